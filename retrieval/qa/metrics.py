"""SQuAD's official EM and F1, exactly as `evaluate-v2.0.py` computes them.

Answers are normalised (lowercase, punctuation and the articles a/an/the
removed, whitespace collapsed); a question's score is the maximum over its
gold answers; an unanswerable question's only gold answer is "" (so the
empty prediction scores 1). Totals are percentages over all questions.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Mapping, Sequence

from retrieval.errors import InputError

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def get_tokens(s: str) -> list[str]:
    """Normalised answer tokens ([] for an empty answer)."""
    return normalize_answer(s).split() if s else []


def compute_exact(a_gold: str, a_pred: str) -> int:
    """1 if the normalised strings are equal."""
    return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold: str, a_pred: str) -> float:
    """Token-overlap F1 between normalised answers."""
    gold_toks, pred_toks = get_tokens(a_gold), get_tokens(a_pred)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        return float(gold_toks == pred_toks)
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_toks)
    recall = num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def score(golds: Sequence[str], prediction: str) -> tuple[int, float]:
    """(EM, F1) of one prediction: the maximum over gold answers ("" if none)."""
    golds = [a for a in golds if normalize_answer(a)] or [""]
    return (max(compute_exact(a, prediction) for a in golds),
            max(compute_f1(a, prediction) for a in golds))


def evaluate(gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str],
             *, require_all: bool = True) -> dict[str, float]:
    """{"exact", "f1", "total"}: percentages over every gold question.

    A question without a prediction is an error when `require_all` (the
    official script scores it 0 and warns).
    """
    missing = [q for q in gold if q not in predictions]
    if missing and require_all:
        raise InputError(f"{len(missing)} questions have no prediction (first: {missing[0]!r})")
    em = f1 = 0.0
    for qid, answers in gold.items():
        if qid in predictions:
            e, f = score(answers, predictions[qid])
            em, f1 = em + e, f1 + f
    n = max(len(gold), 1)
    return {"exact": 100.0 * em / n, "f1": 100.0 * f1 / n, "total": len(gold)}


def contains_answer(text: str, golds: Sequence[str]) -> bool:
    """Whether a normalised gold answer occurs in the normalised text (on token boundaries)."""
    norm = f" {normalize_answer(text)} "
    return any(f" {g} " in norm for g in (normalize_answer(a) for a in golds) if g)
