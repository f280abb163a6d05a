"""The LETOR / SVMlight ranking format, as RankLib, LightGBM's and SVMrank's tools read it:

    # retrieval features: 1:bm25 2:qld 3:dense ...
    2 qid:301 1:12.5 2:-3.25 3:0.8125 # docid = FBIS3-10082

one line per (query, document): the label (the qrels' grade; 0 unjudged or
without qrels), `qid:`, each feature as `index:value` (1-based), then the
document id in the comment. Lines starting with `#` are comments (RankLib skips
them); the first names the features. Values are written as Python's shortest
exact float repr, so reading a file back gives the very same floats, and a run
computed from them the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from retrieval import storage
from retrieval.errors import InputError
from retrieval.ltr.run import FeatureRun

HEADER = "# retrieval features:"


def format_letor(run: FeatureRun, qrels: Mapping[str, Mapping[str, int]] | None = None) -> str:
    """The run's features in LETOR format (labels from `qrels`, else 0)."""
    lines = [HEADER + " " + " ".join(f"{i}:{n}" for i, n in enumerate(run.names, 1))]
    for q, (ids, matrix) in run.features.items():
        first = dict(run.get(q, []))
        judged = qrels.get(q, {}) if qrels is not None else {}
        for d, row in zip(ids, matrix.tolist()):
            values = " ".join(f"{j}:{v!r}" for j, v in enumerate(row, 1))
            lines.append(f"{max(int(judged.get(d, 0)), 0)} qid:{q} {values} # docid = {d}"
                         + (f" first = {first[d]!r}" if d in first else ""))
    return "\n".join(lines) + "\n"


def write_letor(run: FeatureRun, path: str | Path,
                qrels: Mapping[str, Mapping[str, int]] | None = None) -> None:
    """Write the features as a LETOR file, whole or not at all."""
    storage.write_output(path, format_letor(run, qrels).encode())


def read_letor(path: str | Path) -> FeatureRun:
    """A FeatureRun from a LETOR file this module wrote (labels are read by `read_labels`)."""
    run, _ = _read(path)
    return run


def read_labels(path: str | Path) -> dict[str, dict[str, int]]:
    """The labels of a LETOR file: {qid: {doc id: label}}."""
    _, labels = _read(path)
    return labels


def _read(path: str | Path) -> tuple[FeatureRun, dict[str, dict[str, int]]]:
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read the features file: {e.strerror or e}", path) from None
    lines = text.splitlines()
    if not lines or not lines[0].startswith(HEADER):
        raise InputError(f"not a features file written by `retrieval features` (no {HEADER!r} line)", path)
    names = [item.partition(":")[2] for item in lines[0][len(HEADER):].split()]
    rows: dict[str, tuple[list[str], list[list[float]]]] = {}
    first: dict[str, list[tuple[str, float]]] = {}
    labels: dict[str, dict[str, int]] = {}
    for number, line in enumerate(lines[1:], 2):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            data, _, comment = line.partition("#")
            label, qid, *values = data.split()
            q = qid.removeprefix("qid:")
            parts = comment.split()
            doc = parts[parts.index("docid") + 2]
            vector = [0.0] * len(names)
            for item in values:
                j, _, v = item.partition(":")
                vector[int(j) - 1] = float(v)
            ids, matrix = rows.setdefault(q, ([], []))
            ids.append(doc)
            matrix.append(vector)
            labels.setdefault(q, {})[doc] = int(label)
            if "first" in parts:
                first.setdefault(q, []).append((doc, float(parts[parts.index("first") + 2])))
        except (ValueError, IndexError):
            raise InputError(f"line {number}: expected 'label qid:Q 1:v ... # docid = D'", path) from None
    features = {q: (ids, np.array(m, dtype=np.float64).reshape(len(ids), len(names)))
                for q, (ids, m) in rows.items()}
    return FeatureRun(first, features, names), labels
