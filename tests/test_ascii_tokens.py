"""The compiled ASCII path of a build (index/ascii_tokens.py) finds the tokens word_breaks finds and gives
them the term ids the Python path gives; an index built through it is the one built through tokens."""

import random

import numpy as np

from retrieval.analysis import Analyzer
from retrieval.index.ascii_tokens import AsciiTokenTable, UnicodeTokenTable, _tokens
from retrieval.index.postings import InvertedIndexBuilder, _Vocabulary
from retrieval.word_breaks import ASCII_WORD, MAX_TOKEN_UNITS, words

ALPHABET = "abZ09_.':,;- \n'x"


def kernel_tokens(text: str) -> list[str] | None:
    data = np.frombuffer(text.encode("ascii"), np.uint8)
    starts, ends = np.zeros(len(data) + 1, np.int64), np.zeros(len(data) + 1, np.int64)
    count = _tokens(data, MAX_TOKEN_UNITS, starts, ends)
    return None if count < 0 else [text[a:b] for a, b in zip(starts[:count], ends[:count])]


def test_tokens_are_the_regular_expressions():
    rng = random.Random(7)
    texts = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 40))) for _ in range(20_000)]
    texts += ["U.S.A. e.g. 3.14 1,000 x-ray don't 8:30 CA581201 foo_bar __ _a a_ 1;2 a:b 1:2 a.1 a'b'c",
              "__", "_", "'a'", "a..b", "1..2", "a.", ".a"]
    for text in texts:
        assert kernel_tokens(text) == ASCII_WORD.findall(text) == words(text), text


def test_a_token_longer_than_lucenes_buffer_is_left_to_the_tokenizer():
    assert kernel_tokens("a" * 300) is None
    assert kernel_tokens("x " + "_" * 300 + "b") is None
    assert kernel_tokens("a" * MAX_TOKEN_UNITS) == ["a" * MAX_TOKEN_UNITS]
    builder = InvertedIndexBuilder(term_of=Analyzer().analyse_token)
    builder.add_text("b " + "a" * 300, Analyzer().tokens)
    assert builder.documents == 1 and list(builder._tokens)[1:] == [1, 2]  # cut as StandardTokenizer


def test_term_ids_are_the_python_paths():
    analyzer = Analyzer()
    rng = random.Random(3)
    vocab = ["The", "the", "Running", "runs", "cats'", "system's", "3.14", "a", "is", "U.S", "x86", "__z"]
    texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 12))) for _ in range(500)]
    table = AsciiTokenTable(analyzer.analyse_token, vocabulary := _Vocabulary())
    table._room(1)
    for text in texts:  # small arrays at first: every growth and rehash is met
        got = np.frombuffer(table.term_ids(text), np.int32).tolist()
        terms = [analyzer.analyse_token(t) for t in words(text)]
        assert got == [vocabulary[t] if t else -1 for t in terms]


# Beyond ASCII: letters, digits, joiners of either class (’ · ‘ ٫), connectors, separators, and
# characters that need the full grammar (Han, katakana, marks, emoji, Hebrew) or whose classes \w sees
# otherwise (² ½).
UNICODE = "aZ09_.':,; -éΩЖß’·‘٫‿–—“”°×²½漢カ\u0301\u200d😀א\u00a0\x00"


def test_unicode_term_ids_are_the_python_paths():
    analyzer = Analyzer()
    rng = random.Random(11)
    texts = ["".join(rng.choice(UNICODE) for _ in range(rng.randint(1, 40))) for _ in range(20_000)]
    texts += ["café naïve Ωmega’s 1٫5 don’t a·b 3–4 ½ x²", "é" * 127, "é" * 128, "\ud800 a", "é " + "b" * 300]
    table = UnicodeTokenTable(analyzer.analyse_token, vocabulary := _Vocabulary())
    table._room(1)
    taken = 0
    for text in texts:  # small arrays at first: every growth and rehash is met
        ids = table.term_ids(text)
        if ids is None:
            continue
        taken += 1
        terms = [analyzer.analyse_token(t) for t in words(text)]
        assert np.frombuffer(ids, np.int32).tolist() == [vocabulary[t] if t else -1 for t in terms], text
    assert 1000 < taken < len(texts)  # some texts are left to the tokenizer's full grammar
    assert table.term_ids("é" * 128) is None and table.term_ids("\ud800 a") is None
    assert table.term_ids("漢字") is None and table.term_ids("a\x00b") is None


def test_index_through_text_equals_index_through_tokens(tmp_path):
    analyzer = Analyzer()
    rng = random.Random(5)
    pool = ["alpha", "Beta", "gamma's", "café", "naïve", "1,000", "the", "DELTA", "Ωmega", "e.g", "x_y",
            "Ωmega’s", "漢字", "–", "ÉTÉ", "internationalization", "INTERNATIONALIZATIONS",
            "Ωmegaωmegaωmegaωmega", "a" * 300]  # past a slot's 16 inline units; past Lucene's buffer
    texts = [" ".join(rng.choice(pool) for _ in range(rng.randint(1, 30))) for _ in range(300)]
    texts[10:20] = ["" for _ in range(10)]  # no tokens at all
    built = []

    def batches(builder, texts):
        for i in range(0, len(texts), 7):
            builder.add_texts(texts[i:i + 7], analyzer.tokens)

    for name, add_all in (("text", lambda b, ts: [b.add_text(t, analyzer.tokens) for t in ts]),
                          ("tokens", lambda b, ts: [b.add_tokens(analyzer.tokens(t)) for t in ts]),
                          ("texts", batches)):
        builder = InvertedIndexBuilder(tmp_path / f"spill-{name}", run_postings=700,
                                       term_of=analyzer.analyse_token,
                                       terms_of=analyzer.analyse_tokens if name == "texts" else None)
        add_all(builder, texts)
        stats = builder.write(tmp_path / name)
        built.append((stats, {f: (tmp_path / name / f).read_bytes() for f in
                              ("docnos.npy", "tfs.npy", "indptr.npy", "doc_lengths.npy", "terms_utf8.npy")}))
    assert built[0] == built[1] == built[2]


def test_analyse_tokens_is_analyse_token_of_each():
    tokens = ["The", "the", "cats'", "system's", "SYSTEM’S", "runs", "3.14", "ÉTÉ", "Ωmega’s", "is", "s",
              "'s", "Running", "x86", "Cats", "cats", "generalizations", "a*d", "naïve"]  # "cats" twice
    assert Analyzer().analyse_tokens(tokens) == [Analyzer().analyse_token(t) for t in tokens]
    plain = Analyzer(stopwords=False, stemmer=None)
    assert plain.analyse_tokens(tokens) == [plain.analyse_token(t) for t in tokens]
