"""Sharded indexes: runs byte-identical to the single index, in-process and on a local Ray cluster."""

from __future__ import annotations

import shutil

import pytest
import ray

from retrieval import collections
from retrieval.cli import main
from retrieval.errors import InputError
from retrieval.formats.trec import format_run
from retrieval.index.native import Index, build_index
from retrieval.registry import build
from retrieval.shards import (
    LocalBackend,
    ShardedIndex,
    ShardUnavailable,
    build_sharded_index,
)
from retrieval.shards.dense import DenseSource
from retrieval.shards.ray_backend import RayBackend, connect

SYSTEMS = {  # name -> (model, parameters) as rankers.build takes them
    "bm25": ("bm25", {}),
    "qld": ("qld", {}),
    "bm25+rm3": ("bm25", {"rm3": True}),
    "qld+rm3": ("qld", {"rm3": True}),
}


def _sharded(tmp_path_factory, name: str, shards: int = 4) -> ShardedIndex:
    path = tmp_path_factory.mktemp("sharded") / f"{name}-{shards}"
    build_sharded_index(collections.load_documents(name), path, shards, source=f"collection:{name}",
                        workers=2, progress=False)
    return ShardedIndex.open(path)


@pytest.fixture(scope="session")
def cacm_sharded(tmp_path_factory) -> ShardedIndex:
    return _sharded(tmp_path_factory, "cacm")


@pytest.fixture(scope="session")
def scifact_sharded(tmp_path_factory) -> ShardedIndex:
    return _sharded(tmp_path_factory, "scifact")


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster for this module (started here, shut down at the end)."""
    started = connect("local", num_cpus=2)
    yield
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def cacm_ray(ray_cluster, cacm_sharded):
    backend = RayBackend(cacm_sharded)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def scifact_ray(ray_cluster, scifact_sharded):
    backend = RayBackend(scifact_sharded)
    yield backend
    backend.close()


def single_run(index: Index, system: str, queries) -> bytes:
    model, params = SYSTEMS[system]
    return format_run(build(model, index, **params)(queries)).encode()


def sharded_run(index: ShardedIndex, backend, system: str, queries):
    model, params = SYSTEMS[system]
    run = build(model, index.use_backend(backend), **params)(queries)
    return run, format_run(run).encode()


@pytest.mark.parametrize("system", list(SYSTEMS))
def test_cacm_on_ray_equals_single_index(cacm_index, cacm_sharded, cacm_ray, system):
    queries = collections.load_topics("cacm")
    run, text = sharded_run(cacm_sharded, cacm_ray, system, queries)
    assert text == single_run(cacm_index, system, queries)
    assert run.complete and len(run) == len(queries)


@pytest.mark.parametrize("system", ["bm25", "qld", "bm25+rm3"])
def test_scifact_on_ray_equals_single_index(scifact_index, scifact_sharded, scifact_ray, system):
    queries = collections.load_topics("scifact")
    _, text = sharded_run(scifact_sharded, scifact_ray, system, queries)
    assert text == single_run(scifact_index, system, queries)


@pytest.mark.parametrize("system", ["bm25", "qld+rm3"])
def test_in_process_equals_single_index(cacm_index, cacm_sharded, system):
    queries = collections.load_topics("cacm")
    _, text = sharded_run(cacm_sharded, LocalBackend(cacm_sharded), system, queries)
    assert text == single_run(cacm_index, system, queries)


def test_global_statistics_equal_the_single_index(cacm_index, cacm_sharded):
    stats = cacm_sharded.manifest["stats"]
    assert stats == cacm_index.manifest["stats"]
    assert sum(s.documents for s in cacm_sharded.shards) == cacm_index.num_docs
    assert max(s.documents for s in cacm_sharded.shards) - min(s.documents for s in cacm_sharded.shards) <= 1


def test_actor_exiting_mid_batch_is_restarted(cacm_index, cacm_sharded, ray_cluster):
    """Shard 2's actor exits inside its first call (the batch is under way): same run."""
    queries = collections.load_topics("cacm")
    backend = RayBackend(cacm_sharded, faults={2: 1})
    try:
        run, text = sharded_run(cacm_sharded, backend, "bm25+rm3", queries)
    finally:
        backend.close()
    assert backend.restarts == {2: 1}
    assert run.complete and text == single_run(cacm_index, "bm25+rm3", queries)


class KillingBackend(RayBackend):
    """Kills shard 1's actor with ray.kill right after the first batch was sent to it."""

    killed = False

    def submit(self, method, args):
        refs = super().submit(method, args)
        if not self.killed:
            self.killed = True
            ray.kill(self.actors[1], no_restart=True)
        return refs


def test_ray_kill_mid_batch_gives_the_complete_run(cacm_index, cacm_sharded, ray_cluster):
    queries = collections.load_topics("cacm")
    backend = KillingBackend(cacm_sharded)
    try:
        run, text = sharded_run(cacm_sharded, backend, "qld", queries)
    finally:
        backend.close()
    assert backend.killed and backend.restarts == {1: 1}
    assert run.complete and text == single_run(cacm_index, "qld", queries)


@pytest.fixture(scope="module")
def broken(cacm_sharded, tmp_path_factory):
    """The CACM 4-shard index with shard-002's directory gone."""
    path = tmp_path_factory.mktemp("broken") / "cacm-4"
    shutil.copytree(cacm_sharded.path, path)
    shutil.rmtree(path / "shard-002")
    return ShardedIndex.open(path)


def test_missing_shard_is_an_error_naming_it(broken, ray_cluster):
    queries = collections.load_topics("cacm")
    with pytest.raises(ShardUnavailable, match="shard-002"):
        build("bm25", broken.use_backend(LocalBackend(broken)))(queries)
    backend = RayBackend(broken, retries=1)
    try:
        with pytest.raises(ShardUnavailable, match="shard shard-002 is unavailable"):
            build("bm25", broken.use_backend(backend))(queries)
    finally:
        backend.close()


def test_allow_partial_flags_the_run(cacm_index, broken, ray_cluster):
    """The partial run is the single index's run without shard-002's documents."""
    queries = collections.load_topics("cacm")
    backend = RayBackend(broken, allow_partial=True, retries=1)
    try:
        run = build("bm25", broken.use_backend(backend))(queries)
    finally:
        backend.close()
    assert run.missing_shards == ("shard-002",) and not run.complete
    gone = set(cacm_index.doc_id_list[2::4])  # shard i holds the (i+1)-th, (i+5)-th, ... doc ids
    full = build("bm25", cacm_index)(queries)
    for qid in queries:
        kept = [h for h in full.get(qid, []) if h[0] not in gone]
        assert run.get(qid, [])[:len(kept)] == kept


def test_cli_missing_shard_one_line_error_and_allow_partial(broken, tmp_path, capsys):
    out = tmp_path / "run.txt"
    args = ["search", "--index", str(broken.path), "--topics", "cacm", "--output", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "shard-002" in err and err.startswith("retrieval: error:")
    assert main([*args, "--allow-partial"]) == 0
    err = capsys.readouterr().err
    assert "PARTIAL RESULTS" in err and "shard-002" in err and out.read_text()
    assert main(["info", "--index", str(broken.path)]) == 0
    assert '"status": "missing"' in capsys.readouterr().out


def test_cli_index_search_info_on_ray(tiny_docs, tmp_path, ray_cluster, capsys):
    single, sharded = tmp_path / "single", tmp_path / "sharded"
    topics = tmp_path / "t.tsv"
    topics.write_text("1\tcats in gardens\n2\tretrieval ranking documents\n")
    assert main(["index", "--collection", str(tiny_docs), "--index", str(single)]) == 0
    assert main(["index", "--collection", str(tiny_docs), "--index", str(sharded), "--shards", "2"]) == 0
    runs = []
    for index, extra in ((single, []), (sharded, []), (sharded, ["--ray", "local"])):
        out = tmp_path / f"run{len(runs)}"
        assert main(["search", "--index", str(index), "--topics", str(topics), "--model", "qld",
                     "--output", str(out), *extra]) == 0
        runs.append(out.read_bytes())
    assert runs[0] == runs[1] == runs[2] and runs[0]
    capsys.readouterr()
    assert main(["info", "--index", str(sharded)]) == 0
    assert '"shard-001"' in capsys.readouterr().out


def test_cli_late_part_on_shards_reranks_like_the_single_index(tiny_docs, tmp_path):
    topics, first = tmp_path / "t.tsv", tmp_path / "bm25"
    topics.write_text("1\tcats in gardens\n2\tretrieval ranking documents\n")
    reranked = []
    for name, extra in (("single", []), ("sharded", ["--shards", "2"])):
        index = tmp_path / name
        assert main(["index", "--collection", str(tiny_docs), "--index", str(index), "--late", *extra]) == 0
        if name == "single":
            assert main(["search", "--index", str(index), "--topics", str(topics),
                         "--output", str(first)]) == 0
        out = tmp_path / f"{name}.late"
        assert main(["rerank", "--index", str(index), "--topics", str(topics), "--run", str(first),
                     "--output", str(out)]) == 0
        reranked.append(out.read_bytes())
    assert reranked[0] == reranked[1] and reranked[0].count(b"\n") >= 5


@pytest.mark.parametrize("args, message", [
    (["--shards", "0"], "--shards must be at least 1"),
    (["--shards", "6"], "cannot split 5 documents into 6 shards"),
])
def test_bad_shard_counts_are_one_line_errors(tiny_docs, tmp_path, capsys, args, message):
    assert main(["index", "--collection", str(tiny_docs), "--index", str(tmp_path / "i"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert not (tmp_path / "i").exists()


def test_sharded_index_refused_where_a_single_index_is_needed(cacm_sharded, tmp_path, capsys):
    with pytest.raises(InputError, match="sharded index"):
        Index.open(cacm_sharded.path)


def test_rescoring_a_run_on_shards_equals_the_single_index(cacm_index, cacm_sharded, tmp_path, capsys):
    """`--candidates`: each candidate scored on its shard, ranked as the single index ranks them."""
    first = tmp_path / "bm25"
    assert main(["search", "--index", str(cacm_index.path), "--topics", "cacm", "--hits", "50",
                 "--output", str(first)]) == 0
    outs = []
    for index in (cacm_index.path, cacm_sharded.path):
        outs.append(tmp_path / f"qld-{len(outs)}")
        assert main(["search", "--index", str(index), "--topics", "cacm", "--model", "qld",
                     "--candidates", str(first), "--output", str(outs[-1])]) == 0
    assert outs[0].read_bytes() == outs[1].read_bytes() and outs[0].stat().st_size > 10_000
    (tmp_path / "bad").write_text("1 Q0 nope 1 1.0 t\n")
    assert main(["search", "--index", str(cacm_sharded.path), "--topics", "cacm", "--candidates",
                 str(tmp_path / "bad"), "--output", str(tmp_path / "x")]) == 2
    assert f"{tmp_path / 'bad'}: names document 'nope', which is not in the index" in capsys.readouterr().err


def test_ray_needs_a_sharded_index(cacm_index, capsys):
    assert main(["search", "--index", str(cacm_index.path), "--topics", "cacm", "--ray", "local"]) == 2
    assert "sharded index" in capsys.readouterr().err


def _dense_run(index: ShardedIndex, model: str, queries) -> bytes:
    backend = RayBackend(index)
    try:
        return format_run(build(model, index.use_backend(backend))(queries)).encode()
    finally:
        backend.close()


@pytest.mark.slow
def test_cacm_dense_on_ray_equals_single_index(tmp_path_factory, ray_cluster):
    """4 shards, the collection encoded once and split by shard, or the single index's vectors copied
    (CACM's first 200 documents: encoding, not the collection's size, is what is compared)."""
    docs = list(collections.load_documents("cacm"))[:200]
    root = tmp_path_factory.mktemp("dense")
    build_index(docs, root / "single", progress=False)
    from retrieval.dense import add_dense

    add_dense(root / "single")
    single = Index.open(root / "single")
    build_sharded_index(docs, root / "encoded", 4, dense=DenseSource(), progress=False)
    build_sharded_index(docs, root / "copied", 4, dense=DenseSource(reuse=root / "single"), progress=False)
    queries = collections.load_topics("cacm")
    reference = format_run(build("dense", single)(queries)).encode()
    assert _dense_run(ShardedIndex.open(root / "encoded"), "dense", queries) == reference
    assert _dense_run(ShardedIndex.open(root / "copied"), "dense", queries) == reference


@pytest.mark.slow
def test_scifact_dense_and_hybrid_on_ray_equal_single_index(scifact_dense_index, tmp_path, ray_cluster):
    path = tmp_path / "scifact-4"
    build_sharded_index(collections.load_documents("scifact"), path, 4, workers=2, progress=False,
                        dense=DenseSource(reuse=scifact_dense_index.path))
    index = ShardedIndex.open(path)
    queries = collections.load_topics("scifact")
    for model in ("dense", "hybrid"):
        reference = format_run(build(model, scifact_dense_index)(queries)).encode()
        assert _dense_run(index, model, queries) == reference, model


@pytest.mark.slow
def test_late_reranking_on_shards_equals_single_index(tmp_path, capsys):
    """Late parts sharded like the rest: the reranked run is byte-identical (CACM, first 600 docs)."""
    from retrieval.late import LateModel, LateReranker, build_late
    from retrieval.shards.late import LateSource

    docs = list(collections.load_documents("cacm"))[:200]
    model = LateModel(threads=2)
    build_index(docs, tmp_path / "single", progress=False)
    build_late(tmp_path / "single", model, progress=False)
    build_sharded_index(docs, tmp_path / "sharded", 4, workers=1, progress=False, late=LateSource(model))
    queries = dict(list(collections.load_topics("cacm").items())[:12])
    first = build("bm25", Index.open(tmp_path / "single"), hits=100)(queries)
    single = LateReranker(tmp_path / "single", model, use_store=True)(queries, first)
    sharded = LateReranker(tmp_path / "sharded", model, use_store=True)(queries, first)
    assert format_run(sharded) == format_run(single) and len(format_run(single)) > 1000
    alone = LateReranker(tmp_path / "sharded", model, interpolate=0.0, use_store=True)(queries, first)
    assert format_run(alone) != format_run(sharded)  # the (default) interpolation is applied on shards too
    assert ShardedIndex.open(tmp_path / "sharded").has("late")


def test_fast_merge_order_equals_lexsort():
    """order_by_score (packed int64 keys) agrees with a plain (score desc, rank asc) lexsort."""
    import numpy as np

    from retrieval.shards.merge import order_by_score

    rng = np.random.default_rng(3)
    for n in (1, 5, 400, 4000):
        scores = np.round(rng.random(n) * 4, 1)  # many ties, and 1-ulp near-ties below
        scores = np.where(rng.random(n) < 0.1, np.nextafter(scores, np.inf), scores)
        ranks = rng.permutation(3 * n)[:n].astype(np.int64)
        assert order_by_score(scores, ranks).tolist() == np.lexsort((ranks, -scores)).tolist()
        assert order_by_score(scores - 2.0, ranks).tolist() == np.lexsort((ranks, -(scores - 2.0))).tolist()
