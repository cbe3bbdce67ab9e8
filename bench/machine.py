"""Which machine a figure was measured on, and which kernel each fast path chose there.

Absolute figures move with the CPU: the same code gives a 100k hybrid p50 of 8.7 ms on one core
class and 15.6 ms on another. Every bench run prints its machine class (the instruction sets that
matter to FAISS, BLAS, torch and ONNX Runtime) and what each library picked at run time, so a change
in a figure can be told apart from a change of machine."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from ragmesh import cpu_features

# The instruction sets the fast paths use: FAISS's distance kernels (AVX2, AVX-512), int8 matrix products
# (VNNI), bfloat16 products (AVX512-BF16, AMX) for the embedder's document path.
FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
# What `--cpu-class avx2` leaves as this machine has it (bench/README.md, "Machine classes").
UNFORCED = ("ONNX Runtime's kernels (MLAS picks them by CPUID, with no switch), cache sizes, clock and memory "
            "bandwidth")


def class_of(flags: frozenset[str]) -> str:
    """The class figures are grouped by in docs/benchmarks.md."""
    if "avx512f" in flags and flags & cpu_features.BF16_FLAGS:
        return "AVX-512 with bf16"
    if "avx512f" in flags:
        return "AVX-512"
    return "AVX2 only" if "avx2" in flags else "no AVX2"


@dataclass(frozen=True)
class Machine:
    model: str
    cores: int
    flags: tuple[str, ...]  # those of FLAGS the CPU has
    cpu_class: str  # "AVX2 only (forced on AVX-512 with bf16)" when the run acts as the AVX2 class
    forced: bool


def machine(cpuinfo: Path = cpu_features.CPUINFO, cpu_class: str | None = None) -> Machine:
    """This machine, seen as `cpu_class` (default: CPU_CLASS, which `--cpu-class` sets)."""
    cpu = cpu_features.cpu(cpuinfo, cpu_class)
    seen = class_of(cpu.flags)
    return Machine(cpu.model, cpu.cores, tuple(f for f in FLAGS if f in cpu.native_flags),
                   f"{seen} (forced on {class_of(cpu.native_flags)})" if cpu.forced else seen, cpu.forced)


def kernels() -> dict[str, str]:
    """What each library chose at run time on this CPU (each one's own report, not inferred from flags)."""
    import onnxruntime
    import threadpoolctl
    import torch

    from ragmesh.config import Settings
    from ragmesh.cpu_features import has_vnni, native_bf16

    numpy_simd = np.show_config(mode="dicts")["SIMD Extensions"]
    blas = sorted({f"{i['internal_api']} {i.get('architecture') or ''}".strip()
                   for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"})
    return {
        "faiss": f"{faiss.__version__}, SIMD level {faiss.SIMDConfig.get_level_name()}",
        "numpy": f"{np.__version__}, dispatch {' '.join(numpy_simd.get('found', [])) or 'baseline only'}",
        "BLAS": ", ".join(blas) or "?",
        "torch": f"{torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}",
        "ONNX Runtime": f"{onnxruntime.__version__}, {', '.join(onnxruntime.get_available_providers())}",
        "document encoder": "ONNX Runtime int8 (EMBED_DOCUMENTS_INT8)" if Settings().embed_documents_int8 else
                            "torch bf16 autocast (native bf16)" if native_bf16() else "ONNX Runtime float32",
        "int8 document copy": "8-bit weights (VNNI)" if has_vnni() else "7-bit weights (no VNNI: 16-bit pair sums)",
    }


def describe() -> str:
    """Markdown lines for the head of a bench report."""
    m = machine()
    lines = [f"Machine class: **{m.cpu_class}** ({m.model}, {m.cores} CPUs; "
             f"{' '.join(m.flags) or 'no AVX2, AVX-512, VNNI, bf16 or AMX'})."]
    lines += [f"- {name}: {chosen}" for name, chosen in kernels().items()]
    if m.forced:
        lines.append(f"- not forced: {UNFORCED}")
    return "\n".join(lines)
