"""Run as if on a lesser x86 CPU: RETRIEVAL_EMULATE_CPU=avx2 or avx512-vnni.

Most CPUs lack bf16, and many lack AVX-512; this switch lets any machine that
has more measure and test what those CPUs get. It does two things: the
package's own decisions (precision.cpu_flags: bf16, the kind of int8 kernel)
see only the emulated CPU's instruction sets, and torch's kernel libraries are
capped through their own dispatch controls (ATen, MKL, oneDNN, fbgemm), so they
take the emulated CPU's code paths. The clock, caches and memory stay this
machine's, and a real CPU of that kind may still round differently where a
library picks kernels by vendor or model (MKL on AMD). The caps are read when
a library first runs a kernel, so importing `retrieval` sets them (this module
does it when first imported); torch must not have run anything before that.
ONNX Runtime has no such cap: its paths are not emulated.
"""

from __future__ import annotations

import os
import sys

from retrieval.errors import InputError

ENV = "RETRIEVAL_EMULATE_CPU"

# Per emulated CPU: the flag it needs here, the prefixes of the flags it lacks, and each library's cap.
CPUS = {
    "avx2": ("avx2", ("avx512", "amx", "avx_vnni"),
             {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
              "ONEDNN_MAX_CPU_ISA": "AVX2", "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2"}),
    "avx512-vnni": ("avx512_vnni", ("amx", "avx512_bf16", "avx512_fp16"),
                    {"ATEN_CPU_CAPABILITY": "avx512", "MKL_ENABLE_INSTRUCTIONS": "AVX512_E1",
                     "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI", "FBGEMM_ENABLE_INSTRUCTIONS": "AVX512_E1"}),
}


def requested() -> str | None:
    """The CPU RETRIEVAL_EMULATE_CPU names, or None when it is unset or empty."""
    return os.environ.get(ENV, "").strip().lower() or None


def emulable(flags: frozenset[str]) -> list[str]:
    """The CPUs a CPU with `flags` can run as (it has their instruction sets)."""
    return [name for name, (needs, _, _) in CPUS.items() if needs in flags]


def apply() -> None:
    """Set the kernel libraries' dispatch caps for the requested CPU (a bad value is reported by
    `emulated`, where a command can turn it into a one-line error)."""
    name = requested()
    if name in CPUS:
        os.environ.update(CPUS[name][2])


def emulated(flags: frozenset[str]) -> frozenset[str]:
    """This CPU's `flags` as the requested CPU would have them (all of them when none is requested)."""
    name = requested()
    if name is None:
        return flags
    if name not in CPUS:
        raise InputError(f"{ENV}={name!r}: expected one of " + ", ".join(CPUS))
    needs, lacks, _ = CPUS[name]
    if name not in emulable(flags):
        raise InputError(f"{ENV}={name}: this CPU lacks {needs}, so it cannot run as one that has it")
    _check_torch_capped(name)
    return frozenset(flag for flag in flags if not flag.startswith(lacks))


def _check_torch_capped(name: str) -> None:
    """Fail if torch's kernels were chosen before the caps were set (torch ran before `retrieval` was
    imported, or the caps were overridden)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    wanted = CPUS[name][2]["ATEN_CPU_CAPABILITY"]
    if torch.backends.cpu.get_cpu_capability().lower() != wanted:
        raise InputError(f"{ENV}={name}: torch already dispatches to "
                         f"{torch.backends.cpu.get_cpu_capability()} kernels; set {ENV} before Python "
                         "starts and import retrieval before running anything in torch")


apply()
