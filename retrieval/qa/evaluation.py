"""Open-domain QA measured: EM/F1 and answer recall at several passage counts, per first stage.

Each system is a first stage for p(z|x) (dense, or cos + w * BM25); every
question's top max(passages) passages are read once (readings shared between
systems that retrieve the same passage), and the answers at each passage
count come from the same readings, so k=1, 5 and 20 cost one reading pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from tqdm import tqdm

from retrieval.formats.squad import Example, gold_answers
from retrieval.qa.metrics import contains_answer, evaluate
from retrieval.qa.pipeline import Retrieved, best_answers, first_stage
from retrieval.qa.reader import Reading, SpanReader
from retrieval.types import Queries


@dataclass(frozen=True)
class QARow:
    """One system at one passage count."""

    system: str
    passages: int
    questions: int
    exact: float
    f1: float
    recall: float  # fraction of questions with a gold answer string in a top-k passage
    temperature: float
    bm25_weight: float = 0.0  # p(z|x) over cos + bm25_weight * BM25


def read_top(run: Any, questions: Mapping[str, str], texts: Mapping[str, str], depth: int,
             reader: SpanReader, cache: dict[tuple[str, str], Reading],
             progress: bool = True, chunk: int = 16) -> dict[str, Retrieved]:
    """Each question's top `depth` passages with the reader's view of each (cached by pair).

    Pairs of `chunk` questions are read together, so the reader's batches are
    full and run side by side on every thread.
    """
    top = {qid: run.get(qid, [])[:depth] for qid in questions}
    todo = list(dict.fromkeys((qid, d) for qid, hits in top.items() for d, _ in hits
                              if (qid, d) not in cache))
    size = chunk * depth
    with tqdm(total=len(todo), desc="reading", unit=" passages",
              disable=None if progress else True) as bar:
        for b in range(0, len(todo), size):
            pairs = todo[b:b + size]
            readings = reader.read([questions[q] for q, _ in pairs], [texts[d] for _, d in pairs])
            cache.update(zip(pairs, readings))
            bar.update(len(pairs))
    return {qid: Retrieved([d for d, _ in hits], [s for _, s in hits], [cache[qid, d] for d, _ in hits])
            for qid, hits in top.items()}


def answer_recall(ranked: Mapping[str, Sequence[str]], texts: Mapping[str, str],
                  gold: Mapping[str, Sequence[str]], k: int) -> float:
    """Fraction of questions with a gold answer string in one of their top k passages."""
    return float(np.mean([any(contains_answer(texts[d], gold[q]) for d in ranked[q][:k]) for q in gold]))


def evaluate_system(name: str, retrieved: Mapping[str, Retrieved], examples: Sequence[Example],
                    texts: Mapping[str, str], passages: Sequence[int], temperature: float) -> list[QARow]:
    """EM/F1 (answers conditioned on being in the passage) and answer recall at each passage count."""
    gold = gold_answers(ex for ex in examples if not ex.impossible)
    rows = []
    for k in passages:
        predictions = best_answers({q: retrieved[q].answers(k, temperature, True) for q in gold})
        scores = evaluate(gold, predictions)
        recall = answer_recall({q: retrieved[q].passage_ids for q in gold}, texts, gold, k)
        rows.append(QARow(name, k, len(gold), scores["exact"], scores["f1"], recall, temperature))
    return rows


def run_qa(index: Any, examples: Sequence[Example], systems: Mapping[str, tuple[float, float]],
           reader: SpanReader, passages: Sequence[int], *, precision: str | None = None,
           threads: int | None = None, cache: dict[tuple[str, str], Reading] | None = None,
           progress: bool = True) -> list[QARow]:
    """Every system's rows; `systems` maps a name to its (bm25_weight, temperature)."""
    questions = Queries((ex.id, ex.question) for ex in examples if not ex.impossible)
    texts = {d.id: d.text for d in index.docstore}
    depth = max(passages)
    cache = {} if cache is None else cache
    rows = []
    for name, (weight, temperature) in systems.items():
        stage = first_stage(index, bm25_weight=weight, precision=precision, threads=threads,
                            depth=max(depth, 20))
        retrieved = read_top(stage(questions), questions, texts, depth, reader, cache, progress)
        rows += [replace(row, bm25_weight=weight)
                 for row in evaluate_system(name, retrieved, examples, texts, passages, temperature)]
    return rows


@dataclass(frozen=True)
class Choice:
    """A system's settings chosen on the validation set, and the F1 of every candidate there."""

    system: str
    bm25_weight: float
    temperature: float
    tried: list[tuple[float, float, float]]  # (bm25_weight, temperature, validation F1)


def choose(index: Any, validation: Sequence[Example], system: str, weights: Sequence[float],
           temperatures: Sequence[float], passages: int, reader: SpanReader, *,
           precision: str | None = None, threads: int | None = None,
           cache: dict[tuple[str, str], Reading] | None = None, progress: bool = True) -> Choice:
    """The (bm25_weight, temperature) with the best validation F1 at `passages` (ties: first listed)."""
    questions = Queries((ex.id, ex.question) for ex in validation if not ex.impossible)
    texts = {d.id: d.text for d in index.docstore}
    cache = {} if cache is None else cache
    tried = []
    for w in weights:
        stage = first_stage(index, bm25_weight=w, precision=precision, threads=threads,
                            depth=max(passages, 20))
        retrieved = read_top(stage(questions), questions, texts, passages, reader, cache, progress)
        for t in temperatures:
            row = evaluate_system(system, retrieved, validation, texts, [passages], t)[0]
            tried.append((w, t, row.f1))
    best = max(range(len(tried)), key=lambda i: (tried[i][2], -i))
    return Choice(system, tried[best][0], tried[best][1], tried)
