"""Shared fixtures: the data directory and indexes built once per test run (once for all xdist workers)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock

from retrieval import collections
from retrieval.index.native import Index, build_index

DATA = collections.data_dir()


def need_data() -> None:
    """Fail a test that needs ../shared/data when it is missing (pure unit tests still run)."""
    if not DATA.is_dir():
        pytest.fail(f"test data not found at {DATA}; set RETRIEVAL_DATA", pytrace=False)


def shared_dir(tmp_path_factory, name: str, build: Callable[[Path], object]) -> Path:
    """A directory built once per test run and shared by every pytest-xdist worker: the first worker to
    ask builds it under a file lock, the others wait and reuse it. Tests must treat it as read-only."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's base directory, above every worker's own
    path = root / "shared" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    done = path.parent / f"{name}.done"
    with FileLock(str(path.parent / f"{name}.lock")):
        if not done.exists():
            build(path)
            done.touch()
    return path


def _built(tmp_path_factory, name: str) -> Index:
    need_data()

    def build(path: Path) -> None:
        build_index(collections.load_documents(name), path, source=f"collection:{name}", progress=False)

    return Index.open(shared_dir(tmp_path_factory, name, build))


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
    need_data()

    def build(path: Path) -> None:
        from retrieval.dense import add_dense

        build_index(collections.load_documents("scifact"), path, source="collection:scifact", progress=False)
        add_dense(path)

    return Index.open(shared_dir(tmp_path_factory, "scifact-dense", build))
