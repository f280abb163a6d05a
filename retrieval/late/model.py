"""The late-interaction model: token encoder + linear projection + L2 norm, and MaxSim.

A checkpoint is one small safetensors file: the projection matrix
`projection` (dim, hidden) and, in its metadata, the encoder settings it was
trained with and the base model's SHA-256. "zero-shot" is the untrained
model: no projection (identity, dim = hidden size), queries as-is.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
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


class LateModel:
    """Encode queries and documents into normalised token embeddings of size `dim`.

    `precision` is this machine's choice (default `auto`, see retrieval.runtime.precision).
    """

    def __init__(self, model: str | Path | None = None, *, encoder_model: str | Path | None = None,
                 threads: int | None = None, precision: str | None = None,
                 progress: bool | None = False, **overrides):
        from retrieval.late.encoder import TokenEncoder

        self.projection: np.ndarray | None = None
        settings: dict = {}
        if model is None:
            if not DEFAULT_CHECKPOINT.is_file():
                raise InputError(f"the default late-interaction checkpoint is missing; pass a checkpoint"
                                 f" or {ZERO_SHOT!r}", DEFAULT_CHECKPOINT)
            model = DEFAULT_CHECKPOINT
        if str(model) == ZERO_SHOT:
            self.name, self.checkpoint_sha256 = ZERO_SHOT, None
        else:
            self.projection, settings = load_checkpoint(verify_packaged(model))
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
        x = np.asarray(states, dtype=np.float32)
        if self.projection is not None:
            x = x @ self.projection.T
        return normalise(x)

    def queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Query token embeddings, one (tokens, dim) array per text."""
        return [self.project(s) for s in self.encoder.encode(texts, True, desc="queries")]

    def documents(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Document token embeddings (punctuation dropped), one array per text."""
        return [self.project(s) for s in self.encoder.encode(texts, False, desc="documents")]


def save_checkpoint(path: str | Path, projection: np.ndarray, settings: dict, info: dict) -> None:
    """Write the projection and its settings as safetensors (atomically)."""
    from safetensors.numpy import save

    from retrieval.storage import write_bytes_atomic

    meta = {"settings": json.dumps(settings, sort_keys=True), "info": json.dumps(info, sort_keys=True)}
    data = save({"projection": np.ascontiguousarray(projection, dtype=np.float32)}, metadata=meta)
    write_bytes_atomic(Path(path), data)


def load_checkpoint(path: str | Path) -> tuple[np.ndarray, dict]:
    """(projection, encoder settings) from a checkpoint; InputError if it is not one."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise InputError("late-interaction checkpoint not found (expected a .safetensors file"
                         f" or {ZERO_SHOT!r})", path)
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            projection = f.get_tensor("projection")
        settings = json.loads(meta.get("settings", "{}"))
    except (SafetensorError, OSError, ValueError, KeyError) as e:
        raise InputError(f"not a late-interaction checkpoint ({e})", path) from None
    if projection.ndim != 2 or 0 in projection.shape:
        raise InputError("checkpoint projection is not a (non-empty) matrix", path)
    return projection.astype(np.float32), _checked_settings(settings, path)


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
