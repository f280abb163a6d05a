"""Same inputs, same outputs: run files byte-identical across processes, thread counts and
concurrent searches of one loaded index (BM25, QLD, RM3, dense, late reranking)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from retrieval import collections
from retrieval.formats.trec import format_run
from retrieval.index.native import Index, build_index
from retrieval.types import Document

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r'''
import sys
from pathlib import Path
from retrieval import collections
from retrieval.formats import write_run
from retrieval.index.native import Index
from retrieval.sparse.rankers import BM25, RM3, QueryLikelihood

index_path, out, threads = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
index = Index.open(index_path)
queries = collections.load_topics("cacm")
rankers = {"bm25": BM25(index, threads=threads), "qld": QueryLikelihood(index, threads=threads),
           "rm3": RM3(BM25(index, threads=threads))}
rankers["bm25>>qld"] = lambda q: QueryLikelihood(index, threads=threads)(q, BM25(index, hits=100)(q))
for name, ranker in rankers.items():
    write_run(ranker(queries), out / f"{name}.txt", tag=name.replace(">", "-"))
'''

SPARSE = ("bm25", "qld", "rm3", "bm25>>qld")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _runs_in_fresh_process(index: Path, out: Path, threads: int) -> dict[str, str]:
    out.mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(index), str(out), str(threads)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {name: _digest(out / f"{name}.txt") for name in SPARSE}


def test_run_files_identical_across_processes_and_thread_counts(cacm_index, tmp_path):
    first = _runs_in_fresh_process(cacm_index.path, tmp_path / "a", 1)
    again = _runs_in_fresh_process(cacm_index.path, tmp_path / "b", 1)
    two = _runs_in_fresh_process(cacm_index.path, tmp_path / "c", 2)
    assert first == again == two
    assert (tmp_path / "a" / "bm25.txt").stat().st_size > 100_000


def _sparse_rankers(index: Index, threads: int = 1) -> dict:
    from retrieval.sparse.rankers import BM25, RM3, QueryLikelihood

    return {"bm25": BM25(index, threads=threads), "qld": QueryLikelihood(index, threads=threads),
            "rm3": RM3(BM25(index, threads=threads))}


def test_eight_threads_searching_one_index(cacm_index):
    queries = collections.load_topics("cacm")
    reference = {name: format_run(r(queries)) for name, r in _sparse_rankers(cacm_index).items()}
    shared = Index.open(cacm_index.path)  # fresh: its lazily loaded parts are first touched by threads
    rankers = _sparse_rankers(shared)
    names = list(rankers) * 3  # 9 jobs, 8 threads, one index, shared ranker objects
    items = list(queries.items())

    def job(i: int) -> tuple[str, str]:
        name = names[i]
        if i % 2:  # half search all queries at once, half one query at a time
            text = format_run(rankers[name](queries))
        else:
            text = "".join(format_run(rankers[name]({q: t})) for q, t in items)
        return name, text

    with ThreadPoolExecutor(8) as pool:
        for name, text in pool.map(job, range(len(names))):
            assert text == reference[name], name


def test_eight_threads_each_opening_rankers_on_one_fresh_index(cacm_index):
    from retrieval.sparse.rankers import BM25

    queries = collections.load_topics("cacm")
    reference = format_run(BM25(cacm_index)(queries))
    shared = Index.open(cacm_index.path)
    with ThreadPoolExecutor(8) as pool:
        texts = list(pool.map(lambda _: format_run(BM25(shared)(queries)), range(8)))
    assert set(texts) == {reference}


@pytest.fixture(scope="module")
def dense_index(tmp_path_factory) -> Index:
    from retrieval.dense.faiss_index import add_dense

    path = tmp_path_factory.mktemp("dense") / "idx"
    words = ["cats", "dogs", "gardens", "retrieval", "ranking", "documents", "neural", "sparse",
             "dense", "late"]
    docs = [Document(f"d{i:02d}", "", " ".join(words[(i * j) % len(words)] for j in range(1, 9)))
            for i in range(40)]
    build_index(docs, path, progress=False)
    add_dense(path)
    from retrieval.late import build_late

    build_late(path, progress=False)  # the reranker reads stored token embeddings
    return Index.open(path)


def test_dense_and_late_rankings_identical_across_runs_and_threads(dense_index):
    from retrieval.dense import DenseRetriever
    from retrieval.late import LateReranker
    from retrieval.sparse.rankers import BM25

    queries = {"1": "cats in gardens", "2": "neural ranking", "3": "sparse or dense retrieval"}
    dense = DenseRetriever(dense_index)
    late = LateReranker(dense_index)
    first_stage = BM25(dense_index)(queries).cut(10)
    reference = (format_run(dense(queries)), format_run(late(queries, first_stage)))
    assert reference == (format_run(dense(queries)), format_run(late(queries, first_stage)))

    def job(_: int) -> tuple[str, str]:
        return format_run(dense(queries)), format_run(late(queries, first_stage))

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(job, range(8))) == {reference}
    # Each batch runs on one torch thread whatever --threads says, so the bits do not depend on it.
    one_thread = (DenseRetriever(dense_index, threads=1), LateReranker(dense_index, threads=1))
    assert (format_run(one_thread[0](queries)),
            format_run(one_thread[1](queries, first_stage))) == reference
