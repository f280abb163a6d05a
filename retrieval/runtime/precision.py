"""Numeric precision of the neural stages: a property of this machine at run time.

No model, checkpoint or index stores a precision: whatever a model was built or
trained with, it loads and runs in any precision here. The torch paths are
`fp32` (the exact reference), `bf16` (needs CPU bf16 instructions: the dense
encoder casts the whole model, as sentence-transformers documents; the late
encoder and the reader cast matmul weights once and keep LayerNorm/softmax
in fp32 by autocast, the arithmetic their checkpoints were chosen under) and
`int8` (dynamic quantisation, per-channel weights, of every Linear layer; the
feed-forward down-projections' inputs, post-GELU activations, have an outlier
channel that per-tensor int8 activations lose, so those layers run int8 only
for a model with calibrated outlier channels, which stay fp32
(retrieval.runtime.int8_outliers), and fp32 otherwise). int8 activations are
quantised per batch, so a text's result would move slightly with its
batch-mates: every model therefore runs int8 one text (or reader window) a
batch (the dense encoder's cosine to fp32 is about 0.98-0.99).

`auto`, the default everywhere, picks the fastest path that stays within each
model's limit: bf16 where the CPU has bf16 instructions; else int8 where int8
is shown to meet the model's limit on validation data with this CPU's int8
kernels (`shown_within_limit`: the 90% confidence interval of the mean
per-query change lies within the limit, not just the mean); else fp32 (also
on ARM, not measured here). int8 arithmetic is not the same on every x86
CPU: torch's kernels use AVX-512 VNNI where the CPU has it and AVX2
otherwise, and the two round differently, so each model records its decision
per kernel kind (INT8_WITHIN_LIMIT, decided by eval/bench_dense.py and
eval/bench_precision.py on validation splits, never on test); a kind nobody
measured runs fp32. No model's int8 is shown within its limit today (the
intervals are wider than the limits), so `auto` means fp32 without bf16. A
limit binds both ways: int8 is there to give fp32's ranking faster, so a
change up is as much a change as one down.

Set RETRIEVAL_NO_BF16=1 to make the package behave as if the CPU lacked bf16
instructions, or RETRIEVAL_EMULATE_CPU=avx2 (or avx512-vnni) to run as if on
such a CPU, its kernels capped too (retrieval.runtime.cpu_emulation); CI runs the
model tests as an AVX2 CPU so the common CPU is covered on any machine.
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from retrieval.errors import InputError
from retrieval.runtime import cpu_emulation

AUTO = "auto"
NO_BF16_ENV = "RETRIEVAL_NO_BF16"
TORCH_PRECISIONS = ("fp32", "bf16", "int8")
ENCODER_PRECISIONS = (*TORCH_PRECISIONS, "onnx", "onnx-int8")  # the dense encoder also runs ONNX
TRAIN_PRECISIONS = ("fp32", "bf16")


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags, as the CPU that RETRIEVAL_EMULATE_CPU names would have them, if any."""
    return cpu_emulation.emulated(machine_cpu_flags())


@functools.lru_cache(maxsize=1)
def machine_cpu_flags() -> frozenset[str]:
    """This CPU's own feature flags from /proc/cpuinfo, whatever it emulates (empty where it cannot be
    read)."""
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
    if cpu_emulation.requested():
        line += f"; emulated by {cpu_emulation.ENV}={cpu_emulation.requested()}"
    return line + (f" (bf16 switched off by {NO_BF16_ENV})" if bf16_switched_off() else "")


def within_limit(change: float, limit: float) -> bool:
    """Whether a mean validation score moved by at most `limit` in either direction (a path meant to give
    fp32's ranking must not change it, up or down): how studies/calibrate_int8.py picks a configuration."""
    return abs(change) <= limit


def shown_within_limit(values: Sequence[float], reference: Sequence[float], limit: float) -> bool:
    """Whether per-query validation scores of a path (`values`) are shown to stay within `limit` of fp32's
    (`reference`, paired) on average: two one-sided t-tests at 5% (significance.equivalent). This, not
    the mean alone, decides `auto`: on a few hundred queries a mean inside the limit can hide a change
    beyond it, and a path that cannot be shown to meet the limit runs fp32."""
    from retrieval.evaluation.significance import equivalent

    return equivalent(values, reference, limit)


def int8_kernel() -> str | None:
    """Which kind of torch int8 kernels run here: "avx512-vnni", "avx2", or None (not x86's engine)."""
    import torch

    if torch.backends.quantized.engine not in ("x86", "fbgemm"):
        return None
    flags = cpu_flags()
    if "avx512_vnni" in flags:
        return "avx512-vnni"
    return "avx2" if "avx2" in flags else None


# Bumped when a precision's arithmetic changes, so that no cache keeps outputs of the old one (2: int8
# splits off outlier channels and runs one text a batch; the dense encoder's bf16 casts the whole model).
ARITHMETIC_VERSION = 2

Int8Choice = bool | Mapping[str, bool]


def int8_allowed(choice: Int8Choice) -> bool:
    """Whether int8 met the model's limit with this CPU's int8 kernels (`choice`: a model's
    INT8_WITHIN_LIMIT by kernel kind; a plain bool for any kind); unmeasured kinds: no."""
    kernel = int8_kernel()
    if kernel is None:
        return False
    return choice if isinstance(choice, bool) else bool(choice.get(kernel, False))


def auto_precision(int8_within_limit: Int8Choice = True) -> str:
    """The fastest torch path within the loss limit on this CPU; `int8_within_limit` says whether
    int8 is shown to meet the limit for the model at hand (per int8 kernel kind, see `int8_allowed`)."""
    if cpu_has_bf16():
        return "bf16"
    return "int8" if int8_allowed(int8_within_limit) else "fp32"


def resolve(precision: str | None, choices: tuple[str, ...] = TORCH_PRECISIONS, *,
            int8_within_limit: Int8Choice = True) -> str:
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


def cache_signature(precision: str | None) -> str:
    """What decides the arithmetic of every model for a cached result: an explicit choice as is (int8
    with its kind of kernel, which rounds differently on each); for auto, the CPU facts auto decides by
    (bf16, kind of int8 kernel), since models differ in whether int8 meets their limit on a kind, so
    one resolved name does not cover them all."""
    if precision is not None and precision != AUTO:
        chosen = resolve(precision)
        return f"int8={int8_kernel() or 'none'}" if chosen == "int8" else chosen
    return f"{AUTO}:bf16={'yes' if cpu_has_bf16() else 'no'}:int8={int8_kernel() or 'none'}"


def batch_size_for(precision: str, batch_size: int) -> int:
    """Texts a model runs together: `batch_size`, but one for int8, whose activations share one scale
    a batch, so that a text's output is its own and not moved by its batch-mates (a query's result
    would otherwise depend on the other queries of a run; as fast here: the dense encoder did 66.0
    docs/s against 66.6 with 16 a batch on SciFact, one-off measurement)."""
    return 1 if precision == "int8" else batch_size


def torch_path(precision: str | None) -> str | None:
    """The torch precision for a model that has no ONNX path: onnx means fp32, onnx-int8 int8."""
    return {"onnx": "fp32", "onnx-int8": "int8"}.get(precision or AUTO, precision)


def prepare(model: Any, precision: str, outliers: Mapping[str, Sequence[int]] | None = None, *,
            fp32_norms: bool = False) -> Any:
    """The torch model ready to run in `precision` (bf16: cast whole, or with `fp32_norms` only its
    Linear weights, run under `autocast`; int8: quantised).

    int8 quantises every Linear layer that widens or keeps its input. A narrowing one (a feed-forward
    down-projection) stays fp32 unless `outliers` names its outlier input channels (module name ->
    channel numbers, see retrieval.runtime.int8_outliers): those channels stay fp32, the rest runs int8."""
    import torch

    if precision == "int8":
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        from retrieval.runtime.int8_outliers import OutlierSplit

        for name, channels in (outliers or {}).items():
            parent, _, child = name.rpartition(".")
            holder = model.get_submodule(parent) if parent else model
            setattr(holder, child, OutlierSplit(model.get_submodule(name), channels))
        split = {f"{name}.int8_part" for name, module in model.named_modules()  # each split layer's rest
                 if isinstance(module, OutlierSplit)}
        layers = {name: per_channel_dynamic_qconfig for name, module in model.named_modules()
                  if isinstance(module, torch.nn.Linear)
                  and (module.in_features <= module.out_features or name in split)}
        with warnings.catch_warnings():  # torch.ao's deprecation notes; the API is in torch==2.13
            warnings.simplefilter("ignore")
            return quantize_dynamic(model, layers, dtype=torch.qint8)
    if precision == "bf16" and fp32_norms:  # autocast's weight cache lasts one call; cast once instead
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.to(torch.bfloat16)
    elif precision == "bf16":  # all of it: 1.29x the above for the dense encoder (one-off, 154/120 docs/s)
        return model.to(torch.bfloat16)
    return model


def autocast(precision: str, fp32_norms: bool) -> contextlib.AbstractContextManager:
    """The context a forward pass runs in: bf16 autocast for a bf16 model prepared with `fp32_norms`
    (LayerNorm and softmax in fp32), nothing otherwise."""
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16" and fp32_norms)
