"""Sparse ranking stages: BM25, query likelihood (Dirichlet / Jelinek-Mercer), RM3.

Each is a stage: `ranker(queries) -> Run` searches the whole index;
`ranker(queries, run)` rescores the run's candidates instead (same scores as
searching alone, restricted to those documents), which is how a BM25 first
stage feeds query-likelihood scoring. Parameters live in the constructor. A
run naming a query that `queries` has no text for is refused (InputError
naming it), as by every stage (pipeline/stage.py).
"""

from __future__ import annotations

import copy
import sys
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path

import numpy as np
from tqdm import tqdm

from retrieval.errors import InputError, UnknownDocument
from retrieval.index.filters import allow_mask, as_filter
from retrieval.index.impacts import BM25Model, DirichletModel, JelinekMercerModel, impacts_for
from retrieval.index.native import Index, native_index
from retrieval.pipeline import params
from retrieval.pipeline.params import default
from retrieval.pipeline.stage import Stage
from retrieval.sparse.feedback import FeedbackVector, eligible_terms, feedback_vector, relevance_model
from retrieval.sparse.searcher import ImpactSearcher, WeightedQuery
from retrieval.types import Columns, Queries, Ranking, Run


def map_queries(fn: Callable[[str, str], Ranking], queries: Queries, threads: int = 1,
                desc: str = "searching") -> Run:
    """Apply fn(qid, text) to every query (in threads), with a progress bar; order kept."""
    items = list(queries.items())
    bar = tqdm(total=len(items), desc=desc, unit=" queries", disable=None)

    def one(item: tuple[str, str]) -> Ranking:
        result = fn(*item)
        bar.update()
        return result

    if threads > 1:
        with ThreadPoolExecutor(threads) as pool:
            rankings = list(pool.map(one, items))
    else:
        rankings = [one(item) for item in items]
    bar.close()
    return Run(dict(zip([q for q, _ in items], rankings)), presorted=True)


class SparseRanker(Stage):
    """A bag-of-words ranker over the inverted index; subclasses choose the model."""

    name = "sparse"

    def __init__(self, index: Index | str | Path, model, hits: int = default("hits"),
                 threads: int = default("threads"), name: str | None = None, filter: object = None):
        params.check(hits=hits, threads=threads)
        self.name = name or self.name
        self.index = native_index(index)
        self.filter = as_filter(filter)
        self.model = model
        self.hits = hits
        self.threads = threads
        self._warned: set[str] = set()

    def with_filter(self, filter: object) -> SparseRanker:
        """This ranker searching only the documents `filter` passes (an expression, a Filter or None),
        sharing its loaded impacts: how one built stage serves requests with different filters."""
        other = copy.copy(self)
        other.filter = as_filter(filter)
        other.__dict__.pop("allow", None)
        return other

    @cached_property
    def allow(self) -> np.ndarray | None:
        """The filter's allow mask (uint8 by docno), None without a filter (index/filters.py)."""
        return allow_mask(self.filter, self.index)

    @cached_property
    def searcher(self) -> ImpactSearcher:
        inverted = self.index.inverted
        return ImpactSearcher(inverted, impacts_for(self.model, inverted), nonnegative=self.model.nonnegative)

    def analyse(self, text: str) -> Counter[str]:
        """Query term counts after analysis (terms unknown to the index included)."""
        return Counter(self.index.analyzer(text))

    def weighted(self, terms: dict[str, float], qid: str = "") -> WeightedQuery:
        """Known terms with their weights, in sorted term order (deterministic sums)."""
        ids = self.index.inverted.term_ids
        query = [(ids[t], float(w)) for t, w in sorted(terms.items()) if t in ids]
        if not query and qid not in self._warned:
            self._warned.add(qid)
            print(f"retrieval: warning: query {qid!r} has no indexed terms after analysis;"
                  " it gets no hits", file=sys.stderr)
        return query

    def ranking(self, docs: np.ndarray, scores: np.ndarray) -> Ranking:
        """(doc id, score) pairs for docnos."""
        return list(zip(self.index.doc_id_objects[docs].tolist(), scores.tolist()))

    def rescore_terms(self, query: WeightedQuery, candidates: Ranking) -> Ranking:
        docno = self.index.docno
        try:
            docs = np.array([docno[d] for d, _ in candidates], dtype=np.int64)
        except KeyError as e:
            raise UnknownDocument(e.args[0], self.index.path) from None
        if self.allow is not None:  # a filtered rescorer drops the candidates that fail
            docs = docs[self.allow[docs] != 0]
        scores = self.searcher.score(query, docs)
        order = np.lexsort((docs, -scores))  # docno order is doc id order
        return self.ranking(docs[order], scores[order])

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        params.check_queries(queries)
        params.check_run(run, queries)
        self.searcher  # noqa: B018  (build impacts once, before threads start)
        self.allow  # noqa: B018  (and the filter's mask)
        if run is not None:  # rescore every document of the run
            return map_queries(lambda q, t: self.rescore_terms(self.weighted(self.analyse(t), q),
                                                               run.get(q, [])), queries, self.threads,
                               desc="rescoring")
        return self.search_many({q: self.analyse(t) for q, t in queries.items()}, self.hits)

    def search_many(self, terms: dict[str, dict[str, float]], k: int) -> Run:
        """Search many weighted term bags at once (query id -> {term: weight})."""
        weighted = [self.weighted(bag, qid) for qid, bag in terms.items()]
        results = self.searcher.search_many(weighted, k, self.threads, allow=self.allow)
        ids = self.index.doc_id_objects
        return Run({qid: Columns(ids[docs], scores) for qid, (docs, scores) in zip(terms, results)})


class BM25(SparseRanker):
    """BM25 as Lucene computes it (defaults: Anserini's k1=0.9, b=0.4, declared in pipeline/params.py)."""

    name = "bm25"

    def __init__(self, index: Index | str | Path, k1: float = default("k1"), b: float = default("b"),
                 hits: int = default("hits"), threads: int = default("threads"), filter: object = None):
        params.check(k1=k1, b=b)
        super().__init__(index, BM25Model(k1, b), hits, threads, filter=filter)


class QueryLikelihood(SparseRanker):
    """Query likelihood with Dirichlet (`mu`) or Jelinek-Mercer (`lam`) smoothing, as Lucene."""

    def __init__(self, index: Index | str | Path, smoothing: str = "dirichlet", mu: float | None = None,
                 lam: float | None = None, hits: int = default("hits"), threads: int = default("threads"),
                 filter: object = None):
        """`mu` (default 1000) applies only with Dirichlet smoothing, `lam` (default 0.1) only with
        Jelinek-Mercer: the other is refused, not ignored."""
        if smoothing == "dirichlet":
            _only_with(lam, "lam", "jelinek-mercer")
            mu = default("mu") if mu is None else mu
            params.check(mu=mu)
            model, self.name = DirichletModel(mu), "qld"
        elif smoothing in ("jelinek-mercer", "jm"):
            _only_with(mu, "mu", "dirichlet")
            lam = default("lam") if lam is None else lam
            params.check(lam=lam)
            model, self.name = JelinekMercerModel(lam), "qljm"
        else:
            raise InputError(f"unknown smoothing {smoothing!r}; expected dirichlet or jelinek-mercer")
        super().__init__(index, model, hits, threads, filter=filter)


def _only_with(value: float | None, name: str, smoothing: str) -> None:
    if value is not None:
        raise InputError(f"{name} applies only with smoothing {smoothing}")


class RM3(Stage):
    """RM3 pseudo-relevance feedback around a sparse ranker, as Anserini's Rm3Reranker.

    Feedback documents are the ranker's top `fb_docs` (or the given run's);
    each contributes its `fb_terms` most frequent eligible terms (2-20 chars of
    [a-z0-9], in at most 10% of documents), weighted by tf / |vector| times the
    document's score; the top `fb_terms` terms, L1-normalised, are mixed with
    the L1-normalised query (weight `original_weight`) and searched again.
    """

    def __init__(self, ranker: SparseRanker, fb_docs: int = default("fb_docs"),
                 fb_terms: int = default("fb_terms"), original_weight: float = default("original_weight"),
                 hits: int | None = None):
        params.check(fb_docs=fb_docs, fb_terms=fb_terms, original_weight=original_weight, hits=hits)
        if not hasattr(ranker, "search_many"):
            raise InputError("RM3 wraps a sparse ranker (BM25, QueryLikelihood), got"
                             f" {type(ranker).__name__}")
        self.ranker = ranker
        self.fb_docs, self.fb_terms, self.original_weight = fb_docs, fb_terms, original_weight
        self.hits = hits or ranker.hits
        self.name = f"{ranker.name}+rm3"

    @cached_property
    def eligible(self) -> np.ndarray:
        """Terms that may serve as feedback terms."""
        inverted = self.ranker.index.inverted
        return eligible_terms(inverted.terms, inverted.df, inverted.num_docs)

    def relevance_model(self, feedback: Ranking) -> dict[str, float]:
        """The pruned, L1-normalised relevance model from feedback documents."""
        inverted, docno = self.ranker.index.inverted, self.ranker.index.docno
        indptr, terms, tfs = inverted.forward

        def vector(doc_id: str) -> FeedbackVector:
            d = docno[doc_id]
            return feedback_vector(terms[indptr[d]:indptr[d + 1]], tfs[indptr[d]:indptr[d + 1]],
                                   self.eligible, inverted.terms, self.fb_terms)
        return relevance_model(((vector(d), score) for d, score in feedback[: self.fb_docs]), self.fb_terms)

    def expand(self, text: str, feedback: Ranking) -> dict[str, float]:
        """The interpolated feedback query: term -> weight."""
        counts = self.ranker.analyse(text)
        total = sum(counts.values())
        query = {t: c / total for t, c in counts.items()} if total else {}
        model = self.relevance_model(feedback)
        alpha = self.original_weight
        return {t: alpha * query.get(t, 0.0) + (1 - alpha) * model.get(t, 0.0)
                for t in set(query) | set(model)}

    def with_filter(self, filter: object) -> RM3:
        """RM3 around the ranker filtered (feedback documents pass the filter too)."""
        other = copy.copy(self)
        other.ranker = self.ranker.with_filter(filter)
        return other

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        params.check_queries(queries)
        params.check_run(run, queries)
        ranker = self.ranker
        if run is None:
            run = ranker.search_many({q: ranker.analyse(t) for q, t in queries.items()}, self.fb_docs)
        expanded = {q: self.expand(t, run.get(q, [])) for q, t in queries.items()}
        return ranker.search_many(expanded, self.hits)
