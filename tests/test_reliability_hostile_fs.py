"""Hostile use of the file system (issue items 1, 2, 7, 8, 9, 10, 13): nothing deleted, replaced,
followed or left behind; every case is a correct result or one clean error (eval/hostile_fs.py)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval.index.native import Index

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("hostile_fs", ROOT / "eval" / "hostile_fs.py")
hostile_fs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hostile_fs)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[tuple[str, str], str]:
    rows = hostile_fs.run_cases(tmp_path_factory.mktemp("hostile-fs"))
    return {(category, case): outcome for category, case, outcome in rows}


CATEGORIES = sorted({c for c, *_ in hostile_fs.CASES})


@pytest.mark.parametrize("category", CATEGORIES)
def test_every_case_is_a_result_or_a_clean_error(outcomes, category):
    cases = {case: o for (c, case), o in outcomes.items() if c == category}
    assert len(cases) >= 2
    bad = {case: o for case, o in cases.items() if o not in ("error", "fine")}
    assert not bad, bad


def test_cases_expecting_an_error_get_one(outcomes):
    expected = {(c, n): e for c, n, _, e in hostile_fs.CASES}
    assert {k: o for k, o in outcomes.items() if o != expected[k]} == {}


def test_classification_catches_what_it_should():
    """The harness itself: a deleted victim or an escaped exception is never counted as fine."""
    assert hostile_fs.outcome((0, "", False), "fine") == "silent"
    assert hostile_fs.outcome((2, "retrieval: error: x\n", False), "error") == "silent"
    assert hostile_fs.outcome((2, "retrieval: error: x\nmore\n", True), "error") == "silent"
    assert hostile_fs.outcome(ValueError("boom"), "error") == "traceback"
    assert hostile_fs.outcome((-6, "", True), "error") == "crash"


# ---------------------------------------------------------------- property: any path value

@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    return hostile_fs.Fixture(tmp_path_factory.mktemp("hostile-prop"))


def _digest(path: Path) -> str:
    """What is at `path`, to the byte (kind, link target, file contents, directory listing)."""
    if path.is_symlink():
        return "link:" + os.readlink(path)
    if path.is_file():
        return "file:" + hashlib.sha256(path.read_bytes()).hexdigest()
    if path.is_dir():
        return "dir:" + ",".join(sorted(f"{p.name}={_digest(p)}" for p in path.iterdir()))
    return "absent"


def _make(kind: str, base: Path) -> Path:
    """A path of this kind under `base`, with something precious nearby."""
    (base / "precious.txt").write_text("keep")
    if kind == "new":
        return base / "new"
    if kind == "file":
        (base / "f").write_text("keep")
        return base / "f"
    if kind == "dir":
        (base / "d").mkdir()
        (base / "d" / "x").write_text("keep")
        return base / "d"
    if kind == "empty dir":
        (base / "e").mkdir()
        return base / "e"
    if kind == "symlink to file":
        (base / "link").symlink_to(base / "precious.txt")
        return base / "link"
    if kind == "dangling symlink":
        (base / "dangling").symlink_to(base / "nowhere")
        return base / "dangling"
    if kind == "under a file":
        return base / "precious.txt" / "sub"
    if kind == "dotdot":
        (base / "d2").mkdir()
        return base / "d2" / ".." / "precious.txt"
    raise AssertionError(kind)


KINDS = ["new", "file", "dir", "empty dir", "symlink to file", "dangling symlink", "under a file",
         "dotdot"]


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(kind=st.sampled_from(KINDS), command=st.sampled_from(["index", "search --output"]),
       force=st.booleans())
def test_any_path_gives_a_result_or_a_clean_error(fx, tmp_path, kind, command, force):
    base = tmp_path / f"p{abs(hash((kind, command, force)))}"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    target = _make(kind, base)
    before = _digest(base / "precious.txt")
    if command == "index":
        code, err = hostile_fs.run_cli("index", "--collection", fx.docs, "--index", target,
                                       *(["--force"] if force else []))
    else:
        code, err = fx.search(fx.index, target)
    assert code in (0, 2), err
    if code == 2:
        assert err.startswith("retrieval: error: ") and err.count("\n") == 1, err
        assert _digest(base / "precious.txt") == before
    elif command == "index":
        assert Index.open(target).num_docs == 6
        assert force or kind in ("new", "empty dir") or _digest(base / "precious.txt") == before
    else:
        written = Path(os.path.realpath(target))
        assert written.is_file() and " Q0 " in written.read_text()
        if "symlink" in kind:
            assert Path(target).is_symlink()  # followed, never replaced by a regular file
    assert not hostile_fs.leftovers(base)
