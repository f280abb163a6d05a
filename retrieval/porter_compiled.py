"""Porter stems of many ASCII words in one compiled pass: `retrieval.porter.stem` of each.

A build meets hundreds of thousands of distinct words (a batch's new ones at a
time: InvertedIndexBuilder.add_texts). `stems` joins the words into one byte
buffer and stems each in place with the same steps and rules as
`retrieval.porter` (the rule tables are read from it; the first rule whose
suffix ends the word decides, as there), the consonant/vowel pattern of a word
recomputed after each change. Words beyond ASCII, or with the "*" that NLTK's
rule list reads as a suffix, are left to `retrieval.porter.stem`, one at a
time. tests/test_porter.py compares the two on generated words and NLTK's
stems; eval/check_porter.py compares them with NLTK on a corpus's vocabulary.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from retrieval import porter


def _table(groups: dict[str, tuple[tuple[str, str, int], ...]], order: list[str]
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(suffix bytes, suffix offsets, replacement bytes, replacement offsets) of a step's rules in
    their order (`order`: the suffixes as listed)."""
    replacement = {suffix: repl for group in groups.values() for suffix, repl, _ in group}
    suffixes = [s.encode() for s in order]
    replacements = [replacement[s].encode() for s in order]

    def offsets(parts: list[bytes]) -> np.ndarray:
        return np.concatenate(([0], np.cumsum([len(p) for p in parts]))).astype(np.int64)

    return (np.frombuffer(b"".join(suffixes), np.uint8).copy(), offsets(suffixes),
            np.frombuffer(b"".join(replacements) or b"\0", np.uint8).copy(), offsets(replacements))


def _order(groups: dict[str, tuple[tuple[str, str, int], ...]]) -> list[str]:
    """A step's suffixes in an order where, for each last letter, its rules keep their order (all
    a word's candidate rules share its last letter, so the first match is the same)."""
    return [suffix for group in groups.values() for suffix, _, _ in group]


_S2 = _table(porter._STEP2, _order(porter._STEP2))
_S3 = _table(porter._STEP3, _order(porter._STEP3))
_S4 = _table(porter._STEP4, _order(porter._STEP4))
_ION = np.frombuffer(b"ion", np.uint8).copy()


@njit(cache=True, inline="always")
def _vowel(c):
    return c == 97 or c == 101 or c == 105 or c == 111 or c == 117


@njit(nogil=True, cache=True)
def _pattern(w, a, n, cv):
    """cv[i] = 1 for a vowel, 0 for a consonant, of w[a:a+n] (Porter's y rule)."""
    for i in range(n):
        c = w[a + i]
        if _vowel(c):
            cv[i] = 1
        elif c == 121:
            cv[i] = 0 if i == 0 or cv[i - 1] == 1 else 1
        else:
            cv[i] = 0


@njit(nogil=True, cache=True)
def _measure(cv, n):
    """Vowel-to-consonant changes in cv[:n] (the measure m)."""
    m = 0
    for i in range(n - 1):
        if cv[i] == 1 and cv[i + 1] == 0:
            m += 1
    return m


@njit(nogil=True, cache=True)
def _has_vowel(cv, n):
    for i in range(n):  # noqa: SIM110 (a loop, not any() of a generator: compiled)
        if cv[i] == 1:
            return True
    return False


@njit(nogil=True, cache=True)
def _ends(w, a, n, suffix, s0, s1):
    k = s1 - s0
    if k > n:
        return False
    for i in range(k):  # noqa: SIM110 (a loop, not all() of a generator: compiled)
        if w[a + n - k + i] != suffix[s0 + i]:
            return False
    return True


@njit(nogil=True, cache=True)
def _ends_lit(w, a, n, lit):
    return _ends(w, a, n, lit, 0, len(lit))


@njit(nogil=True, cache=True)
def _ends_cvc(w, a, cv, n):
    if n < 3 or not (cv[n - 3] == 0 and cv[n - 2] == 1 and cv[n - 1] == 0):
        return False
    c = w[a + n - 1]
    return not (c == 119 or c == 120 or c == 121)


@njit(nogil=True, cache=True)
def _apply(w, a, n, cv, table, least):
    suffix, soff, repl, roff = table
    for r in range(len(soff) - 1):
        if _ends(w, a, n, suffix, soff[r], soff[r + 1]):
            k = n - (soff[r + 1] - soff[r])
            _pattern(w, a, k, cv)
            if _measure(cv, k) >= least:
                for i in range(roff[r + 1] - roff[r]):
                    w[a + k + i] = repl[roff[r] + i]
                return k + roff[r + 1] - roff[r]
            return n
    return n


@njit(nogil=True, cache=True)
def _step1ab(w, a, n, cv, lits):
    sses, ies, ss, eed, ed, ing, at, bl, iz = lits
    if w[a + n - 1] == 115:  # s
        if _ends_lit(w, a, n, sses) or _ends_lit(w, a, n, ies):
            n -= 2
        elif not _ends_lit(w, a, n, ss):
            n -= 1
    if _ends_lit(w, a, n, eed):
        _pattern(w, a, n, cv)
        return n - 1 if _measure(cv, n - 3) > 0 else n
    if _ends_lit(w, a, n, ed):
        k = n - 2
    elif _ends_lit(w, a, n, ing):
        k = n - 3
    else:
        return n
    _pattern(w, a, k, cv)
    if not _has_vowel(cv, k):
        return n
    if _ends_lit(w, a, k, at) or _ends_lit(w, a, k, bl) or _ends_lit(w, a, k, iz):
        w[a + k] = 101
        return k + 1
    if k >= 2 and w[a + k - 1] == w[a + k - 2] and cv[k - 1] == 0:  # *d
        c = w[a + k - 1]
        return k if (c == 108 or c == 115 or c == 122) else k - 1
    if _measure(cv, k) == 1 and _ends_cvc(w, a, cv, k):
        w[a + k] = 101
        return k + 1
    return k


@njit(nogil=True, cache=True)
def _stem(w, a, n, cv, lits, s2, s3, s4, ion):
    """The stem of w[a:a+n], written over it; its length."""
    if n <= 2:
        return n
    n = _step1ab(w, a, n, cv, lits)
    if w[a + n - 1] == 121:  # step 1c
        _pattern(w, a, n - 1, cv)
        if _has_vowel(cv, n - 1):
            w[a + n - 1] = 105
    n = _apply(w, a, n, cv, s2, 1)
    n = _apply(w, a, n, cv, s3, 1)
    suffix, soff, _, _ = s4
    for r in range(len(soff) - 1):  # step 4: measure > 1 (and s or t before -ion)
        if _ends(w, a, n, suffix, soff[r], soff[r + 1]):
            k = n - (soff[r + 1] - soff[r])
            _pattern(w, a, k, cv)
            if _measure(cv, k) > 1:
                length = soff[r + 1] - soff[r]
                is_ion = length == 3 and _ends(suffix, soff[r], length, ion, 0, 3)
                if not is_ion or w[a + k - 1] == 115 or w[a + k - 1] == 116:
                    n = k
            break
    if w[a + n - 1] == 101:  # step 5a
        _pattern(w, a, n, cv)
        m = _measure(cv, n - 1)
        if m > 1 or (m == 1 and not _ends_cvc(w, a, cv, n - 1)):
            n -= 1
    if n >= 2 and w[a + n - 1] == 108 and w[a + n - 2] == 108:  # step 5b
        _pattern(w, a, n, cv)
        if _measure(cv, n - 1) > 1:
            n -= 1
    return n


@njit(nogil=True, cache=True)
def _stems(text, out, lits, s2, s3, s4, ion):
    """The stems of the words of `text` (ASCII, each followed by "\n") into `out`, each followed by
    "\n"; the bytes written."""
    cv = np.empty(len(text) + 1, np.uint8)
    a = 0
    used = 0
    for i in range(len(text)):
        if text[i] != 10:
            continue
        n = _stem(text, a, i - a, cv, lits, s2, s3, s4, ion)  # written over the word
        for j in range(n):
            out[used + j] = text[a + j]
        out[used + n] = 10
        used += n + 1
        a = i + 1
    return used


_LITS = tuple(np.frombuffer(s.encode(), np.uint8).copy()
              for s in ("sses", "ies", "ss", "eed", "ed", "ing", "at", "bl", "iz"))


def stems(words: list[str]) -> list[str]:
    """`retrieval.porter.stem` of each word (lower case expected): those that are ASCII, without "*"
    or a line break (word tokens are), in one compiled pass; any other one at a time."""
    if not words:
        return []
    joined = "\n".join(words) + "\n"
    if joined.isascii() and "*" not in joined and joined.count("\n") == len(words):
        return _compiled(joined)
    simple = [i for i, w in enumerate(words) if w.isascii() and "*" not in w and "\n" not in w]
    out = list(map(porter.stem, words)) if not simple else list(words)
    if simple:
        stemmed = _compiled("\n".join(words[i] for i in simple) + "\n")
        done = set(simple)
        for i, stem in zip(simple, stemmed):
            out[i] = stem
        for i, word in enumerate(words):
            if i not in done:
                out[i] = porter.stem(word)
    return out


def _compiled(joined: str) -> list[str]:
    """The stems of the words of `joined` (ASCII, each followed by "\n", none containing "*")."""
    text = np.frombuffer(joined.encode("ascii"), np.uint8).copy()
    out = np.empty(len(text), np.uint8)
    used = _stems(text, out, _LITS, _S2, _S3, _S4, _ION)
    return out[:used - 1].tobytes().decode("ascii").split("\n")
