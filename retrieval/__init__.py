"""A retrieval engine combining classic and neural ranking.

Data flow: collection -> analysis -> index -> first stage -> rerankers -> Run
-> run file / evaluation. See the README's architecture section.
"""

import os

# MKL's matrix products may take a different code path when several run at once
# (concurrent searches of one index), changing the last bits of a score. AUTO
# conditional numerical reproducibility keeps them identical at no measured cost;
# it must be set before torch first calls MKL.
os.environ.setdefault("MKL_CBWR", "AUTO")

from retrieval import cpu_emulation  # noqa: F401  (on import: caps torch's kernels before they first run)
from retrieval.errors import InputError
from retrieval.evaluation import evaluate, per_query
from retrieval.formats import read_qrels, read_run, read_topics, write_run
from retrieval.index import Index, build_index
from retrieval.sparse.rankers import BM25, RM3, QueryLikelihood
from retrieval.types import Document, Qrels, Queries, Run

__all__ = [
    "BM25", "RM3", "QueryLikelihood", "Index", "build_index", "evaluate", "per_query",
    "Run", "Queries", "Qrels", "Document", "InputError", "read_run", "write_run",
    "read_topics", "read_qrels",
]
