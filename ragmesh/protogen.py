"""Regenerates the protobuf stubs under ragmesh/v1 (`make proto`).

The stale-stub test calls `generate` into a temporary folder and compares, so
the committed stubs are always what the .proto files say.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
PROTO_FILES = sorted(PROTO_ROOT.glob("ragmesh/v1/*.proto"))


def generate(out_dir: Path) -> list[Path]:
    """Writes *_pb2.py, *_pb2_grpc.py and *.pyi for every contract into out_dir."""
    from grpc_tools import protoc  # dev dependency: only stub generation needs it

    import grpc_tools

    include = Path(grpc_tools.__file__).parent / "_proto"
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--pyi_out={out_dir}",
        *[str(p.relative_to(PROTO_ROOT)) for p in PROTO_FILES],
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed: " + " ".join(args))
    return sorted((out_dir / "ragmesh" / "v1").glob("*.py*"))


def main() -> None:
    written = generate(ROOT)
    init = ROOT / "ragmesh" / "v1" / "__init__.py"
    init.touch()
    print(f"regenerated {len(written)} files under {init.parent.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
