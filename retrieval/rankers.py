"""Ranker names -> stage constructors, shared by the CLI and experiment configs.

To add a ranker: write a stage class (constructor takes the index and its
parameters; `__call__(queries, run=None) -> Run`), then register a factory
here under a short name. Parameter names are the CLI flag names with `_`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from retrieval import storage
from retrieval.errors import InputError
from retrieval.index import Index
from retrieval.params import check as check_params
from retrieval.pipeline import Stage
from retrieval.sparse.rankers import BM25, RM3, QueryLikelihood

Factory = Callable[..., Stage]


def _bm25(index: Index, k1: float = 0.9, b: float = 0.4, hits: int = 1000, threads: int = 1,
          **_: Any) -> Stage:
    return BM25(index, k1=k1, b=b, hits=hits, threads=threads)


def _qld(index: Index, mu: float = 1000.0, hits: int = 1000, threads: int = 1, **_: Any) -> Stage:
    return QueryLikelihood(index, "dirichlet", mu=mu, hits=hits, threads=threads)


def _qljm(index: Index, lam: float = 0.1, hits: int = 1000, threads: int = 1, **_: Any) -> Stage:
    return QueryLikelihood(index, "jelinek-mercer", lam=lam, hits=hits, threads=threads)


def _late(index: Index, checkpoint: str | None = None, interpolate: float | None = None, depth: int = 100,
          threads: int = 1, precision: str | None = None, **_: Any) -> Stage:
    """Late-interaction reranker: it needs a run, so use it after a first stage in a pipeline or
    with `retrieval search --candidates RUN` (checkpoint: a .safetensors path or zero-shot)."""
    from retrieval.late import LateReranker

    return LateReranker(index, checkpoint, interpolate=interpolate, depth=depth, threads=threads,
                        precision=precision)


def _dense(index: Index, hits: int = 1000, encoder: str | None = None, precision: str | None = None,
           ef_search: int | None = None, nprobe: int | None = None, threads: int | None = None,
           **_: Any) -> Stage:
    from retrieval.dense import DenseRetriever

    return DenseRetriever(index, encoder, hits=hits, precision=precision, threads=threads,
                          ef_search=ef_search, nprobe=nprobe)


def _hybrid(index: Index, weight: float = 0.5, fusion: str = "interpolate", depth: int = 1000,
            k1: float = 0.9, b: float = 0.4, hits: int = 1000, threads: int = 1,
            encoder: str | None = None, precision: str | None = None, **_: Any) -> Stage:
    """BM25 fused with dense retrieval: min-max interpolation (`weight` on BM25) or RRF."""
    from retrieval.fusion import RRF, Interpolate

    sparse = BM25(index, k1=k1, b=b, hits=depth, threads=threads)
    dense = _dense(index, hits=depth, encoder=encoder, precision=precision)
    if fusion == "rrf":
        return RRF(sparse, dense, depth=depth, hits=hits)
    if fusion != "interpolate":
        raise InputError(f"unknown fusion {fusion!r}; expected interpolate or rrf")
    return Interpolate(sparse, dense, weight=weight, depth=depth, hits=hits)


RANKERS: dict[str, Factory] = {"bm25": _bm25, "qld": _qld, "qljm": _qljm, "late": _late,
                               "dense": _dense, "hybrid": _hybrid}
SPARSE = {"bm25", "qld", "qljm"}
LUCENE_MODELS = {"bm25", "qld"}


def detect_backend(path: str | Path) -> str:
    """"lucene" for an index built by the Lucene backend or a plain Anserini index, else "native"."""
    path = Path(path)
    if (path / storage.MANIFEST).is_file():
        return storage.read_manifest(path).get("backend", "native")
    return "lucene" if any(path.glob("segments_*")) else "native"


def make_lucene_ranker(model: str, index: str | Path, rm3: bool = False, fb_docs: int = 10,
                       fb_terms: int = 10, original_weight: float = 0.5, k1: float = 0.9,
                       b: float = 0.4, mu: float = 1000.0, hits: int = 1000, threads: int = 1,
                       **_: Any) -> Stage:
    """The Anserini/Lucene stage for `model` (bm25 or qld), through pyserini's jar."""
    if model not in LUCENE_MODELS:
        raise InputError(f"the lucene backend runs {', '.join(sorted(LUCENE_MODELS))}, not {model!r}")
    check_params(fb_docs=fb_docs, fb_terms=fb_terms, original_weight=original_weight, k1=k1, b=b, mu=mu,
                 hits=hits, threads=threads)
    from retrieval.lucene import LuceneBM25, LuceneQLD

    feedback = {"rm3": rm3, "fb_docs": fb_docs, "fb_terms": fb_terms,
                "original_weight": original_weight, "hits": hits, "threads": threads}
    if model == "bm25":
        return LuceneBM25(index, k1=k1, b=b, **feedback)
    return LuceneQLD(index, mu=mu, **feedback)


def make_ranker(model: str, index: Index, rm3: bool = False, fb_docs: int = 10,
                fb_terms: int = 10, original_weight: float = 0.5, **params: Any) -> Stage:
    """Build the native stage for `model` with its parameters, optionally wrapped in RM3."""
    check_params(fb_docs=fb_docs, fb_terms=fb_terms, original_weight=original_weight, **params)
    if model not in RANKERS:
        raise InputError(f"unknown model {model!r}; expected one of {', '.join(sorted(RANKERS))}")
    stage = RANKERS[model](index, **params)
    if rm3:
        if model not in SPARSE:
            raise InputError(f"RM3 needs a sparse model (bm25, qld, qljm), not {model!r}")
        stage = RM3(stage, fb_docs=fb_docs, fb_terms=fb_terms, original_weight=original_weight)
    return stage
