"""Text analysis compatible with Lucene's EnglishAnalyzer as Anserini uses it.

StandardTokenizer (Unicode word boundaries, UAX #29, in `retrieval.word_breaks`) ->
EnglishPossessiveFilter -> LowerCaseFilter (Java's per-character lower case) ->
StopFilter (Lucene's English stop set) -> PorterStemFilter. Stemming gives the stems of NLTK's
Porter in MARTIN_EXTENSIONS mode, which follows Porter's reference code as Lucene does
(e.g. technology -> technolog), through `retrieval.porter` (the same stems, several times
faster); each distinct token is analysed once and cached.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any, TypeVar

from retrieval.porter import stem as porter_stem
from retrieval.word_breaks import word_spans, words

# org.apache.lucene.analysis.en.EnglishAnalyzer.ENGLISH_STOP_WORDS_SET
LUCENE_ENGLISH_STOPWORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
))
_SINGLE_LOWER = {"\u0130": "i"}  # the one character whose full lower case is two characters


def tokenize(text: str) -> list[str]:
    """Split text into word tokens as Lucene's StandardTokenizer does (UAX #29 word boundaries)."""
    return words(text)


def token_spans(text: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, token) of each word token, as `tokenize` splits (for highlighting)."""
    for start, end in word_spans(text):
        yield start, end, text[start:end]


def java_lower(token: str) -> str:
    """Lower case one character at a time as Java's Character.toLowerCase (Lucene's LowerCaseFilter):
    no context (a final capital sigma gives σ, not ς) and one character for one (İ gives i)."""
    if token.isascii():
        return token.lower()
    return "".join(_lower_char(c) for c in token)


def _lower_char(c: str) -> str:
    lower = c.lower()
    return lower if len(lower) == 1 else _SINGLE_LOWER.get(c, c)


STEMMERS = (None, "porter")
STOPWORD_SETS = (None, "lucene-english")


def settings_problem(settings: Any) -> str | None:
    """Why `settings` (a manifest's analyzer entry) are not ones `Analyzer.settings` writes, or None."""
    if not isinstance(settings, dict):
        return "must be an object"
    for key, known in (("stemmer", STEMMERS), ("stopwords", STOPWORD_SETS)):
        if settings.get(key) not in known:
            return f"{key} {settings.get(key)!r} is unknown (expected one of {', '.join(map(repr, known))})"
    return None


class Analyzer:
    """Turns text into index terms; one instance caches the analysis of each distinct token."""

    def __init__(self, stopwords: bool = True, stemmer: str | None = "porter"):
        if stemmer not in STEMMERS:
            raise ValueError(f"unknown stemmer {stemmer!r}; expected 'porter' or None")
        self.stopwords = LUCENE_ENGLISH_STOPWORDS if stopwords else frozenset()
        self.stemmer = stemmer
        self._lock = threading.Lock()
        self._stems: dict[str, str] = {}  # lower-cased token -> its stem
        self._term_of = _TermCache(self)

    @property
    def settings(self) -> dict[str, Any]:
        """What the manifest records, so query and index analysis can be checked to agree."""
        return {"name": "lucene-english", "stopwords": "lucene-english" if self.stopwords else None,
                "stemmer": self.stemmer, "version": 2}  # 2: every script (issue 54); 1 split Latin only

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> Analyzer:
        """Rebuild the analyzer an index was built with."""
        return cls(stopwords=settings.get("stopwords") is not None, stemmer=settings.get("stemmer"))

    def analyse_token(self, token: str) -> str:
        """The index term of one word token ("" for none: a stopword), as `term` gives, without
        caching it by token (stems are cached by lower-cased token): for a builder, which maps each
        distinct token to a term id in its own table."""
        return self.analyse_tokens([token])[0]

    def analyse_tokens(self, tokens: list[str]) -> list[str]:
        """`analyse_token` of each token, in one loop (a builder's batch of tokens it has not met):
        possessive dropped, lower case, stopwords to "", Porter for tokens ending in a-z (every rule's
        suffix ends in a letter a-z: other tokens, numbers..., are their own stem), stems cached by
        lower-cased token so tokens that differ only in case share one; the ASCII tokens not stemmed
        before are stemmed together at the end (compiled when they are many)."""
        stopwords, stems, porter = self.stopwords, self._stems, self.stemmer == "porter"
        out = []
        append = out.append
        unstemmed: dict[str, list[int]] = {}  # ASCII token not stemmed yet -> where it goes in `out`
        for token in tokens:
            if len(token) >= 2 and token[-1] in "sS" and token[-2] in "'\u2019\uff07":
                token = token[:-2]  # EnglishPossessiveFilter
            ascii_token = token.isascii()
            token = token.lower() if ascii_token else java_lower(token)
            if not token or token in stopwords:
                append("")
            elif porter and "a" <= token[-1] <= "z":
                stem = stems.get(token)
                if stem is None:
                    if ascii_token:
                        unstemmed.setdefault(token, []).append(len(out))
                        append("")
                        continue
                    stem = stems[token] = porter_stem(token)
                append(stem)
            else:
                append(token)
        if unstemmed:
            words = list(unstemmed)
            for word, stem in zip(words, _stem_all(words)):
                stems[word] = stem
                for i in unstemmed[word]:
                    out[i] = stem
        return out

    def __call__(self, text: str) -> list[str]:
        """The index terms of `text`, in order."""
        return list(filter(None, map(self._term_of.__getitem__, words(text))))

    def tokens(self, text: str) -> list[str]:
        """The word tokens of `text` before analysis: `term` of each, dropping "", gives `self(text)`
        (a builder maps each distinct token to a term id once, rather than each term of each text)."""
        return words(text)

    def term(self, token: str) -> str:
        """The index term of one word token ("" for none: a stopword)."""
        return self._term_of[token]


COMPILED_STEMS = 4  # words at a time from which the compiled stemmer is used (faster from 4; it loads numba)


def _stem_all(words: list[str]) -> list[str]:
    """Porter stems of ASCII words: compiled for many (retrieval.porter_compiled), else one at a time."""
    if len(words) < COMPILED_STEMS:
        return list(map(porter_stem, words))
    from retrieval.porter_compiled import stems

    return stems(words)


class _TermCache(dict):
    """Token -> its index term ("" for none: a stopword), each distinct token analysed once; looked
    up through dict's own __getitem__, so a known token costs no Python frame."""

    def __init__(self, analyzer: Analyzer):
        super().__init__()
        self.analyzer = analyzer

    def __missing__(self, token: str) -> str:
        term = self.analyzer.analyse_token(token)
        with self.analyzer._lock:
            self[token] = term
        return term


T = TypeVar("T")
_worker_analyzer: Analyzer | None = None


def ignore_interrupts() -> None:
    """In a worker process: leave Ctrl-C to the parent, which stops the pool and cleans up (a worker
    interrupted while holding the pool's queue lock would hang the parent's shutdown)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def workers_ignore_interrupts() -> Iterator[None]:
    """Start worker processes (and the fork server, which would print a traceback if Ctrl-C came while
    it imports its modules) with Ctrl-C ignored: they inherit that; the parent's own handling resumes
    right after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _init_worker(settings: dict[str, Any]) -> None:
    global _worker_analyzer
    ignore_interrupts()
    _worker_analyzer = Analyzer.from_settings(settings)


def _analyse_batch(texts: list[str]) -> list[list[str]]:
    return [_worker_analyzer(t) for t in texts]


def available_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def worker_context() -> multiprocessing.context.BaseContext:
    """Workers fork from a clean single-threaded server that has this module imported: cheap
    to start, unlike "spawn", and safe, unlike plain "fork" (forking a process whose torch /
    ONNX Runtime / OpenMP threads hold locks can deadlock the child)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


def analyse_all(items: Iterable[T], text_of, analyzer: Analyzer, workers: int = 1,
                batch: int = 256) -> Iterator[tuple[T, list[str]]]:
    """(item, terms of text_of(item)) for every item, in order; `workers` > 1 analyses
    in that many processes (results are identical, only faster on several cores)."""
    workers = min(workers, available_cpus())  # more processes than CPUs only add start-up cost
    if workers <= 1:
        for item in items:
            yield item, analyzer(text_of(item))
        return
    iterator = iter(items)
    chunks = iter(lambda: list(islice(iterator, batch)), [])
    for chunk, result in in_processes(((chunk, [text_of(i) for i in chunk]) for chunk in chunks),
                                      _analyse_batch, _init_worker, (analyzer.settings,), workers):
        yield from zip(chunk, result)


def in_processes(jobs: Iterable[tuple[T, Any]], work, init, initargs: tuple, workers: int,
                 ahead: int | None = None) -> Iterator[tuple[T, Any]]:
    """(key, work(argument)) for each (key, argument) of `jobs`, in order, computed in `workers`
    processes started with `init(*initargs)` (which should call `ignore_interrupts`); at most
    `ahead` jobs (default 2 * workers) are in flight. A worker takes its jobs in the order given,
    so state it keeps from one job to the next sees them in that order."""
    ahead = 2 * workers if ahead is None else ahead
    ctx = worker_context()
    with workers_ignore_interrupts():
        pool = ctx.Pool(workers, init, initargs)
    with pool:
        pending: deque = deque()
        for key, argument in jobs:
            pending.append((key, pool.apply_async(work, (argument,))))
            if len(pending) > ahead:
                done, result = pending.popleft()
                yield done, result.get()
        while pending:
            done, result = pending.popleft()
            yield done, result.get()
