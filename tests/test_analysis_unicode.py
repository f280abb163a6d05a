"""Unicode word segmentation as Lucene's StandardTokenizer does it (issue 54), without a JVM.

tests/lucene_analysis.json holds a multilingual sample with the tokens, token types and English
terms Lucene 9.9 gives (written by `python eval/bench_tokenizer.py --record ...`);
tests/test_analysis_lucene.py checks that file against the live JVM and the tokenizer against it
on random text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval.analysis import Analyzer, java_lower, token_spans, tokenize
from retrieval.cli import main
from retrieval.service.engine import highlight
from retrieval.word_breaks import _SAME_IN_RE, ASCII_WORD, full_grammar_spans, word_spans, words

LUCENE = json.loads((Path(__file__).parent / "lucene_analysis.json").read_text())["cases"]


@pytest.mark.parametrize("case", list(LUCENE))
def test_tokens_and_terms_equal_lucenes_on_the_multilingual_sample(case):
    expected = LUCENE[case]
    assert tokenize(expected["text"]) == expected["tokens"]
    assert Analyzer()(expected["text"]) == expected["terms"]


def test_the_issues_examples():
    assert tokenize("हिन्दी") == ["हिन्दी"]  # combining marks stay in the word (was ह, न, द)
    assert tokenize("日本語のテキスト検索") == ["日", "本", "語", "の", "テキスト", "検", "索"]
    assert LUCENE["japanese"]["tokens"][:7] == ["日", "本", "語", "の", "テキスト", "検", "索"]
    assert set(Analyzer()("हाथ नदी")).isdisjoint(Analyzer()("हिन्दी"))


def test_scripts_without_word_spaces_and_emoji():
    assert tokenize("ภาษาไทยง่าย คำ") == ["ภาษาไทยง่าย", "คำ"]  # a Thai run is one token
    assert tokenize("한국어 텍스트") == ["한국어", "텍스트"]
    assert tokenize("👩\u200d❤\ufe0f\u200d💋\u200d👨 🇺🇸🇬") == ["👩\u200d❤\ufe0f\u200d💋\u200d👨", "🇺🇸"]
    assert tokenize("x² ½ H₂O") == ["x", "H", "O"]  # superscripts and fractions are not word characters


def test_lower_case_is_javas_one_character_at_a_time():
    assert java_lower("ΟΔΟΣ") == "οδοσ"  # not the final sigma str.lower gives
    assert java_lower("İSTANBUL") == "istanbul"  # one character for one
    assert Analyzer(stopwords=False, stemmer=None)("ΟΔΟΣ İstanbul Straße") == ["οδοσ", "istanbul", "straße"]


def test_tokens_stop_at_the_scanners_255_unit_buffer():
    assert [len(t) for t in tokenize("a" * 600)] == [255, 255, 90]
    assert tokenize("a" * 254 + ".b") == ["a" * 254, "b"]  # "." cannot end a token: cut before it
    assert tokenize("_" * 300 + "a") == ["_" * 254 + "a"]  # no token fits until the buffer holds "a"
    assert [len(t) for t in tokenize("\U0001D400" * 140)] == [127, 13]  # 2 UTF-16 units each
    assert [len(t) for t in Analyzer()("a" * 600)] == [255, 255, 90]


# Characters of every word-break class and of every route, whitespace included.
_ALPHABET = sorted(set(
    "aZé9_.,;:'\"’·-@/\u00ad\u0301\u093f\u200b\u200c\u200d\ufe0f\ufe0e\u20e3\u3005\u3099"
    "Ωяبकאבアｱーカのひ日本ก\u0e31ຮ\u1780한ᄀ１٣😀👍\U0001F3FD❤©™Ⓜ#*\U0001F1FA\U0001F1F8"
    "\U000E0067\U000E007F\U0001D400\U00020000\u0600\u19da\ufe10\u055f\u00b8²½"
    + "".join(regex.findall(r"\s", "".join(map(chr, range(0x3001)))))
))
TEXT = st.text(alphabet=_ALPHABET, max_size=40)
ASCII = st.text(alphabet=[chr(c) for c in range(128)], max_size=60)
SIMPLE = st.text(alphabet=list("aZé9Ωяب_.,;:'’·-@/ \u00a0\n²½ӧ‘‿"), max_size=60)
LATIN = st.text(alphabet=list("aZé9Ωяبµ٣_.,;:'’·–°@/ \u00a0\n"), max_size=60)  # the Unicode route's


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(TEXT, ASCII, SIMPLE, LATIN))
def test_faster_routes_equal_the_full_grammar(text):
    """ASCII, Python's Unicode classes, ASCII stand-ins of classes and space-separated stretches
    all give what every rule of the grammar gives on the whole text."""
    spans = list(full_grammar_spans(text))
    assert list(word_spans(text)) == spans
    assert words(text) == [text[a:b] for a, b in spans]


def test_characters_the_unicode_route_takes_act_as_in_the_grammar():
    """Every character of the Basic Multilingual Plane that UNICODE_WORD is trusted with."""
    trusted = [chr(c) for c in range(0x80, 0x10000)
               if not 0xD800 <= c <= 0xDFFF and _SAME_IN_RE[chr(c)]]
    assert len(trusted) > 20000 and "é" in trusted and "²" not in trusted and "\u2018" not in trusted
    for c in trusted:
        text = f"a{c}a 1{c}1 {c} {c}{c} _{c}_ a.{c} {c}.a 1.{c} {c}'b"
        assert words(text) == [text[a:b] for a, b in full_grammar_spans(text)], hex(ord(c))


@settings(max_examples=300, deadline=None)
@given(st.one_of(TEXT, ASCII))
def test_token_spans_are_the_tokens_in_order(text):
    spans = list(token_spans(text))
    assert [t for _, _, t in spans] == tokenize(text)
    assert all(text[a:b] == t for a, b, t in spans)
    assert all(b1 <= a2 for (_, b1, _), (a2, _, _) in zip(spans, spans[1:]))


@settings(max_examples=300, deadline=None)
@given(ASCII)
def test_ascii_route_is_the_tokenizer_before_issue_54_without_underscore_only_tokens(text):
    """English text tokenizes as it did: the old regex, less tokens of underscores alone (which
    analysed to nothing), as long as no token passes 255 characters."""
    letter = r"[^\W\d_]"
    joined = rf"(?<={letter})[.'\u2019:\u00b7](?={letter})|(?<=\d)[.,;'\u2019](?=\d)"
    old = regex.findall(rf"\w+(?:(?:{joined})\w+)*", text)
    assert ASCII_WORD.findall(text) == [t for t in old if t.strip("_")]


def test_highlight_marks_whole_words_in_any_script():
    text = "यह हिन्दी पाठ है और हाथ नदी नहीं"
    snippet, marks = highlight(text, "हिन्दी", Analyzer())
    assert [snippet[a:b] for a, b in marks] == ["हिन्दी"]
    snippet, marks = highlight("日本語のテキスト検索です", "検索", Analyzer())
    assert [snippet[a:b] for a, b in marks] == ["検", "索"]


def test_search_finds_hindi_japanese_and_thai_documents(tmp_path):
    docs = {"hi": "हिन्दी भाषा का पाठ", "decoy": "हाथ नदी के पास", "ja": "日本語のテキスト検索",
            "ja2": "東京の天気予報", "th": "ภาษาไทยง่าย", "en": "English text about retrieval"}
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": i, "text": t}, ensure_ascii=False) + "\n"
                              for i, t in docs.items()), encoding="utf-8")
    topics = tmp_path / "topics.tsv"
    topics.write_text("1\t検索\n2\tहिन्दी\n3\tภาษาไทยง่าย\n", encoding="utf-8")
    assert main(["index", "--collection", str(corpus), "--index", str(tmp_path / "idx")]) == 0
    assert main(["search", "--index", str(tmp_path / "idx"), "--topics", str(topics),
                 "--output", str(tmp_path / "run")]) == 0
    ranked: dict[str, list[str]] = {}
    for line in (tmp_path / "run").read_text().splitlines():
        ranked.setdefault(line.split()[0], []).append(line.split()[2])
    assert ranked == {"1": ["ja"], "2": ["hi"], "3": ["th"]}  # the decoy shares no term with हिन्दी
