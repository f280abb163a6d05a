"""REALM-style training of the retriever's query side from the reader's signal.

For each training question the top-k passages are retrieved once with the
current encoder; the (fixed) reader gives p(y* | z, x), the probability of
the gold answer string in each passage. The query encoder is then trained to
maximise the marginal likelihood log sum_z p(y* | z, x) p(z | x), with
p(z | x) = softmax(q(x) . d_z / T) over those k passages and the document
embeddings d_z held fixed (the index is not refreshed). The trained query
encoder is an HF model directory; `QueryEncoder` searches the unchanged
index with it.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from retrieval.formats.squad import Example
from retrieval.qa.metrics import normalize_answer
from retrieval.qa.reader import SpanReader
from retrieval.runtime.local_models import load_pretrained, resolve_model_dir
from retrieval.storage import atomic_directory, is_model_dir, naming


def gold_probability(reader: SpanReader, question: str, contexts: Sequence[str],
                     golds: Sequence[str]) -> np.ndarray:
    """p(y* | z, x) for each passage: the reader's mass on spans equal to a gold answer."""
    keys = {normalize_answer(g) for g in golds} - {""}
    out = []
    for reading in reader.read([question] * len(contexts), list(contexts)):
        answers = reading.answers(answerable=False)
        out.append(sum(answers[k][0] for k in keys if k in answers))
    return np.asarray(out, dtype=np.float64)


class QueryEncoder(torch.nn.Module):
    """Mean-pooled, L2-normalised question embeddings from a trainable HF encoder."""

    def __init__(self, model: str | Path | None = None):
        super().__init__()
        from transformers import AutoModel, AutoTokenizer

        path = resolve_model_dir(model)
        self.model = load_pretrained(AutoModel, path)
        self.tokenizer = load_pretrained(AutoTokenizer, path)

    def forward(self, texts: Sequence[str]) -> torch.Tensor:
        enc = self.tokenizer(list(texts), padding=True, truncation=True, max_length=64,
                             return_tensors="pt")
        hidden = self.model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)

    @torch.inference_mode()
    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Embeddings as float32 numpy rows."""
        self.eval()
        parts = [self(texts[i:i + batch_size]).float().numpy() for i in range(0, len(texts), batch_size)]
        return np.concatenate(parts) if parts else np.zeros((0, 384), dtype=np.float32)

    def save(self, path: Path, info: dict) -> None:
        """Atomically write the encoder (safetensors), tokenizer and training info."""
        with atomic_directory(Path(path), is_model_dir) as tmp, naming(path):
            self.model.save_pretrained(tmp, safe_serialization=True)
            self.tokenizer.save_pretrained(tmp)
            (tmp / "training.json").write_text(json.dumps(info, indent=2) + "\n")


def marginal_loss(scores: torch.Tensor, p_gold: torch.Tensor, temperature: float) -> torch.Tensor:
    """Mean over questions of -log sum_z softmax(scores / T)_z p(y* | z, x)."""
    log_pz = torch.log_softmax(scores / temperature, dim=-1)
    return -torch.logsumexp(log_pz + torch.log(p_gold.clamp(min=1e-12)), dim=-1).mean()


def train_query_side(examples: Sequence[Example], doc_vectors: np.ndarray, doc_ids: Sequence[str],
                     texts: dict[str, str], reader: SpanReader, output: str | Path, *, k: int = 8,
                     temperature: float = 0.05, epochs: int = 2, lr: float = 2e-5,
                     batch_size: int = 16, seed: int = 0, log: Callable[[str], None] = print) -> dict:
    """Fine-tune the query encoder on the marginal likelihood; writes it to `output`."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    enc = QueryEncoder()
    t0 = time.time()
    q = enc.encode([e.question for e in examples])
    top = np.argsort(-(q @ doc_vectors.T), axis=1, kind="stable")[:, :k]
    items = []
    for n, (e, rows) in enumerate(zip(examples, top), 1):
        pg = gold_probability(reader, e.question, [texts[doc_ids[r]] for r in rows],
                              [a.text for a in e.answers])
        if pg.sum() > 1e-6:
            items.append((e.question, rows, pg))
        if n % 100 == 0:
            log(f"read {n}/{len(examples)} ({time.time() - t0:.0f}s)")
    docs = torch.from_numpy(np.asarray(doc_vectors, dtype=np.float32))
    opt = torch.optim.AdamW(enc.model.parameters(), lr=lr, weight_decay=0.01)
    history = []
    enc.train()
    for epoch in range(1, epochs + 1):
        rng.shuffle(items)
        total = 0.0
        for b in range(0, len(items), batch_size):
            batch = items[b:b + batch_size]
            qv = enc([x[0] for x in batch])
            d = docs[torch.from_numpy(np.stack([x[1] for x in batch]))]  # (B, k, dim)
            scores = torch.einsum("bd,bkd->bk", qv, d)
            pg = torch.from_numpy(np.stack([x[2] for x in batch])).float()
            loss = marginal_loss(scores, pg, temperature)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            total += float(loss.detach()) * len(batch)
        history.append(total / max(len(items), 1))
        log(f"epoch {epoch} marginal NLL {history[-1]:.4f} ({time.time() - t0:.0f}s)")
    info = {"questions": len(examples), "used": len(items), "k": k, "temperature": temperature,
            "epochs": epochs, "lr": lr, "batch_size": batch_size, "seed": seed, "loss": history,
            "seconds": round(time.time() - t0, 1)}
    enc.save(Path(output), info)
    return info
