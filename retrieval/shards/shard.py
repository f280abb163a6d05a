"""One shard's search service: the work a shard does for the manager, in-process or in a Ray actor.

The manager sends analysed queries (term -> weight, terms as strings) and gets
back each query's top k as (doc ids, scores), ordered by score descending and
doc id ascending. Impacts use the collection statistics (stats.py), and query
terms are taken in sorted term order as the single index does, so every score
is bit for bit the single index's score. A segment of a live index (live.py)
reads its statistics and its deleted docnos from the current generation's
directory instead; deleted documents never reach a result. For RM3, the shard
returns its feedback documents' candidate terms; for dense search, its FAISS
top k.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from retrieval import storage
from retrieval.errors import InputError
from retrieval.index.filters import allow_mask
from retrieval.index.impacts import CollectionStats, impacts_for
from retrieval.index.native import Index
from retrieval.shards.stats import load_generation_statistics, load_shard_statistics
from retrieval.sparse.feedback import FeedbackVector, eligible_terms, feedback_vector
from retrieval.sparse.searcher import ImpactSearcher, WeightedQuery

# (doc ids as a str array, float64 scores[, local docnos]), in rank order
Hits = tuple[np.ndarray, ...]


class ShardSearcher:
    """Searches one shard; `expected_sha256` (of its manifest) guards against a foreign shard.

    `generation`: a live index's statistics directory for this segment (live.py).
    """

    def __init__(self, path: str | Path, name: str = "", expected_sha256: str | None = None,
                 generation: str | Path | None = None):
        self.path = Path(path)
        self.name = name or self.path.name
        if not (self.path / storage.MANIFEST).is_file():
            raise InputError("shard directory or its manifest is missing", self.path)
        if expected_sha256 and storage.sha256_file(self.path / storage.MANIFEST) != expected_sha256:
            raise InputError("not the shard this sharded index was built with (its manifest differs);"
                             " rebuild the sharded index", self.path)
        self.index = Index.open(self.path)
        self.deleted = np.zeros(self.index.num_docs, dtype=bool)  # by docno
        if generation is None:
            self.stats: CollectionStats = load_shard_statistics(self.index)
        else:
            self.stats, deleted = load_generation_statistics(self.index, Path(generation))
            self.deleted[deleted] = True
        self.live = generation is not None
        self.generation = None if generation is None else Path(generation)
        self._searchers: dict[Any, ImpactSearcher] = {}
        self._masks: dict[str, np.ndarray] = {}

    def searcher(self, model: Any) -> ImpactSearcher:
        """The impact searcher of a sparse model (BM25Model, DirichletModel, ...), built once."""
        if model not in self._searchers:
            inverted = self.index.inverted
            self._searchers[model] = ImpactSearcher(inverted, impacts_for(model, inverted, self.stats),
                                                    nonnegative=model.nonnegative)
        return self._searchers[model]

    def weighted(self, bag: dict[str, float]) -> WeightedQuery:
        """The shard's known terms with their weights, in sorted term order (as the single index).

        A term that only deleted documents hold is unknown, as in a fresh build of the live ones.
        """
        ids, df = self.index.inverted.term_ids, self.stats.df
        return [(ids[t], float(w)) for t, w in sorted(bag.items()) if t in ids and df[ids[t]] > 0]

    def allow(self, filter: str | None) -> np.ndarray | None:
        """The allow mask of a filter expression here, deleted documents left out (None for none).
        A field this shard's documents lack fails here (another shard may have it)."""
        if filter is None:
            return None
        if filter not in self._masks:
            mask = allow_mask(filter, self.index, strict=False)
            mask[self.deleted] = 0
            self._masks = {filter: mask}  # the last one: requests repeat a filter, rarely several
        return self._masks[filter]

    def search(self, model: Any, bags: list[dict[str, float]], k: int,
               threads: int = 1, filter: str | None = None) -> tuple[list[Hits], list[int]]:
        """Each query's top k here, and how many of its terms this shard knows.

        Deleted documents are dropped before the cut: asking for k plus their number still
        leaves the exact top k of the others. Segments return no docnos (merge.py's shortcut
        assumes the round-robin partition). `filter` (index/filters.py) keeps out the failing
        documents (and the deleted ones) inside the top k.
        """
        queries = [self.weighted(bag) for bag in bags]
        if filter is not None:
            results = self.searcher(model).search_many(queries, k, threads, allow=self.allow(filter))
            ids = self.index.doc_ids
            return ([(ids[d], np.asarray(s, dtype=np.float64)) if self.live
                     else (ids[d], np.asarray(s, dtype=np.float64), d) for d, s in results],
                    [len(q) for q in queries])
        extra = int(self.deleted.sum())
        results = self.searcher(model).search_many(queries, k + extra, threads)
        ids, hits = self.index.doc_ids, []
        for docs, scores in results:
            docs, scores = np.asarray(docs), np.asarray(scores, dtype=np.float64)
            if extra:
                keep = ~self.deleted[docs]
                docs, scores = docs[keep][:k], scores[keep][:k]
            hits.append((ids[docs], scores) if self.live else (ids[docs], scores, docs))
        return hits, [len(q) for q in queries]

    def rescore(self, model: Any, bags: list[dict[str, float]],
                candidates: list[list[str]], filter: str | None = None
                ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query, (doc ids, scores) of its candidates held (and not deleted) here; with a
        filter, of those passing it."""
        docno, out = self.index.docno, []
        allow = self.allow(filter)
        for bag, ids in zip(bags, candidates):
            docs = np.array([docno[d] for d in ids if d in docno and not self.deleted[docno[d]]
                             and (allow is None or allow[docno[d]])], dtype=np.int64)
            out.append((self.index.doc_ids[docs], self.searcher(model).score(self.weighted(bag), docs)))
        return out

    def fielded(self, name: str, params: tuple) -> Any:
        """A fielded ranker (sparse/fielded.py: multifield, multifield_qld, bm25f) over this shard with
        the collection-wide statistics of every field (and of the flat part, for BM25F's idf), built
        once per parameters: the single fielded index's scores, bit for bit."""
        key = (name, params)
        if key not in self._searchers:
            from retrieval.sparse.fielded import FIELDED

            stats = {f: self.field_stats(f) for f in self.index.fields} | {None: self.stats}
            ranker = FIELDED[name](self.index, **dict(params), stats=stats)
            ranker._warned = _NoWarnings()  # the manager warns once about queries with no known terms
            self._searchers[key] = ranker
        return self._searchers[key]

    def field_stats(self, field: str) -> CollectionStats:
        """A field's collection-wide statistics: the sharded index's or the live generation's."""
        if self.generation is None:
            return load_shard_statistics(self.index, field)
        return load_generation_statistics(self.index, self.generation, field)[0]

    def search_fielded(self, name: str, params: tuple, bags: list[dict[str, float]], k: int,
                       threads: int = 1, filter: str | None = None) -> tuple[list[Hits], list[int]]:
        """Each query's top k here under a fielded ranker, failing and deleted documents kept out
        inside the top k; and how many of its terms this shard's flat part knows."""
        ranker = self.fielded(name, params)
        allow = self.allow(filter)
        if allow is None and self.deleted.any():
            allow = (~self.deleted).astype(np.uint8)
        ranker.__dict__["allow"] = allow
        ranker.threads = threads
        run = ranker.search_many({str(i): bag for i, bag in enumerate(bags)}, k)
        hits = []
        for i in range(len(bags)):
            ranking = run.get(str(i), [])
            ids = np.array([d for d, _ in ranking], dtype=self.index.doc_ids.dtype)
            hits.append((ids, np.array([s for _, s in ranking], dtype=np.float64)))
        return hits, [len(self.weighted(bag)) for bag in bags]

    @cached_property
    def eligible(self) -> np.ndarray:
        """Terms that may serve as RM3 feedback terms, judged by collection-wide df (as RM3)."""
        return eligible_terms(self.index.inverted.terms, self.stats.df, self.stats.num_docs)

    def feedback(self, doc_ids: list[str], fb_terms: int) -> list[FeedbackVector]:
        """Per document, its `fb_terms` most frequent eligible terms (ties by term) and their tfs."""
        inverted, docno = self.index.inverted, self.index.docno
        indptr, terms, tfs = inverted.forward
        return [feedback_vector(terms[indptr[d]:indptr[d + 1]], tfs[indptr[d]:indptr[d + 1]], self.eligible,
                                inverted.terms, fb_terms) for d in (docno[i] for i in doc_ids)]

    @cached_property
    def dense(self) -> tuple[Any, np.ndarray]:
        """(FAISS index, doc id of each row) of the shard's dense part."""
        from retrieval.dense.faiss_index import load_dense_part

        faiss_index, doc_ids, _ = load_dense_part(self.path)
        return faiss_index, doc_ids

    def dense_search(self, vectors: np.ndarray, k: int, threads: int = 1,
                     filter: str | None = None) -> list[Hits]:
        """Each query vector's top k here by inner product, ordered by score then doc id; with a
        filter, of the passing (and not deleted) documents only, exactly (index/filters.py)."""
        import faiss

        faiss_index, doc_ids = self.dense
        faiss.omp_set_num_threads(max(1, threads))
        x = np.ascontiguousarray(vectors, dtype=np.float32)
        if filter is not None:
            return self._dense_filtered(x, k, self.dense_rows_allow(filter))
        deleted = self.deleted_ids
        scores, rows = faiss_index.search(x, min(k + len(deleted), faiss_index.ntotal))
        out = []
        for s, r in zip(scores, rows):
            keep = r >= 0
            if len(deleted):
                keep &= ~np.isin(doc_ids[np.maximum(r, 0)], deleted)
            out.append(_ranked(doc_ids[r[keep]], s[keep], k))
        return out

    def dense_rows_allow(self, filter: str) -> np.ndarray:
        """The allow mask (deleted documents left out) by row of the shard's dense part."""
        _, doc_ids = self.dense
        docno = self.index.docno
        return self.allow(filter)[np.array([docno[str(d)] for d in doc_ids], dtype=np.int64)]

    def _dense_filtered(self, x: np.ndarray, k: int, allow: np.ndarray) -> list[Hits]:
        """Top k of the passing rows of a flat part: FAISS scores only them (IDSelectorBitmap)."""
        import faiss

        faiss_index, doc_ids = self.dense
        passing = int(np.count_nonzero(allow))
        if min(k, passing) == 0:
            return [(doc_ids[:0], np.zeros(0)) for _ in range(len(x))]
        if not isinstance(faiss_index, faiss.IndexFlat):
            raise InputError("a filter on sharded dense search needs flat dense parts", self.path)
        bits = np.packbits(allow.astype(bool), bitorder="little")
        selector = faiss.IDSelectorBitmap(len(allow), faiss.swig_ptr(bits))
        scores, rows = faiss_index.search(x, min(k, passing), params=faiss.SearchParameters(sel=selector))
        return [_ranked(doc_ids[r[r >= 0]], s[r >= 0], k) for s, r in zip(scores, rows)]

    @cached_property
    def deleted_ids(self) -> np.ndarray:
        """Doc ids of this segment's deleted documents."""
        return self.index.doc_ids[self.deleted]


def _ranked(ids: np.ndarray, scores: np.ndarray, k: int) -> Hits:
    """(ids, float64 scores) ordered by score descending, doc id ascending, first k."""
    values = scores.astype(np.float64)
    order = np.lexsort((ids, -values))[:k]
    return ids[order], values[order]


class _NoWarnings(set):
    """A ranker's warned-about queries, claiming them all: a shard never warns (the manager does)."""

    def __contains__(self, item: object) -> bool:
        return True
