"""The inverted index: postings by term, term statistics, document lengths.

Files (all .npy, memory-mapped on load, never pickled):
  terms_utf8.npy / terms_offsets.npy  the sorted vocabulary as one UTF-8 blob
  indptr.npy        postings of term t are [indptr[t], indptr[t+1]) (so df = diff)
  block_*.npy       the postings packed in blocks of 128: docno gaps and term
                    frequencies bit-packed (index/blocks.py)
  doc_lengths.npy   terms per document (int32, after analysis)

Indexes built before the packed layout hold the postings as plain arrays
instead (docnos.npy, int32, ascending within a term; tfs.npy, int32); both
open. `docnos` and `tfs` give the flat arrays either way (decoded into
memory on first use for a packed index); the compiled searcher reads the
blocks.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from numba import njit

from retrieval.errors import InputError
from retrieval.index.ascii_tokens import AsciiTokenTable, UnicodeTokenTable
from retrieval.index.blocks import Blocks, pack_postings, unpack_postings, verify_postings
from retrieval.storage import load_array, new_array, release_pages, save_array

CHECK_POSTINGS = 1 << 22  # postings checked at a time when an index is opened (bounded memory)


def term_ranges(indptr: np.ndarray, postings: int) -> list[tuple[int, int]]:
    """Term ranges [lo, hi) of about `postings` postings each (a term is never split), covering every
    term of the CSR offsets `indptr`: how passes over all postings keep their memory bounded."""
    terms = len(indptr) - 1
    bounds = [0]
    while bounds[-1] < terms:
        lo = bounds[-1]
        hi = int(np.searchsorted(indptr, indptr[lo] + postings, side="right")) - 1
        bounds.append(min(max(hi, lo + 1), terms))
    return list(zip(bounds[:-1], bounds[1:]))


class _Vocabulary(dict):
    """Term -> term id, a new term getting the next id when first looked up."""

    def __missing__(self, term: str) -> int:
        self[term] = n = len(self)
        return n


class NewTerms(_Vocabulary):
    """A vocabulary that also lists its terms in id order (`order`), so the terms numbered since
    some id are at hand."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []

    def __missing__(self, term: str) -> int:
        self.order.append(term)
        return super().__missing__(term)


class _TokenIds(dict):
    """Word token -> the term id of its index term (-1 for none: a stopword), each distinct token
    analysed once (`term_of`, or `terms_of` for a list of tokens at a time), its term numbered in
    `vocabulary` when first seen."""

    def __init__(self, term_of: Callable[[str], str], vocabulary: dict[str, int],
                 terms_of: Callable[[list[str]], list[str]] | None = None) -> None:
        super().__init__()
        self.term_of = term_of
        self.terms_of = terms_of or (lambda tokens: list(map(term_of, tokens)))
        self.vocabulary = vocabulary

    def __missing__(self, token: str) -> int:
        term = self.term_of(token)
        self[token] = n = self.vocabulary[term] if term else -1
        return n

    def ids(self, tokens: list[str]) -> list[int]:
        """The term ids of `tokens` (distinct), those not met before analysed together (`terms_of`)
        and their terms numbered in order, as looking each up in turn would."""
        ids = list(map(self.get, tokens))  # None for a token not met before
        at = [n for n, known in enumerate(ids) if known is None]
        if at:  # looked up once each (a large dict's lookups are cache misses)
            new = [tokens[n] for n in at]
            vocabulary = self.vocabulary
            for n, token, term in zip(at, new, self.terms_of(new)):
                ids[n] = self[token] = vocabulary[term] if term else -1
        return ids


@njit(nogil=True, cache=True)
def _count(tokens, lengths, vocabulary):
    """(term ids, tfs, distinct terms per document, terms per document) of documents whose tokens
    (term ids, -1 for a token without a term, which is skipped) follow each other in `tokens`,
    `lengths` each: a document's terms in the order first seen, as Counter."""
    mark = np.full(vocabulary, -1, np.int64)  # the last document each term was seen in
    slot = np.empty(vocabulary, np.int64)     # where that document's posting of it is
    terms = np.empty(len(tokens), np.int32)
    tfs = np.empty(len(tokens), np.int32)
    sizes = np.empty(len(lengths), np.int32)
    kept = np.empty(len(lengths), np.int32)
    n = 0
    p = 0
    for d in range(len(lengths)):
        start = n
        count = 0
        for i in range(p, p + lengths[d]):
            t = tokens[i]
            if t < 0:
                continue
            count += 1
            if mark[t] != d:
                mark[t] = d
                slot[t] = n
                terms[n] = t
                tfs[n] = 1
                n += 1
            else:
                tfs[slot[t]] += 1
        p += lengths[d]
        sizes[d] = n - start
        kept[d] = count
    return terms[:n], tfs[:n], sizes, kept


@njit(nogil=True, cache=True)
def _scatter(ids, docs, tfs, docno_of, cursor, out_docnos, out_tfs):
    """Each posting (sorted term id, add-order document, tf) of a run written at its term's cursor,
    which moves on: a counting sort by term, the run's documents taken in docno order, so a term's
    postings from one run come out sorted by docno. `docs` rises (a document's postings together)."""
    n = len(ids)
    if n == 0:
        return
    first = docs[0]
    count = docs[n - 1] - first + 1
    start = np.zeros(count + 1, np.int64)  # postings of document first + j: [start[j], start[j + 1])
    for i in range(n):
        start[docs[i] - first + 1] += 1
    for j in range(count):
        start[j + 1] += start[j]
    for j in np.argsort(docno_of[first:first + count]):
        docno = docno_of[first + j]
        for i in range(start[j], start[j + 1]):
            t = ids[i]
            p = cursor[t]
            out_docnos[p] = docno
            out_tfs[p] = tfs[i]
            cursor[t] = p + 1


@njit(nogil=True, cache=True)
def _merge(src_d, src_t, dst_d, dst_t, a, m, b):
    """Merge src[a:m] and src[m:b] (each rising by docno) into dst[a:b]."""
    i, j, k = a, m, a
    while i < m and j < b:
        if src_d[j] < src_d[i]:
            dst_d[k] = src_d[j]
            dst_t[k] = src_t[j]
            j += 1
        else:
            dst_d[k] = src_d[i]
            dst_t[k] = src_t[i]
            i += 1
        k += 1
    while i < m:
        dst_d[k] = src_d[i]
        dst_t[k] = src_t[i]
        i += 1
        k += 1
    while j < b:
        dst_d[k] = src_d[j]
        dst_t[k] = src_t[j]
        j += 1
        k += 1


@njit(nogil=True, cache=True)
def _sort_terms(indptr, lo, hi, docnos, tfs):
    """Sort each posting list of terms [lo, hi) by docno (arrays from posting indptr[lo]): its
    rising stretches (one per run that has the term, _scatter) merged pairwise until one is left;
    lists already in order are left as they are."""
    base = indptr[lo]
    longest = 0
    for t in range(lo, hi):
        longest = max(longest, indptr[t + 1] - indptr[t])
    spare_d = np.empty(longest, np.int32)
    spare_t = np.empty(longest, np.int32)
    bounds = np.empty(longest + 1, np.int64)
    for t in range(lo, hi):
        a, b = indptr[t] - base, indptr[t + 1] - base
        n = b - a
        stretches = 0
        bounds[0] = 0
        for p in range(1, n):
            if docnos[a + p] < docnos[a + p - 1]:
                stretches += 1
                bounds[stretches] = p
        if stretches == 0:
            continue
        stretches += 1
        bounds[stretches] = n
        src_d, src_t = docnos[a:b], tfs[a:b]
        dst_d, dst_t = spare_d[:n], spare_t[:n]
        in_spare = False
        while stretches > 1:
            merged = 0
            for s in range(0, stretches, 2):
                lo_s = bounds[s]
                if s + 1 < stretches:
                    _merge(src_d, src_t, dst_d, dst_t, lo_s, bounds[s + 1], bounds[s + 2])
                else:
                    dst_d[lo_s:bounds[s + 1]] = src_d[lo_s:bounds[s + 1]]
                    dst_t[lo_s:bounds[s + 1]] = src_t[lo_s:bounds[s + 1]]
                bounds[merged] = lo_s
                merged += 1
            bounds[merged] = n
            stretches = merged
            src_d, dst_d = dst_d, src_d
            src_t, dst_t = dst_t, src_t
            in_spare = not in_spare
        if in_spare:
            docnos[a:b] = src_d
            tfs[a:b] = src_t


_RUN_PARTS = ("terms", "docs", "tfs")  # the files of a spilled run


class Found(NamedTuple):
    """What `InvertedIndexBuilder.find_texts` found in a batch of texts: its parts (table, entries,
    text numbers, tokens per text; table None for a text left to the tokenizer) and how many
    entries each table had once it was done (what `add_found` resolves)."""

    parts: list[tuple[AsciiTokenTable | None, Any, list[int], list[int]]]
    ascii_entries: int
    unicode_entries: int


class InvertedIndexBuilder:
    """Accumulates analysed documents, then writes the postings arrays, in bounded memory.

    Postings are kept in flat buffers (4 bytes per token's term id and per
    document) and spilled to `spill_dir` as a run every `run_postings`
    tokens (counted and written by a spill thread while the next run fills);
    `write` merges the runs straight into the memory-mapped output
    (a compiled counting sort by term, then each term's postings sorted by
    docno, term range by term range), so memory holds two runs at most, the
    vocabulary and per-document lengths, whatever the collection size. The arrays are
    those of one global sort by (term, docno).
    """

    def __init__(self, spill_dir: Path | None = None, run_postings: int = 1 << 24,
                 term_of: Callable[[str], str] | None = None,
                 terms_of: Callable[[list[str]], list[str]] | None = None,
                 vocabulary: dict[str, int] | None = None) -> None:
        """`term_of` gives a word token's index term (Analyzer.analyse_token) for `add_tokens` and
        `add_text`; `terms_of`, when given, those of a list of tokens at once (Analyzer.analyse_tokens:
        the same terms, faster). `vocabulary` (term -> id, a new term numbered next when looked up,
        as `NewTerms`) replaces the builder's own."""
        self.vocab: dict[str, int] = _Vocabulary() if vocabulary is None else vocabulary
        self.token_ids = _TokenIds(term_of or _no_analyzer, self.vocab, terms_of if term_of else None)
        self.ascii = AsciiTokenTable(term_of or _no_analyzer, self.vocab, self.token_ids.ids)
        self.unicode = UnicodeTokenTable(term_of or _no_analyzer, self.vocab, self.token_ids.ids)
        self.lengths = array("i")  # terms per document of the spilled runs
        self.spill_dir = spill_dir
        self.run_postings = run_postings
        self.runs: list[Path] = []
        self._spilled_docs = 0  # documents of the runs spilled (or being spilled)
        self._spilling: Future | None = None  # the run being spilled in the spill thread
        self._spill_thread: ThreadPoolExecutor | None = None
        self._tokens = array("i")  # term id of every token of the current run's documents, in order
        self._raw = array("i")  # tokens per document of the current run (those without a term too)

    @property
    def documents(self) -> int:
        """Documents added so far."""
        return self._spilled_docs + len(self._raw)

    def add(self, terms: list[str]) -> None:
        """Add the next document's terms (its docno is the number added before it)."""
        self._tokens.extend(map(self.vocab.__getitem__, terms))  # a new term gets the next id
        self._added(len(terms))

    def add_all(self, documents: list[list[str]]) -> None:
        """`add` of each document's terms in turn."""
        for terms in documents:
            self.add(terms)

    def add_tokens(self, tokens: list[str]) -> None:
        """Add the next document as its word tokens before analysis (Analyzer.tokens), each distinct
        token mapped to its term id once (`term_of` given when built); same index as `add` of the
        terms."""
        self._tokens.extend(map(self.token_ids.__getitem__, tokens))
        self._added(len(tokens))

    def add_text(self, text: str, tokens: Callable[[str], list[str]]) -> None:
        """Add the next document as its text, `tokens` its tokenizer (Analyzer.tokens): the text is
        tokenized and its tokens mapped to term ids in one compiled pass (AsciiTokenTable, or
        UnicodeTokenTable beyond ASCII: the same tokens), or when that cannot through `add_tokens`;
        same index as `add_tokens(tokens(text))`."""
        table = self.ascii if text.isascii() else self.unicode
        if (ids := table.term_ids(text)) is not None:
            self._tokens.frombytes(ids)
            self._added(len(ids) // 4)
        else:
            self.add_tokens(tokens(text))

    def add_texts(self, texts: list[str], tokens: Callable[[str], list[str]]) -> None:
        """`add_text` of each text in turn: the ASCII texts tokenized and looked up together
        (AsciiTokenTable.entries_of_texts: one compiled pass for them all), then the others
        (UnicodeTokenTable.entries_of_texts), the tokens new to the tables analysed together once
        every text is looked up (`resolve`: one call of the analyzer for the batch, not one a text),
        and the term ids put back in the texts' order. A group the tables cannot take whole (a long
        token, a lone surrogate) goes a text at a time, and a text they cannot take (`entries`
        gives None) through `tokens`. The order tokens are numbered in is not the order of the
        texts; the index does not depend on it (`write` sorts the vocabulary). The two halves,
        `find_texts` and `add_found`, may run in two threads (native.build_index)."""
        self.add_found(texts, self.find_texts(texts), tokens)

    def find_texts(self, texts: list[str]) -> Found:
        """The first half of `add_texts`: the texts' tokens found and looked up in the token tables,
        nothing analysed (compiled, the GIL released for most of it). It touches only the tables, so
        it may run in a thread of its own, a batch after another, while `add_found` adds the batches
        before (which reads only entries already made)."""
        ascii_at: list[int] = []
        other_at: list[int] = []
        for n, text in enumerate(texts):
            (ascii_at if text.isascii() else other_at).append(n)
        parts: list[tuple[AsciiTokenTable | None, Any, list[int], list[int]]] = []
        for at, table in ((ascii_at, self.ascii), (other_at, self.unicode)):
            if not at:
                continue
            group = table.entries_of_texts([texts[n] for n in at])
            if group is None:  # a text at a time
                for n in at:
                    entries = table.entries(texts[n])
                    parts.append((None, None, [n], []) if entries is None else
                                 (table, entries, [n], [len(entries)]))
                continue
            entries, counts, left = group
            parts.append((table, entries, at, counts))
            parts.extend((None, None, [at[k]], []) for k in left)
        return Found(parts, self.ascii.entered(), self.unicode.entered())

    def add_found(self, texts: list[str], found: Found, tokens: Callable[[str], list[str]]) -> None:
        """The second half of `add_texts`: the tables' new tokens up to `found` analysed, the texts
        they could not take tokenized (`tokens`), and every text's term ids added in order."""
        self.ascii.resolve(found.ascii_entries)
        self.unicode.resolve(found.unicode_entries)
        ids, starts, counts, offset = [], np.zeros(len(texts), np.int64), np.zeros(len(texts), np.int64), 0
        for table, entries, at, numbers in found.parts:  # where each text's ids are, one part after another
            if table is None:
                entries, at, numbers = self._tokenized(texts[at[0]], tokens, at[0])
            ids.append(entries if table is None else table.term[entries])
            at, numbers = np.asarray(at), np.asarray(numbers, np.int64)
            has = numbers > 0  # a text a group left is 0 there and has its own part
            starts[at[has]] = (offset + np.cumsum(numbers) - numbers)[has]
            counts[at[has]] = numbers[has]
            offset += int(numbers.sum())
        order = np.arange(offset) + np.repeat(starts - (np.cumsum(counts) - counts), counts)
        if offset:
            self._tokens.frombytes(np.concatenate(ids)[order].astype(np.int32, copy=False).tobytes())
        self._added(*counts.tolist())

    def _tokenized(self, text: str, tokens: Callable[[str], list[str]],
                   n: int) -> tuple[np.ndarray, list[int], list[int]]:
        """A part of add_texts: the term ids of text number `n` through the tokenizer (numbered now)."""
        ids = np.array(list(map(self.token_ids.__getitem__, tokens(text))), np.int32)
        return ids, [n], [len(ids)]

    def add_ids(self, ids: np.ndarray, counts: np.ndarray) -> None:
        """Add documents as the term ids of their tokens (int32, -1 for a token without a term; ids of
        this builder's `vocab`), `counts` (int32) tokens each, one document's after another's."""
        self._tokens.frombytes(np.ascontiguousarray(ids, np.int32).tobytes())
        self._added(*np.asarray(counts).tolist())

    def take(self) -> tuple[bytes, bytes]:
        """The term ids of the tokens added since the last take (int32 bytes) and each document's
        number of tokens (int32 bytes), which this builder then forgets (a worker's builder, which
        never spills or writes: see index/parallel.py)."""
        taken = self._tokens.tobytes(), self._raw.tobytes()
        self._tokens, self._raw = array("i"), array("i")
        return taken

    def _added(self, *tokens: int) -> None:
        """Record the number of tokens of each document just added; spill a full run."""
        self._raw.extend(tokens)
        if self.spill_dir is not None and len(self._tokens) >= self.run_postings:
            self._spill()

    def _take_run(self) -> tuple[array, array, int]:
        """The current run's tokens and tokens per document, and the vocabulary's size; the builder
        starts a new one."""
        run = self._tokens, self._raw, len(self.vocab)
        self._spilled_docs += len(self._raw)
        self._tokens, self._raw = array("i"), array("i")
        return run

    def _run_arrays(self, tokens: array, raw: array, vocabulary: int) -> tuple[np.ndarray, ...]:
        """A run (`_take_run`) as (term ids in first-seen order within each document, add-order doc
        numbers, tfs), counted in one compiled pass over its tokens; its documents' lengths join
        `lengths` (runs are counted in order, one at a time)."""
        first = len(self.lengths)
        terms, tfs, sizes, kept = _count(np.frombuffer(tokens, dtype=np.int32),
                                         np.frombuffer(raw, dtype=np.int32), vocabulary)
        self.lengths.frombytes(kept.tobytes())
        docs = np.repeat(np.arange(first, first + len(sizes), dtype=np.int32), sizes)
        return terms, docs, tfs

    def _spill(self) -> None:
        """Hand the current run to the spill thread, which counts it and writes it to `spill_dir` (three
        files: its term ids, documents and tfs), while the caller adds the next documents; at most one
        run is in flight (bounded memory), so this waits for the one before."""
        self._spilled()
        stem = Path(self.spill_dir) / f"run{len(self.runs):05d}"
        stem.parent.mkdir(parents=True, exist_ok=True)
        if self._spill_thread is None:
            self._spill_thread = ThreadPoolExecutor(1, thread_name_prefix="spill")
        self._spilling = self._spill_thread.submit(self._write_run, stem, *self._take_run())
        self.runs.append(stem)

    def _write_run(self, stem: Path, *run: object) -> None:
        """Count a run and save its three arrays apart (not stacked into one: no copy in memory)."""
        for path, values in zip(self._run_files(stem), self._run_arrays(*run)):
            save_array(path, values)

    def _spilled(self) -> None:
        """Wait until the run in the spill thread is written (its error raised here)."""
        spilling, self._spilling = self._spilling, None
        if spilling is not None:
            spilling.result()

    def _run_files(self, stem: Path) -> list[Path]:
        return [stem.with_name(f"{stem.name}.{name}.npy") for name in _RUN_PARTS]

    def _all_runs(self, last: tuple[np.ndarray, np.ndarray, np.ndarray]):
        """Every run in add order: the spilled ones (memory-mapped one at a time: a pass that needs
        only the term ids reads only those), then `last`."""
        for stem in self.runs:
            terms, docs, tfs = (np.asarray(load_array(path)) for path in self._run_files(stem))
            yield terms, docs, tfs
        yield last

    def drop_token_tables(self) -> None:
        """Free the token tables and the token -> term id dictionary (`write` needs only the
        vocabulary): once every text is added, so they are not held through `write`'s peak."""
        self.token_ids = self.ascii = self.unicode = None

    def write(self, out: Path, docno_of: np.ndarray | None = None,
              chunk_postings: int = 1 << 24) -> dict[str, Any]:
        """Write the arrays into `out` and return collection statistics.

        `docno_of[i]` renumbers the i-th added document (default: keep order).
        """
        out.mkdir(parents=True, exist_ok=True)
        self._spilled()
        if self._spill_thread is not None:
            self._spill_thread.shutdown()
        last = self._run_arrays(*self._take_run())
        n_docs = len(self.lengths)
        terms = sorted(self.vocab)
        remap = np.empty(len(terms), dtype=np.int32)  # first-seen id -> sorted id
        remap[[self.vocab[t] for t in terms]] = np.arange(len(terms), dtype=np.int32)
        docno_of = np.arange(n_docs) if docno_of is None else np.asarray(docno_of)
        docno_of = docno_of.astype(np.int32)
        df = np.zeros(len(terms), dtype=np.int64)
        for run_terms, _, _ in self._all_runs(last):
            df += np.bincount(remap[run_terms], minlength=len(terms))
        indptr = np.zeros(len(terms) + 1, dtype=np.int64)
        np.cumsum(df, out=indptr[1:])
        total = int(indptr[-1])
        docnos = new_array(out / "docnos.npy", np.int32, (total,))
        tfs = new_array(out / "tfs.npy", np.int32, (total,))
        cursor = indptr[:-1].copy()
        for run_terms, run_docs, run_tfs in self._all_runs(last):  # scatter each run to its terms' slots
            _scatter(remap[run_terms], run_docs, run_tfs, docno_of, cursor, np.asarray(docnos),
                     np.asarray(tfs))
            release_pages(docnos, tfs, write_back=False)  # scattered writes touch every page: keep none
            # resident (scratch files: pack_files reads them, from the page cache, and deletes them)
        del last
        for lo, hi in term_ranges(indptr, chunk_postings):  # then each term's postings by docno
            a, b = int(indptr[lo]), int(indptr[hi])
            _sort_terms(indptr, lo, hi, np.asarray(docnos[a:b]), np.asarray(tfs[a:b]))
            release_pages(docnos, tfs, write_back=False)
        del docnos, tfs
        for stem in self.runs:
            for path in self._run_files(stem):
                path.unlink()
        write_terms(out, terms)
        save_array(out / "indptr.npy", indptr)
        lengths = np.empty(n_docs, dtype=np.int32)
        lengths[docno_of] = np.frombuffer(self.lengths, dtype=np.int32)
        save_array(out / "doc_lengths.npy", lengths)
        return {"documents": n_docs, "unique_terms": len(terms),
                "total_terms": int(lengths.sum(dtype=np.int64)), "postings": total}


def _no_analyzer(token: str) -> str:
    raise AssertionError("add_tokens needs the builder made with term_of (Analyzer.term)")


def pack_files(path: Path) -> None:
    """Turn the flat postings arrays written into `path` (docnos.npy, tfs.npy) into packed blocks
    (index/blocks.py), term range by term range, and remove the flat ones."""
    indptr = np.asarray(load_array(path / "indptr.npy"))
    docnos, tfs = load_array(path / "docnos.npy"), load_array(path / "tfs.npy")
    pack_postings(indptr, docnos, tfs, term_ranges(indptr, CHECK_POSTINGS)).save(path)
    del docnos, tfs
    for name in ("docnos.npy", "tfs.npy"):
        (path / name).unlink()


def write_terms(out: Path, terms: list[str]) -> None:
    """Write a sorted vocabulary as one UTF-8 blob and the offset of each term in it."""
    encoded = [t.encode() for t in terms]
    offsets = np.zeros(len(terms) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    save_array(out / "terms_utf8.npy", np.frombuffer(b"".join(encoded), dtype=np.uint8))
    save_array(out / "terms_offsets.npy", offsets)


class InvertedIndex:
    """Read-only postings over memory-mapped arrays."""

    def __init__(self, path: Path):
        self.path = Path(path)
        # Plain ndarray views of the memory maps: slicing np.memmap objects is slow.
        self.indptr = np.asarray(load_array(self.path / "indptr.npy"))
        self.packed = not (self.path / "docnos.npy").is_file()  # else the flat layout of older indexes
        if not self.packed:
            self.docnos = np.asarray(load_array(self.path / "docnos.npy"))
            self.tfs = np.asarray(load_array(self.path / "tfs.npy"))
        self.doc_lengths = np.asarray(load_array(self.path / "doc_lengths.npy"))
        self._terms_utf8 = load_array(self.path / "terms_utf8.npy")
        self._terms_offsets = load_array(self.path / "terms_offsets.npy")
        self._check()

    @cached_property
    def blocks(self) -> Blocks:
        """The postings packed in blocks (stored, or packed in memory from an older index's arrays)."""
        if self.packed:
            raise AssertionError("set when the index is opened")
        return pack_postings(self.indptr, self.docnos, self.tfs, term_ranges(self.indptr, CHECK_POSTINGS))

    @cached_property
    def docnos(self) -> np.ndarray:
        """Doc number of every posting (int32, ascending within a term), by term (of a packed index,
        decoded into memory when first asked for: what the flat kernels search)."""
        return unpack_postings(self.blocks, self.path, with_tfs=False)[0]

    @cached_property
    def tfs(self) -> np.ndarray:
        """Term frequency of every posting (int32), aligned with docnos."""
        return unpack_postings(self.blocks, self.path)[1]

    def span(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(docnos, tfs) of the postings of terms [lo, hi): slices of the flat arrays, or of a packed
        index those terms' blocks decoded (no more in memory than they take)."""
        a, b = int(self.indptr[lo]), int(self.indptr[hi])
        if not self.packed or {"docnos", "tfs"} <= self.__dict__.keys():
            return self.docnos[a:b], self.tfs[a:b]
        return unpack_postings(self.blocks, self.path, lo, hi)

    def release(self) -> None:
        """Drop the resident pages of the memory-mapped postings (passes over all of them stay bounded)."""
        if self.packed:
            release_pages(self.blocks.words)
        else:
            release_pages(self.docnos, self.tfs)

    @property
    def posting_count(self) -> int:
        return int(self.indptr[-1]) if len(self.indptr) else 0

    def _check(self) -> None:
        """Cheap consistency checks, so crafted arrays (even with recomputed checksums) are refused."""
        arrays = {"indptr": self.indptr, "doc_lengths": self.doc_lengths, "terms_utf8": self._terms_utf8,
                  "terms_offsets": self._terms_offsets}
        if not self.packed:
            arrays |= {"docnos": self.docnos, "tfs": self.tfs}
        for name, a in arrays.items():
            if a.ndim != 1 or a.dtype.kind not in "iu":
                raise InputError(f"expected a 1-d integer array, found {a.dtype} of shape {a.shape};"
                                 " rebuild the index", self.path / f"{name}.npy")
        flat = not self.packed
        problems = [
            ("indptr", len(self.indptr) < 1 or self.indptr[0] != 0
             or (flat and self.indptr[-1] != len(self.docnos))
             or bool((np.diff(self.indptr) < 0).any()), "offsets from 0, rising, to the posting count"),
            ("tfs", flat and (len(self.tfs) != len(self.docnos) or (len(self.tfs) and self.tfs.min() < 1)),
             "one term frequency >= 1 per posting"),
            ("docnos", flat and len(self.docnos) and (self.docnos.min() < 0
                                                      or self.docnos.max() >= len(self.doc_lengths)),
             "document numbers below the document count"),
            ("doc_lengths", len(self.doc_lengths) and self.doc_lengths.min() < 0, "lengths >= 0"),
            ("terms_offsets", len(self._terms_offsets) != len(self.indptr)
             or self._terms_offsets[0] != 0 or self._terms_offsets[-1] != len(self._terms_utf8)
             or bool((np.diff(self._terms_offsets) < 0).any()), "one rising offset per term"),
        ]
        for name, bad, expected in problems:
            if bad:
                raise InputError(f"inconsistent index array: expected {expected}; rebuild the index",
                                 self.path / f"{name}.npy")
        if flat:
            self._check_postings()
            return
        self.blocks = Blocks.load(self.path, self.indptr)
        verify_postings(self.blocks, self.doc_lengths, self.path)

    def _check_postings(self, chunk: int = CHECK_POSTINGS) -> None:
        """Each posting list names a document once, in rising docno order, and each document's length
        is the sum of its term frequencies (so no tf exceeds it, and no length is made up). One
        pass over the postings, `chunk` at a time (bounded memory)."""
        total = len(self.docnos)
        starts = np.asarray(self.indptr[1:-1])
        starts = starts[(starts > 0) & (starts < total)]  # a new posting list begins at each
        sums = np.zeros(len(self.doc_lengths), dtype=np.int64)
        for a in range(0, total, chunk):
            b = min(total, a + chunk + 1)  # one past: the pair across the chunk boundary
            docnos = np.asarray(self.docnos[a:b])
            rising = docnos[1:] > docnos[:-1]
            rising[starts[(starts > a) & (starts < b)] - a - 1] = True
            if not rising.all():
                raise InputError("inconsistent index array: expected each term's documents once, in"
                                 " rising order; rebuild the index", self.path / "docnos.npy")
            end = min(total, a + chunk)
            weights = np.asarray(self.tfs[a:end], dtype=np.float64)  # int32 weights are 30x slower
            sums += np.bincount(docnos[:end - a].astype(np.intp), weights=weights,
                                minlength=len(sums)).astype(np.int64)
            release_pages(self.docnos, self.tfs)
        if not np.array_equal(sums, self.doc_lengths):
            raise InputError("inconsistent index array: expected each document's length to be the sum of"
                             " its term frequencies (tfs.npy); rebuild the index",
                             self.path / "doc_lengths.npy")

    @property
    def num_docs(self) -> int:
        return len(self.doc_lengths)

    @property
    def num_terms(self) -> int:
        return len(self.indptr) - 1

    @cached_property
    def terms(self) -> list[str]:
        """The vocabulary, sorted; term id = position. InputError naming terms_utf8.npy unless every
        term is UTF-8 and they rise strictly (term ids are found by that order)."""
        blob = self._terms_utf8.tobytes()
        offsets = self._terms_offsets.tolist()
        try:
            terms = [blob[offsets[i]:offsets[i + 1]].decode() for i in range(self.num_terms)]
        except UnicodeDecodeError:
            raise InputError("inconsistent index array: expected UTF-8 terms; rebuild the index",
                             self.path / "terms_utf8.npy") from None
        if not all(a < b for a, b in zip(terms, terms[1:])):
            raise InputError("inconsistent index array: expected the terms sorted, each once; rebuild the"
                             " index", self.path / "terms_utf8.npy")
        return terms

    @cached_property
    def term_ids(self) -> dict[str, int]:
        """Term -> term id."""
        return {t: i for i, t in enumerate(self.terms)}

    @cached_property
    def df(self) -> np.ndarray:
        """Document frequency per term."""
        return np.diff(self.indptr)

    @cached_property
    def cf(self) -> np.ndarray:
        """Collection frequency (total occurrences) per term."""
        if self.packed and "tfs" not in self.__dict__:
            out = np.zeros(self.num_terms, dtype=np.int64)
            for lo, hi in term_ranges(self.indptr, CHECK_POSTINGS):
                tfs = self.span(lo, hi)[1]
                has = np.flatnonzero(self.df[lo:hi] > 0)
                if len(has):
                    starts = (self.indptr[lo:hi] - self.indptr[lo])[has]
                    out[lo + has] = np.add.reduceat(tfs, starts, dtype=np.int64)
            return out
        return np.add.reduceat(self.tfs, self.indptr[:-1], dtype=np.int64) * (self.df > 0)

    @cached_property
    def posting_terms(self) -> np.ndarray:
        """The term id of every posting (aligned with docnos/tfs)."""
        return np.repeat(np.arange(self.num_terms, dtype=np.int32), self.df)

    @cached_property
    def forward(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Document vectors as CSR by docno: (indptr, term ids, tfs)."""
        order = np.argsort(self.docnos, kind="stable")
        indptr = np.zeros(self.num_docs + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.docnos, minlength=self.num_docs), out=indptr[1:])
        return indptr, self.posting_terms[order], np.asarray(self.tfs)[order]

    def postings(self, term_id: int) -> tuple[np.ndarray, np.ndarray]:
        """(docnos, tfs) of one term."""
        return self.span(term_id, term_id + 1)
