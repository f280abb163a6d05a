"""Fielded ranking over an index built with `retrieval index --fields title,text`.

- `MultifieldBM25`: Anserini's "multifield" BM25 (`-fields title=W text=W`): each field scored
  with Lucene's BM25 on that field's own statistics (its document count, average length and
  document frequencies), the field scores weighted and summed. The fields' postings are laid
  end to end as one set of term lists (`FieldedPostings`), a query term in field f becoming
  the term (f, t) with weight w_f, so the compiled exact top-k kernels (and filters) serve it
  unchanged.
- `MultifieldQLD`: query likelihood per field, the same way: Lucene's Dirichlet QL on each field
  with its own language model, weighted and summed (Anserini's multifield search with -qld).
- `BM25F`: one saturation over field-weighted, per-field length-normalised frequencies
  (Robertson and Zaragoza): tf~ = sum_f w_f tf_f / (1 - b_f + b_f len_f / avglen_f),
  score = sum_t idf_t tf~ / (k1 + tf~), idf from the flat index (documents containing t in any
  field), lengths Lucene's quantised norms as in BM25. Scored with numpy, exact top k.

Field weights (`field_weights`, "title=1.5,text=1") and BM25F's per-field b (`field_b`) are
ranker parameters: search flags, YAML keys, registry entries.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np

from retrieval.errors import InputError, UnknownDocument
from retrieval.index.codebook import Impacts
from retrieval.index.impacts import BM25Model, CollectionStats, DirichletModel, ImpactModel, impacts_for, log
from retrieval.index.lucene_norms import quantised_lengths
from retrieval.index.native import Index, native_index
from retrieval.pipeline import params
from retrieval.pipeline.params import default
from retrieval.sparse.rankers import SparseRanker
from retrieval.sparse.searcher import ImpactSearcher, WeightedQuery, top_k
from retrieval.types import Columns, Queries, Ranking, Run


def parse_field_values(text: str | None, fields: list[str], what: str, low: float = 0.0,
                       high: float = float("inf")) -> dict[str, float]:
    """"title=2,text=1" -> {"title": 2.0, "text": 1.0} for fields of the index; InputError for an
    unknown field, a value out of [low, high] or a malformed pair."""
    values: dict[str, float] = {}
    for pair in (text or "").split(","):
        if not pair.strip():
            continue
        name, sep, value = pair.partition("=")
        name = name.strip()
        try:
            number = float(value) if sep else float("nan")
        except ValueError:
            number = float("nan")
        if not (low <= number <= high):
            raise InputError(f"{what} {pair.strip()!r}: expected FIELD=NUMBER with the number in"
                             f" [{low:g}, {high:g}] (e.g. title=1.5,text=1)")
        if name not in fields:
            raise InputError(f"{what}: the index has no field {name!r} (fields: {', '.join(fields)})")
        values[name] = number
    return values


def index_fields(index: Index) -> list[str]:
    """The fields of an index, or InputError saying how to build them."""
    if not index.fields:
        raise InputError("this index has no fields; build it with `retrieval index --fields title,text`"
                         " to search fields apart", index.path)
    return index.fields


class FieldedPostings:
    """Every field's postings end to end, as one inverted index: term (f, t) is term t of field f,
    numbered after the terms of the fields before f. Impacts are each field's own, of `model`
    (BM25 or Dirichlet QL) on that field's statistics."""

    def __init__(self, index: Index, fields: list[str], model: ImpactModel,
                 stats: dict[str, CollectionStats] | None = None):
        parts = [index.field_index(f) for f in fields]
        impacts = [impacts_for(model, p, (stats or {}).get(f)) for f, p in zip(fields, parts)]
        self.num_docs = index.num_docs
        self.term_offsets = np.cumsum([0] + [p.num_terms for p in parts])
        posting_offsets = np.cumsum([0] + [len(p.docnos) for p in parts])
        table_offsets = np.cumsum([0] + [len(i.table) for i in impacts])
        self.indptr = np.concatenate([np.asarray(p.indptr[:-1]) + o for p, o in zip(parts, posting_offsets)]
                                     + [np.array([posting_offsets[-1]])]).astype(np.int64)
        self.docnos = np.concatenate([np.asarray(p.docnos) for p in parts])
        codes = np.concatenate([np.asarray(i.codes) for i in impacts])
        bases = np.concatenate([np.asarray(i.bases[:-1]) + o for i, o in zip(impacts, table_offsets)]
                               + [np.array([table_offsets[-1]])]).astype(np.int64)
        self.impacts = Impacts(codes, np.concatenate([np.asarray(i.table) for i in impacts]), bases)
        self.term_ids = [p.term_ids for p in parts]
        # with collection-wide statistics (a shard, a live segment), a term no live document of the
        # collection holds in a field is unknown there, as in a fresh build of the live documents
        self.known = [None if stats is None else np.asarray(stats[f].df) > 0 for f in fields]


class MultifieldBM25(SparseRanker):
    """Anserini's multifield BM25: per-field BM25 (each field's own statistics), weighted and summed."""

    name = "multifield"

    def __init__(self, index: Index | str | Path, k1: float = default("k1"), b: float = default("b"),
                 field_weights: str | None = None, hits: int = default("hits"),
                 threads: int = default("threads"), filter: object = None,
                 stats: dict[str, CollectionStats] | None = None):
        params.check(k1=k1, b=b)
        self._fielded(index, field_weights, BM25Model(k1, b), hits, threads, filter, stats)

    def _fielded(self, index: Index | str | Path, field_weights: str | None, model: ImpactModel,
                 hits: int, threads: int, filter: object, stats: dict[str, CollectionStats] | None) -> None:
        """`stats`: collection-wide statistics by field name (a shard's or a live segment's)."""
        self.stats = stats
        index = native_index(index)
        self.fields = index_fields(index)
        weights = parse_field_values(field_weights, self.fields, "field_weights")
        self.weights = [weights.get(f, 1.0) for f in self.fields]
        SparseRanker.__init__(self, index, model, hits, threads, filter=filter)

    @cached_property
    def postings(self) -> FieldedPostings:
        return FieldedPostings(self.index, self.fields, self.model, self.stats)

    @cached_property
    def searcher(self) -> ImpactSearcher:
        return ImpactSearcher(self.postings, self.postings.impacts, nonnegative=True)  # type: ignore[arg-type]

    def weighted(self, terms: dict[str, float], qid: str = "") -> WeightedQuery:
        """Each known term of each field with weight (query weight * field weight); field by field,
        in sorted term order within a field (Anserini's sum of one query per field)."""
        postings = self.postings
        query = [(int(postings.term_offsets[f]) + ids[t], float(w) * fw)
                 for f, (ids, fw, known) in enumerate(zip(postings.term_ids, self.weights, postings.known))
                 if fw > 0 for t, w in sorted(terms.items()) if t in ids and (known is None or known[ids[t]])]
        if not query and self.stats is None:
            super().weighted({}, qid)  # the warning
        return query


class MultifieldQLD(MultifieldBM25):
    """Query likelihood per field: Lucene's Dirichlet QL on each field with that field's own
    language model (its collection probabilities, its lengths), weighted and summed, i.e. the
    product of per-field query likelihoods raised to the field weights (Anserini's multifield
    search with -qld). `field_weights=title=1,text=0` is QL on the title alone. Being a sum of
    per-(field, term) impacts, it runs on the exact kernels, with filters, RM3 and rescoring, as
    multifield BM25; the mixture of field models (Ogilvie and Callan) is a log of a sum, which
    is not, and is left out (docs/design/fields-and-filters.md)."""

    name = "multifield_qld"

    def __init__(self, index: Index | str | Path, mu: float = default("mu"), field_weights: str | None = None,
                 hits: int = default("hits"), threads: int = default("threads"), filter: object = None,
                 stats: dict[str, CollectionStats] | None = None):
        params.check(mu=mu)
        self._fielded(index, field_weights, DirichletModel(mu), hits, threads, filter, stats)


class BM25F(SparseRanker):
    """BM25F: field-weighted, per-field length-normalised term frequencies, one saturation."""

    name = "bm25f"

    def __init__(self, index: Index | str | Path, k1: float = default("k1"), b: float = default("b"),
                 field_weights: str | None = None, field_b: str | None = None,
                 hits: int = default("hits"), threads: int = default("threads"), filter: object = None,
                 stats: dict[str, CollectionStats] | None = None):
        """`stats`: collection-wide statistics by field name, and the flat part's under None."""
        params.check(k1=k1, b=b)
        index = native_index(index)
        self.stats = stats
        self.fields = index_fields(index)
        weights = parse_field_values(field_weights, self.fields, "field_weights")
        bs = parse_field_values(field_b, self.fields, "field_b", 0.0, 1.0)
        self.weights = [weights.get(f, 1.0) for f in self.fields]
        self.bs = [bs.get(f, b) for f in self.fields]
        self.k1 = k1
        super().__init__(index, BM25Model(k1, b), hits, threads, filter=filter)

    @cached_property
    def _parts(self) -> list[tuple[object, np.ndarray]]:
        """Per field with weight > 0: (its inverted index, w_f / (1 - b_f + b_f len / avglen) per doc)."""
        out = []
        for name, w, b in zip(self.fields, self.weights, self.bs):
            if w <= 0:
                continue
            part = self.index.field_index(name)
            stats = self.stats[name] if self.stats else CollectionStats.of(part)
            avg = float(stats.total_terms) / max(stats.doc_count, 1)
            lengths = quantised_lengths(part.doc_lengths)
            out.append((part, w / (1.0 - b + b * lengths / avg) if avg > 0 else np.full(part.num_docs, w)))
        return out

    @cached_property
    def _flat_idf(self) -> tuple[dict[str, int], np.ndarray]:
        flat = self.index.inverted
        stats = self.stats[None] if self.stats else CollectionStats.of(flat)
        df = np.asarray(stats.df, dtype=np.float64)
        return flat.term_ids, log(1.0 + (stats.doc_count - df + 0.5) / (df + 0.5))

    def score_all(self, terms: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
        """(docnos matching a query term in a weighted field, ascending; their BM25F scores)."""
        ids, idf = self._flat_idf
        n = self.index.num_docs
        scores = np.zeros(n)
        matched = np.zeros(n, dtype=bool)
        for term, weight in sorted(terms.items()):
            if term not in ids or weight == 0:
                continue
            tf = np.zeros(n)
            for part, factor in self._parts:
                t = part.term_ids.get(term)
                if t is None:
                    continue
                s, e = int(part.indptr[t]), int(part.indptr[t + 1])
                docs = np.asarray(part.docnos[s:e])
                tf[docs] += np.asarray(part.tfs[s:e], dtype=np.float64) * factor[docs]
                matched[docs] = True
            hit = np.flatnonzero(tf)
            scores[hit] += weight * idf[ids[term]] * tf[hit] / (self.k1 + tf[hit])
        docs = np.flatnonzero(matched)
        return docs, scores[docs]

    def search_many(self, terms: dict[str, dict[str, float]], k: int) -> Run:
        out = {}
        ids = self.index.doc_id_objects
        allow = self.allow
        for qid, bag in terms.items():
            if not self.weighted(bag, qid):
                out[qid] = Columns(ids[np.zeros(0, np.int64)], np.zeros(0))
                continue
            docs, scores = self.score_all(bag)
            if allow is not None:
                keep = allow[docs].astype(bool)
                docs, scores = docs[keep], scores[keep]
            top, top_scores = top_k(docs, scores, k)
            out[qid] = Columns(ids[top], top_scores)
        return Run(out)

    def rescore_terms(self, query: WeightedQuery, candidates: Ranking) -> Ranking:
        raise NotImplementedError  # __call__ rescores through _rescore

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        params.check_queries(queries)
        params.check_run(run, queries)
        if run is None:
            return self.search_many({q: self.analyse(t) for q, t in queries.items()}, self.hits)
        docno = self.index.docno
        out = {}
        for qid, text in queries.items():
            candidates = [d for d, _ in run.get(qid, [])]
            docs = np.array([docno[d] for d in candidates if d in docno], dtype=np.int64)
            if len(docs) != len(candidates):
                raise UnknownDocument(next(d for d in candidates if d not in docno), self.index.path)
            if self.allow is not None:  # a filtered rescorer drops the candidates that fail
                docs = docs[self.allow[docs] != 0]
            matched, scores = self.score_all(self.analyse(text))
            full = np.zeros(self.index.num_docs)
            full[matched] = scores
            order = np.lexsort((docs, -full[docs]))
            out[qid] = self.ranking(docs[order], full[docs][order])
        return Run(out)


FIELDED = {"multifield": MultifieldBM25, "multifield_qld": MultifieldQLD, "bm25f": BM25F}  # by ranker name
