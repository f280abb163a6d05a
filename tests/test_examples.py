"""The examples are kept working: each script under examples/ runs to its end (its own asserts pass)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from retrieval import collections
from retrieval.pipeline.params import LATE_WEIGHT

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_python_api_example_runs(tmp_path):
    """examples/python_api.py: search, rerank a run file and raw strings, DataFrames, a PyTerrier pipeline
    mixing both libraries' stages, and an Experiment whose table and figures are `retrieval run`'s."""
    assert collections.data_dir().is_dir(), "test data not found; set RETRIEVAL_DATA"
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "python_api.py"), str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the Experiment's figures equal retrieval run's" in done.stdout
    assert f"BM25(k1=0.9, b=0.4) % 20 >> LateReranker(interpolate={LATE_WEIGHT}, depth=20)" in done.stdout
    assert "55 of the qrels' 796 judgements" in done.stderr  # CACM's unpadded ids, warned about
