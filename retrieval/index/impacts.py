"""Scoring functions as Lucene computes them, evaluated once per posting ("impacts").

Each model turns the index's postings into one float per posting; a query's
score for a document is then sum over query terms of weight * impact, which
is exactly how Lucene sums BoostQuery-weighted TermQuery clauses. Document
lengths are Lucene's quantised norms (see lucene_norms).

The collection statistics (document count, total length, df, cf) come from
the index itself unless a `CollectionStats` is given: a shard of a sharded
index scores with the whole collection's statistics, so its impacts equal the
single index's (see retrieval.shards.stats).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from numba import vectorize

from retrieval.errors import InputError
from retrieval.index.blocks import CODE_FILES, CodeBlocks, blocks_of, pack_codes
from retrieval.index.codebook import Impacts, PackedImpacts, encode
from retrieval.index.lucene_norms import quantised_lengths
from retrieval.index.postings import InvertedIndex, term_ranges
from retrieval.storage import load_array, naming, new_array, release_pages, save_array


@vectorize(["float64(float64)"], cache=True)
def log(x):
    """The C library's natural log, element by element. numpy's own loops on CPUs with AVX-512 round
    some results differently from the C library's, which would make impacts and run files depend on
    the CPU; this is the same on every machine."""
    return math.log(x)


@vectorize(["float64(float64)"], cache=True)
def log1p(x):
    """The C library's log(1 + x), element by element (see log)."""
    return math.log1p(x)


@dataclass(frozen=True, eq=False)
class CollectionStats:
    """The statistics a model scores with; `df` and `cf` are aligned with the index's term ids."""

    num_docs: int      # documents, empty ones included
    doc_count: int     # documents with at least one term (Lucene's docCount)
    total_terms: int   # collection length
    df: np.ndarray     # document frequency per term id
    cf: np.ndarray     # collection frequency per term id (int64)

    @classmethod
    def of(cls, index: InvertedIndex) -> CollectionStats:
        """An index's own statistics."""
        return cls(num_docs=index.num_docs, doc_count=int(np.count_nonzero(index.doc_lengths)),
                   total_terms=int(np.sum(index.doc_lengths, dtype=np.int64)), df=index.df, cf=index.cf)


# The impacts of the model named in IMPACTS_MODEL_FILE, as a codebook (codebook.py):
CODES_FILE = "impact_codes.npy"       # per posting: uint16 (or uint32) place in its term's run of the table
TABLE_FILE = "impact_table.npy"       # float64: each term's distinct impacts, term after term
BASES_FILE = "impact_bases.npy"       # int64, terms + 1: where each term's run starts
IMPACTS_MODEL_FILE = "impacts.json"   # {"model": class name, parameters...}
CHUNK_POSTINGS = 1 << 23              # impacts are computed this many postings at a time (bounded memory)


def _collection_probability(stats: CollectionStats) -> np.ndarray:
    """Lucene's DefaultCollectionModel: (cf + 1) / (total terms + 1), per term."""
    return (stats.cf + 1.0) / (float(stats.total_terms) + 1.0)


class ImpactModel:
    """A model whose score is a sum over query terms of weight * per-posting impact.

    `impacts` evaluates `_chunk` term range by term range into one array:
    every operation is elementwise, so the values are those of one pass over
    all postings, with temporaries bounded by CHUNK_POSTINGS. Every model here
    has impacts >= 0 (what dynamic pruning needs).
    """

    nonnegative = True

    def _chunk(self, index: InvertedIndex, stats: CollectionStats, lengths: np.ndarray,
               lo: int, hi: int) -> np.ndarray:
        raise NotImplementedError

    def impacts(self, index: InvertedIndex, stats: CollectionStats | None = None) -> np.ndarray:
        """One float64 impact per posting (the reference the codebook reproduces)."""
        out = np.empty(index.posting_count, dtype=np.float64)
        for lo, hi, values in self.chunks(index, stats):
            out[index.indptr[lo]:index.indptr[hi]] = values
        return out

    def encoded(self, index: InvertedIndex, stats: CollectionStats | None = None,
                codes_for: Callable[[type], np.ndarray] | None = None) -> Impacts:
        """The impacts as a codebook, computed term range by term range (bounded memory); the codes
        go into `codes_for(dtype)` (default: a new array in memory)."""
        return encode(index.indptr, lambda: self.chunks(index, stats),
                      codes_for or (lambda dtype: np.empty(index.posting_count, dtype)))

    def chunks(self, index: InvertedIndex, stats: CollectionStats | None = None
               ) -> Iterator[tuple[int, int, np.ndarray]]:
        """(lo, hi, float64 impacts of the postings of terms [lo, hi)), about CHUNK_POSTINGS at a time."""
        stats = stats or CollectionStats.of(index)
        lengths = quantised_lengths(index.doc_lengths)
        for lo, hi in term_ranges(index.indptr, CHUNK_POSTINGS):
            yield lo, hi, self._finite_chunk(index, stats, lengths, lo, hi)
            index.release()  # bounded memory when the postings are file maps

    def _finite_chunk(self, index: InvertedIndex, stats: CollectionStats, lengths: np.ndarray,
                      lo: int, hi: int) -> np.ndarray:
        """`_chunk`, refusing parameters whose arithmetic overflows (e.g. BM25 k1 = 1e308, whose
        scores would come out as 0 or 1e-308 instead of an error)."""
        try:
            with np.errstate(over="raise", invalid="raise"):
                return self._chunk(index, stats, lengths, lo, hi)
        except FloatingPointError:
            settings = ", ".join(f"{k} = {v!r}" for k, v in asdict(self).items())
            raise InputError(f"{type(self).__name__} with {settings} overflows on this index's frequencies"
                             " and lengths; choose a smaller value") from None

    @property
    def key(self) -> dict:
        """What identifies these impacts on disk: the class name and the parameters."""
        return {"model": type(self).__name__, **asdict(self)}


@dataclass(frozen=True)
class BM25Model(ImpactModel):
    """Lucene's BM25Similarity: idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))."""

    k1: float
    b: float

    def _chunk(self, index, stats, lengths, lo, hi):
        doc_count = stats.doc_count  # docs that have the field
        avgdl = float(stats.total_terms) / max(doc_count, 1)
        df = stats.df[lo:hi].astype(np.float64)
        idf = log(1.0 + (doc_count - df + 0.5) / (df + 0.5))
        docnos, tfs = index.span(lo, hi)
        tf = np.asarray(tfs, dtype=np.float64)
        norm = self.k1 * (1.0 - self.b + self.b * lengths[docnos] / avgdl)
        return np.repeat(idf, index.df[lo:hi]) * tf / (tf + norm)


@dataclass(frozen=True)
class DirichletModel(ImpactModel):
    """Lucene's LMDirichletSimilarity: max(0, log(1 + tf / (mu p(t|C))) + log(mu / (dl + mu)))."""

    mu: float

    def _chunk(self, index, stats, lengths, lo, hi):
        docnos, tfs = index.span(lo, hi)
        pc = np.repeat(_collection_probability(stats)[lo:hi], index.df[lo:hi])
        tf = np.asarray(tfs, dtype=np.float64)
        score = log1p(tf / (self.mu * pc)) + log(self.mu / (lengths[docnos] + self.mu))
        return np.maximum(score, 0.0)


@dataclass(frozen=True)
class JelinekMercerModel(ImpactModel):
    """Lucene's LMJelinekMercerSimilarity: log(1 + (1 - lam) tf / dl / (lam p(t|C))).

    `lam` is the weight of the collection model, as in Lucene and Anserini.
    """

    lam: float

    def _chunk(self, index, stats, lengths, lo, hi):
        docnos, tfs = index.span(lo, hi)
        pc = np.repeat(_collection_probability(stats)[lo:hi], index.df[lo:hi])
        tf = np.asarray(tfs, dtype=np.float64)
        return log1p((1.0 - self.lam) * tf / lengths[docnos] / (self.lam * pc))


# Every bag-of-words model by ranker name, with its own parameters (declared in params.PARAMS). A new
# formula registers here; rankers.sparse_builders then builds its native and sharded stages.
SPARSE_MODELS: dict[str, tuple[type[ImpactModel], tuple[str, ...]]] = {
    "bm25": (BM25Model, ("k1", "b")),
    "qld": (DirichletModel, ("mu",)),
    "qljm": (JelinekMercerModel, ("lam",)),
}


def sparse_model(name: str, **values: float) -> ImpactModel:
    """The model registered as `name`, its parameters checked and the missing ones defaulted."""
    from retrieval.pipeline import params

    if name not in SPARSE_MODELS:
        raise InputError(f"unknown sparse model {name!r}; expected one of {', '.join(SPARSE_MODELS)}")
    model, names = SPARSE_MODELS[name]
    params.check(**values)
    return model(**({n: params.default(n) for n in names} | values))


def write_impacts(path: Path, model: ImpactModel, packed: bool = True) -> None:
    """Precompute a model's impacts (as a codebook) into an inverted part being built; `packed`:
    their codes packed in blocks beside the postings' (blocks.CodeBlocks), else one per posting.

    Written at build time for the default BM25, so that searching with it neither
    pays a pass over all postings on the first query nor holds them in memory
    (the codes are memory-mapped); other models compute theirs on load.
    """
    index = InvertedIndex(path)
    index.release()  # opening checks every posting; keep none resident

    def codes_file(dtype: type) -> np.ndarray:
        return new_array(path / CODES_FILE, dtype, (index.posting_count,))

    impacts = model.encoded(index, codes_for=codes_file)
    impacts.codes.flush()
    if packed:
        pack_codes(index.indptr, impacts.codes, term_ranges(index.indptr, CHUNK_POSTINGS)).save(path)
        release_pages(impacts.codes)
    save_array(path / TABLE_FILE, impacts.table)
    save_array(path / BASES_FILE, impacts.bases)
    del impacts
    if packed:
        (path / CODES_FILE).unlink()
    with naming(path / IMPACTS_MODEL_FILE):
        (path / IMPACTS_MODEL_FILE).write_text(json.dumps(model.key, sort_keys=True) + "\n")


def impacts_for(model: ImpactModel, index: InvertedIndex,
                stats: CollectionStats | None = None) -> Impacts:
    """The impacts of `model`: the stored ones when the index has them for this
    model and its own statistics, else computed now (an index built before they were stored, another
    model or parameters, or a shard scoring with the whole collection's statistics)."""
    stored = index.path / IMPACTS_MODEL_FILE
    packed = (index.path / CODE_FILES[0]).is_file()
    if stats is None and stored.is_file() and (packed or (index.path / CODES_FILE).is_file()):
        try:
            key = json.loads(stored.read_text())
        except (ValueError, RecursionError):
            raise InputError("unreadable impacts description; rebuild the index", stored) from None
        if key == model.key and packed:
            code_blocks = CodeBlocks.load(index.path, index.indptr, blocks_of(index.indptr))
            impacts = PackedImpacts(code_blocks, *(np.asarray(load_array(index.path / name))
                                                   for name in (TABLE_FILE, BASES_FILE)), index.indptr)
            impacts.check(index.indptr, index.path / TABLE_FILE)
            check_stored(model, index, impacts)
            return impacts
        if key == model.key:
            impacts = Impacts(*(np.asarray(load_array(index.path / name))
                                for name in (CODES_FILE, TABLE_FILE, BASES_FILE)))
            impacts.check(index.indptr, index.path / CODES_FILE, lambda: release_pages(impacts.codes))
            check_stored(model, index, impacts)
            return impacts
    return model.encoded(index, stats)


def check_stored(model: ImpactModel, index: InvertedIndex, impacts: Impacts | PackedImpacts,
                 samples: int = 16) -> None:
    """Stored impacts are finite and >= 0, and on a sample of terms exactly the ones `model` (what
    impacts.json names) computes: a description naming other parameters than the impacts were
    computed with would otherwise score with the wrong ones."""
    table = np.asarray(impacts.table)
    if not (np.isfinite(table).all() and (table >= 0).all()):
        raise InputError("stored impacts must be finite numbers >= 0; rebuild the index",
                         index.path / TABLE_FILE)
    if index.num_terms == 0:
        return
    terms = np.unique(np.linspace(0, index.num_terms - 1, samples).astype(np.int64)).tolist()
    cf = np.zeros(index.num_terms, dtype=np.int64)  # only the sampled terms' are read
    for t in terms:
        cf[t] = int(np.sum(index.postings(t)[1], dtype=np.int64))
    stats = CollectionStats(num_docs=index.num_docs, doc_count=int(np.count_nonzero(index.doc_lengths)),
                            total_terms=int(np.sum(index.doc_lengths, dtype=np.int64)), df=index.df, cf=cf)
    lengths = quantised_lengths(index.doc_lengths)
    for t in terms:
        expected = model._chunk(index, stats, lengths, t, t + 1)
        if not np.array_equal(expected, impacts.values(t, int(index.indptr[t]), int(index.indptr[t + 1]))):
            raise InputError(f"stored impacts are not those of the model this file names ({model.key});"
                             " rebuild the index", index.path / IMPACTS_MODEL_FILE)
