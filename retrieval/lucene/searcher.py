"""BM25 and query likelihood (Dirichlet) over a Lucene index, with optional RM3.

Stages wrap Anserini's `SimpleSearcher` through pyjnius (no pyserini Python
modules are imported, so its encoder packages and their OpenAI client are
never touched). Parameters are fixed at construction; each stage owns its own
Java searcher, configured once. Scores are Lucene's (float32) scores; rankings
follow the Run rule (score descending, doc id ascending), which is also
Anserini's own tie-break.

The index can be one built by `build_lucene_index` (a directory with a
manifest and a `lucene/` part) or any existing Anserini/pyserini index
directory (no manifest, Lucene `segments_N` file inside).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from retrieval import storage
from retrieval.errors import InputError, UnknownDocument
from retrieval.index.filters import Filter, allow_mask, as_filter
from retrieval.lucene import jvm
from retrieval.lucene.indexer import LUCENE_DIR
from retrieval.pipeline import params
from retrieval.pipeline.params import default
from retrieval.pipeline.stage import Stage
from retrieval.types import Queries, Run


class LuceneIndex:
    """An opened Lucene index: one of ours (manifest + `lucene/` part) or a plain Anserini one."""

    kind = "lucene"
    analyzer = None  # Lucene's EnglishAnalyzer, inside the jar: queries go to it as text

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.manifest: dict[str, Any] | None = None
        if (self.path / storage.MANIFEST).is_file():
            self.manifest = storage.read_manifest(self.path)
            part = self.manifest.get("parts", {}).get(LUCENE_DIR)
            if part is None:
                raise InputError("index has no Lucene part (built by the native backend?); build one"
                                 " with `retrieval index --backend lucene`", self.path)
            for rel in part.get("files", {}):
                if not (self.path / rel).is_file():
                    raise InputError("Lucene index file is missing; rebuild the index", self.path / rel)
            self.directory = self.path / LUCENE_DIR
        elif not self.path.is_dir():
            raise InputError("no index here (directory does not exist)", self.path)
        elif any(self.path.glob("segments_*")):
            self.directory = self.path
        else:
            raise InputError("not an index: no manifest.json and no Lucene segments_N file", self.path)

    @classmethod
    def open(cls, path: str | Path) -> LuceneIndex:
        """Open a Lucene index directory (ours or Anserini's)."""
        return cls(path)

    def __repr__(self) -> str:
        return f"LuceneIndex({str(self.path)!r})"

    @property
    def parts(self) -> dict[str, Any]:
        return self.manifest["parts"] if self.manifest else {LUCENE_DIR: {}}

    def has(self, part: str) -> bool:
        return part in self.parts

    @cached_property
    def statistics(self) -> dict[str, Any]:
        """Documents and term counts (from our manifest, else read from the Lucene index)."""
        if self.manifest:
            return self.manifest["stats"]
        from retrieval.lucene.indexer import index_stats

        return index_stats(self.directory)

    def text(self, doc_id: str) -> str:
        """A document's stored text (the `contents` field Anserini stores with -storeRaw)."""
        searcher = _open_searcher(self.directory)
        try:
            doc = searcher.doc(str(doc_id))
            if doc is None:
                raise UnknownDocument(doc_id, self.path)
            return str(doc.get("contents") or doc.get("raw") or "")
        finally:
            searcher.close()

    def describe(self) -> dict[str, Any]:
        """What `retrieval info` prints."""
        m = self.manifest or {}
        return {"path": str(self.path), "kind": self.kind, "source": m.get("source", str(self.directory)),
                "created": m.get("created"), "analyzer": m.get("analyzer"), "stats": self.statistics,
                "parts": sorted(self.parts)}


def _as_lucene(index: LuceneIndex | str | Path) -> LuceneIndex:
    return index if isinstance(index, LuceneIndex) else LuceneIndex.open(index)


def _open_searcher(directory: Path) -> Any:
    simple_searcher = jvm.autoclass("io.anserini.search.SimpleSearcher")
    try:
        return simple_searcher(str(directory))
    except Exception as e:  # jnius.JavaException (e.g. IndexNotFoundException, corrupt index)
        raise InputError(f"cannot open Lucene index ({jvm.java_error(e)})", directory) from None


def filter_query(index: LuceneIndex, spec: Filter) -> tuple[int, Any]:
    """(documents passing, the filter as a non-scoring Lucene query; None when all pass).

    The filter is evaluated over our doc store's metadata (index/filters.py's allow mask), and
    becomes an exact doc-id set on Anserini's `id` field (indexed as one term per document): the
    passing ids (a TermInSetQuery), or, when fewer fail, every document but the failing ids.
    Added to a query as a FILTER clause it selects without scoring, so a passing document's score
    is its unfiltered score.
    """
    if index.manifest is None:
        raise InputError("a filter needs the doc store of an index built by `retrieval index"
                         " --backend lucene` (metadata); this is a plain Anserini index", index.path)
    from retrieval.index.native import Index

    native = Index.open(index.path)
    mask = allow_mask(spec, native).astype(bool)
    ids = np.asarray(native.doc_id_list, dtype=object)
    passing = int(mask.sum())
    keep = passing <= len(mask) - passing
    listed = ids[mask] if keep else ids[~mask]
    if not keep and not len(listed):
        return passing, None
    id_set = _id_set(listed.tolist())
    if keep:
        return passing, id_set
    return passing, _boolean((jvm.autoclass("org.apache.lucene.search.MatchAllDocsQuery")(), "MUST"),
                             (id_set, "MUST_NOT"))


def _id_set(doc_ids: Iterable[str]) -> Any:
    """A Lucene query matching exactly these documents: a TermInSetQuery on Anserini's `id` field."""
    bytes_ref = jvm.autoclass("org.apache.lucene.util.BytesRef")
    terms = jvm.autoclass("java.util.ArrayList")()
    for doc_id in doc_ids:
        terms.add(bytes_ref(str(doc_id).encode("utf-8")))
    return jvm.autoclass("org.apache.lucene.search.TermInSetQuery")("id", terms)


def _boolean(*clauses: tuple[Any, str]) -> Any:
    """A Lucene BooleanQuery of (query, occur name) clauses."""
    occur = jvm.autoclass("org.apache.lucene.search.BooleanClause$Occur")
    builder = jvm.autoclass("org.apache.lucene.search.BooleanQuery$Builder")()
    for query, how in clauses:
        builder.add(query, getattr(occur, how))
    return builder.build()


class _LuceneStage(Stage):
    """Shared machinery: open the index, configure RM3, batch search."""

    def __init__(self, index: LuceneIndex | str | Path, *, hits: int = default("hits"), rm3: bool = False,
                 fb_docs: int = default("fb_docs"), fb_terms: int = default("fb_terms"),
                 original_weight: float = default("original_weight"), threads: int = default("threads"),
                 filter: object = None):
        params.check(hits=hits, threads=threads, rm3=rm3, fb_docs=fb_docs, fb_terms=fb_terms,
                     original_weight=original_weight)
        self.index = _as_lucene(index)
        self.filter = as_filter(filter)
        self.directory = self.index.directory
        self.hits, self.threads, self.rm3 = hits, threads, rm3
        self.fb_docs, self.fb_terms, self.original_weight = fb_docs, fb_terms, original_weight
        self._searcher = _open_searcher(self.directory)
        self._configure(self._searcher)
        self._filter_query = None if self.filter is None else filter_query(self.index, self.filter)
        if rm3:
            self._enable_rm3()

    def _configure(self, searcher: Any) -> None:
        raise NotImplementedError

    def _enable_rm3(self) -> None:
        vectors = self._searcher.reader.getTermVectors(0) if self.num_docs else None
        if vectors is None:
            raise InputError("RM3 needs document vectors; this Lucene index was built without"
                             " -storeDocvectors", self.directory)
        self._searcher.set_rm3(None, int(self.fb_terms), int(self.fb_docs),
                               float(self.original_weight), False, True)

    @property
    def num_docs(self) -> int:
        """Documents in the Lucene index."""
        return int(self._searcher.get_total_num_docs())

    def close(self) -> None:
        """Release the Java index reader."""
        if self._searcher is not None:
            self._searcher.close()
            self._searcher = None

    def __enter__(self) -> _LuceneStage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"hits": self.hits}
        if self.filter is not None:
            params["filter"] = self.filter.to_expression()
        if self.rm3:
            params.update(rm3=True, fb_docs=self.fb_docs, fb_terms=self.fb_terms,
                          original_weight=self.original_weight)
        return params

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({str(self.directory)!r}, {args})"

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        """Search every query (a first stage: `run` is ignored); `hits` per query."""
        if self._searcher is None:
            raise RuntimeError(f"{type(self).__name__} is closed")
        for qid, text in queries.items():
            if not str(text).strip():
                raise InputError(f"query {qid!r} is empty")
        if self.filter is not None:
            return self._filtered(queries)
        array_list = jvm.autoclass("java.util.ArrayList")
        texts, qids = array_list(), array_list()
        for qid, text in queries.items():
            texts.add(str(text))
            qids.add(str(qid))
        try:
            results = self._searcher.batch_search(texts, qids, self.hits, self.threads)
        except Exception as e:  # jnius.JavaException: some query failed inside Java
            self._find_failing_query(queries)
            raise RuntimeError(f"Lucene search failed: {jvm.java_error(e)}") from e
        rankings = {}
        for qid in queries:
            found = results.get(str(qid))
            if found is None:
                raise RuntimeError(f"Lucene returned no result list for query {qid!r}")
            rankings[qid] = [(hit.docid, float(hit.score)) for hit in found]
        return Run(rankings)

    def _filtered(self, queries: Queries) -> Run:
        """Each query's top `hits` among the documents the filter passes: the query as Anserini
        builds it (bag of words over `contents`), required, and the filter as a non-scoring FILTER
        clause (filter_query), so Lucene collects passing documents only, scored as ever. With RM3,
        Anserini's own reranker cascade runs as SimpleSearcher runs it, given the filter in its
        context: its feedback documents are the filtered ranking's, and it adds the filter to the
        expanded query."""
        passing, id_filter = self._filter_query
        if passing == 0:
            return Run({qid: [] for qid in queries})
        searcher = self._searcher
        rankings = {}
        for qid, text in queries.items():
            query = searcher.generator.buildQuery("contents", searcher.analyzer, str(text))
            if id_filter is not None:
                query = _boolean((query, "MUST"), (id_filter, "FILTER"))
            try:
                if self.rm3:
                    rankings[qid] = self._rm3(str(qid), str(text), query, id_filter)
                else:
                    found = searcher.search(query, self.hits)
                    rankings[qid] = [(hit.docid, float(hit.score)) for hit in found]
            except Exception as e:  # jnius.JavaException, e.g. TooManyClauses for a very long query
                raise InputError(f"Lucene cannot search query {qid!r}: {jvm.java_error(e)}") from None
        return Run(rankings)

    def _rm3(self, qid: str, text: str, query: Any, id_filter: Any) -> list[tuple[str, float]]:
        """SimpleSearcher's RM3 search (first ranking to Anserini's rerank cut-off, then its
        cascade: RM3, score-tie adjustment), with the filter in the reranker context."""
        ac = jvm.autoclass
        searcher = self._searcher
        args = ac("io.anserini.search.SearchCollection$Args")()
        args.hits = self.hits
        sort_field = ac("org.apache.lucene.search.SortField")
        string = ac("org.apache.lucene.search.SortField$Type").STRING_VAL
        by_score_then_id = ac("org.apache.lucene.search.Sort")(sort_field.FIELD_SCORE,
                                                               sort_field("id", string))
        first = searcher.searcher.search(query, args.rerankcutoff, by_score_then_id, True)
        tokens = ac("io.anserini.analysis.AnalyzerUtils").analyze(searcher.analyzer, text)
        context = ac("io.anserini.rerank.RerankerContext")(searcher.searcher, qid, query, None, text, tokens,
                                                           id_filter, args)
        hits = searcher.cascade.run(ac("io.anserini.search.ScoredDocs").fromTopDocs(first, searcher.searcher),
                                    context)
        return [(str(d), float(s)) for d, s in zip(hits.docids, hits.scores)][: self.hits]

    def rescore(self, queries: Queries, run: Run) -> Run:
        """Each query's score of the run's documents (no others): the query as Anserini builds it,
        required, and the documents' ids as a non-scoring FILTER clause, so each document gets the
        score a full search gives it; a document that matches no query term is left out. RM3 and a
        filter of the stage are not applied here."""
        if self._searcher is None:
            raise RuntimeError(f"{type(self).__name__} is closed")
        searcher = self._searcher
        out = {}
        for qid, hits in run.items():
            text = str(queries[qid])
            if not text.strip():
                raise InputError(f"query {qid!r} is empty")
            if not hits:
                out[qid] = []
                continue
            query = _boolean((searcher.generator.buildQuery("contents", searcher.analyzer, text), "MUST"),
                             (_id_set(doc_id for doc_id, _ in hits), "FILTER"))
            try:
                found = searcher.search(query, len(hits))
            except Exception as e:  # jnius.JavaException, e.g. TooManyClauses
                raise InputError(f"Lucene cannot score query {qid!r}: {jvm.java_error(e)}") from None
            out[qid] = [(hit.docid, float(hit.score)) for hit in found]
        return Run(out)

    def _find_failing_query(self, queries: Queries) -> None:
        """Search one query at a time to name the one Lucene rejects (InputError)."""
        for qid, text in queries.items():
            try:
                self._searcher.search(str(text), 1)
            except Exception as e:  # e.g. TooManyClauses for a very long query
                raise InputError(f"Lucene cannot search query {qid!r}: {jvm.java_error(e)}"
                                 ) from None


class LuceneBM25(_LuceneStage):
    """Lucene BM25 (Anserini defaults k1=0.9, b=0.4), optionally with RM3 feedback."""

    def __init__(self, index: LuceneIndex | str | Path, *, k1: float = default("k1"), b: float = default("b"),
                 **common: Any):
        params.check(k1=k1, b=b)
        self.k1, self.b = float(k1), float(b)
        super().__init__(index, **common)

    def _configure(self, searcher: Any) -> None:
        searcher.set_bm25(self.k1, self.b)

    def _params(self) -> dict[str, Any]:
        return {"k1": self.k1, "b": self.b, **super()._params()}


class LuceneQLD(_LuceneStage):
    """Lucene query likelihood with Dirichlet smoothing (mu=1000), optionally with RM3."""

    def __init__(self, index: LuceneIndex | str | Path, *, mu: float = default("mu"), **common: Any):
        params.check(mu=mu)
        self.mu = float(mu)
        super().__init__(index, **common)

    def _configure(self, searcher: Any) -> None:
        searcher.set_qld(self.mu)

    def _params(self) -> dict[str, Any]:
        return {"mu": self.mu, **super()._params()}


class LuceneRescorer(Stage):
    """A Lucene BM25 or QLD stage scoring the documents of the run it is given (`rescore`), as a
    features stage's scorer on a Lucene index; it needs a run."""

    name = "lucene_rescore"

    def __init__(self, stage: _LuceneStage):
        self.stage = stage

    def __repr__(self) -> str:
        return f"LuceneRescorer({self.stage!r})"

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        params.check_queries(queries)
        params.check_run(run, queries)
        if run is None:
            raise InputError("rescoring with a Lucene index needs a run")
        return self.stage.rescore(queries, run)
