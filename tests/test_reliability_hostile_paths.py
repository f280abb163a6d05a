"""Paths that are not the tool's and crafted indexes (issue 49, items 6-9): a directory holding
anything its manifest does not name is never replaced, nothing inside an index is built or
updated, only this tool's own marked temporaries are cleaned up, and every crafted index is one
clean error naming the file (eval/hostile_paths.py)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from retrieval import storage
from retrieval.errors import InputError
from retrieval.index.lucene_norms import int_to_byte4, norm_codes, quantised_lengths
from retrieval.ownership import check_not_inside_index, owned_index

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "eval"))
_spec = importlib.util.spec_from_file_location("hostile_paths", ROOT / "eval" / "hostile_paths.py")
hostile_paths = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hostile_paths)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[tuple[str, str], str]:
    rows = hostile_paths.run_cases(tmp_path_factory.mktemp("hostile-paths"))
    return {(category, case): outcome for category, case, outcome in rows}


@pytest.mark.parametrize("category", sorted({c for c, *_ in hostile_paths.CASES}))
def test_every_case_gets_what_it_expects(outcomes, category):
    expected = {n: e for c, n, _, e in hostile_paths.CASES if c == category}
    got = {case: o for (c, case), o in outcomes.items() if c == category}
    assert len(got) >= 4
    assert {case: o for case, o in got.items() if o != expected[case]} == {}


def test_owned_index_is_exactly_what_the_manifest_names(tmp_path):
    fx = hostile_paths.Fixture(tmp_path / "fx")
    live = hostile_paths.live_index(fx, tmp_path, deleted=True)
    assert owned_index(fx.index) and owned_index(live)
    (live / "shard-000" / "inverted" / "notes.txt").write_text("mine")  # deep inside a segment
    assert not owned_index(live)
    (live / "shard-000" / "inverted" / "notes.txt").unlink()
    (live / "gen-000001").mkdir()  # a retired generation a reader still holds: the tool's
    (live / "gen-000001" / "lease").write_bytes(b"")
    assert owned_index(live)
    (live / "gen-000001" / "other.txt").write_text("mine")
    assert not owned_index(live)


def test_nothing_is_built_inside_an_index(tmp_path):
    fx = hostile_paths.Fixture(tmp_path / "fx")
    for path in (fx.index / "inverted", fx.index / "new" / "deeper"):
        with pytest.raises(InputError, match="is inside the index"):
            check_not_inside_index(path)
    check_not_inside_index(fx.index)  # the index itself is fine
    check_not_inside_index(tmp_path / "elsewhere")


def test_only_marked_temporaries_of_dead_processes_are_removed(tmp_path):
    dead = hostile_paths.dead_pid()
    theirs = tmp_path / f".run.txt.tmp-{dead}-x1"  # named like ours, not marked: someone else's
    theirs.mkdir()
    (theirs / "data").write_text("keep")
    ours = storage.temporary_container(tmp_path / "run.txt", "tmp", pid=dead)
    live = storage.temporary_container(tmp_path / "run.txt", "tmp")  # this process is alive
    storage.write_bytes_atomic(tmp_path / "run.txt", b"whole")
    assert not ours.exists() and live.exists() and (theirs / "data").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([theirs.name, live.name, "run.txt"])


def test_norm_codes_equal_lucenes_scalar_encoding_and_need_no_list_per_length():
    """The vectorised norm encoding is Lucene's, value for value; a length of 2**31 - 1 once built a
    Python list of 2**31 codes (a hang)."""
    values = np.concatenate([np.arange(0, 70_000), [2**k + d for k in range(17, 31) for d in (-1, 0, 1)],
                             [2**31 - 1]]).astype(np.int32)
    assert norm_codes(values).tolist() == [int_to_byte4(int(v)) for v in values]
    assert quantised_lengths(np.array([2**31 - 1, 122, 3], dtype=np.int32))[1:].tolist() == [120.0, 3.0]


def test_opening_checks_stay_cheap(cacm_index):
    """The postings checks added at open (one pass, vectorised) keep CACM's open under a second."""
    import time

    from retrieval.index.postings import InvertedIndex

    start = time.perf_counter()
    InvertedIndex(cacm_index.path / "inverted")
    assert time.perf_counter() - start < 1.0


def test_a_killed_container_is_recognised_in_a_child(tmp_path):
    """A write killed with SIGKILL leaves its marked container; the next write removes it."""
    code = ("import os, signal, sys; from retrieval import storage; from pathlib import Path;"
            " storage.temporary_container(Path(sys.argv[1]) / 'out.txt', 'tmp');"
            " os.kill(os.getpid(), signal.SIGKILL)")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert [p.name for p in tmp_path.iterdir() if ".out.txt.tmp-" in p.name]
    storage.write_bytes_atomic(tmp_path / "out.txt", b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
