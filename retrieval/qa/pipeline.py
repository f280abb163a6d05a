"""Retrieve-then-read: dense top-k passages, span reader, REALM marginalisation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrieval.errors import InputError
from retrieval.qa.marginal import Answer, marginalise, passage_probs
from retrieval.qa.reader import Reading, SpanReader
from retrieval.types import Queries

DEFAULT_K = 5
DEFAULT_TEMPERATURE = 0.05


@dataclass(frozen=True)
class Retrieved:
    """One question's top passages: ids, retrieval scores, texts and the reader's view."""

    passage_ids: list[str]
    scores: list[float]
    readings: list[Reading]

    def answers(self, k: int, temperature: float = DEFAULT_TEMPERATURE,
                answerable: bool = True) -> list[Answer]:
        """Marginalised answers over the top `k` of these passages."""
        p_z = passage_probs(self.scores[:k], temperature)
        return marginalise(self.passage_ids[:k], p_z, self.readings[:k], answerable)


class RetrieveThenRead:
    """p(y | x) = sum over the top-k passages z of p(y | z, x) p(z | x).

    `index` is an index directory (or Index) with a dense part and a doc
    store; `reader` a reader checkpoint directory (default: models/reader);
    `retriever` an already built DenseRetriever to reuse; `query_model` a query
    encoder trained by `retrieval.qa.realm` (the index's document vectors are
    kept, only the questions are encoded with it). `bm25_weight` > 0 scores
    passages by cos + weight * BM25 (see `retrieval.qa.hybrid`) before p(z | x).
    """

    def __init__(self, index: Any, reader: str | Path | SpanReader | None = None, *,
                 k: int = DEFAULT_K, temperature: float = DEFAULT_TEMPERATURE,
                 answerable: bool = True, precision: str | None = None, threads: int | None = None,
                 retriever: Any = None, query_model: str | Path | None = None,
                 bm25_weight: float = 0.0):
        from retrieval.dense import DenseRetriever
        from retrieval.index import open_index

        if k < 1:
            raise InputError(f"k must be positive, got {k}")
        if temperature <= 0:
            raise InputError(f"temperature must be positive, got {temperature}")
        self.index = open_index(index)
        self.retriever = retriever or DenseRetriever(self.index, hits=k, threads=threads, precision=precision)
        self.reader = reader if isinstance(reader, SpanReader) else \
            SpanReader(reader, precision=precision, threads=threads)
        self.k, self.temperature, self.answerable = k, temperature, answerable
        self.query_encoder = None
        self.bm25_weight = bm25_weight
        if query_model is not None:
            from retrieval.qa.realm import QueryEncoder

            self.query_encoder = QueryEncoder(query_model)

    def retrieve(self, queries: Mapping[str, str]) -> Any:
        """The dense Run for these questions (REALM query encoder when given)."""
        texts = list(queries.values())
        if self.query_encoder is None and not self.bm25_weight:
            return self.retriever(Queries(queries))
        vectors = self.query_encoder.encode(texts) if self.query_encoder is not None else \
            self.retriever.encoder.encode(texts, desc="encoding queries")
        if self.bm25_weight:
            from retrieval.qa.hybrid import hybrid_run

            return hybrid_run(self.retriever, self.index, queries, vectors, self.bm25_weight,
                              depth=max(self.retriever.hits, 20))
        return self.retriever.search_vectors(list(queries), vectors)

    def retrieve_and_read(self, queries: Mapping[str, str], k: int | None = None
                          ) -> dict[str, Retrieved]:
        """Per question id: the top-k passages and the reader's distribution over each."""
        k = k or self.k
        run = self.retrieve(queries).cut(k)
        store = self.index.docstore
        out = {}
        for qid, question in queries.items():
            hits = run[qid]
            docs = store.get_many([d for d, _ in hits])
            readings = self.reader.read([question] * len(docs), [d.text for d in docs])
            out[qid] = Retrieved([d for d, _ in hits], [s for _, s in hits], readings)
        return out

    def ask_batch(self, queries: Mapping[str, str]) -> dict[str, list[Answer]]:
        """Ranked answers (with evidence) for every question id."""
        return {qid: r.answers(self.k, self.temperature, self.answerable)
                for qid, r in self.retrieve_and_read(queries).items()}

    def ask(self, question: str) -> list[Answer]:
        """Ranked answers for one question."""
        if not question.strip():
            raise InputError("empty question")
        return self.ask_batch({"q": question})["q"]


def best_answers(answers: Mapping[str, list[Answer]]) -> dict[str, str]:
    """Question id -> top answer text ("" when nothing was found): a predictions file."""
    return {qid: (a[0].text if a else "") for qid, a in answers.items()}
