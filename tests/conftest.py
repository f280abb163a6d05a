"""Shared fixtures: the data directory and indexes built once per test run."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval import collections
from retrieval.index.native import Index, build_index

DATA = collections.data_dir()


def need_data() -> None:
    """Fail a test that needs ../shared/data when it is missing (pure unit tests still run)."""
    if not DATA.is_dir():
        pytest.fail(f"test data not found at {DATA}; set RETRIEVAL_DATA", pytrace=False)


def _built(tmp_path_factory, name: str) -> Index:
    need_data()
    path = tmp_path_factory.mktemp("indexes") / name
    build_index(collections.load_documents(name), path, source=f"collection:{name}", progress=False)
    return Index.open(path)


@pytest.fixture(scope="session")
def cacm_index(tmp_path_factory) -> Index:
    return _built(tmp_path_factory, "cacm")


@pytest.fixture(scope="session")
def scifact_index(tmp_path_factory) -> Index:
    return _built(tmp_path_factory, "scifact")


@pytest.fixture()
def tiny_docs(tmp_path) -> Path:
    """A five-document BEIR corpus."""
    path = tmp_path / "corpus.jsonl"
    rows = [
        ('d1', 'Cats', 'The cat sat on the mat. Cats like mats.'),
        ('d2', 'Dogs', 'Dogs chase cats in the garden.'),
        ('d3', '', 'Information retrieval systems rank documents.'),
        ('d4', 'Retrieval', "Ranking documents by BM25 is retrieval's classic baseline."),
        ('d5', '', 'A garden with no animals at all.'),
    ]
    import json
    path.write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in rows))
    return path


@pytest.fixture(scope="session")
def scifact_dense_index(tmp_path_factory) -> Index:
    """SciFact with inverted and dense parts (default encoder), built once per test run."""
    from retrieval.dense import add_dense

    index = _built(tmp_path_factory, "scifact")
    add_dense(index)
    return Index.open(index.path)
