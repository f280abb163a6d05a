"""Contextual token states from a local Hugging Face encoder, ColBERT-style.

Queries and documents get a marker token after [CLS] ([unused0] / [unused1],
as ColBERT does) when `markers` is on; queries can be padded with [MASK] to
`query_length` tokens (query augmentation). Document tokens that are pure
punctuation are dropped. The states returned here are the encoder's last
layer (hidden size, e.g. 384); `model.LateModel` projects and normalises them.
Precision is this machine's (`retrieval.runtime.precision`, default `auto`) and batches
run side by side, one thread each, as in the dense encoder.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from retrieval.analysis import available_cpus
from retrieval.errors import InputError
from retrieval.runtime import precision as precisions
from retrieval.runtime.cpu_batches import padded_batches, run_side_by_side
from retrieval.runtime.int8_outliers import stored_channels
from retrieval.runtime.local_models import load_pretrained, model_checksum, model_name, resolve_model_dir

Q_MARKER, D_MARKER = "[unused0]", "[unused1]"
# Whether int8 token embeddings are shown to keep nDCG@10 within 0.003 of fp32's, either way, on validation
# (the checkpoint's 121 held-out SciFact training queries, BM25 top-100 reranked; the 90% interval of the
# per-query change must lie inside: precision.shown_within_limit), per kind of int8 kernel
# (precision.int8_kernel; eval/bench_precision.py decides it on each). int8 splits off the encoder's outlier
# channels (runtime/int8_outliers.py; the late checkpoint is a projection on the dense model's weights,
# so their calibration serves both). The mean moves -0.00005 with AVX-512 VNNI (Intel Xeon; interval -0.0104
# to +0.0103) and +0.0026 with AVX2 (the Xeon as an AVX2 CPU, RETRIEVAL_EMULATE_CPU=avx2; -0.0057 to
# +0.0110): 121 queries cannot show either within 0.003, so fp32. Test figures are never used to choose.
INT8_WITHIN_LIMIT = {"avx2": False, "avx512-vnni": False}


class TokenEncoder:
    """Last-layer token states of queries and documents (float32, one array per text)."""

    def __init__(self, model: str | Path | None = None, *, query_length: int = 32,
                 doc_length: int = 256, markers: bool = False, augment: bool = False,
                 precision: str | None = None, threads: int | None = None, batch_size: int = 16,
                 progress: bool | None = None):
        from transformers import AutoModel, AutoTokenizer

        self.model_dir = resolve_model_dir(model)
        self.checksum = model_checksum(self.model_dir)
        self.precision = precisions.resolve(precision, int8_within_limit=INT8_WITHIN_LIMIT)
        self.query_length, self.doc_length = int(query_length), int(doc_length)
        self.markers, self.augment = bool(markers), bool(augment)
        self.threads = threads or available_cpus()
        self.batch_size, self.progress = batch_size, progress
        self.tokenizer = load_pretrained(AutoTokenizer, self.model_dir)
        model = load_pretrained(AutoModel, self.model_dir).eval()
        self.dim = int(model.config.hidden_size)
        self.model = precisions.prepare(model, self.precision, stored_channels(self.checksum),
                                        fp32_norms=True)  # see retrieval.runtime.precision
        vocab = self.tokenizer.get_vocab()
        self.marker_ids = (vocab[Q_MARKER], vocab[D_MARKER]) if Q_MARKER in vocab else None
        if self.markers and self.marker_ids is None:
            raise InputError(f"markers need {Q_MARKER}/{D_MARKER} in the model's vocabulary", self.model_dir)
        punct = set(string.punctuation)
        self.skip_ids = np.array(sorted(i for t, i in vocab.items() if t and set(t) <= punct),
                                 dtype=np.int64)

    @property
    def effective_batch_size(self) -> int:
        """Texts encoded together (precision.batch_size_for: one for int8)."""
        return precisions.batch_size_for(self.precision, self.batch_size)

    def settings(self) -> dict:
        """What a manifest or checkpoint records about the token encoder: never a path or a precision,
        which belong to the machine that runs it."""
        return {"model": model_name(self.model_dir), "model_sha256": self.checksum,
                "query_length": self.query_length, "doc_length": self.doc_length,
                "markers": self.markers, "augment": self.augment}

    def _ids(self, texts: Sequence[str], is_query: bool) -> list[list[int]]:
        limit = (self.query_length if is_query else self.doc_length) - (1 if self.markers else 0)
        ids = self.tokenizer([str(t) for t in texts], truncation=True, max_length=limit,
                             add_special_tokens=True)["input_ids"]
        if self.markers:
            ids = [[i[0], self.marker_ids[0 if is_query else 1], *i[1:]] for i in ids]
        if is_query and self.augment:
            mask = self.tokenizer.mask_token_id
            ids = [i + [mask] * (self.query_length - len(i)) for i in ids]
        return ids

    @torch.inference_mode()
    def _forward(self, batch: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with precisions.autocast(self.precision, fp32_norms=True):
            out = self.model(input_ids=torch.from_numpy(batch), attention_mask=torch.from_numpy(mask))
        return out.last_hidden_state.float().numpy()

    def encode(self, texts: Sequence[str], is_query: bool, desc: str = "encoding") -> list[np.ndarray]:
        """States (tokens, hidden) per text; document punctuation tokens dropped."""
        ids = self._ids(texts, is_query)
        out: list[np.ndarray] = [np.zeros((0, self.dim), np.float32)] * len(ids)
        bar = tqdm(total=len(ids), desc=desc, unit="text",
                   disable=None if self.progress is None else not self.progress)

        def encode_batch(rows: list[int], batch: np.ndarray, mask: np.ndarray) -> None:
            states = self._forward(batch, mask)
            for j, i in enumerate(rows):
                keep = np.arange(len(ids[i]))
                if not is_query:
                    keep = keep[~np.isin(batch[j, :len(ids[i])], self.skip_ids)]
                out[i] = states[j, keep]
            bar.update(len(rows))

        batches = padded_batches(ids, self.effective_batch_size, self.tokenizer.pad_token_id or 0)
        run_side_by_side(lambda b: encode_batch(*b), batches, self.threads, self.threads)
        bar.close()
        return out
