"""Training hyper-parameters (torch-free, so the CLI can show defaults cheaply)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainConfig:
    """Hyper-parameters of `train`; recorded in the checkpoint."""

    dim: int = 384
    epochs: int = 12
    batch_size: int = 16
    negatives: int = 4
    negative_depth: int = 30
    lr: float = 3e-3
    temperature: float = 1.0
    holdout: float = 0.15
    titles: bool = False
    seed: int = 13
    depth: int = 100
    augment: bool = False
    markers: bool = False
    query_length: int = 32
    doc_length: int = 256
    pairs_from: tuple[str, ...] = ()
    title_pairs_from: tuple[str, ...] = ()
    pairs_per_collection: int = 1000
    anchor: float = 0.01
    distill: float = 0.0  # weight of the distillation term (train_sources: sources with teacher scores)
    distill_temperature: float = 0.1  # the teacher's scores are divided by it before its softmax
    mlp_width: int = 0  # train_sources: > 0 adds a residual per-token MLP of this width (model.Head)
