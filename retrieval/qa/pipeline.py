"""Retrieve-then-read: a first stage's top passages, span reader, REALM marginalisation.

p(y | x) = sum over the top `passages` z of p(y | z, x) p(z | x), with
p(z | x) = softmax(score / temperature) over the first stage's scores. The
first stage is any Stage: a DenseRetriever (REALM's p(z | x)), a
WeightedSum(dense, BM25) (cos + w * BM25), plain BM25, ...; `first_stage`
builds the ones `retrieval ask` offers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrieval.errors import InputError
from retrieval.pipeline import params
from retrieval.pipeline.stage import Stage
from retrieval.qa.marginal import Answer, marginalise, passage_probs
from retrieval.qa.reader import Reading, SpanReader
from retrieval.types import Queries, Run

DEFAULT_PASSAGES = params.default("passages")
DEFAULT_TEMPERATURE = params.default("temperature")
DEFAULT_DEPTH = 20  # passages each first stage retrieves (the reader reads the top `passages`)


@dataclass(frozen=True)
class Retrieved:
    """One question's top passages: ids, retrieval scores, texts and the reader's view."""

    passage_ids: list[str]
    scores: list[float]
    readings: list[Reading]

    def answers(self, passages: int, temperature: float = DEFAULT_TEMPERATURE,
                answerable: bool = True) -> list[Answer]:
        """Marginalised answers over the top `passages` of these passages."""
        p_z = passage_probs(self.scores[:passages], temperature)
        return marginalise(self.passage_ids[:passages], p_z, self.readings[:passages], answerable)


def check_settings(passages: int, temperature: float) -> None:
    """Refuse a passage count below 1 or a temperature that is not positive (params.PARAMS)."""
    params.check(passages=passages, temperature=temperature)


def first_stage(index: Any, *, bm25_weight: float = 0.0, query_model: str | Path | None = None,
                precision: str | None = None, threads: int | None = None,
                depth: int = DEFAULT_DEPTH) -> Stage:
    """The passage retriever whose scores feed p(z | x): dense, or cos + bm25_weight * BM25.

    Dense retrieval returns the top `depth` passages; `query_model` is a query
    encoder trained by `retrieval.qa.realm` (the index's document vectors are
    kept, only the questions are encoded with it). With `bm25_weight` > 0 the
    stage is WeightedSum(dense, BM25) over the union of both top `depth` lists
    (BM25 with its default parameters).
    """
    from retrieval.index.kinds import open_index
    from retrieval.registry import build

    params.check(bm25_weight=bm25_weight, depth=depth, threads=threads)
    index = open_index(index)
    if index.kind == "native":  # the one kind a trained query encoder can search
        from retrieval.dense import DenseRetriever

        query_encoder = None
        if query_model is not None:
            from retrieval.qa.realm import QueryEncoder

            query_encoder = QueryEncoder(query_model)
        dense = DenseRetriever(index, hits=depth, precision=precision, threads=threads,
                               query_encoder=query_encoder)
    elif query_model is not None:
        raise InputError(f"a trained query encoder needs a native index; this one is {index.kind}",
                         index.path)
    else:  # e.g. a live index, after documents were added or deleted
        dense = build("dense", index, hits=depth, precision=precision, threads=threads)
    if not bm25_weight:
        return dense
    from retrieval.pipeline.fusion import WeightedSum

    return WeightedSum(dense, build("bm25", index, hits=depth), weights=(1.0, bm25_weight), depth=depth)


class RetrieveThenRead:
    """p(y | x) = sum over the top `passages` z of p(y | z, x) p(z | x).

    `first_stage` is any Stage (or callable with the stage signature) whose
    scores give p(z | x) = softmax(score / temperature) over its top
    `passages`; `reader` a reader checkpoint directory or SpanReader (None: the
    shipped retrieval/models/reader); `index` an index directory (or Index) whose doc
    store supplies the passage texts. `precision` and `threads` are the reader's.
    """

    def __init__(self, first_stage: Stage | Callable[..., Run], reader: str | Path | SpanReader | None,
                 index: Any, *, passages: int = DEFAULT_PASSAGES,
                 temperature: float = DEFAULT_TEMPERATURE, answerable: bool = True,
                 precision: str | None = None, threads: int | None = None):
        from retrieval.index.kinds import open_index

        check_settings(passages, temperature)
        if not callable(first_stage):
            raise InputError(f"the first stage must be a Stage, got {type(first_stage).__name__}")
        self.first_stage = first_stage
        self.index = open_index(index)
        if not hasattr(self.index, "passage"):
            raise InputError(f"passages are read from a native or sharded index's doc store; this one is"
                             f" {self.index.kind}", self.index.path)
        self.reader = reader if isinstance(reader, SpanReader) else \
            SpanReader(reader, precision=precision, threads=threads)
        self.passages, self.temperature, self.answerable = passages, temperature, answerable

    def retrieve(self, queries: Mapping[str, str]) -> Run:
        """The first stage's Run for these questions."""
        return self.first_stage(Queries(queries))

    def retrieve_and_read(self, queries: Mapping[str, str], passages: int | None = None
                          ) -> dict[str, Retrieved]:
        """Per question id: the top `passages` passages and the reader's distribution over each."""
        passages = passages or self.passages
        run = self.retrieve(queries).cut(passages)
        out = {}
        for qid, question in queries.items():
            hits = run[qid]
            texts = [self.index.passage(d) for d, _ in hits]
            readings = self.reader.read([question] * len(texts), texts)
            out[qid] = Retrieved([d for d, _ in hits], [s for _, s in hits], readings)
        return out

    def ask_batch(self, queries: Mapping[str, str]) -> dict[str, list[Answer]]:
        """Ranked answers (with evidence) for every question id."""
        return {qid: r.answers(self.passages, self.temperature, self.answerable)
                for qid, r in self.retrieve_and_read(queries).items()}

    def ask(self, question: str) -> list[Answer]:
        """Ranked answers for one question."""
        if not question.strip():
            raise InputError("empty question")
        return self.ask_batch({"q": question})["q"]


def best_answers(answers: Mapping[str, list[Answer]]) -> dict[str, str]:
    """Question id -> top answer text ("" when nothing was found): a predictions file."""
    return {qid: (a[0].text if a else "") for qid, a in answers.items()}
