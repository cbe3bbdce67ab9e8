"""Each chooser that goes by the CPU's flags picks the path the CPU class has, and the AVX2 class can be
asked for on a newer CPU: an AVX2-only Xeon's /proc/cpuinfo and this AVX-512-with-bf16 EPYC's, as text."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.machine import machine
from ragmesh import config
from ragmesh.cpu_features import avx2_flags, cpu, has_vnni, native_bf16
from ragmesh.errors import ConfigError
from services.embedder import backends

CPUINFO = Path(__file__).parents[1] / "data" / "cpuinfo"
AVX2_ONLY, AVX512_BF16 = CPUINFO / "avx2-only.txt", CPUINFO / "avx512-bf16.txt"


@pytest.mark.parametrize("cpuinfo, cpu_class, bf16, vnni, shown", [
    (AVX2_ONLY, "native", False, False, "AVX2 only"),
    (AVX512_BF16, "native", True, True, "AVX-512 with bf16"),
    (AVX512_BF16, "avx2", False, False, "AVX2 only (forced on AVX-512 with bf16)"),
    (AVX2_ONLY, "avx2", False, False, "AVX2 only"),  # nothing to take away: not forced
])
def test_each_chooser_picks_the_path_of_the_class(cpuinfo: Path, cpu_class: str, bf16: bool, vnni: bool,
                                                  shown: str) -> None:
    assert native_bf16(cpuinfo, cpu_class) is bf16  # bf16 documents through torch, else ONNX Runtime float32
    assert has_vnni(cpuinfo, cpu_class) is vnni  # 8-bit document weights, else 7-bit
    assert machine(cpuinfo, cpu_class).cpu_class == shown
    assert machine(cpuinfo, cpu_class).forced is ("forced" in shown)


def test_the_avx2_class_keeps_avx2_and_drops_everything_past_it() -> None:
    native = cpu(AVX512_BF16, "native").flags
    seen = cpu(AVX512_BF16, "avx2").flags
    assert {"avx", "avx2", "fma", "f16c", "bmi2"} <= seen < native
    assert not {f for f in seen if f.startswith(("avx512", "amx", "avx_"))}
    assert avx2_flags(cpu(AVX2_ONLY, "native").flags) == cpu(AVX2_ONLY, "native").flags
    assert cpu(AVX2_ONLY, "native").model.startswith("Intel(R) Xeon(R) CPU E5-2673 v3") and cpu(AVX2_ONLY).cores == 2


def test_cpu_class_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CPU_CLASS", raising=False)
    assert native_bf16(AVX512_BF16) and has_vnni(AVX512_BF16)
    monkeypatch.setenv("CPU_CLASS", "avx2")
    assert not native_bf16(AVX512_BF16) and not has_vnni(AVX512_BF16)
    monkeypatch.setenv("CPU_CLASS", "avx512")
    with pytest.raises(ConfigError, match="CPU_CLASS"):
        native_bf16(AVX512_BF16)


def test_an_unreadable_cpuinfo_takes_the_portable_paths(tmp_path: Path) -> None:
    assert not native_bf16(tmp_path / "missing", "native") and not has_vnni(tmp_path / "missing", "native")


def test_the_embedder_sends_documents_to_bf16_only_where_the_class_has_it(tmp_path: Path) -> None:
    base = config.load().replace(embed_backend="local", embed_runtime="onnx", model_cache_dir=str(tmp_path),
                                 embed_documents_int8=False, embed_documents_bf16="auto")
    assert backends.create(base.replace(cpu_class="avx2")).documents is None
    assert (backends.create(base.replace(cpu_class="native")).documents is not None) == native_bf16(cpu_class="native")
    assert backends.create(base.replace(cpu_class="avx2", embed_documents_bf16="on")).documents is not None
