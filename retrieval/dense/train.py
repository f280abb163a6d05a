"""Fine-tune the dense encoder contrastively: in-batch negatives plus one hard negative per query.

The loss is sentence-transformers' MultipleNegativesRankingLoss: for a batch of
(query, positive, hard negative) triples, each query is scored (cosine x
`scale`) against every positive and every hard negative of the batch, and the
cross-entropy of its own positive is minimised. `scale` 20 (temperature 0.05)
is that loss's default, fixed before any run (issue 51 item 4), not tuned.
Pooling and normalisation are the model's own (mean, L2), as `Encoder` applies
them, so a fine-tuned directory is a drop-in `--encoder DIR`.

The output directory is a complete local model: weights as safetensors (never
pickle), config, tokenizer, the sentence-transformers pooling files copied from
the source, and `training.json` (settings, pairs, per-step loss).
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from retrieval.errors import InputError
from retrieval.runtime.local_models import load_pretrained, model_name, resolve_model_dir

ST_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling")


@dataclass(frozen=True)
class FinetuneConfig:
    """Settings of `finetune`, recorded in training.json; all fixed a priori (issue 51 item 4)."""

    epochs: int = 1
    batch_size: int = 16
    lr: float = 2e-5
    scale: float = 20.0  # cosine x 20 = temperature 0.05 (MultipleNegativesRankingLoss's default)
    query_length: int = 32
    doc_length: int = 128  # documents cut to 128 word pieces while training (CPU time); encoding keeps 256
    seed: int = 13
    bf16: bool = True  # bf16 autocast on CPU (weights and optimiser stay fp32)


Triple = tuple[str, str, str | None]  # (query, positive passage, hard negative passage or None)


def _embed(model: torch.nn.Module, tokenizer: Any, texts: Sequence[str], length: int) -> torch.Tensor:
    """Mean-pooled, L2-normalised embeddings (as the encoder's sentence-transformers config pools)."""
    batch = tokenizer(list(texts), truncation=True, max_length=length, padding=True, return_tensors="pt")
    hidden = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, dim=-1)


def batch_loss(model: torch.nn.Module, tokenizer: Any, batch: Sequence[Triple],
               cfg: FinetuneConfig) -> torch.Tensor:
    """MultipleNegativesRanking loss of one batch: each query against all positives and hard negatives."""
    queries = _embed(model, tokenizer, [q for q, _, _ in batch], cfg.query_length)
    docs = [p for _, p, _ in batch] + [n for _, _, n in batch if n is not None]
    passages = _embed(model, tokenizer, docs, cfg.doc_length)
    scores = cfg.scale * queries @ passages.T
    return torch.nn.functional.cross_entropy(scores, torch.arange(len(batch)))


def finetune(triples: Sequence[Triple], output: str | Path, model: str | Path | None = None,
             cfg: FinetuneConfig = FinetuneConfig(), threads: int = 1,
             extra_info: dict[str, Any] | None = None, progress: bool = False) -> dict[str, Any]:
    """Fine-tune `model` (default: the bundled all-MiniLM-L6-v2) on `triples` and write it to `output`;
    returns the training record (also `output`/training.json)."""
    from transformers import AutoModel, AutoTokenizer

    if not triples:
        raise InputError("no training pairs to fine-tune the dense encoder on")
    source = resolve_model_dir(model)
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(threads)
    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
    net = load_pretrained(AutoModel, source, quiet=True)
    net.train()
    optimiser = torch.optim.AdamW(net.parameters(), lr=cfg.lr)
    order = list(triples)
    losses: list[float] = []
    start = time.time()
    for epoch in range(cfg.epochs):
        random.Random(f"{cfg.seed}:{epoch}").shuffle(order)
        for i in range(0, len(order), cfg.batch_size):
            batch = order[i:i + cfg.batch_size]
            if len(batch) < 2:  # a lone query has no in-batch negative
                continue
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
                loss = batch_loss(net, tokenizer, batch, cfg)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            losses.append(round(float(loss.detach()), 5))
            if progress:
                print(f"step {len(losses)}: loss {losses[-1]:.4f} ({time.time() - start:.0f}s)", flush=True)
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    net.eval()
    net.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    for name in ST_FILES:
        src = source / name
        if src.is_dir():
            shutil.copytree(src, out / name, dirs_exist_ok=True)
        elif src.is_file():
            shutil.copy2(src, out / name)
    info = {"base_model": model_name(source), "config": asdict(cfg), "pairs": len(order),
            "hard_negatives": sum(n is not None for _, _, n in order), "steps": len(losses),
            "losses": losses, "seconds": round(time.time() - start, 1), **(extra_info or {})}
    (out / "training.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    return info
