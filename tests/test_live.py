"""Live updates (retrieval.shards.live): adds, deletes and merges keep runs equal to a fresh build."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from retrieval import collections
from retrieval.cli import main
from retrieval.formats.trec import format_run
from retrieval.index.kinds import open_index
from retrieval.index.native import build_index
from retrieval.registry import build
from retrieval.shards import live
from retrieval.shards.live import add_documents, delete_documents, optimize
from retrieval.types import Document

SYSTEMS = [("bm25", {}), ("qld", {}), ("bm25", {"rm3": True}), ("qljm", {})]


@pytest.fixture(scope="module")
def cacm():
    return list(collections.load_documents("cacm")), dict(list(collections.load_topics("cacm").items()))


def runs(path: Path, queries) -> list[str]:
    index = open_index(path)
    return [format_run(build(name, index, **params)(queries)) for name, params in SYSTEMS]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_any_updates_equal_a_fresh_build(cacm, tmp_path, seed):
    """Property: after a random sequence of adds and deletes (deleted ids re-added too), BM25,
    QLD, RM3 and QLJM runs are byte-identical to a fresh build of the live documents; also after
    optimize."""
    docs, topics = cacm
    rng = random.Random(seed)
    order = docs[:]
    rng.shuffle(order)
    cuts = sorted(rng.sample(range(200, len(order) - 200), 3))
    batches = [order[a:b] for a, b in zip([0, *cuts], [*cuts, len(order)])]
    path = tmp_path / "live"
    build_index(batches[0], path, progress=False)
    alive = {d.id: d for d in batches[0]}
    for batch in batches[1:]:
        add_documents(path, batch, progress=False)
        alive.update((d.id, d) for d in batch)
        gone = rng.sample(sorted(alive), rng.randint(1, 150))
        delete_documents(path, gone)
        back = gone[: rng.randint(0, len(gone))]
        if back:
            add_documents(path, [d for d in docs if d.id in set(back)], progress=False)
        for d in gone[len(back):]:
            del alive[d]
    fresh = tmp_path / "fresh"
    build_index(alive.values(), fresh, progress=False)
    expected = runs(fresh, topics)
    assert runs(path, topics) == expected
    index = open_index(path)
    assert index.statistics == open_index(fresh).statistics | {"postings": index.statistics["postings"]}
    assert index.statistics["documents"] == len(alive)
    optimize(path, progress=False)
    assert runs(path, topics) == expected
    assert len(open_index(path).shards) == 1


def test_many_small_adds_keep_few_segments(cacm, tmp_path):
    """Past live.MAX_SEGMENTS segments the smallest are merged; runs still equal a fresh build."""
    docs, topics = cacm
    path = tmp_path / "i"
    build_index(docs[:1000], path, progress=False)
    for n in range(16):
        add_documents(path, docs[1000 + 30 * n:1030 + 30 * n], progress=False)
        delete_documents(path, [docs[1000 + 30 * n].id])
        assert len(open_index(path).shards) <= live.MAX_SEGMENTS
    alive = [d for d in docs[:1480] if d.id not in {docs[1000 + 30 * n].id for n in range(16)}]
    build_index(alive, tmp_path / "fresh", progress=False)
    assert runs(path, topics) == runs(tmp_path / "fresh", topics)
    names = {p.name for p in path.iterdir()}
    assert len([n for n in names if n.startswith("shard-")]) <= live.MAX_SEGMENTS + 1  # + one for readers


def test_deleted_documents_are_never_returned_or_read(cacm, tmp_path):
    docs, topics = cacm
    path = tmp_path / "i"
    build_index(docs[:500], path, progress=False)
    gone = [d.id for d in docs[:500:3]]
    delete_documents(path, gone)
    index = open_index(path)
    run = build("bm25", index, hits=1000)(topics)
    assert not {d for hits in run.values() for d, _ in hits} & set(gone)
    assert run  # the others are found
    with pytest.raises(Exception, match="not in the sharded index"):
        index.text(gone[0])


def test_failed_update_leaves_the_index_as_it_was(cacm, tmp_path, monkeypatch):
    """An error after the new segment is written (before the manifest switch) changes nothing:
    the segment it wrote is removed at once, and the next update works."""
    docs, topics = cacm
    path = tmp_path / "i"
    build_index(docs[:300], path, progress=False)
    add_documents(path, docs[300:400], progress=False)
    before, manifest = runs(path, topics), (path / "manifest.json").read_bytes()

    def broken(*args, **kwargs):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(live, "write_generation", broken)
    with pytest.raises(OSError):
        add_documents(path, docs[400:500], progress=False)
    assert (path / "manifest.json").read_bytes() == manifest and runs(path, topics) == before
    assert not (path / "shard-002").exists() and not list(path.glob(".*tmp-*"))
    generation = json.loads(manifest)["live"]["generation"]  # the only one left: the new one is gone
    assert [p.name for p in path.glob("gen-*")] == [f"gen-{generation:06d}"]
    monkeypatch.undo()
    add_documents(path, docs[400:450], progress=False)
    assert json.loads((path / "manifest.json").read_text())["shards"][-1]["name"] == "shard-002"
    assert not list(tmp_path.glob(".i.tmp-*"))


def test_failed_first_update_leaves_a_native_index_native(cacm, tmp_path, monkeypatch):
    """The first update converts a native index to the live layout; when the update fails, the
    conversion is not kept either: every file of the native index is as it was."""
    docs, topics = cacm
    path = tmp_path / "i"
    build_index(docs[:300], path, progress=False)
    before = {p.relative_to(path): p.read_bytes() for p in path.rglob("*") if p.is_file()}

    def broken(*args, **kwargs):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(live, "commit", broken)  # after the conversion, before the switch
    for update in (lambda: add_documents(path, docs[300:400], progress=False),
                   lambda: delete_documents(path, [docs[0].id]), lambda: optimize(path, progress=False)):
        with pytest.raises(OSError):
            update()
        assert {p.relative_to(path): p.read_bytes() for p in path.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".i.update-lock", "i"]
    monkeypatch.undo()
    add_documents(path, docs[300:400], progress=False)
    build_index(docs[:400], tmp_path / "fresh", progress=False)
    assert runs(path, topics) == runs(tmp_path / "fresh", topics)


READER = """
import sys, time
from pathlib import Path
from retrieval.formats.trec import format_run
from retrieval.index.kinds import open_index
from retrieval.registry import build
from retrieval.types import Queries
path, out, stop = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
queries = Queries(line.split("\\t", 1) for line in Path(sys.argv[4]).read_text().splitlines())
n = 0
while not stop.exists() or n == 0:
    try:
        text = format_run(build("bm25", open_index(path))(queries))
    except Exception as e:
        text = "ERROR " + repr(e)
    (out / f"{n:05d}").write_text(text)
    n += 1
"""


def test_search_during_updates_sees_old_or_new(cacm, tmp_path):
    """Searches in another process while updates commit each return the run of a committed state."""
    import subprocess
    import sys

    docs, topics = cacm
    queries = dict(list(topics.items())[:10])
    qfile, out, stop = tmp_path / "q.tsv", tmp_path / "seen", tmp_path / "stop"
    qfile.write_text("".join(f"{q}\t{' '.join(t.split())}\n" for q, t in queries.items()))
    out.mkdir()
    path = tmp_path / "i"
    build_index(docs[:1000], path, progress=False)
    delete_documents(path, [docs[0].id])  # the live layout from the start: each commit is one rename
    current = lambda: format_run(build("bm25", open_index(path))(queries))  # noqa: E731
    states = [current()]
    reader = subprocess.Popen([sys.executable, "-c", READER, str(path), str(out), str(stop), str(qfile)])
    try:
        for start in range(1000, 1600, 100):
            add_documents(path, docs[start:start + 100], progress=False)
            states.append(current())
            delete_documents(path, [docs[start].id])
            states.append(current())
    finally:
        stop.touch()
        assert reader.wait(timeout=300) == 0
    seen = [p.read_text() for p in sorted(out.iterdir())]
    assert not [s for s in seen if s.startswith("ERROR")]
    assert seen and set(seen) <= set(states)
    assert len(set(states)) == len(states)  # every commit changed the run


def test_cli_add_delete_optimize(tiny_docs, tmp_path, capsys):
    index, topics, out = tmp_path / "idx", tmp_path / "t.tsv", tmp_path / "run"
    topics.write_text("1\tcats gardens\n2\tsubmarine sonar\n")
    assert main(["index", "--collection", str(tiny_docs), "--index", str(index)]) == 0
    new = tmp_path / "new.jsonl"
    row = {"_id": "d6", "title": "Sonar", "text": "A submarine listens by sonar."}
    new.write_text(json.dumps(row) + "\n")
    assert main(["add", "--index", str(index), str(new)]) == 0
    assert "6 documents in 2 segment(s)" in capsys.readouterr().err
    ids = tmp_path / "ids.txt"
    ids.write_text("d1\n\nd2\n")
    assert main(["delete", "--index", str(index), "--ids", str(ids)]) == 0
    assert main(["search", "--index", str(index), "--topics", str(topics), "--output", str(out)]) == 0
    hits = [line.split()[2] for line in out.read_text().splitlines()]
    assert "d6" in hits and "d1" not in hits and "d2" not in hits
    assert main(["optimize", "--index", str(index)]) == 0
    assert "4 documents in 1 segment(s), 0 marked deleted" in capsys.readouterr().err
    capsys.readouterr()
    assert main(["info", "--index", str(index)]) == 0
    assert '"generation"' in capsys.readouterr().out


@pytest.mark.parametrize("case, message", [
    ("clash", "corpus.jsonl: 5 document id(s) are already in the index (e.g. 'd1')"),
    ("unknown", "1 id(s) are not documents of the index (e.g. 'nope'); nothing was deleted"),
    ("bad-line", "ids.txt:2: expected one document id per line"),
    ("missing-file", "x: file not found"),
])
def test_bad_updates_are_one_line_errors_and_change_nothing(tiny_docs, tmp_path, capsys, case, message):
    index = tmp_path / "idx"
    assert main(["index", "--collection", str(tiny_docs), "--index", str(index)]) == 0
    ids = tmp_path / "ids.txt"
    ids.write_text({"unknown": "d3\nnope\n", "bad-line": "d3\nd4 d5\n"}.get(case, "d3\n"))
    if case == "clash":
        args = ["add", "--index", str(index), str(tiny_docs)]
    else:
        source = ids if case != "missing-file" else tmp_path / "x"
        args = ["delete", "--index", str(index), "--ids", str(source)]
    before = sorted((p.relative_to(index), p.read_bytes()) for p in index.rglob("*") if p.is_file())
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    if case != "clash":  # the clash is found after the first update turned the index live
        after = sorted((p.relative_to(index), p.read_bytes()) for p in index.rglob("*") if p.is_file())
        assert after == before


def test_duplicate_ids_within_an_added_file_are_refused(tiny_docs, tmp_path):
    index = tmp_path / "idx"
    build_index(collections.load_documents(str(tiny_docs)), index, progress=False)
    twice = [Document("x", "", "one"), Document("x", "", "two")]
    with pytest.raises(Exception, match="duplicate document id"):
        add_documents(index, twice, progress=False)
    assert open_index(index).statistics["documents"] == 5


def test_updates_to_what_is_not_an_index_leave_no_lock_and_counts_are_of_documents(tiny_docs, tmp_path,
                                                                                  capsys):
    (tmp_path / "plain").mkdir()
    for target in ("nosuch", "plain"):
        assert main(["add", "--index", str(tmp_path / target), str(tiny_docs)]) == 2
    assert not list(tmp_path.glob(".*update-lock"))
    index, ids = tmp_path / "idx", tmp_path / "ids.txt"
    build_index(collections.load_documents(str(tiny_docs)), index, progress=False)
    ids.write_text("d2\nd2\n")
    capsys.readouterr()
    assert main(["delete", "--index", str(index), "--ids", str(ids)]) == 0
    assert capsys.readouterr().err.startswith("deleted 1 documents") and open_index(index).statistics[
        "documents"] == 4


@pytest.mark.slow
def test_dense_and_late_parts_kept_in_step(tiny_docs, tmp_path):
    """Added documents get dense vectors and late embeddings from the index's models; deleted ones
    leave dense results; late reranking reads the new segment."""
    from retrieval.late import LateReranker

    index = tmp_path / "idx"
    assert main(["index", "--collection", str(tiny_docs), "--index", str(index), "--dense", "--late"]) == 0
    add_documents(index, [Document("d6", "Sonar", "A submarine listens to the ocean by sonar.")],
                  progress=False)
    delete_documents(index, ["d2"])
    opened = open_index(index)
    queries = {"q": "submarine sonar", "c": "dogs chase cats"}
    dense = build("dense", opened)(queries)
    assert dense["q"][0][0] == "d6"
    assert "d2" not in {d for hits in dense.values() for d, _ in hits}
    assert len(dense["c"]) == 5  # every live document, none deleted
    first = build("bm25", opened)(queries)
    reranked = LateReranker(opened, use_store=True)(queries, first)
    assert reranked["q"][0][0] == "d6"
