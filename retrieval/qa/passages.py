"""The open-domain passage collection and its dense index.

Every xquad-en paragraph plus every squad2-dev paragraph as distractors,
deduplicated by text; a passage's id is a hash of its text, so gold
paragraphs of the evaluation set can be found by text.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from retrieval.qa.squad import paragraphs, read_squad
from retrieval.types import Document


def passage_documents(files: Iterable[str | Path]) -> Iterator[Document]:
    """Documents for every distinct paragraph of the SQuAD files (title: article, spaced)."""
    seen: set[str] = set()
    for path in files:
        for pid, (title, text) in paragraphs(read_squad(path)).items():
            if pid not in seen:
                seen.add(pid)
                yield Document(pid, title.replace("_", " "), text)


def build_passage_index(files: Iterable[str | Path], path: str | Path, *, encoder: Any = None,
                        progress: bool = False) -> Path:
    """Doc store + inverted index + dense part (flat inner product) at `path`."""
    from retrieval.dense import Encoder, add_dense
    from retrieval.index import build_index

    files = list(files)
    build_index(passage_documents(files), path, source=" + ".join(map(str, files)),
                progress=progress)
    add_dense(path, encoder or Encoder(progress=progress))
    return Path(path)
