"""What a comparison of runs should be told: judged documents the collection lacks, runs of other depths.

`retrieval run`, the Python `Experiment` and `retrieval eval --index/--collection`
print the same warnings from here (the arithmetic is in evaluation/measures.py).
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from retrieval.evaluation.measures import depth_differences, depth_warning, missing_warning
from retrieval.types import Qrels


def index_doc_ids(index: Any) -> Collection[str] | None:
    """The doc ids of an opened index where its kind lists them (native: `docno`, sharded:
    `shard_of`); None where it does not (a Lucene index)."""
    for attribute in ("docno", "shard_of"):
        ids = getattr(index, attribute, None)
        if ids is not None:
            return ids
    return None


def collection_doc_ids(collection: str) -> set[str]:
    """The doc ids of a named collection or collection file (read once, text not kept)."""
    from retrieval import collections

    return {document.id for document in collections.load_documents(collection)}


def judged_warnings(qrels: Qrels, doc_ids: Collection[str] | None) -> list[str]:
    """The missing-document warning, if the qrels judge documents the collection lacks."""
    if doc_ids is None:
        return []
    warning = missing_warning(qrels, doc_ids)
    return [warning] if warning else []


def depth_warnings(depths: Mapping[str, int], baseline: str, measures: Sequence[str | object]) -> list[str]:
    """One warning per system compared with the baseline at another depth on some of the measures."""
    return [depth_warning(system, depths[system], baseline, depths[baseline], names)
            for system, names in depth_differences(depths, baseline, measures).items()]


def warn(messages: Sequence[str]) -> None:
    """Print each warning on stderr, one line each, as the command line does."""
    for message in messages:
        print(f"retrieval: warning: {message}", file=sys.stderr)
