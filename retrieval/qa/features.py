"""Question-passage windows for the span reader.

A passage longer than the reader's window is split into overlapping windows
(`stride` tokens shared between neighbours); each window is
`[CLS] question [SEP] passage piece [SEP]`, and keeps the character offsets of
its passage tokens so a span maps back to the passage text. Index 0 ([CLS])
stands for "no answer in this window".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

MAX_LENGTH = 384
STRIDE = 128
MAX_QUERY_TOKENS = 64


@dataclass
class Window:
    """One reader input: token ids, which pair it came from, context offsets."""

    pair: int
    input_ids: list[int]
    token_type_ids: list[int]
    offsets: list[tuple[int, int] | None]
    gold: list[tuple[int, int]] = field(default_factory=list)

    @property
    def context_tokens(self) -> list[int]:
        """Indices of the tokens that belong to the passage."""
        return [i for i, o in enumerate(self.offsets) if o is not None]


def _truncate_question(tokenizer, question: str) -> str:
    ids = tokenizer(question, add_special_tokens=False)["input_ids"]
    if len(ids) <= MAX_QUERY_TOKENS:
        return question
    return tokenizer.decode(ids[:MAX_QUERY_TOKENS])


def make_windows(tokenizer, questions: Sequence[str], contexts: Sequence[str], *,
                 answers: Sequence[Sequence[tuple[int, int]]] | None = None,
                 max_length: int = MAX_LENGTH, stride: int = STRIDE) -> list[Window]:
    """Windows for each (question, context) pair; `answers` are gold char spans (start, end).

    With `answers`, each window's `gold` lists the token spans of the answers
    that lie wholly inside it, or [(0, 0)] (no answer here) when none does.
    """
    qs = [_truncate_question(tokenizer, q) for q in questions]
    enc = tokenizer(qs, list(contexts), truncation="only_second", max_length=max_length,
                    stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True,
                    padding=False)
    out = []
    for w, pair in enumerate(enc["overflow_to_sample_mapping"]):
        seq = enc.sequence_ids(w)
        offsets = [tuple(o) if s == 1 else None for o, s in zip(enc["offset_mapping"][w], seq)]
        window = Window(pair, enc["input_ids"][w], enc["token_type_ids"][w], offsets)
        if answers is not None:
            window.gold = _gold_tokens(offsets, answers[pair])
        out.append(window)
    return out


def _gold_tokens(offsets: list[tuple[int, int] | None],
                 spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    gold = set()
    ctx = [i for i, o in enumerate(offsets) if o is not None]
    if ctx:
        lo, hi = offsets[ctx[0]][0], offsets[ctx[-1]][1]
        for start, end in spans:
            if start < 0 or start < lo or end > hi:
                continue
            s = next(i for i in ctx if offsets[i][1] > start)
            e = next(i for i in reversed(ctx) if offsets[i][0] < end)
            if s <= e:
                gold.add((s, e))
    return sorted(gold) or [(0, 0)]
