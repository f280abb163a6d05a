"""Term ids of a text in one compiled pass: tokenizing and looking each token up together.

A build spends most of its time per token: the tokenizer's regular expression
makes a string of each token, and a dictionary maps it to its term id. For a
text that is all ASCII (most of English text), `AsciiTokenTable.term_ids` does
both in one compiled loop over the text's bytes: it finds the tokens
`word_breaks.ASCII_WORD` finds (letters, digits and "_" run together, with at
least one letter or digit; ".", "'" and ":" join two letters, ".", ",", ";" and
"'" two digits), and looks each token's bytes up in an open-addressing hash
table of the tokens seen before. A new token is added, and analysed in Python
once (`term_of`, e.g. Analyzer.analyse_token) when the text is done. A text
with a token longer than 255 characters (Lucene's scanner cuts it) is left to
the caller's tokenizer: `term_ids` gives None.

`UnicodeTokenTable` does the same for a text beyond ASCII, on its code points:
each character is first translated to the ASCII stand-in of its word-break
class (`word_breaks.stand_in_code`, the "view" `word_breaks.words` runs
ASCII_WORD on), the tokens are found on that view and looked up by their code
points. A text with a character that needs the full grammar (the NUL stand-in),
or a token longer than 127 characters, is left to the caller's tokenizer, as
`words` leaves it to its full grammar.

The term ids are those `term_of` of each token of `word_breaks.words(text)`
gives (tests/test_ascii_tokens.py compares the tokens with the regular
expression's on generated text; eval/check_unicode_tokens.py with `words` on
every text of a corpus beyond ASCII).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit

from retrieval.word_breaks import MAX_TOKEN_UNITS, stand_in_code

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@njit(inline="always")
def _word(c):
    return (48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122) or c == 95


@njit(inline="always")
def _letter(c):
    return (65 <= c <= 90) or (97 <= c <= 122)


@njit(inline="always")
def _digit(c):
    return 48 <= c <= 57


@njit(nogil=True, cache=True)
def _tokens(text, longest, starts, ends):
    """Spans of ASCII_WORD's tokens in `text` (uint8) into starts/ends; their number, or -1 when
    one is longer than `longest`."""
    n = len(text)
    count = 0
    i = 0
    while i < n:
        if not _word(text[i]):
            i += 1
            continue
        j = i
        while j < n and text[j] == 95:  # "_*" then a letter or digit
            j += 1
        if j >= n or not (_letter(text[j]) or _digit(text[j])):
            i = j
            continue
        k = j + 1
        while k < n and _word(text[k]):
            k += 1
        while k + 1 < n:  # a joiner between two letters or two digits, then more word characters
            c, p, q = text[k], text[k - 1], text[k + 1]
            letters = _letter(p) and _letter(q) and (c == 46 or c == 39 or c == 58)
            if not (letters or (_digit(p) and _digit(q) and (c == 46 or c == 44 or c == 59 or c == 39))):
                break
            k += 2
            while k < n and _word(text[k]):
                k += 1
        if k - i > longest:
            return -1
        starts[count] = i
        ends[count] = k
        count += 1
        i = k
    return count


INLINE = 16  # units of a token kept in its slot, when each is below 256 (most words): compared there


@njit(nogil=True, cache=True)
def _lookup(text, starts, ends, count, slots, key_start, arena, state, out):
    """Each token's entry in the table (a new one added: its bytes appended to `arena`) into
    `out`; state = [entries, arena bytes used].

    A slot (a row of `slots`, 32 bytes) holds the token's hash; its length, whether it is kept
    inline and its entry + 1 (0: an empty slot); and, inline, its first INLINE units as bytes. A
    token found in the slot it probes is compared there, most often without reading `key_start` or
    `arena` (fewer cache misses per token than a slot of entries beside arrays of keys)."""
    mask = len(slots) - 1
    for t in range(count):
        a, b = starts[t], ends[t]
        n = b - a
        h = _FNV_OFFSET
        k0 = np.uint64(0)
        k1 = np.uint64(0)
        inline = n <= INLINE
        for i in range(a, b):
            c = np.uint64(text[i])
            h = (h ^ c) * _FNV_PRIME
            if inline:
                if c > 255:
                    inline = False
                elif i - a < 8:
                    k0 |= c << np.uint64(8 * (i - a))
                else:
                    k1 |= c << np.uint64(8 * (i - a - 8))
        high = np.uint64(n) | (np.uint64(1 << 16) if inline else np.uint64(0))  # length, inline flag
        s = np.int64(h & np.uint64(mask))
        while True:
            word = slots[s, 1]
            if word == 0:
                e = state[0]
                used = state[1]
                for i in range(a, b):
                    arena[used + i - a] = text[i]
                key_start[e] = used
                key_start[e + 1] = used + n
                slots[s, 0] = h
                slots[s, 1] = (high << np.uint64(32)) | np.uint64(e + 1)
                slots[s, 2] = k0
                slots[s, 3] = k1
                state[0] = e + 1
                state[1] = used + n
                break
            if slots[s, 0] == h and (word >> np.uint64(32)) == high:
                e = np.int64(word & np.uint64(0xFFFFFFFF)) - 1
                if inline:
                    if slots[s, 2] == k0 and slots[s, 3] == k1:
                        break
                else:
                    k = key_start[e]
                    same = True
                    for i in range(n):
                        if arena[k + i] != text[a + i]:
                            same = False
                            break
                    if same:
                        break
            s = (s + 1) & mask
        out[t] = e


@njit(nogil=True, cache=True)
def _find(view, data, longest, starts, ends, slots, key_start, arena, state, out):
    """_tokens of `view` then _lookup of their units in `data`, in one call (one release of the GIL):
    the number of tokens, or -1 when one is longer than `longest`."""
    count = _tokens(view, longest, starts, ends)
    if count >= 0:
        _lookup(data, starts, ends, count, slots, key_start, arena, state, out)
    return count


@njit(nogil=True, cache=True)
def _rehash(old, slots):
    """The filled slots of `old` moved into the larger, empty `slots`."""
    mask = len(slots) - 1
    for r in range(len(old)):
        if old[r, 1] != 0:
            s = np.int64(old[r, 0] & np.uint64(mask))
            while slots[s, 1] != 0:
                s = (s + 1) & mask
            for j in range(4):
                slots[s, j] = old[r, j]


@njit(nogil=True, cache=True)
def _stand_ins(codes, table, view):
    """view[i] = table[codes[i]] (the stand-in of each code point); (how many have none yet (255),
    whether one needs the full grammar (0))."""
    missing, full = 0, False
    for i in range(len(codes)):
        c = table[codes[i]]
        view[i] = c
        if c == 255:
            missing += 1
        elif c == 0:
            full = True
    return missing, full


def _text_ends(texts: list[str]) -> np.ndarray:
    """Where each text ends in `texts` joined by "\n": the offset of the "\n" after it (int64)."""
    return np.cumsum(np.fromiter(map(len, texts), np.int64, len(texts)) + 1) - 1


class AsciiTokenTable:
    """Token bytes -> entry, entry -> term id (-1 for none: a stopword), for ASCII texts."""

    dtype: type = np.uint8  # of a token's units in the table
    encoding = "ascii"

    def __init__(self, term_of: Callable[[str], str], vocabulary: dict[str, int],
                 token_ids: Callable[[list[str]], list[int]] | None = None) -> None:
        """`token_ids` (the term ids of a list of distinct tokens, analysing those it has not met:
        the builder's), when given, numbers the new tokens instead of `term_of` and `vocabulary`, so
        that a token met by another table or by the builder's own tokenizer is not analysed again."""
        self.term_of = term_of
        self.vocabulary = vocabulary
        self.token_ids = token_ids
        self.slots = np.zeros((1 << 16, 4), np.uint64)  # see _lookup
        self.key_start = np.zeros(1 << 15, np.int64)
        self.arena = np.zeros(1 << 18, self.dtype)
        self.state = np.zeros(2, np.int64)  # entries, arena bytes used
        self.term = np.zeros(1 << 15, np.int32)  # entry -> term id
        self._starts = np.zeros(1 << 12, np.int64)
        self._ends = np.zeros(1 << 12, np.int64)
        self._out = np.zeros(1 << 12, np.int64)
        self._resolved = 0  # entries analysed so far (resolve)

    def _room(self, size: int) -> None:
        """Grow the arrays so that a text of `size` bytes fits (at most `size` new tokens)."""
        entries, used = int(self.state[0]), int(self.state[1])
        if len(self._starts) < size + 1:
            n = max(size + 1, 2 * len(self._starts))
            self._starts, self._ends, self._out = (np.zeros(n, np.int64) for _ in range(3))
        if len(self.key_start) < entries + size + 2:
            self.key_start = np.resize(self.key_start, max(entries + size + 2, 2 * len(self.key_start)))
        if len(self.arena) < used + size:
            self.arena = np.resize(self.arena, max(used + size, 2 * len(self.arena)))
        if len(self.slots) < 2 * (entries + size):
            n = len(self.slots)
            while n < 2 * (entries + size):
                n *= 2
            old, self.slots = self.slots, np.zeros((n, 4), np.uint64)
            _rehash(old, self.slots)

    def term_ids(self, text: str) -> bytes | None:
        """The term ids (int32, native order, as bytes) of the tokens of an ASCII `text`, -1 for a
        token without a term; None when a token is longer than 255 characters."""
        return self._ids(self.entries(text))

    def entries(self, text: str) -> np.ndarray | None:
        """The table entries of the tokens of `text` (`term[entry]` is a token's term id once
        `resolve` has run: new tokens are analysed then), or None as `term_ids`."""
        data = np.frombuffer(text.encode("ascii"), np.uint8)
        return self._entries(data, data, MAX_TOKEN_UNITS)

    def term_ids_of_texts(self, texts: list[str]) -> tuple[bytes, list[int]] | None:
        """`term_ids` of ASCII `texts` in one pass (one call into the compiled loops, not one a text):
        the term ids of all their tokens, one text's after another's, and each text's number of
        tokens; None when a token is longer than 255 characters."""
        found = self.entries_of_texts(texts)
        return None if found is None else (self._ids(found[0]), found[1])

    def entries_of_texts(self, texts: list[str]) -> tuple[np.ndarray, list[int], list[int]] | None:
        """`entries` of ASCII `texts` in one pass, each text's number of tokens and the texts left to
        the caller's tokenizer (none here: see UnicodeTokenTable); None when a token is longer than
        255 characters. The texts are joined by "\n", which no token spans (not a word character,
        nor a joiner)."""
        data = np.frombuffer("\n".join(texts).encode("ascii"), np.uint8)
        entries = self._entries(data, data, MAX_TOKEN_UNITS)
        return None if entries is None else (entries, self._counts(texts, len(entries)), [])

    def _counts(self, texts: list[str], tokens: int) -> list[int]:
        """Each text's number of the `tokens` just found in `texts` joined by "\n"."""
        before = np.searchsorted(self._starts[:tokens], _text_ends(texts))  # tokens up to each text's end
        return np.diff(before, prepend=0).tolist()

    def _ids(self, entries: np.ndarray | None) -> bytes | None:
        """The term ids of `entries` (new tokens analysed first), as bytes; None for None."""
        if entries is None:
            return None
        self.resolve()
        return self.term[entries].tobytes()

    def _entries(self, view: np.ndarray, data: np.ndarray, longest: int) -> np.ndarray | None:
        """The entries of the tokens ASCII_WORD finds in `view` (uint8), looked up by their units in
        `data` (a new token gets the next entry, analysed by `resolve`); None when one is longer
        than `longest`."""
        self._room(len(data))
        count = _find(view, data, longest, self._starts, self._ends, self.slots, self.key_start,
                      self.arena, self.state, self._out)
        return None if count < 0 else self._out[:count].copy()

    def entered(self) -> int:
        """How many entries the table has (`resolve(upto)` of this many makes `term` cover them)."""
        return int(self.state[0])

    def resolve(self, upto: int | None = None) -> None:
        """Analyse the tokens entered since the last call (up to entry `upto`, default all), all
        together (`token_ids`, or `term_of` and `vocabulary`), so `term` gives their term ids. With
        `upto`, the table may meanwhile take more texts in another thread (the builder's: this reads
        only entries already entered, and `term` is grown only here)."""
        before, after = self._resolved, self.entered() if upto is None else upto
        if after > before:
            if len(self.term) < after:
                self.term = np.resize(self.term, max(after, 2 * len(self.term)))
            key_start, arena = self.key_start, self.arena  # the other thread may replace them (larger copies)
            bounds = key_start[before:after + 1].tolist()
            text = arena[bounds[0]:bounds[-1]].tobytes().decode(self.encoding)
            first = bounds[0]
            tokens = [text[a - first:b - first] for a, b in zip(bounds, bounds[1:])]
            if self.token_ids is not None:
                self.term[before:after] = self.token_ids(tokens)
            else:
                term_of, vocabulary = self.term_of, self.vocabulary
                names = list(map(term_of, tokens))
                self.term[before:after] = [vocabulary[name] if name else -1 for name in names]
            self._resolved = after


class UnicodeTokenTable(AsciiTokenTable):
    """Token code points -> entry, entry -> term id, for texts beyond ASCII (see the module)."""

    dtype = np.uint32
    encoding = "utf-32-le"

    def __init__(self, term_of: Callable[[str], str], vocabulary: dict[str, int],
                 token_ids: Callable[[list[str]], list[int]] | None = None) -> None:
        super().__init__(term_of, vocabulary, token_ids)
        self.stand_ins = np.full(0x110000, 255, np.uint8)  # code point -> stand-in, 255: not met yet
        self.stand_ins[:128] = np.arange(128)  # ASCII is its own stand-in
        self._view = np.zeros(1 << 12, np.uint8)

    def term_ids(self, text: str) -> bytes | None:
        """The term ids (int32, native order, as bytes) of the tokens of `text` (`words(text)`), -1 for
        a token without a term; None when `words` would need its full grammar or a token is long."""
        return self._ids(self.entries(text))

    def entries(self, text: str) -> np.ndarray | None:
        """The table entries of the tokens of `text` (see AsciiTokenTable.entries), or None as
        `term_ids`."""
        found = self.entries_of_texts([text])
        return None if found is None or found[2] else found[0]

    def entries_of_texts(self, texts: list[str]) -> tuple[np.ndarray, list[int], list[int]] | None:
        """`entries` of `texts` in one pass (joined by "\n", as AsciiTokenTable.entries_of_texts), each
        text's number of tokens and the texts left to the caller's tokenizer (those `words` would
        need its full grammar for: their tokens are not looked up, and their count is 0); None when
        a text has a lone surrogate or a token is long."""
        try:
            codes = np.frombuffer("\n".join(texts).encode("utf-32-le"), np.uint32)
        except UnicodeEncodeError:  # a lone surrogate
            return None
        if len(self._view) < len(codes):
            self._view = np.zeros(max(len(codes), 2 * len(self._view)), np.uint8)
        view = self._view[:len(codes)]
        missing, full = _stand_ins(codes, self.stand_ins, view)
        if missing:
            for code in np.unique(codes[view == 255]).tolist():
                self.stand_ins[code] = stand_in_code(code)
            missing, full = _stand_ins(codes, self.stand_ins, view)
        left: list[int] = []
        if full:  # blank the texts that need the full grammar (no token is found there)
            ends = _text_ends(texts)
            left = np.unique(np.searchsorted(ends, np.flatnonzero(view == 0))).tolist()
            for k in left:
                view[ends[k] - len(texts[k]):ends[k]] = 32
        entries = self._entries(view, codes, MAX_TOKEN_UNITS // 2)  # at most two UTF-16 units a character
        return None if entries is None else (entries, self._counts(texts, len(entries)), left)
