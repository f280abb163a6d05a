"""Lucene's own analysis of a text, through the JVM: the reference `retrieval.analysis` is checked
against (its tests and eval/bench_tokenizer.py), one call per text."""

from __future__ import annotations

from typing import Any

from retrieval.lucene import jvm

_TERM = "org.apache.lucene.analysis.tokenattributes.CharTermAttribute"
_TYPE = "org.apache.lucene.analysis.tokenattributes.TypeAttribute"


def _attribute(stream: Any, name: str) -> Any:
    import jnius

    return jnius.cast(name, stream.addAttribute(jvm.autoclass("java.lang.Class").forName(name)))


def _drain(stream: Any, typed: bool) -> list[Any]:
    term = _attribute(stream, _TERM)
    kind = _attribute(stream, _TYPE) if typed else None
    stream.reset()
    out = []
    try:
        while stream.incrementToken():
            out.append((term.toString(), kind.type()) if typed else term.toString())
        stream.end()
    finally:
        stream.close()
    return out


def standard_tokens(text: str) -> list[str]:
    """The tokens of Lucene's StandardTokenizer (default maximum token length 255)."""
    return [token for token, _ in standard_tokens_typed(text)]


def standard_tokens_typed(text: str) -> list[tuple[str, str]]:
    """(token, type) from Lucene's StandardTokenizer, e.g. ("日", "<IDEOGRAPHIC>")."""
    tokenizer = jvm.autoclass("org.apache.lucene.analysis.standard.StandardTokenizer")()
    tokenizer.setReader(jvm.autoclass("java.io.StringReader")(text))
    return _drain(tokenizer, typed=True)


def english_terms(text: str, analyzer: Any = None) -> list[str]:
    """The terms of Anserini's default English analyzer (Lucene's EnglishAnalyzer chain: standard
    tokens, possessives, lower case, Lucene's English stop words, Porter stems)."""
    if analyzer is None:
        analyzer = default_english_analyzer()
    return _drain(analyzer.tokenStream("contents", text), typed=False)


def default_english_analyzer() -> Any:
    """Anserini's DefaultEnglishAnalyzer, as its indexer and searcher use it."""
    return jvm.autoclass("io.anserini.analysis.DefaultEnglishAnalyzer").newDefaultInstance()
