"""Crash safety and integrity: SIGKILL writes at many points; corrupt files are named on open.

The driver (eval/crash_cases.py) SIGKILLs each write (index build, dense part,
late part, run file, JSON) at points spread over its duration and reports what
is on disk. Allowed:
the previous complete data, the new complete data, or a clear InputError (for
"no index here"); never a load that succeeds on partial data.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from retrieval import storage
from retrieval.errors import InputError
from retrieval.index.native import Index, build_index
from retrieval.types import Document

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "eval"))
from crash_cases import damage, drive, loaders  # noqa: E402


def _killed_mid_build(points: list) -> int:
    return sum(not p["finished"] for p in points)


@pytest.mark.parametrize("kind", ["inverted", "inverted-fresh"])
def test_killed_index_build_never_loads_partial_data(kind, tmp_path):
    points, summary = drive(kind, tmp_path)
    old = summary["old"]
    assert old.startswith("docs=300 ")
    assert _killed_mid_build(points) >= len(points) // 2  # kills really landed during the build
    for p in points:
        state = p["state"]
        if state.startswith("InputError"):
            assert "no index here" in state or "not an index" in state, p
            assert kind == "inverted-fresh" or not p["finished"], p
        elif state.startswith("docs=4000 "):
            pass  # the new index, complete and verified
        else:
            assert kind == "inverted" and state == old and not p["finished"], p
    if kind == "inverted":  # with a previous index, a kill must leave it in place
        assert all(not p["state"].startswith("InputError") for p in points
                   if p["delay"] < 0.8 * summary["duration"]), points


@pytest.mark.parametrize("kind", ["dense", "late", "dense-replace", "parts-replace"])
def test_killed_part_build_never_loads_partial_data(kind, tmp_path):
    """A killed part build leaves the index as it was or complete: it always opens and verifies,
    never loads a half-written part, and never drops a part being replaced, whether through the
    API's add_dense or through replace_parts (the CLI)."""
    points, summary = drive(kind, tmp_path)
    complete, base = summary["complete"], summary["base"]
    part = "dense" if kind == "parts-replace" else kind.split("-")[0]
    assert f"parts={part},inverted" in complete or f"parts=inverted,{part}" in complete, complete
    assert base.startswith("docs=20 parts=dense,inverted " if kind.endswith("replace") else
                           "docs=20 parts=inverted ")
    for p in points:
        state = p["state"]
        allowed = {base.split(" created")[0], complete.split(" created")[0]}
        assert state.split(" created")[0] in allowed, p


@pytest.mark.parametrize("kind", ["run", "json"])
def test_killed_file_write_leaves_old_or_new_file(kind, tmp_path):
    points, summary = drive(kind, tmp_path)
    assert summary["new_bytes"] > 1_000_000
    assert {p["state"] for p in points} <= {"old", "new"}, points
    assert any(p["state"] == "old" for p in points)


# ---------------------------------------------------------------- integrity


def _refuse(what: str, real):
    """`real` for numba's own cache of compiled kernels (its index is pickled: code numba wrote under
    __pycache__, not data this project stores), else a failure."""
    def refuse(*args, **kwargs):
        if sys._getframe(1).f_globals.get("__name__", "").startswith("numba."):
            return real(*args, **kwargs)
        raise AssertionError(f"{what} called: data must never be unpickled")
    return refuse


def no_unpickling(mp: pytest.MonkeyPatch) -> None:
    """Make every way of unpickling fail loudly (pickle, numpy with allow_pickle, torch.load)."""
    import pickle

    import torch

    for name in ("load", "loads"):
        mp.setattr(pickle, name, _refuse(f"pickle.{name}", getattr(pickle, name)))
    real_np_load, real_torch_load = np.load, torch.load

    def np_load(*args, **kwargs):
        if kwargs.get("allow_pickle", False):
            raise AssertionError("numpy.load(allow_pickle=True) called")
        return real_np_load(*args, **kwargs)

    def torch_load(*args, **kwargs):
        if kwargs.get("weights_only") is not True:
            raise AssertionError("torch.load without weights_only=True called")
        return real_torch_load(*args, **kwargs)

    mp.setattr(np, "load", np_load)
    mp.setattr(torch, "load", torch_load)


@pytest.fixture(scope="module")
def full_index(tmp_path_factory) -> Path:
    """A small index with inverted, dense and late parts, built with unpickling disabled."""
    from retrieval.dense.faiss_index import add_dense
    from retrieval.late import build_late

    path = tmp_path_factory.mktemp("full") / "idx"
    docs = [Document(f"d{i:02d}", f"title {i}", f"document {i} about cats, dogs and gardens {i * i}")
            for i in range(30)]
    with pytest.MonkeyPatch.context() as mp:
        no_unpickling(mp)
        build_index(docs, path, progress=False)
        add_dense(path)
        build_late(path, progress=False)
    return path


def test_nothing_is_unpickled_when_loading_and_searching(full_index, monkeypatch):
    from retrieval.dense import DenseRetriever
    from retrieval.late import LateReranker
    from retrieval.sparse.rankers import BM25, RM3, QueryLikelihood

    no_unpickling(monkeypatch)
    index = Index.open(full_index)
    queries = {"1": "cats and dogs", "2": "gardens"}
    for ranker in (BM25(index), QueryLikelihood(index), RM3(BM25(index)), DenseRetriever(index)):
        run = ranker(queries)
        assert all(len(run[q]) > 0 for q in queries)
    reranked = LateReranker(index)(queries, BM25(index)(queries))
    assert all(len(reranked[q]) > 0 for q in queries)


def test_no_module_can_unpickle():
    """Static check: no pickle/marshal/shelve/joblib, np.load only with allow_pickle=False,
    torch.load only with weights_only=True, anywhere in retrieval/."""
    import ast

    package = Path(__file__).resolve().parents[1] / "retrieval"
    problems = []
    for file in sorted(package.rglob("*.py")):
        tree = ast.parse(file.read_text(), str(file))
        for node in ast.walk(tree):
            where = f"{file.relative_to(package.parent)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any(n.split(".")[0] in ("pickle", "cPickle", "dill", "joblib", "shelve", "marshal",
                                           "cloudpickle") for n in names):
                    problems.append(f"{where}: imports an unpickler")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                kw = {k.arg: k.value for k in node.keywords}
                owner = ast.unparse(node.func.value)
                if node.func.attr == "load" and owner in ("np", "numpy"):
                    value = kw.get("allow_pickle")
                    if not (isinstance(value, ast.Constant) and value.value is False):
                        problems.append(f"{where}: np.load without allow_pickle=False")
                if node.func.attr == "load" and owner == "torch":
                    value = kw.get("weights_only")
                    if not (isinstance(value, ast.Constant) and value.value is True):
                        problems.append(f"{where}: torch.load without weights_only=True")
                if node.func.attr in ("read_pickle", "from_pickle"):
                    problems.append(f"{where}: {node.func.attr}")
    assert not problems, problems


def _stored_files(path: Path) -> list[str]:
    return sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())


def test_every_stored_file_is_checksummed(full_index):
    manifest = storage.read_manifest(full_index)
    listed = set(manifest["files"])
    for part in manifest["parts"].values():
        listed |= set(part["files"])
    stored = set(_stored_files(full_index)) - {storage.MANIFEST}
    assert stored == listed
    assert {"docs.sqlite", "docids.npy", "dense/faiss.index", "dense/doc_ids.npy"} <= stored
    assert any(f.startswith("inverted/") for f in stored) and any(f.startswith("late/") for f in stored)
    Index.open(full_index)  # and they verify


@pytest.mark.parametrize("how", ["truncate", "flip"])
def test_damaged_file_is_named_on_open(full_index, tmp_path, how):
    import shutil

    names = [f for f in _stored_files(full_index) if f != storage.MANIFEST]
    for rel in names:
        copy = tmp_path / f"{how}-{rel.replace('/', '_')}"
        shutil.copytree(full_index, copy)
        damage(copy / rel, how)
        for load in loaders(copy, rel):
            with pytest.raises(InputError) as e:
                load()
            assert e.value.path == str(copy / rel), (rel, str(e.value))
        shutil.rmtree(copy)


def test_damaged_manifest_is_an_input_error(full_index, tmp_path):
    import shutil

    copy = tmp_path / "idx"
    shutil.copytree(full_index, copy)
    for data in (b"", b"{", b"[]", b'{"format_version": 99}', b"\xff\xfe"):
        (copy / storage.MANIFEST).write_bytes(data)
        with pytest.raises(InputError) as e:
            Index.open(copy)
        assert str(copy) in str(e.value)
    (copy / storage.MANIFEST).unlink()
    with pytest.raises(InputError, match="not an index"):
        Index.open(copy)
    with pytest.raises(InputError, match="no index here"):
        Index.open(tmp_path / "nowhere")


def test_damaged_array_is_refused_by_load_array_even_without_verify(tmp_path):
    storage.save_array(tmp_path / "a.npy", np.arange(1000))
    damage(tmp_path / "a.npy", "truncate")
    with pytest.raises(InputError) as e:
        storage.load_array(tmp_path / "a.npy")
    assert e.value.path == str(tmp_path / "a.npy")


def test_leftovers_of_killed_writers_are_removed_by_the_next_write(tmp_path):
    """The temporary containers of a killed process go at the next write; a live writer's are kept,
    and so is anything merely named like one (issue 49: someone else's `.run.txt.tmp-4000000-keep`)."""
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout)
    target = tmp_path / "run.txt"
    abandoned = [storage.temporary_container(target, "tmp", pid=dead),
                 storage.temporary_container(tmp_path / "idx", "tmp", pid=dead),
                 storage.temporary_container(tmp_path / "idx", "old", pid=dead)]
    (abandoned[0] / "new").write_text("half")
    live = storage.temporary_container(tmp_path / "idx", "tmp")
    theirs = [tmp_path / f".run.txt.tmp-{dead}-keep", tmp_path / f".idx.old-{dead}-y"]
    theirs[0].write_text("not ours")
    (theirs[1] / "previous").mkdir(parents=True)
    storage.write_bytes_atomic(target, b"whole")
    assert not abandoned[0].exists() and abandoned[1].exists()  # only the file's own siblings
    with storage.atomic_directory(tmp_path / "idx") as tmp:
        (tmp / "f").write_text("x")
    assert not abandoned[1].exists() and not abandoned[2].exists()
    assert live.exists() and (tmp_path / "idx" / "f").read_text() == "x"
    assert theirs[0].read_text() == "not ours" and (theirs[1] / "previous").is_dir()
