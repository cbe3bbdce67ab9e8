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

# The instruction sets the fast paths use: FAISS's distance kernels (AVX2, AVX-512), int8 matrix products
# (VNNI), bfloat16 products (AVX512-BF16, AMX) for the embedder's document path.
FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


@dataclass(frozen=True)
class Machine:
    model: str
    cores: int
    flags: tuple[str, ...]  # those of FLAGS the CPU has

    @property
    def cpu_class(self) -> str:
        """The class figures are grouped by in docs/benchmarks.md."""
        has = set(self.flags)
        if "avx512f" in has and has & {"avx512_bf16", "amx_bf16"}:
            return "AVX-512 with bf16"
        if "avx512f" in has:
            return "AVX-512"
        return "AVX2 only" if "avx2" in has else "no AVX2"


def machine(cpuinfo: Path = Path("/proc/cpuinfo")) -> Machine:
    model, flags, cores = "?", set(), 0
    for line in cpuinfo.read_text().splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name":
            model, cores = value.strip(), cores + 1
        elif key == "flags" and not flags:
            flags = set(value.split())
    return Machine(model, cores, tuple(f for f in FLAGS if f in flags))


def kernels() -> dict[str, str]:
    """What each library chose at run time on this CPU (each one's own report, not inferred from flags)."""
    import onnxruntime
    import threadpoolctl
    import torch

    from services.embedder.backends.local import native_bf16

    numpy_simd = np.show_config(mode="dicts")["SIMD Extensions"]
    blas = sorted({f"{i['internal_api']} {i.get('architecture') or ''}".strip()
                   for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"})
    return {
        "faiss": f"{faiss.__version__}, SIMD level {faiss.SIMDConfig.get_level_name()}",
        "numpy": f"{np.__version__}, dispatch {' '.join(numpy_simd.get('found', [])) or 'baseline only'}",
        "BLAS": ", ".join(blas) or "?",
        "torch": f"{torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}",
        "ONNX Runtime": f"{onnxruntime.__version__}, {', '.join(onnxruntime.get_available_providers())}",
        "document encoder": "torch bf16 autocast (native bf16)" if native_bf16() else "ONNX Runtime float32",
    }


def describe() -> str:
    """Markdown lines for the head of a bench report."""
    m = machine()
    lines = [f"Machine class: **{m.cpu_class}** ({m.model}, {m.cores} CPUs; "
             f"{' '.join(m.flags) or 'no AVX2, AVX-512, VNNI, bf16 or AMX'})."]
    lines += [f"- {name}: {chosen}" for name, chosen in kernels().items()]
    return "\n".join(lines)
