"""A full disk (eval/full_disk.py): each command that writes, given less free space than it needs,
ends in one clean error naming the file and leaves the disk as it was, or succeeds whole."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("full_disk", ROOT / "eval" / "full_disk.py")
full_disk = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(full_disk)

WHY_NOT = full_disk.available()
# amounts of free space tried, from none to enough: enough to reach each kind of file the command writes
POINTS = {"index": 8, "index over an index": 8, "search --output": 5, "index --dense --late": 4,
          "index --index --dense --late": 4, "add": 4, "first add": 4}
NEURAL = {"index --dense --late", "index --index --dense --late", "add", "first add"}


def test_every_case_has_points():
    assert set(POINTS) == set(full_disk.CASES)


@pytest.mark.skipif(WHY_NOT is not None, reason=f"needs a private mount namespace: {WHY_NOT}")
@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in NEURAL else c
                                  for c in full_disk.CASES])
def test_a_full_disk_is_one_clean_error_and_nothing_left(case, tmp_path):
    results = full_disk.drive(case, tmp_path, POINTS[case])["results"]
    outcomes = [r["outcome"] for r in results]
    assert outcomes[0] == "error" and outcomes[-1] == "fine", results  # the sweep spans both sides
    bad = [r for r in results if r["outcome"] not in ("error", "fine")]
    assert not bad, bad
