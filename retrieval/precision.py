"""Numeric precision of the neural stages: a property of this machine at run time.

No model, checkpoint or index stores a precision: whatever a model was built or
trained with, it loads and runs in any precision here. The torch paths are
`fp32` (the exact reference), `bf16` (matmul weights cast to bf16 once,
LayerNorm/softmax kept in fp32 by autocast; needs CPU bf16 instructions) and
`int8` (dynamic quantisation, per-channel weights, of every Linear layer but
the feed-forward down-projections: their inputs, post-GELU activations, have
outliers that per-tensor int8 activations lose; SciFact nDCG@10 −0.0060 with
them quantised, +0.0011 without). int8 activations are quantised per batch, so
a text's embedding moves slightly with its batch-mates (cosine to fp32 about
0.985-0.99; the same inputs still give the same bytes).

`auto`, the default everywhere, picks the fastest path that stays within each
model's loss limit: bf16 where the CPU has bf16 instructions; else int8 where
torch's x86 quantised kernels run (every x86-64 CPU with AVX2) and int8 met the
model's limit on validation data (each model's INT8_WITHIN_LIMIT, decided by
eval/bench_dense.py and eval/bench_precision.py on validation splits, never on
test); else fp32 (also on ARM, not measured here). On the AMD EPYC measured:
late interaction runs int8 (+0.0078 nDCG@10 on held-out SciFact training
queries, limit 0.003); the dense encoder (-0.0052 on SciFact training queries,
limit 0.005) and the reader (-1.7 F1 on squad2-dev:validation, limit 0.5)
run fp32.

Set RETRIEVAL_NO_BF16=1 to make the package behave as if the CPU lacked bf16
instructions; CI runs the model tests that way so the common CPU is covered
on any machine.
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from pathlib import Path
from typing import Any

from retrieval.errors import InputError

AUTO = "auto"
NO_BF16_ENV = "RETRIEVAL_NO_BF16"
TORCH_PRECISIONS = ("fp32", "bf16", "int8")
TRAIN_PRECISIONS = ("fp32", "bf16")


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def bf16_switched_off() -> bool:
    """Whether RETRIEVAL_NO_BF16 asks the package to act as if the CPU lacked bf16."""
    return os.environ.get(NO_BF16_ENV, "").strip().lower() not in ("", "0", "false", "no")


def cpu_has_bf16() -> bool:
    """Whether bf16 runs fast here: AVX512-BF16 or AMX, and not switched off."""
    return not bf16_switched_off() and bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def instruction_sets() -> str:
    """A short description of the CPU's relevant instruction sets, for benchmark machine lines."""
    flags = cpu_flags()
    has = {"bf16": {"avx512_bf16", "amx_bf16"} & flags, "AVX-512": "avx512f" in flags,
           "VNNI": {"avx512_vnni", "avx_vnni"} & flags, "AVX2": "avx2" in flags}
    line = ", ".join(f"{name} {'yes' if value else 'no'}" for name, value in has.items())
    return line + (f" (bf16 switched off by {NO_BF16_ENV})" if bf16_switched_off() else "")


def int8_runs_fast() -> bool:
    """Whether torch's dynamic int8 kernels here are the x86 ones (FBGEMM / x86 engine)."""
    import torch

    return torch.backends.quantized.engine in ("x86", "fbgemm")


def auto_precision(int8_within_limit: bool = True) -> str:
    """The fastest torch path within the loss limit on this CPU; `int8_within_limit` says whether
    int8 meets the limit for the model at hand (measured: yes for dense, no for late interaction)."""
    if cpu_has_bf16():
        return "bf16"
    return "int8" if int8_within_limit and int8_runs_fast() else "fp32"


def resolve(precision: str | None, choices: tuple[str, ...] = TORCH_PRECISIONS, *,
            int8_within_limit: bool = True) -> str:
    """A concrete precision for this machine from a user's choice (None or `auto`: auto_precision)."""
    if precision is None or precision == AUTO:
        chosen = auto_precision(int8_within_limit)
        return chosen if chosen in choices else "fp32"
    if precision not in choices:
        raise InputError(f"unknown precision {precision!r}; expected {AUTO} or one of "
                         + ", ".join(choices))
    if precision == "bf16" and not cpu_has_bf16():
        raise InputError("precision bf16 needs a CPU with bf16 instructions (avx512_bf16 or AMX),"
                         f" which this one lacks{' (switched off)' if bf16_switched_off() else ''};"
                         f" use {AUTO}, fp32 or int8")
    return precision


def torch_path(precision: str | None) -> str | None:
    """The torch precision for a model that has no ONNX path: onnx means fp32, onnx-int8 int8."""
    return {"onnx": "fp32", "onnx-int8": "int8"}.get(precision or AUTO, precision)


def prepare(model: Any, precision: str) -> Any:
    """The torch model ready to run in `precision` (bf16: Linear weights cast once; int8: quantised)."""
    import torch

    if precision == "int8":
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        layers = {name: per_channel_dynamic_qconfig for name, module in model.named_modules()
                  if isinstance(module, torch.nn.Linear) and module.in_features <= module.out_features}
        with warnings.catch_warnings():  # torch.ao's deprecation notes; the API is in torch==2.13
            warnings.simplefilter("ignore")
            return quantize_dynamic(model, layers, dtype=torch.qint8)
    if precision == "bf16":  # autocast's weight cache lasts one call; cast once instead
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.to(torch.bfloat16)
    return model


def autocast(precision: str) -> contextlib.AbstractContextManager:
    """The context a forward pass runs in: bf16 autocast for bf16, nothing otherwise."""
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
