"""Unicode word segmentation as Lucene's StandardTokenizer does it (UAX #29 word boundaries).

StandardTokenizer is a JFlex scanner over a grammar of Unicode word-break classes: at each
position the longest match of any rule wins. Only its rules for words (letters, digits,
katakana and the characters that join them), emoji sequences, runs of South-East Asian
script (Thai, Lao, Khmer, Myanmar: one token per run, no dictionary), single Han ideographs
and single hiragana make tokens; every other character is skipped. Its scanner buffer holds
255 UTF-16 code units, so no token runs past 255 of them from its start: a longer match is
cut to the longest one that fits, as the scanner's is.

The rules are transcribed into `regex` patterns written so that their greedy match is the
longest one (Lucene's word rule is ambiguous as written; matching it leftmost-longest takes
time cubic in a word's length); only the emoji rule, short, is matched leftmost-longest.
The character classes are the `regex` module's Unicode properties, put back to Unicode 9.0
(Lucene's) for the 40 characters Lucene knows whose class changed since, and
Extended_Pictographic is the emoji-data 11.0 table Lucene's grammar includes. Characters
assigned since Unicode 9.0 (new scripts, CJK extensions) make tokens here where Lucene skips
them. tests/test_analysis_lucene.py checks all this against Lucene through the JVM.

Four routes, fastest first, give the same tokens: pure-ASCII text takes one `re` pattern;
text whose other characters Python's Unicode classes put where the grammar does takes its
Unicode form; other text without the characters that need the full grammar (marks, format
characters, Hebrew, katakana, Han, hiragana, South-East Asian scripts, emoji) takes the ASCII
pattern over an ASCII stand-in of each character's class; space-separated stretches with such
characters take every rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import NamedTuple

import regex

MAX_TOKEN_UNITS = 255  # StandardTokenizer.DEFAULT_MAX_TOKEN_LENGTH, in UTF-16 code units

# emoji-data 11.0's Extended_Pictographic (the data Lucene's grammar includes); the `regex`
# module's property misses hundreds of these (e.g. U+2605 BLACK STAR, U+1F000..U+1F0FF).
_EXTENDED_PICTOGRAPHIC = (
    (0xA9, 0xA9), (0xAE, 0xAE), (0x203C, 0x203C), (0x2049, 0x2049), (0x2122, 0x2122),
    (0x2139, 0x2139), (0x2194, 0x2199), (0x21A9, 0x21AA), (0x231A, 0x231B), (0x2328, 0x2328),
    (0x2388, 0x2388), (0x23CF, 0x23CF), (0x23E9, 0x23F3), (0x23F8, 0x23FA), (0x24C2, 0x24C2),
    (0x25AA, 0x25AB), (0x25B6, 0x25B6), (0x25C0, 0x25C0), (0x25FB, 0x25FE), (0x2600, 0x2605),
    (0x2607, 0x2612), (0x2614, 0x2685), (0x2690, 0x2705), (0x2708, 0x2712), (0x2714, 0x2714),
    (0x2716, 0x2716), (0x271D, 0x271D), (0x2721, 0x2721), (0x2728, 0x2728), (0x2733, 0x2734),
    (0x2744, 0x2744), (0x2747, 0x2747), (0x274C, 0x274C), (0x274E, 0x274E), (0x2753, 0x2755),
    (0x2757, 0x2757), (0x2763, 0x2767), (0x2795, 0x2797), (0x27A1, 0x27A1), (0x27B0, 0x27B0),
    (0x27BF, 0x27BF), (0x2934, 0x2935), (0x2B05, 0x2B07), (0x2B1B, 0x2B1C), (0x2B50, 0x2B50),
    (0x2B55, 0x2B55), (0x3030, 0x3030), (0x303D, 0x303D), (0x3297, 0x3297), (0x3299, 0x3299),
    (0x1F000, 0x1F0FF), (0x1F10D, 0x1F10F), (0x1F12F, 0x1F12F), (0x1F16C, 0x1F171),
    (0x1F17E, 0x1F17F), (0x1F18E, 0x1F18E), (0x1F191, 0x1F19A), (0x1F1AD, 0x1F1E5),
    (0x1F201, 0x1F20F), (0x1F21A, 0x1F21A), (0x1F22F, 0x1F22F), (0x1F232, 0x1F23A),
    (0x1F23C, 0x1F23F), (0x1F249, 0x1F3FA), (0x1F400, 0x1F53D), (0x1F546, 0x1F64F),
    (0x1F680, 0x1F6FF), (0x1F774, 0x1F77F), (0x1F7D5, 0x1F7FF), (0x1F80C, 0x1F80F),
    (0x1F848, 0x1F84F), (0x1F85A, 0x1F85F), (0x1F888, 0x1F88F), (0x1F8AE, 0x1F8FF),
    (0x1F90C, 0x1F93A), (0x1F93C, 0x1F945), (0x1F947, 0x1FFFD),
)
_PICTOGRAPHIC = "".join(f"\\U{a:08X}-\\U{b:08X}" for a, b in _EXTENDED_PICTOGRAPHIC)

# Word-break classes (UAX #29) as contents of `regex` sets (V1 syntax), put back to Unicode 9.0
# (Lucene's) for the 40 characters Lucene knows whose classes changed since: tone letters and a
# few marks became letters; prepended concatenation marks became digits or letters (they were
# format characters); New Tai Lue digit one left the South-East Asian class; and two vertical
# presentation forms stopped joining digits.
_PREPENDED_MARKS = r"\u0600-\u0605\u06DD\u070F\u08E2\U000110BD\U000110CD"
_ATTACHED = rf"\p{{WB=Format}}\p{{WB=Extend}}\p{{WB=ZWJ}}{_PREPENDED_MARKS}"  # WB4: absorbed
_LETTER = rf"[\p{{WB=ALetter}}--[\u00B8\u02E5-\u02EB\u055A\u058A\uA708-\uA716{_PREPENDED_MARKS}]]"
_HEBREW = r"\p{WB=Hebrew_Letter}"
_NUMERIC = (rf"[\p{{WB=Numeric}}--[{_PREPENDED_MARKS}\u19DA]]"
            r"[\p{Block=Halfwidth_And_Fullwidth_Forms}&&\p{Nd}]")
_KATAKANA = r"\p{WB=Katakana}"
_CONNECTOR = r"\p{WB=ExtendNumLet}"
_MID_LETTER = r"[\p{WB=MidLetter}--\u055F]\p{WB=MidNumLet}\p{WB=Single_Quote}"
_MID_NUMBER = r"\p{WB=MidNum}\p{WB=MidNumLet}\p{WB=Single_Quote}\uFE10\uFE14"
_SOUTHEAST_ASIAN = r"\p{Line_Break=Complex_Context}\u19DA"
_HAN = r"\p{Script=Han}"
_HIRAGANA = r"\p{Script=Hiragana}"
_REGIONAL = r"\p{WB=Regional_Indicator}"
_KEYCAP_BASE = r"0-9#*"
# Keycap bases, regional indicators, modifiers and ©®™〰〽 are emoji only in sequences.
_EMOJI_RKAM = rf"{_REGIONAL}{_KEYCAP_BASE}\u00A9\u00AE\u2122\u3030\u303D\p{{Emoji_Modifier}}"
_EMOJI_CHAR = rf"{_PICTOGRAPHIC}[\p{{Emoji}}--[{_EMOJI_RKAM}]]"
_TAGS = r"\U000E0020-\U000E007F"
_XS = rf"[{_ATTACHED}]--[\uFE0E\uFE0F]"  # absorbed, emoji presentation selectors aside


def _unit(chars: str, attached: str = _ATTACHED) -> str:
    """One character of the set `chars` with the extending characters it absorbs (WB4)."""
    return f"(?:[{chars}][{attached}]*+)"


def _emoji_unit(chars: str) -> str:
    """As `_unit` for the emoji rule, whose sequences may take back an absorbed ZWJ or mark."""
    return f"(?:[{chars}][{_XS}]*)"


def _compile(pattern: str) -> regex.Pattern:
    return regex.compile(pattern, regex.V1)


# The word rule (UAX #29 WB5-WB13b): letters, digits and katakana with what joins them.
# Katakana joins only katakana directly; letters and digits join each other directly; any
# two join through connectors ("_"); a MidLetter joins two letters, a MidNum two digits; a
# Hebrew letter starting a part may take a following single quote, or a double quote and a
# Hebrew letter. Each alternative is tried so that the greedy match is the longest.
_H, _N = _unit(_HEBREW), _unit(_NUMERIC)
_K, _E = _unit(_KATAKANA), _unit(_CONNECTOR)
_LH = _unit(_LETTER + _HEBREW)
_SQ, _DQ = _unit(r"\p{WB=Single_Quote}"), _unit(r"\p{WB=Double_Quote}")
_HEBREW_QUOTED = rf"{_H}(?:{_SQ}|{_DQ}{_H})"
_LETTERS = rf"{_LH}(?:{_unit(_MID_LETTER)}{_LH})*+"
_NUMBERS = rf"{_N}(?:{_unit(_MID_NUMBER)}{_N})*+"
_PART = rf"(?:{_K}++|(?:{_HEBREW_QUOTED}|{_LETTERS}|{_NUMBERS})++)"
_WORD = rf"{_E}*+{_PART}(?:{_E}++{_PART})*+{_E}*+"

# The emoji rule (UTS #51 emoji_sequence as Lucene's grammar has it); its forms overlap, so
# it is matched leftmost-longest (POSIX), within at most 255 code units.
_ZWJ = r"\p{WB=ZWJ}"
_EMOJI_MODIFIED = _emoji_unit(r"\p{Emoji_Modifier_Base}"), _emoji_unit(r"\p{Emoji_Modifier}")
_EMOJI_ELEMENT = (rf"(?:{_ZWJ}*{_emoji_unit(_EMOJI_CHAR)}\uFE0F?"
                  rf"|(?:{_ZWJ}*{_EMOJI_MODIFIED[0]})?{_EMOJI_MODIFIED[1]})")
_KEYCAP_MARK = _emoji_unit(r"\u20E3")
_KEYCAP = rf"{_emoji_unit(_KEYCAP_BASE)}\uFE0F?{_KEYCAP_MARK}"
_EMOJI = (rf"{_EMOJI_ELEMENT}(?:(?:{_ZWJ}{_EMOJI_ELEMENT})*|[\U000E0020-\U000E007E]+\U000E007F)"
          rf"|{_KEYCAP}|{_unit(_REGIONAL)}{{2}}")

# The other rules in one pattern: their first characters differ, except letters that are Han
# (U+3005 々), where the word rule's match is the longer, so the first alternative that
# matches is the longest. The emoji rule's first characters overlap digits and letters.
_WORDS = _compile(f"{_WORD}|{_unit(_SOUTHEAST_ASIAN)}++|{_unit(_HAN)}|{_unit(_HIRAGANA)}")
_EMOJI_RULE = _compile("(?p)" + _EMOJI)
_EMOJI_START = (f"{_ZWJ}{_EMOJI_CHAR}\\p{{Emoji_Modifier_Base}}\\p{{Emoji_Modifier}}"
                f"{_KEYCAP_BASE}{_REGIONAL}")
# A cheap test first: what follows a run of ZWJs must be able to start an emoji element.
_EMOJI_FIRST = _compile(f"{_ZWJ}*+[{_EMOJI_START}--{_ZWJ}]")
_TOKEN_START = _compile(f"[{_CONNECTOR}{_LETTER}{_HEBREW}{_NUMERIC}{_KATAKANA}{_SOUTHEAST_ASIAN}"
                        f"{_HAN}{_HIRAGANA}{_EMOJI_START}]")

# Without marks, format characters, Hebrew, katakana or emoji the word rule is: letters,
# digits and connectors run together (with at least one letter or digit), a MidLetter joins
# two letters and a MidNum two digits; and the other rules cannot apply.
_NEEDS_FULL_GRAMMAR = (f"{_ATTACHED}{_HEBREW}{_KATAKANA}{_SOUTHEAST_ASIAN}{_HAN}{_HIRAGANA}"
                       f"{_REGIONAL}{_EMOJI_CHAR}\\p{{Emoji_Modifier_Base}}\\p{{Emoji_Modifier}}"
                       f"{_TAGS}")
_SIMPLE_WORD = _compile(
    rf"[{_CONNECTOR}]*+[{_LETTER}{_NUMERIC}]"
    rf"(?:[{_LETTER}{_NUMERIC}{_CONNECTOR}]|(?<=[{_LETTER}])[{_MID_LETTER}](?=[{_LETTER}])"
    rf"|(?<=[{_NUMERIC}])[{_MID_NUMBER}](?=[{_NUMERIC}]))*+"
)

# The simple word rule restricted to ASCII: a, Z, 0 and _ run together; "." and "'" join two
# letters or two digits, ":" two letters, "," and ";" two digits.
ASCII_WORD = re.compile(
    r"_*[A-Za-z0-9]\w*(?:(?:(?<=[A-Za-z])[.':](?=[A-Za-z])|(?<=[0-9])[.,;'](?=[0-9]))\w+)*",
    re.ASCII,
)

# So text beyond ASCII takes ASCII_WORD too, translated character for character to an ASCII
# stand-in of each character's class (the simple rule sees classes only): NUL for a character
# that needs the full grammar, a space for one in no class (never in a token).
_STAND_INS = (
    (_compile(f"[{_NEEDS_FULL_GRAMMAR}]"), "\x00"),
    (_compile(f"[{_LETTER}]"), "a"),
    (_compile(f"[{_NUMERIC}]"), "0"),
    (_compile(f"[{_CONNECTOR}]"), "_"),
    (_compile(f"[[{_MID_LETTER}]&&[{_MID_NUMBER}]]"), "."),
    (_compile(f"[{_MID_LETTER}]"), ":"),
    (_compile(f"[{_MID_NUMBER}]"), ","),
)
_NEEDS_FULL = "\x00"
# A whitespace-free stretch of the translated text holding a character that needs the full grammar.
_FULL_GRAMMAR_CHUNK = re.compile(r"(?<![^ ])[^ \x00]*\x00[^ ]*")


def _stand_in(char: str) -> str:
    """The ASCII stand-in of a character's class (a space if it is in none)."""
    return next((stand_in for pattern, stand_in in _STAND_INS if pattern.match(char)), " ")


class _StandIns(dict):
    """The str.translate table to ASCII stand-ins, filled as characters are met (ASCII is itself)."""

    def __missing__(self, code: int) -> str:
        stand_in = chr(code) if code < 128 else _stand_in(chr(code))
        if len(self) >= 100_000:  # a bound on memory for text of every character
            self.clear()
        self[code] = stand_in
        return stand_in


_TABLE = _StandIns()


def stand_in_code(code: int) -> int:
    """The code of the ASCII stand-in of code point `code` in the view `words` tokenizes beyond
    ASCII (0 for a character that needs the full grammar)."""
    return ord(_TABLE[code])

# Fastest beyond ASCII: Python's own Unicode classes, for text whose every character beyond ASCII
# is one those classes put where the grammar does (Latin, Greek, Cyrillic letters and digits,
# dashes, degree signs...; not ², ½ or ‘, which \w and the grammar see differently).
UNICODE_WORD = re.compile(
    r"_*[^\W_]\w*(?:(?:(?<=[^\W\d_])[.':\u00b7\u2019](?=[^\W\d_])|(?<=\d)[.,;'\u2019](?=\d))\w+)*"
)


def _re_stand_in(char: str) -> str:
    """The ASCII stand-in of the class UNICODE_WORD sees a character beyond ASCII in."""
    if re.match(r"[^\W\d_]", char):
        return "a"
    if re.match(r"\d", char):
        return "0"
    if re.match(r"\w", char):
        return "w"  # a word character that is neither: no stand-in has it
    return {"\u2019": ".", "\u00b7": ":"}.get(char, " ")


class _SameInRe(dict):
    """Whether UNICODE_WORD treats a character beyond ASCII as the grammar does, as they are met."""

    def __missing__(self, char: str) -> bool:
        same = _re_stand_in(char) == _stand_in(char)
        if len(self) >= 100_000:  # a bound on memory for text of every character
            self.clear()
        self[char] = same
        return same


_SAME_IN_RE = _SameInRe()
_BEYOND_ASCII = re.compile(r"[^\x00-\x7f]")


def _simple_match(text: str, start: int, limit: int) -> int:
    """The end of the simple word rule's match at `start` (`start` if none)."""
    match = _SIMPLE_WORD.match(text, start, limit)
    return start if match is None else match.end()


def _full_match(text: str, start: int, limit: int) -> int:
    """The end of the longest match of any rule at `start` (`start` if none matches)."""
    stop = start
    if (match := _WORDS.match(text, start, limit)) is not None:
        stop = match.end()
    if _EMOJI_FIRST.match(text, start, limit) and (match := _EMOJI_RULE.match(text, start, limit)):
        stop = max(stop, match.end())
    return stop


class _Route(NamedTuple):
    """The characters a token may start with, and the end of the longest token at a position."""

    starts: regex.Pattern
    match: Callable[[str, int, int], int]  # (text, start, limit) -> end, or start if no token


_SIMPLE = _Route(_compile(f"[{_CONNECTOR}{_LETTER}{_NUMERIC}]"), _simple_match)
_FULL = _Route(_TOKEN_START, _full_match)


def _window_end(text: str, start: int, end: int) -> int:
    """Where the scanner's 255-unit buffer ends for a token starting at `start` (at most `end`)."""
    stop = min(end, start + MAX_TOKEN_UNITS)
    if max(text[start:stop], default="") <= "\uffff":
        return stop
    stop, units = start, 0
    while stop < end:
        units += 2 if text[stop] > "\uffff" else 1
        if units > MAX_TOKEN_UNITS:
            break
        stop += 1
    return stop


def _too_long(text: str, start: int, stop: int) -> bool:
    """Whether text[start:stop] takes more than 255 UTF-16 code units."""
    if stop - start <= MAX_TOKEN_UNITS // 2:
        return False
    return (stop - start) + sum(c > "\uffff" for c in text[start:stop]) > MAX_TOKEN_UNITS


def _spans_between(text: str, pos: int, end: int, route: _Route) -> Iterator[tuple[int, int]]:
    """Token spans in text[pos:end] as the scanner finds them, at each position that can start a
    token the longest match within its buffer (Lucene's scanner too is as slow as this allows)."""
    starts, match = route
    while (found := starts.search(text, pos, end)) is not None:
        start = found.start()
        stop = match(text, start, min(end, start + MAX_TOKEN_UNITS))  # the buffer ends by then
        if _too_long(text, start, stop):
            stop = match(text, start, _window_end(text, start, end))
        if stop > start:
            yield start, stop
            pos = stop
        else:
            pos = start + 1  # no rule matches here: the scanner skips the character


def _simple_spans(text: str, view: str, pos: int, end: int) -> Iterator[tuple[int, int]]:
    """As `_spans_between` with the simple word rule (on `view`, the translated text), faster while
    no match nears 255 units."""
    for found in ASCII_WORD.finditer(view, pos, end):
        start, stop = found.span()
        if stop - start > MAX_TOKEN_UNITS // 2:
            yield from _spans_between(text, start, end, _SIMPLE)
            return
        yield start, stop


def full_grammar_spans(text: str) -> Iterator[tuple[int, int]]:
    """Token spans by every rule of the grammar, no faster route (what the routes are tested against)."""
    return _spans_between(text, 0, len(text), _FULL)


def word_spans(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each token StandardTokenizer makes of `text`, in order."""
    if text.isascii():
        spans = [m.span() for m in ASCII_WORD.finditer(text)]
        if not any(stop - start > MAX_TOKEN_UNITS for start, stop in spans):
            yield from spans
            return
    view = text.translate(_TABLE)
    pos = 0
    for chunk in _FULL_GRAMMAR_CHUNK.finditer(view):
        yield from _simple_spans(text, view, pos, chunk.start())
        yield from _spans_between(text, chunk.start(), chunk.end(), _FULL)
        pos = chunk.end()
    yield from _simple_spans(text, view, pos, len(text))


def words(text: str) -> list[str]:
    """The tokens StandardTokenizer makes of `text`."""
    if text.isascii():
        tokens, longest = ASCII_WORD.findall(text), MAX_TOKEN_UNITS  # one unit a character
    elif all(_SAME_IN_RE[c] for c in set(_BEYOND_ASCII.findall(text))):
        tokens, longest = UNICODE_WORD.findall(text), MAX_TOKEN_UNITS // 2  # at most two units a character
    else:
        view = text.translate(_TABLE)
        if _NEEDS_FULL in view:
            return [text[start:stop] for start, stop in word_spans(text)]
        tokens = [text[m.start():m.end()] for m in ASCII_WORD.finditer(view)]
        longest = MAX_TOKEN_UNITS // 2  # at most two units a character
    if tokens and max(map(len, tokens)) > longest:
        return [text[start:stop] for start, stop in word_spans(text)]
    return tokens
