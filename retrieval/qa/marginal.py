"""REALM's marginalisation: p(y | x) = sum_z p(y | z, x) p(z | x).

p(z | x) is a softmax over the retriever's inner products of the top-k
passages divided by a temperature; p(y | z, x) is the reader's probability
of the normalised answer string y in passage z. Each answer keeps its
evidence: every passage that proposed it, with the character span and both
probabilities.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from retrieval.qa.reader import Reading


@dataclass(frozen=True)
class Evidence:
    """One passage's support for an answer."""

    passage_id: str
    start: int
    end: int
    text: str
    p_passage: float
    p_answer_given_passage: float


@dataclass(frozen=True)
class Answer:
    """An answer string with its marginal probability p(y | x) and evidence (best first)."""

    text: str
    prob: float
    evidence: tuple[Evidence, ...]

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"answer": self.text, "probability": self.prob,
                "evidence": [{"passage_id": e.passage_id, "start": e.start, "end": e.end,
                              "text": e.text, "p_passage": e.p_passage,
                              "p_answer_given_passage": e.p_answer_given_passage}
                             for e in self.evidence]}


def passage_probs(scores: Sequence[float], temperature: float) -> np.ndarray:
    """p(z | x): softmax(score / temperature) over the given passages."""
    s = np.asarray(scores, dtype=np.float64) / temperature
    if not len(s):
        return s
    e = np.exp(s - s.max())
    return e / e.sum()


def marginalise(passage_ids: Sequence[str], p_z: Sequence[float], readings: Sequence[Reading],
                answerable: bool = True) -> list[Answer]:
    """Answers ranked by p(y | x) (ties: text ascending), with their evidence.

    With `answerable`, each passage's span distribution is conditioned on the
    passage holding an answer; otherwise its no-answer mass is dropped from
    the answer strings (a passage the reader rejects contributes less).
    """
    total: dict[str, float] = {}
    support: dict[str, list[Evidence]] = {}
    surface: dict[str, tuple[float, str]] = {}
    for pid, pz, reading in zip(passage_ids, p_z, readings):
        for key, (py, span) in reading.answers(answerable).items():
            total[key] = total.get(key, 0.0) + float(pz) * py
            support.setdefault(key, []).append(
                Evidence(pid, span.start, span.end, span.text, float(pz), py))
            joint = float(pz) * py
            if joint > surface.get(key, (-1.0, ""))[0]:
                surface[key] = (joint, span.text)
    ranked = sorted(total, key=lambda k: (-total[k], k))
    return [Answer(surface[k][1], total[k],
                   tuple(sorted(support[k], key=lambda e: -e.p_passage * e.p_answer_given_passage)))
            for k in ranked]
