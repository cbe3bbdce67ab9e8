"""The bench names the machine class its figures were measured on, from the CPU's own flags."""
from pathlib import Path

import pytest

from bench.machine import describe, kernels, machine

CPUINFO = """processor\t: {n}
model name\t: Test CPU
flags\t\t: fpu sse4_2 {flags}
"""


def cpuinfo(tmp_path: Path, flags: str, cores: int = 2) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text("\n".join(CPUINFO.format(n=n, flags=flags) for n in range(cores)))
    return path


@pytest.mark.parametrize("flags, expected", [
    ("avx avx2 fma", "AVX2 only"),
    ("avx2 avx512f avx512_vnni", "AVX-512"),
    ("avx2 avx512f avx512_vnni avx512_bf16", "AVX-512 with bf16"),
    ("avx2 avx512f amx_tile amx_bf16", "AVX-512 with bf16"),
    ("avx", "no AVX2"),
])
def test_machine_class_follows_the_flags(tmp_path: Path, flags: str, expected: str) -> None:
    found = machine(cpuinfo(tmp_path, flags, cores=4))
    assert found.cpu_class == expected
    assert found.model == "Test CPU" and found.cores == 4
    assert set(found.flags) <= set(flags.split())


def test_every_fast_path_reports_its_choice() -> None:
    chosen = kernels()
    assert set(chosen) == {"faiss", "numpy", "BLAS", "torch", "ONNX Runtime", "document encoder"}
    assert "SIMD level" in chosen["faiss"] and "CPU capability" in chosen["torch"]
    assert describe().startswith("Machine class: **")
