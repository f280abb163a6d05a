"""A retrieval engine combining classic and neural ranking.

Data flow: collection -> analysis -> index -> first stage -> rerankers -> Run
-> run file / evaluation. See docs/design/architecture.md.
"""

import os

# MKL's matrix products may take a different code path when several run at once
# (concurrent searches of one index), changing the last bits of a score. AUTO
# conditional numerical reproducibility keeps them identical at no measured cost;
# it must be set before torch first calls MKL.
os.environ.setdefault("MKL_CBWR", "AUTO")

from retrieval.runtime import cpu_emulation  # noqa: F401  (on import: caps torch's kernels before they first run)

# The API below is imported when first used, so `import retrieval` (and with it the `retrieval`
# command's start-up, where Ctrl-C must still end in one line) does not load numpy, numba or torch.
_EXPORTS = {
    # stages: search (`stage(queries)`, `stage.search("text", k)`), compose (>> % + * |), rerank
    "BM25": "retrieval.sparse.rankers", "RM3": "retrieval.sparse.rankers",
    "QueryLikelihood": "retrieval.sparse.rankers", "DenseRetriever": "retrieval.dense.retriever",
    "LateReranker": "retrieval.late.reranker", "LateModel": "retrieval.late.model",
    "rerank": "retrieval.late.reranker", "Stage": "retrieval.pipeline.stage",
    "Pipeline": "retrieval.pipeline.stage", "Cut": "retrieval.pipeline.stage",
    "pipe": "retrieval.pipeline.stage", "RRF": "retrieval.pipeline.fusion",
    "Interpolate": "retrieval.pipeline.fusion", "WeightedSum": "retrieval.pipeline.fusion",
    "to_pyterrier": "retrieval.pipeline.pyterrier", "from_pyterrier": "retrieval.pipeline.pyterrier",
    # indexes: build, open any kind, the ranker registry
    "Index": "retrieval.index.native", "build_index": "retrieval.index.native",
    "open_index": "retrieval.index.kinds", "build": "retrieval.registry",
    # evaluation and experiments
    "evaluate": "retrieval.evaluation.measures", "per_query": "retrieval.evaluation.measures",
    "parse_measures": "retrieval.evaluation.measures", "compare": "retrieval.evaluation.significance",
    "Experiment": "retrieval.experiments.experiment",
    # the currency, files, errors
    "Run": "retrieval.types", "Queries": "retrieval.types", "Qrels": "retrieval.types",
    "Document": "retrieval.types", "Result": "retrieval.types", "Results": "retrieval.types",
    "InputError": "retrieval.errors",
    "read_run": "retrieval.formats", "write_run": "retrieval.formats",
    "read_topics": "retrieval.formats", "read_qrels": "retrieval.formats",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'retrieval' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
