"""The open-domain passage collection and its dense index.

Every xquad-en paragraph plus every squad2-dev paragraph as distractors,
deduplicated by text; a passage's id is a hash of its text, so gold
paragraphs of the evaluation set can be found by text.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from retrieval.formats.squad import passage_documents


def build_passage_index(files: Iterable[str | Path], path: str | Path, *, encoder: Any = None,
                        progress: bool = False) -> Path:
    """Doc store + inverted index + dense part (flat inner product) at `path`."""
    from retrieval.dense import Encoder, add_dense
    from retrieval.index.native import build_index

    files = list(files)
    build_index(passage_documents(files), path, source=" + ".join(map(str, files)),
                progress=progress)
    add_dense(path, encoder or Encoder(progress=progress))
    return Path(path)
