"""The bench names the machine class its figures were measured on, from the CPU's own flags."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.machine import describe, kernels, machine
from ragmesh.cpu_features import avx2_environment

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
    assert set(chosen) == {"faiss", "numpy", "BLAS", "torch", "ONNX Runtime", "document encoder", "int8 document copy"}
    assert "SIMD level" in chosen["faiss"] and "CPU capability" in chosen["torch"]
    assert describe().startswith("Machine class: **")


@pytest.mark.slow
def test_a_process_started_as_the_avx2_class_runs_each_library_on_its_avx2_kernels() -> None:
    """What each library reports it chose, not what it was asked: a switch a library ignores shows here."""
    script = "import json; from bench.machine import describe, kernels; print(json.dumps([kernels(), describe()]))"
    out = subprocess.run([sys.executable, "-c", script], env=os.environ | avx2_environment(), capture_output=True,
                         text=True, check=True, cwd=Path(__file__).parents[2]).stdout
    chosen, described = json.loads(out)
    assert chosen["faiss"].endswith("SIMD level AVX2")
    assert chosen["torch"].endswith("CPU capability AVX2")
    assert "AVX512" not in chosen["numpy"] and "X86_V4" not in chosen["numpy"]
    assert all(blas.endswith("Haswell") for blas in chosen["BLAS"].split(", ")), chosen["BLAS"]
    assert chosen["document encoder"] in ("ONNX Runtime float32", "ONNX Runtime int8 (EMBED_DOCUMENTS_INT8)")
    assert chosen["int8 document copy"].startswith("7-bit")
    assert described.startswith("Machine class: **AVX2 only")
    assert "- not forced: ONNX Runtime's kernels" in described or "forced" not in described.splitlines()[0]
