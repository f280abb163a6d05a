"""The extractive span reader: p(y | z, x) over the spans of one passage.

A BERT-style encoder with a start/end head scores every passage token; a
span (s, e) scores start[s] + end[e], "no answer" scores start[CLS] +
end[CLS] (the lowest over a passage's windows, as in SQuAD 2.0 practice).
One softmax over the no-answer option and every span of at most
`max_answer_tokens` tokens in every window gives p(span | z, x).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from retrieval.analysis import available_cpus
from retrieval.errors import InputError
from retrieval.qa.features import MAX_LENGTH, STRIDE, Window, make_windows
from retrieval.qa.metrics import normalize_answer
from retrieval.runtime import precision as precisions
from retrieval.runtime.cpu_batches import run_side_by_side
from retrieval.runtime.int8_outliers import stored_channels
from retrieval.runtime.local_models import PACKAGED, load_pretrained, verify_packaged, weights_file
from retrieval.storage import sha256_file

MAX_ANSWER_TOKENS = 30
TOP_SPANS = 20
DEFAULT_READER = PACKAGED / "reader"  # shipped in the package (package data)
# Whether int8 is shown to keep closed-setting F1 within 0.5 of fp32's, either way, on validation (460
# answerable squad2-dev:validation questions; the 90% interval of the per-question change must lie inside:
# precision.shown_within_limit), per kind of int8 kernel (precision.int8_kernel; eval/bench_precision.py
# decides it on each), the committed reader: -1.4 F1 with AVX-512 VNNI (Intel Xeon), -1.1 with AVX2 (the Xeon
# as an AVX2 CPU, RETRIEVAL_EMULATE_CPU=avx2), neither shown.
INT8_WITHIN_LIMIT = {"avx2": False, "avx512-vnni": False}


@dataclass(frozen=True)
class Span:
    """A candidate answer in one passage: text, character offsets, p(span | z, x)."""

    text: str
    start: int
    end: int
    prob: float


@dataclass(frozen=True)
class Reading:
    """The reader's distribution over one passage: no-answer mass and the top spans."""

    null_prob: float
    spans: tuple[Span, ...]

    def answers(self, answerable: bool = False) -> dict[str, tuple[float, Span]]:
        """Normalised answer string -> (p(y | z, x), its most probable span).

        With `answerable`, probabilities are conditioned on the passage holding
        an answer (divided by 1 - p(no answer)).
        """
        scale = 1.0 / max(1.0 - self.null_prob, 1e-12) if answerable else 1.0
        out: dict[str, tuple[float, Span]] = {}
        for span in self.spans:
            key = normalize_answer(span.text)
            if not key:
                continue
            prob, best = out.get(key, (0.0, span))
            out[key] = (prob + span.prob * scale, best)
        return out


def _logsumexp(x: np.ndarray) -> float:
    m = float(np.max(x))
    return m + float(np.log(np.sum(np.exp(x - m))))


def span_distribution(context: str, windows: Sequence[Window], starts: Sequence[np.ndarray],
                      ends: Sequence[np.ndarray], max_answer_tokens: int = MAX_ANSWER_TOKENS,
                      top: int = TOP_SPANS) -> Reading:
    """Softmax over no-answer and all spans of all windows of one passage."""
    null = min(float(s[0] + e[0]) for s, e in zip(starts, ends))
    best: dict[tuple[int, int], float] = {}
    scores = [np.array([null])]
    for window, start, end in zip(windows, starts, ends):
        ctx = np.array(window.context_tokens, dtype=np.int64)
        if not len(ctx):
            continue
        m = start[ctx][:, None] + end[ctx][None, :]
        offs = np.arange(len(ctx))
        band = (offs[None, :] >= offs[:, None]) & (offs[None, :] - offs[:, None] < max_answer_tokens)
        valid = m[band]
        scores.append(valid)
        rows, cols = np.nonzero(band)
        for i in np.argsort(-valid, kind="stable")[:top]:
            s, e = window.offsets[ctx[rows[i]]][0], window.offsets[ctx[cols[i]]][1]
            best[(s, e)] = max(best.get((s, e), -np.inf), float(valid[i]))
    z = _logsumexp(np.concatenate(scores))
    spans = sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return Reading(float(np.exp(null - z)),
                   tuple(Span(context[s:e], s, e, float(np.exp(sc - z))) for (s, e), sc in spans))


def check_reader_dir(path: str | Path) -> None:
    """InputError unless `path` looks like a reader checkpoint directory (its config.json)."""
    if not (Path(path) / "config.json").is_file():
        raise InputError("no reader checkpoint here (config.json missing); train one with"
                         " `retrieval train reader`", path)


def load_reader_model(path: str | Path | None = None):
    """(model, tokenizer, SHA-256 of the weights) from a local reader checkpoint directory (fp16
    weights -> fp32)."""
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    path = verify_packaged(Path(path) if path else DEFAULT_READER)  # the shipped reader: checked
    check_reader_dir(path)
    model, loading = load_pretrained(AutoModelForQuestionAnswering, path, quiet=True, dtype=torch.float32,
                                     output_loading_info=True)
    if any(key.startswith("qa_outputs") for key in loading["missing_keys"]):  # else a random head
        raise InputError("is not a reader checkpoint (it has no answer-span head); train one with"
                         " `retrieval train reader`", path)
    model = model.eval()
    tokenizer = load_pretrained(AutoTokenizer, path, quiet=True)
    return model, tokenizer, sha256_file(weights_file(path))


class SpanReader:
    """Read passages for a question: one `Reading` per passage.

    `precision` is this machine's choice (default `auto`, see retrieval.runtime.precision).
    """

    def __init__(self, model: str | Path | None = None, *, max_length: int = MAX_LENGTH,
                 stride: int = STRIDE, max_answer_tokens: int = MAX_ANSWER_TOKENS,
                 batch_size: int = 32, precision: str | None = None, threads: int | None = None):
        self.precision = precisions.resolve(precision, int8_within_limit=INT8_WITHIN_LIMIT)
        model, self.tokenizer, self.checksum = load_reader_model(model)
        self.model = precisions.prepare(model, self.precision, stored_channels(self.checksum),
                                        fp32_norms=True)  # see retrieval.runtime.precision
        self.max_length, self.stride = max_length, stride
        self.max_answer_tokens = max_answer_tokens
        self.batch_size = batch_size
        self.threads = threads or available_cpus()

    @property
    def effective_batch_size(self) -> int:
        """Windows read together (precision.batch_size_for: one for int8)."""
        return precisions.batch_size_for(self.precision, self.batch_size)

    def logits(self, windows: Sequence[Window]) -> list[tuple[np.ndarray, np.ndarray]]:
        """(start, end) logits per window, float32, unpadded.

        Windows are batched by length (little padding) and batches run side by side,
        one thread each, as in the encoders.
        """
        out: list[tuple[np.ndarray, np.ndarray]] = [None] * len(windows)  # type: ignore[list-item]
        order = sorted(range(len(windows)), key=lambda i: (len(windows[i].input_ids), i))
        size = self.effective_batch_size
        batches = [order[b:b + size] for b in range(0, len(order), size)]

        def read_batch(rows: list[int]) -> None:
            for i, logits in zip(rows, self._forward([windows[i] for i in rows])):
                out[i] = logits

        run_side_by_side(read_batch, batches, self.threads, self.threads)
        return out

    @torch.inference_mode()
    def _forward(self, batch: Sequence[Window]) -> list[tuple[np.ndarray, np.ndarray]]:
        pad = self.tokenizer.pad_token_id or 0
        width = -(-max(len(w.input_ids) for w in batch) // 32) * 32  # few shapes: kernel reuse
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        types = torch.zeros_like(ids)
        mask = torch.zeros_like(ids)
        for i, w in enumerate(batch):
            n = len(w.input_ids)
            ids[i, :n] = torch.tensor(w.input_ids)
            types[i, :n] = torch.tensor(w.token_type_ids)
            mask[i, :n] = 1
        with precisions.autocast(self.precision, fp32_norms=True):
            res = self.model(input_ids=ids, token_type_ids=types, attention_mask=mask)
        s, e = res.start_logits.float().numpy(), res.end_logits.float().numpy()
        return [(s[i, :len(w.input_ids)], e[i, :len(w.input_ids)]) for i, w in enumerate(batch)]

    def read(self, questions: Sequence[str], contexts: Sequence[str]) -> list[Reading]:
        """The reader's distribution for each (question, context) pair."""
        if not contexts:
            return []
        windows = make_windows(self.tokenizer, questions, contexts, max_length=self.max_length,
                               stride=self.stride)
        logits = self.logits(windows)
        by_pair: dict[int, list[int]] = {}
        for i, w in enumerate(windows):
            by_pair.setdefault(w.pair, []).append(i)
        out = []
        for p, context in enumerate(contexts):
            idx = by_pair.get(p, [])
            out.append(span_distribution(context, [windows[i] for i in idx],
                                         [logits[i][0] for i in idx], [logits[i][1] for i in idx],
                                         self.max_answer_tokens))
        return out
