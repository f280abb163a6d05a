from retrieval.analysis import LUCENE_ENGLISH_STOPWORDS, Analyzer, tokenize


def test_tokenizer_follows_word_boundary_rules():
    text = "The U.S.A. e.g. 3.14 1,000 x-ray don't 8:30 CA581201 foo_bar"
    assert tokenize(text) == ["The", "U.S.A", "e.g", "3.14", "1,000", "x", "ray", "don't",
                              "8", "30", "CA581201", "foo_bar"]


def test_lucene_english_stop_set_has_33_words():
    assert len(LUCENE_ENGLISH_STOPWORDS) == 33
    assert {"the", "with", "into"} <= LUCENE_ENGLISH_STOPWORDS
    assert "what" not in LUCENE_ENGLISH_STOPWORDS


def test_analyzer_possessive_stop_lower_and_porter_as_lucene():
    analyze = Analyzer()
    assert analyze("The system's Computers and technology") == ["system", "comput", "technolog"]
    assert analyze("as is") == []  # stopwords only
    assert analyze("ab") == ["ab"]  # 2-character terms are not stemmed away


def test_analyzer_options_and_settings_round_trip():
    plain = Analyzer(stopwords=False, stemmer=None)
    assert plain("The Cats") == ["the", "cats"]
    assert Analyzer.from_settings(plain.settings).settings == plain.settings
    assert Analyzer.from_settings(Analyzer().settings)("cats") == ["cat"]


def test_punctuation_only_and_long_tokens():
    analyze = Analyzer()
    assert analyze("... --- !!! ___") == []
    assert [len(t) for t in analyze("a" * 600)] == [255, 255, 90]


def test_tokens_not_ending_in_a_letter_are_their_own_porter_stem():
    """The analyzer skips the stemmer for tokens whose last character is not a-z (numbers, other
    scripts): Porter (MARTIN_EXTENSIONS) leaves each of them unchanged, so terms are the same."""
    from nltk.stem.porter import PorterStemmer

    porter = PorterStemmer(mode=PorterStemmer.MARTIN_EXTENSIONS)
    tokens = ["1987", "3,000", "x86", "ies1", "running1", "généralé", "café", "naïve2", "sses9", "ly_",
              "ational0", "ωμέγα", "données", "b2b", "covid-19", "e", "ll"]
    analyzer = Analyzer()
    for token in tokens:
        assert analyzer.term(token) == (porter.stem(token, to_lowercase=False) if token not in
                                        analyzer.stopwords else "")
    assert analyzer("Running cafés in 1987 and 3,000 x86 boxes") == ["run", "café", "1987", "3,000", "x86",
                                                                      "box"]


def test_indexing_and_searching_need_no_nltk(tmp_path):
    """NLTK is a test and bench extra only (the reference for our Porter stemmer): the core runs
    without it. A child process with `nltk` made unimportable indexes and searches a tiny collection."""
    import json
    import subprocess
    import sys

    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"id": f"d{i}", "contents": text}) + "\n"
                            for i, text in enumerate(["Running cats", "dogs running fast", "cats and dogs"])))
    topics = tmp_path / "topics.tsv"
    topics.write_text("1\tcat\n")
    code = ("import sys; sys.modules['nltk'] = None\n"
            "from retrieval.cli import main\n"
            f"main(['index', '--collection', {str(docs)!r}, '--index', {str(tmp_path / 'i')!r}])\n"
            f"main(['search', '--index', {str(tmp_path / 'i')!r}, '--topics', {str(topics)!r},"
            f" '--output', {str(tmp_path / 'run.txt')!r}])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert [line.split()[2] for line in (tmp_path / "run.txt").read_text().splitlines()] == ["d0", "d2"]
