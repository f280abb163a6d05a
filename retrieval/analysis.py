"""Text analysis compatible with Lucene's EnglishAnalyzer as Anserini uses it.

StandardTokenizer (Unicode word boundaries, approximated by one regex) ->
EnglishPossessiveFilter -> LowerCaseFilter -> StopFilter (Lucene's English
stop set) -> PorterStemFilter. Stemming uses NLTK's Porter in
MARTIN_EXTENSIONS mode, which follows Porter's reference code as Lucene does
(e.g. technology -> technolog); it is slow per call, so each distinct token
is analysed once and cached.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import signal
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any, TypeVar

# org.apache.lucene.analysis.en.EnglishAnalyzer.ENGLISH_STOP_WORDS_SET
LUCENE_ENGLISH_STOPWORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
))

# Unicode word-boundary rules (UAX #29) as StandardTokenizer applies them to
# Latin text: letters, digits and underscores run together; "." and
# apostrophes join letter-letter and digit-digit; ":" joins letters; "," and
# ";" join digits. So "e.g." -> "e.g", "3.14" -> "3.14", "x-ray" -> x, ray.
_LETTER = r"[^\W\d_]"
_TOKEN = re.compile(
    rf"\w+(?:(?:(?<={_LETTER})[.'\u2019:\u00b7](?={_LETTER})|(?<=\d)[.,;'\u2019](?=\d))\w+)*"
)
_HAS_ALNUM = re.compile(r"[^\W_]")
MAX_TOKEN_LENGTH = 255  # StandardTokenizer splits longer tokens


def tokenize(text: str) -> list[str]:
    """Split text into word tokens the way Lucene's StandardTokenizer does for Latin text."""
    return _TOKEN.findall(text)


def token_spans(text: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, token) of each word token, as `tokenize` splits (for highlighting)."""
    for match in _TOKEN.finditer(text):
        yield match.start(), match.end(), match.group()


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
        from nltk.stem.porter import PorterStemmer  # imported here: NLTK is slow to import

        self._porter = PorterStemmer(mode=PorterStemmer.MARTIN_EXTENSIONS)
        self._cache: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    @property
    def settings(self) -> dict[str, Any]:
        """What the manifest records, so query and index analysis can be checked to agree."""
        return {"name": "lucene-english", "stopwords": "lucene-english" if self.stopwords else None,
                "stemmer": self.stemmer, "version": 1}

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> Analyzer:
        """Rebuild the analyzer an index was built with."""
        return cls(stopwords=settings.get("stopwords") is not None, stemmer=settings.get("stemmer"))

    def _analyze_token(self, token: str) -> list[str]:
        if not _HAS_ALNUM.search(token):
            return []
        pieces = [token[i:i + MAX_TOKEN_LENGTH] for i in range(0, len(token), MAX_TOKEN_LENGTH)]
        terms = []
        for piece in pieces:
            if len(piece) >= 2 and piece[-1] in "sS" and piece[-2] in "'\u2019\uff07":
                piece = piece[:-2]  # EnglishPossessiveFilter
            piece = piece.lower()
            if not piece or piece in self.stopwords:
                continue
            if self.stemmer == "porter":
                piece = self._porter.stem(piece, to_lowercase=False)
            terms.append(piece)
        return terms

    def __call__(self, text: str) -> list[str]:
        """The index terms of `text`, in order."""
        cache = self._cache
        out: list[str] = []
        for token in _TOKEN.findall(text):
            terms = cache.get(token)
            if terms is None:
                terms = self._analyze_token(token)
                with self._lock:
                    cache[token] = terms
            out.extend(terms)
        return out


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
    ctx.set_forkserver_preload([__name__, "nltk.stem.porter"])
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
    ctx = worker_context()
    with workers_ignore_interrupts():
        pool = ctx.Pool(workers, _init_worker, (analyzer.settings,))
    with pool:
        pending: deque = deque()
        iterator = iter(items)
        while chunk := list(islice(iterator, batch)):
            pending.append((chunk, pool.apply_async(_analyse_batch, ([text_of(i) for i in chunk],))))
            if len(pending) > 2 * workers:
                done, result = pending.popleft()
                yield from zip(done, result.get())
        while pending:
            done, result = pending.popleft()
            yield from zip(done, result.get())
