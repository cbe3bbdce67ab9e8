"""What the CPU can do, for the code that picks a kernel by it, and the AVX2 class on demand.

Two of the embedder's choices follow the CPU's flags: documents through torch in bfloat16 only where the
CPU multiplies bf16 in hardware (elsewhere bf16 is emulated, slower than float32), and 7-bit int8 weights
where it lacks VNNI (its 8-bit products then add in pairs into 16 bits, where full-range weights can
overflow). Both read the flags here, as the bench's machine report does, so that CPU_CLASS=avx2 makes each
of them choose as on an AVX2-only CPU (Haswell to Zen 3: no AVX-512, AVX-VNNI, bf16 or AMX) while running
on a newer one. `avx2_environment()` adds the libraries' own switches to the same class; each library picks
its kernels when it loads, so they only take hold in a process that starts with them."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# Flag prefixes of the instruction sets past AVX2: AVX-512's, the VEX-encoded ones that came after it
# (avx_vnni, avx_ifma, avx_ne_convert, ...) and AMX's. An AVX2-only CPU has none of them.
BEYOND_AVX2 = ("avx512", "avx_", "amx")
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # bfloat16 products in hardware
VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni"})  # int8 dot products into 32 bits


@dataclass(frozen=True)
class Cpu:
    model: str
    cores: int
    flags: frozenset[str]  # as the fast paths are to see them: an AVX2-only CPU's when forced
    native_flags: frozenset[str]  # as the CPU lists them

    @property
    def forced(self) -> bool:
        return self.flags != self.native_flags

    @property
    def native_bf16(self) -> bool:
        """Whether bfloat16 is multiplied in hardware; elsewhere it is emulated, slower than float32."""
        return bool(self.flags & BF16_FLAGS)

    @property
    def vnni(self) -> bool:
        """Whether int8 products add into 32 bits (AVX512-VNNI or AVX-VNNI)."""
        return bool(self.flags & VNNI_FLAGS)


def avx2_flags(flags: frozenset[str]) -> frozenset[str]:
    """The flags of an AVX2-only CPU otherwise like this one."""
    return frozenset(f for f in flags if not f.startswith(BEYOND_AVX2))


def configured_class() -> str:
    """CPU_CLASS: `native` or `avx2`."""
    from ragmesh.config import EmbeddingSettings

    return EmbeddingSettings.load().cpu_class


def cpu(cpuinfo: Path = CPUINFO, cpu_class: str | None = None) -> Cpu:
    """This CPU as /proc/cpuinfo describes it, seen as `cpu_class` (default: CPU_CLASS). Unreadable
    (not Linux): no flags, so every chooser takes its portable path."""
    model, cores, flags = "?", 0, frozenset()
    try:
        text = cpuinfo.read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name":
            model, cores = value.strip(), cores + 1
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
    seen = avx2_flags(flags) if (cpu_class or configured_class()) == "avx2" else flags
    return Cpu(model, cores, seen, flags)


def native_bf16(cpuinfo: Path = CPUINFO, cpu_class: str | None = None) -> bool:
    """Whether documents may run in bfloat16 (the embedder's choice when EMBED_DOCUMENTS_BF16=auto)."""
    return cpu(cpuinfo, cpu_class).native_bf16


def has_vnni(cpuinfo: Path = CPUINFO, cpu_class: str | None = None) -> bool:
    """Whether the int8 document copy may use full 8-bit weights (else 7-bit: see the module's docstring)."""
    return cpu(cpuinfo, cpu_class).vnni


def avx2_environment() -> dict[str, str]:
    """The variables a process starts with to run as the AVX2 class: our choosers (CPU_CLASS) and each
    library's kernel choice. ONNX Runtime has no such switch (its MLAS kernels follow CPUID, settable only
    when it is built): it keeps this CPU's kernels."""
    from numpy._core._multiarray_umath import __cpu_dispatch__

    return {
        "CPU_CLASS": "avx2",
        "FAISS_SIMD_LEVEL": "AVX2",  # faiss's kernels per SIMD level, chosen at run time (one library since 1.13)
        "ATEN_CPU_CAPABILITY": "avx2",  # torch's own vectorised kernels
        "ONEDNN_MAX_CPU_ISA": "AVX2",  # torch's oneDNN (bf16 and some float32 layers)
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",  # torch's MKL (float32 matrix products)
        "OPENBLAS_CORETYPE": "Haswell",  # numpy's and faiss's OpenBLAS (both built with every core's kernels)
        # numpy's AVX-512 loops (a name numpy does not dispatch on would stop it loading: only those it does)
        "NPY_DISABLE_CPU_FEATURES": " ".join(t for t in __cpu_dispatch__ if t.startswith(("AVX512", "X86_V4"))),
    }
