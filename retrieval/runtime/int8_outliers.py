"""Outlier channels for int8: calibrated once per model, kept fp32 while the rest of a layer runs int8.

int8 activations share one scale per batch (torch's dynamic quantisation), so
an input channel whose values run far beyond all others costs the other
channels their resolution. MiniLM's feed-forward down-projections have such
channels after GELU: each layer's largest peaks at 7-25 where the median
channel peaks near 2 (the next largest at 6-8, 15 in one layer), which is why
int8 used to leave those layers in fp32. Taking the outlier channels out and
multiplying them in fp32 (LLM.int8()'s decomposition, with channels found
offline) lets the down-projections run int8 too.

The channels of a model are found on unlabelled documents (`channel_peaks`,
`largest_channels`) and stored as JSON beside the package
(`int8_outliers.json`, keyed by the model's SHA-256; `eval/studies/calibrate_int8.py`
writes it). A model without an entry keeps its down-projections in fp32, as
before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

CALIBRATION_FILE = Path(__file__).with_name("int8_outliers.json")


class OutlierSplit(torch.nn.Module):
    """A Linear layer whose outlier input channels are multiplied in fp32 and the rest in int8 (once
    `retrieval.runtime.precision.prepare` has quantised `int8_part`). Zeroes those channels of its input in
    place: the input is a temporary (the output of the activation before it)."""

    def __init__(self, linear: torch.nn.Linear, channels: Sequence[int]):
        super().__init__()
        self.register_buffer("channels", torch.tensor(list(channels), dtype=torch.int64))
        self.register_buffer("outlier_weight", linear.weight.detach()[:, self.channels].t().contiguous())
        self.int8_part = linear  # keeps the bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outlier_part = x[..., self.channels] @ self.outlier_weight
        x[..., self.channels] = 0.0
        return self.int8_part(x) + outlier_part


def narrowing_layers(model: torch.nn.Module) -> dict[str, torch.nn.Linear]:
    """The Linear layers with fewer outputs than inputs (feed-forward down-projections), by name."""
    return {name: module for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear) and module.in_features > module.out_features}


@torch.inference_mode()
def channel_peaks(model: torch.nn.Module,
                  batches: Iterable[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The largest absolute value of each input channel of each narrowing layer over `batches`
    (fp32 forward passes), by layer name."""
    layers = narrowing_layers(model)
    peaks = {name: torch.zeros(layer.in_features) for name, layer in layers.items()}

    def record(name: str):
        def hook(_module, inputs):
            x = inputs[0].detach().abs().reshape(-1, inputs[0].shape[-1]).amax(0)
            torch.maximum(peaks[name], x.float(), out=peaks[name])
        return hook

    handles = [layer.register_forward_pre_hook(record(name)) for name, layer in layers.items()]
    try:
        for batch in batches:
            model(**batch)
    finally:
        for handle in handles:
            handle.remove()
    return peaks


def largest_channels(peaks: dict[str, torch.Tensor], per_layer: int) -> dict[str, list[int]]:
    """The `per_layer` channels of largest peak of each layer, ascending channel numbers."""
    return {name: sorted(int(c) for c in np.argsort(-peak.numpy(), kind="stable")[:per_layer])
            for name, peak in peaks.items()}


def stored_channels(model_sha256: str) -> dict[str, list[int]]:
    """The calibrated outlier channels of the model with this weights checksum ({} if none)."""
    if not CALIBRATION_FILE.is_file():
        return {}
    entry = json.loads(CALIBRATION_FILE.read_text()).get("models", {}).get(model_sha256)
    return {name: list(channels) for name, channels in entry["channels"].items()} if entry else {}
