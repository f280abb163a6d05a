"""The late-interaction model: token encoder + linear projection + L2 norm, and MaxSim.

A checkpoint is one small safetensors file: the projection matrix
`projection` (dim, hidden), optionally a residual per-token MLP (`mlp_in`
(width, hidden), `mlp_out` (dim, width): `Head`), and, in its metadata, the
encoder settings it was trained with and the base model's SHA-256.
"zero-shot" is the untrained model: no projection (identity, dim = hidden
size), queries as-is.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval.errors import InputError
from retrieval.runtime.local_models import PACKAGED, verify_packaged
from retrieval.storage import sha256_file

ZERO_SHOT = "zero-shot"
DEFAULT_CHECKPOINT = PACKAGED / "late" / "late.safetensors"  # shipped in the package (package data)
# Settings a checkpoint fixes; anything else in its metadata (e.g. an old "precision") is ignored.
ENCODER_KEYS = ("query_length", "doc_length", "markers", "augment")


def normalise(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero)."""
    return x / np.clip(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12, None)


def maxsim(query: np.ndarray, docs: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Sum over query tokens of the max similarity over each document's tokens.

    `docs` holds the tokens of every document one after another; document i is
    rows offsets[i]:offsets[i + 1]. A document without tokens scores 0.
    """
    n = len(offsets) - 1
    out = np.zeros(n, dtype=np.float32)
    lengths = np.diff(offsets)
    if n == 0 or len(docs) == 0:
        return out
    sims = query.astype(np.float32) @ np.asarray(docs, dtype=np.float32).T
    starts = np.asarray(offsets[:-1])[lengths > 0]
    best = np.maximum.reduceat(sims, starts, axis=1)
    out[lengths > 0] = best.sum(axis=0)
    return out


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU, tanh form (torch's `approximate="tanh"`, what training uses)."""
    return 0.5 * x * (1.0 + np.tanh(np.float32(0.7978845608) * (x + np.float32(0.044715) * x ** 3)))


@dataclass(frozen=True)
class Head:
    """What maps frozen token states to embeddings: the linear `projection` (dim, hidden) and, when
    `mlp_in` (width, hidden) and `mlp_out` (dim, width) are given, a residual per-token MLP on the
    unit-normalised states: normalise(P s' + B gelu(A s')), s' = normalise(s). Normalising first keeps
    a zero-shot late store (unit-normalised states) exact for it, as for the linear head."""

    projection: np.ndarray
    mlp_in: np.ndarray | None = None
    mlp_out: np.ndarray | None = None

    def embed(self, states: np.ndarray) -> np.ndarray:
        """Hidden states -> normalised embeddings (float32)."""
        x = np.asarray(states, dtype=np.float32)
        if self.mlp_in is None or self.mlp_out is None:
            return normalise(x @ self.projection.T)
        x = normalise(x)
        return normalise(x @ self.projection.T + gelu(x @ self.mlp_in.T) @ self.mlp_out.T)


def as_head(w: np.ndarray | Head | None) -> Head | None:
    """A projection matrix as a linear Head; a Head or None (zero-shot) as is."""
    if w is None or isinstance(w, Head):
        return w
    return Head(np.asarray(w, dtype=np.float32))


class LateModel:
    """Encode queries and documents into normalised token embeddings of size `dim`.

    `precision` is this machine's choice (default `auto`, see retrieval.runtime.precision).
    """

    def __init__(self, model: str | Path | None = None, *, encoder_model: str | Path | None = None,
                 threads: int | None = None, precision: str | None = None,
                 progress: bool | None = False, **overrides):
        from retrieval.late.encoder import TokenEncoder

        self.projection: np.ndarray | None = None
        self.head: Head | None = None
        settings: dict = {}
        if model is None:
            if not DEFAULT_CHECKPOINT.is_file():
                raise InputError(f"the default late-interaction checkpoint is missing; pass a checkpoint"
                                 f" or {ZERO_SHOT!r}", DEFAULT_CHECKPOINT)
            model = DEFAULT_CHECKPOINT
        if str(model) == ZERO_SHOT:
            self.name, self.checkpoint_sha256 = ZERO_SHOT, None
        else:
            self.head, settings = load_head(verify_packaged(model))
            self.projection = self.head.projection
            # stored files name the checkpoint by its file name, never a path of this machine
            self.name, self.checkpoint_sha256 = Path(model).name, sha256_file(Path(model))
        settings = {k: v for k, v in settings.items() if k in ENCODER_KEYS}
        settings.update(overrides)
        self.encoder = TokenEncoder(encoder_model, threads=threads, precision=precision, progress=progress,
                                    **settings)
        if self.projection is not None and self.projection.shape[1] != self.encoder.dim:
            raise InputError(f"checkpoint projects from {self.projection.shape[1]} dimensions but the "
                             f"encoder has {self.encoder.dim}", model)
        self.dim = self.encoder.dim if self.projection is None else self.projection.shape[0]

    def identity(self) -> dict:
        """What must match between a late store and the model that queries it."""
        return {"model_sha256": self.encoder.checksum, "checkpoint_sha256": self.checkpoint_sha256,
                "dim": self.dim, **{k: getattr(self.encoder, k) for k in ("doc_length", "markers")}}

    def describe(self) -> dict:
        """The model's manifest entry (identity plus name and query settings)."""
        settings = self.encoder.settings()
        return {**settings, **self.identity(), "base_model": settings["model"], "model": self.name}

    def project(self, states: np.ndarray) -> np.ndarray:
        """Hidden states -> normalised embeddings (float32)."""
        if self.head is not None:
            return self.head.embed(states)
        return normalise(np.asarray(states, dtype=np.float32))

    def queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Query token embeddings, one (tokens, dim) array per text."""
        return [self.project(s) for s in self.encoder.encode(texts, True, desc="queries")]

    def documents(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Document token embeddings (punctuation dropped), one array per text."""
        return [self.project(s) for s in self.encoder.encode(texts, False, desc="documents")]


def save_checkpoint(path: str | Path, projection: np.ndarray | Head, settings: dict, info: dict) -> None:
    """Write the projection (or a Head: with its MLP, when it has one) and its settings as safetensors
    (atomically)."""
    from safetensors.numpy import save

    from retrieval.storage import write_bytes_atomic

    head = as_head(projection)
    assert head is not None
    tensors = {"projection": head.projection}
    if head.mlp_in is not None and head.mlp_out is not None:
        tensors |= {"mlp_in": head.mlp_in, "mlp_out": head.mlp_out}
    meta = {"settings": json.dumps(settings, sort_keys=True), "info": json.dumps(info, sort_keys=True)}
    data = save({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}, metadata=meta)
    write_bytes_atomic(Path(path), data)


def load_head(path: str | Path) -> tuple[Head, dict]:
    """(head, encoder settings) from a checkpoint; InputError if it is not one."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise InputError("late-interaction checkpoint not found (expected a .safetensors file"
                         f" or {ZERO_SHOT!r})", path)
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            names = list(f.keys())  # a safe_open handle is not iterable
            tensors = {k: f.get_tensor(k).astype(np.float32) for k in names}
        settings = json.loads(meta.get("settings", "{}"))
        projection = tensors["projection"]
    except (SafetensorError, OSError, ValueError, KeyError) as e:
        raise InputError(f"not a late-interaction checkpoint ({e})", path) from None
    if projection.ndim != 2 or 0 in projection.shape:
        raise InputError("checkpoint projection is not a (non-empty) matrix", path)
    a, b = tensors.get("mlp_in"), tensors.get("mlp_out")
    if (a is None) != (b is None) or (a is not None and b is not None and (
            a.ndim != 2 or b.ndim != 2 or a.shape[1] != projection.shape[1]
            or b.shape != (projection.shape[0], a.shape[0]))):
        raise InputError("checkpoint MLP head is incomplete or does not fit its projection (expected"
                         " mlp_in (width, hidden) and mlp_out (dim, width))", path)
    return Head(projection, a, b), _checked_settings(settings, path)


def load_checkpoint(path: str | Path) -> tuple[np.ndarray, dict]:
    """(projection, encoder settings) from a linear checkpoint; InputError if it is not one (a checkpoint
    with an MLP head: `load_head`)."""
    head, settings = load_head(path)
    if head.mlp_in is not None:
        raise InputError("checkpoint has an MLP head, not a projection alone; load it with load_head", path)
    return head.projection, settings


def _checked_settings(settings: object, path: Path) -> dict:
    """A checkpoint's encoder settings: lengths are whole numbers from 4 to 512, flags booleans."""
    if not isinstance(settings, dict):
        raise InputError("checkpoint settings are not a JSON object", path)
    for key in ("query_length", "doc_length"):
        value = settings.get(key, 32)
        if not isinstance(value, int) or isinstance(value, bool) or not 4 <= value <= 512:
            raise InputError(f"checkpoint setting {key} must be a whole number from 4 to 512, got {value!r}",
                             path)
    for key in ("markers", "augment"):
        if not isinstance(settings.get(key, False), bool):
            raise InputError(f"checkpoint setting {key} must be true or false, got {settings[key]!r}", path)
    return settings
