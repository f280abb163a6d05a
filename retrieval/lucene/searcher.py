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

import json
from pathlib import Path
from typing import Any

from retrieval import storage
from retrieval.errors import InputError
from retrieval.lucene import jvm
from retrieval.lucene.indexer import LUCENE_DIR
from retrieval.pipeline import Stage
from retrieval.types import Queries, Run


def lucene_directory(index: Any) -> Path:
    """The Lucene index directory for an index path (ours or a plain Anserini one) or Index."""
    path = Path(getattr(index, "path", index))
    if (path / storage.MANIFEST).is_file():
        manifest = storage.read_manifest(path)
        part = manifest.get("parts", {}).get(LUCENE_DIR)
        if part is None:
            raise InputError("index has no Lucene part (built by the native backend?); build one"
                             " with `retrieval index --backend lucene`", path)
        for rel in part.get("files", {}):
            if not (path / rel).is_file():
                raise InputError("Lucene index file is missing; rebuild the index", path / rel)
        return path / LUCENE_DIR
    if not path.is_dir():
        raise InputError("no index here (directory does not exist)", path)
    if any(path.glob("segments_*")):
        return path
    raise InputError("not an index: no manifest.json and no Lucene segments_N file", path)


def _open_searcher(directory: Path) -> Any:
    simple_searcher = jvm.autoclass("io.anserini.search.SimpleSearcher")
    try:
        return simple_searcher(str(directory))
    except Exception as e:  # jnius.JavaException (e.g. IndexNotFoundException, corrupt index)
        raise InputError(f"cannot open Lucene index ({jvm.java_error(e)})", directory) from None


class _LuceneStage(Stage):
    """Shared machinery: open the index, configure RM3, batch search."""

    def __init__(self, index: Any, *, hits: int = 1000, rm3: bool = False, fb_docs: int = 10,
                 fb_terms: int = 10, original_weight: float = 0.5, threads: int = 1):
        if not isinstance(hits, int) or hits < 1:
            raise InputError(f"hits must be a positive integer, got {hits!r}")
        if not isinstance(threads, int) or threads < 1:
            raise InputError(f"threads must be a positive integer, got {threads!r}")
        if rm3 and not (fb_docs >= 1 and fb_terms >= 1 and 0.0 <= original_weight <= 1.0):
            raise InputError("RM3 needs fb_docs >= 1, fb_terms >= 1 and 0 <= original_weight <= 1")
        self.directory = lucene_directory(index)
        self.hits, self.threads, self.rm3 = hits, threads, rm3
        self.fb_docs, self.fb_terms, self.original_weight = fb_docs, fb_terms, original_weight
        self._searcher = _open_searcher(self.directory)
        self._configure(self._searcher)
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

    def __init__(self, index: Any, *, k1: float = 0.9, b: float = 0.4, hits: int = 1000,
                 rm3: bool = False, fb_docs: int = 10, fb_terms: int = 10,
                 original_weight: float = 0.5, threads: int = 1):
        if k1 < 0 or not 0.0 <= b <= 1.0:
            raise InputError(f"BM25 needs k1 >= 0 and 0 <= b <= 1 (got k1={k1}, b={b})")
        self.k1, self.b = float(k1), float(b)
        super().__init__(index, hits=hits, rm3=rm3, fb_docs=fb_docs, fb_terms=fb_terms,
                         original_weight=original_weight, threads=threads)

    def _configure(self, searcher: Any) -> None:
        searcher.set_bm25(self.k1, self.b)

    def _params(self) -> dict[str, Any]:
        return {"k1": self.k1, "b": self.b, **super()._params()}


class LuceneQLD(_LuceneStage):
    """Lucene query likelihood with Dirichlet smoothing (mu=1000), optionally with RM3."""

    def __init__(self, index: Any, *, mu: float = 1000.0, hits: int = 1000, rm3: bool = False,
                 fb_docs: int = 10, fb_terms: int = 10, original_weight: float = 0.5,
                 threads: int = 1):
        if mu <= 0:
            raise InputError(f"QLD needs mu > 0 (got {mu})")
        self.mu = float(mu)
        super().__init__(index, hits=hits, rm3=rm3, fb_docs=fb_docs, fb_terms=fb_terms,
                         original_weight=original_weight, threads=threads)

    def _configure(self, searcher: Any) -> None:
        searcher.set_qld(self.mu)

    def _params(self) -> dict[str, Any]:
        return {"mu": self.mu, **super()._params()}


def index_info(index: Any) -> dict[str, Any]:
    """Manifest of one of our Lucene indexes, or basic facts about a plain Anserini index."""
    directory = lucene_directory(index)
    manifest_path = directory.parent / storage.MANIFEST
    if directory.name == LUCENE_DIR and manifest_path.is_file():
        return json.loads(manifest_path.read_text())
    from retrieval.lucene.indexer import index_stats

    return {"backend": "lucene", "source": str(directory), "stats": index_stats(directory)}
