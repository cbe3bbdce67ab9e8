"""The committed stubs under ragmesh/v1 are exactly what `make proto` generates."""
from pathlib import Path

from ragmesh import protogen


def test_generated_stubs_match_the_protos(tmp_path: Path) -> None:
    fresh = protogen.generate(tmp_path)
    assert fresh, "protoc generated nothing"
    committed_dir = protogen.ROOT / "ragmesh" / "v1"
    stale = [p.name for p in fresh if (committed_dir / p.name).read_bytes() != p.read_bytes()]
    missing = [p.name for p in fresh if not (committed_dir / p.name).exists()]
    assert not missing, f"stubs missing, run `make proto`: {missing}"
    assert not stale, f"stubs are stale, run `make proto`: {stale}"
