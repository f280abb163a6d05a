"""retrieval.porter gives NLTK's MARTIN_EXTENSIONS Porter stems (the analyzer's terms, hence every index
and run, depend on it). The whole vocabulary of the 1.37M Wikipedia passages was compared offline
(docs/design/index-format.md); here words built to reach every rule and its conditions."""

import random

import pytest

from retrieval.porter import stem

nltk_porter = pytest.importorskip("nltk.stem.porter")

SUFFIXES = [
    "ational", "tional", "enci", "anci", "izer", "bli", "abli", "alli", "entli", "eli", "ousli",
    "ization", "ation", "ator", "alism", "iveness", "fulness", "ousness", "aliti", "iviti", "biliti",
    "logi", "fulli", "icate", "ative", "alize", "iciti", "ical", "ful", "ness", "al", "ance", "ence",
    "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion", "sion", "tion", "ou", "ism",
    "ate", "iti", "ous", "ive", "ize", "eed", "ed", "ing", "sses", "ies", "ied", "ss", "s", "y", "yy",
    "e", "ll", "at", "bl", "iz", "*d", "'",
]
LETTERS = "aeiouyyyssllbcdtnrzgmwx*'éß1"
WORDS = [
    "caresses", "ponies", "ties", "caress", "cats", "feed", "agreed", "plastered", "bled", "motoring",
    "sing", "conflated", "troubled", "sized", "hopping", "tanned", "falling", "hissing", "fizzed",
    "failing", "filing", "happy", "sky", "relational", "conditional", "rational", "valenci",
    "digitizer", "conformabli", "radicalli", "differentli", "vileli", "analogousli", "vietnamization",
    "predication", "operator", "feudalism", "decisiveness", "hopefulness", "callousness", "formaliti",
    "sensitiviti", "sensibiliti", "triplicate", "formative", "formalize", "electriciti", "electrical",
    "hopeful", "goodness", "revival", "allowance", "inference", "airliner", "gyroscopic", "adjustable",
    "defensible", "irritant", "replacement", "adjustment", "dependent", "adoption", "homologou",
    "communism", "activate", "angulariti", "homologous", "effective", "bowdlerize", "probate", "rate",
    "cease", "controll", "roll", "technology", "analogi", "yyyyyy", "syzygy", "toy", "eyed", "yying",
    "bed", "ies", "ied", "sses", "dying", "lying", "news", "innings", "proceed", "exceed", "a*d",
    "ba*ded", "naïve", "café", "über", "ωmega", "straße", "computers", "running", "generalizations",
    "oscillators", "ab", "yyyy", "controlling",
]


def generated(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        base = "".join(rng.choice(LETTERS) for _ in range(rng.randint(0, 6)))
        out.append(base + "".join(rng.choice(SUFFIXES) for _ in range(rng.randint(0, 3))))
    return [w for w in out if w]


def test_stems_are_nltks_martin_extensions_stems():
    porter = nltk_porter.PorterStemmer(mode=nltk_porter.PorterStemmer.MARTIN_EXTENSIONS)
    words = WORDS + generated(40_000)
    differ = [(w, porter.stem(w, to_lowercase=False), stem(w)) for w in words
              if porter.stem(w, to_lowercase=False) != stem(w)]
    assert differ == []


def test_known_stems():
    assert [stem(w) for w in ("technology", "computers", "running", "generalizations", "oscillators",
                              "ab", "yyyy", "controlling")] == [
        "technolog", "comput", "run", "gener", "oscil", "ab", "yyyi", "control"]


def test_compiled_stems_are_the_stems():
    """retrieval.porter_compiled gives `stem` of each word: ASCII words in one compiled pass, a list
    with a word beyond ASCII or a "*" one at a time."""
    from retrieval.porter_compiled import stems

    words = WORDS + generated(40_000, seed=1)
    simple = [w for w in words if w.isascii() and "*" not in w]
    assert len(simple) > 10_000 and stems(simple) == [stem(w) for w in simple]
    assert stems(words) == [stem(w) for w in words]
    assert stems([]) == [] and stems(["a", "is", "ponies"]) == ["a", "is", "poni"]
