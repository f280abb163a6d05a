"""Collection-wide statistics for a sharded index, so every shard scores like the single index.

BM25 needs the document count, the average length and each term's df; query
likelihood needs the collection length and each term's cf; RM3 needs df and
the number of documents. A shard alone knows only its own. At build time the
shards' statistics are summed by term string into `global/` (the whole
vocabulary: `terms_utf8.npy`, `terms_offsets.npy`, `df.npy`, `cf.npy`), and each
shard gets a `global/` part holding the same df and cf aligned with its own
term ids (`df.npy`, `cf.npy`; the scalars in its manifest entry). A shard then
computes exactly the impacts the single index would (index/impacts.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from retrieval import storage
from retrieval.errors import InputError
from retrieval.index.impacts import CollectionStats
from retrieval.index.native import FIELD_PART, Index
from retrieval.index.postings import InvertedIndex, write_terms

PART = "global"
SCALARS = ("num_docs", "doc_count", "total_terms")


def merge_vocabularies(shards: list[InvertedIndex]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(sorted vocabulary, df, cf) of the whole collection from its shards' postings."""
    terms = sorted(set().union(*(s.terms for s in shards)))
    position = {t: i for i, t in enumerate(terms)}
    df = np.zeros(len(terms), dtype=np.int64)
    cf = np.zeros(len(terms), dtype=np.int64)
    for shard in shards:
        ids = global_ids(shard.terms, position)
        np.add.at(df, ids, shard.df)
        np.add.at(cf, ids, shard.cf)
    return terms, df, cf


def global_ids(terms: list[str], position: dict[str, int]) -> np.ndarray:
    """Global term id of each of a shard's terms."""
    return np.fromiter((position[t] for t in terms), dtype=np.int64, count=len(terms))


def collection_scalars(shards: list[InvertedIndex]) -> dict[str, int]:
    """Document count (all, and with at least one term) and collection length."""
    return {"num_docs": sum(s.num_docs for s in shards),
            "doc_count": sum(int(np.count_nonzero(s.doc_lengths)) for s in shards),
            "total_terms": sum(int(np.sum(s.doc_lengths, dtype=np.int64)) for s in shards)}


def write_vocabulary(out: Path, terms: list[str], df: np.ndarray, cf: np.ndarray) -> None:
    """Write the global vocabulary (UTF-8 blob + offsets, as the inverted index) with df and cf."""
    out.mkdir(parents=True, exist_ok=True)
    write_terms(out, terms)
    storage.save_array(out / "df.npy", df)
    storage.save_array(out / "cf.npy", cf)


def write_global_statistics(root: Path, shard_dirs: list[Path], fields: list[str] | tuple = ()
                            ) -> dict[str, Any]:
    """Write `root/global/` and each shard's `global/` part (and, for each of `fields`, the same
    for the field's part as `global.field.NAME/`); returns the collection statistics."""
    shards = [InvertedIndex(d / "inverted") for d in shard_dirs]
    _write_part_statistics(root, shard_dirs, shards, PART)
    for name in fields:
        parts = [InvertedIndex(d / f"{FIELD_PART}{name}") for d in shard_dirs]
        _write_part_statistics(root, shard_dirs, parts, field_stats_part(name))
    terms = set().union(*(s.terms for s in shards))
    scalars = collection_scalars(shards)
    return {"documents": scalars["num_docs"], "unique_terms": len(terms),
            "total_terms": scalars["total_terms"], "postings": sum(s.posting_count for s in shards)}


def field_stats_part(field: str) -> str:
    """The part holding a field's collection-wide statistics (`global.field.NAME`)."""
    return f"{PART}.{FIELD_PART}{field}"


def _write_part_statistics(root: Path, shard_dirs: list[Path], shards: list[InvertedIndex],
                           part: str) -> None:
    """The merged vocabulary of one inverted part into `root/part/`, each shard's df, cf (by its
    term ids) and the collection scalars into its `part/`."""
    terms, df, cf = merge_vocabularies(shards)
    scalars = collection_scalars(shards)
    write_vocabulary(root / part, terms, df, cf)
    position = {t: i for i, t in enumerate(terms)}
    for shard_dir, shard in zip(shard_dirs, shards):
        ids = global_ids(shard.terms, position)
        target = shard_dir / part
        with storage.atomic_directory(target) as tmp:
            storage.save_array(tmp / "df.npy", df[ids])
            storage.save_array(tmp / "cf.npy", cf[ids])
        storage.add_part(shard_dir, part, dict(scalars, unique_terms=len(terms)), target)


def load_shard_statistics(index: Index, field: str | None = None) -> CollectionStats:
    """The collection statistics stored in a shard's `global/` part (or its field's), for its term ids."""
    part = PART if field is None else field_stats_part(field)
    entry = index.parts.get(part)
    if entry is None:
        raise InputError(f"shard has no global statistics part {part!r}; rebuild the sharded index",
                         index.path)
    inverted = index.inverted if field is None else index.field_index(field)
    root = index.path / part
    df, cf = storage.load_array(root / "df.npy"), storage.load_array(root / "cf.npy")
    if len(df) != inverted.num_terms or len(cf) != len(df):
        raise InputError(f"global statistics cover {len(df)} terms, the shard has"
                         f" {inverted.num_terms}; rebuild the sharded index", root)
    return CollectionStats(**{k: int(entry[k]) for k in SCALARS}, df=np.asarray(df), cf=np.asarray(cf))


# ---------------------------------------------------------------- live indexes (live.py)

SEGMENT_STATS = "stats.json"  # the collection scalars, beside df.npy, cf.npy and deleted.npy


def live_counts(index: Index, deleted: np.ndarray, inverted: InvertedIndex | None = None
                ) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """(df, cf, scalars) of a segment's documents that are not `deleted` (docnos), by its term ids
    (of its flat part, or of `inverted`, one of its field parts)."""
    inverted = index.inverted if inverted is None else inverted
    df, cf = inverted.df.astype(np.int64), inverted.cf.astype(np.int64)
    lengths = np.asarray(inverted.doc_lengths, dtype=np.int64)
    keep = np.ones(inverted.num_docs, dtype=bool)
    if len(deleted):
        keep[deleted] = False
        indptr, terms, tfs = inverted.forward
        rows = np.concatenate([np.arange(indptr[d], indptr[d + 1]) for d in deleted.tolist()])
        np.subtract.at(df, terms[rows], 1)
        np.subtract.at(cf, terms[rows], tfs[rows].astype(np.int64))
    scalars = {"num_docs": int(keep.sum()), "doc_count": int(np.count_nonzero(lengths[keep])),
               "total_terms": int(lengths[keep].sum())}
    return df, cf, scalars


def write_generation(root: Path, segments: list[tuple[str, Index, np.ndarray]],
                     fields: list[str] | tuple = ()) -> dict[str, Any]:
    """Write a live index's statistics of (name, segment, deleted docnos) under `root`.

    `root/global/` holds the vocabulary of the live documents with df and cf;
    `root/<name>/` each segment's df and cf by its own term ids, its deleted
    docnos and the scalars, so it scores exactly as a fresh build of the live
    documents would. Each of `fields` gets the same for its part: `root/global.field.NAME/`
    and `root/<name>/field.NAME/`. Returns the collection statistics.
    """
    (root / "lease").write_bytes(b"")  # layout.take_lease: readers of this generation hold it
    for name, _, deleted in segments:
        (root / name).mkdir()
        storage.save_array(root / name / "deleted.npy", np.asarray(deleted, dtype=np.int64))
    counts, terms = _write_live_part(root, segments, None)
    for field in fields:
        _write_live_part(root, segments, field)
    scalars = {k: sum(c[2][k] for c in counts) for k in SCALARS}
    postings = sum(int(c[0].sum()) for c in counts)
    return {"documents": scalars["num_docs"], "unique_terms": len(terms),
            "total_terms": scalars["total_terms"], "postings": postings}


def _write_live_part(root: Path, segments: list[tuple[str, Index, np.ndarray]], field: str | None
                     ) -> tuple[list, list[str]]:
    """The live statistics of the flat part (field None) or of one field's part; (counts, terms)."""
    parts = [index.inverted if field is None else index.field_index(field) for _, index, _ in segments]
    counts = [live_counts(index, deleted, part) for (_, index, deleted), part in zip(segments, parts)]
    vocabularies = [part.terms for part in parts]
    terms = sorted({t for words, (df, _, _) in zip(vocabularies, counts)
                    for t, n in zip(words, df.tolist()) if n > 0})
    position = {t: i for i, t in enumerate(terms)}
    df, cf = np.zeros(len(terms), dtype=np.int64), np.zeros(len(terms), dtype=np.int64)
    for words, (seg_df, seg_cf, _) in zip(vocabularies, counts):
        live = seg_df > 0
        ids = global_ids([t for t, keep in zip(words, live.tolist()) if keep], position)
        np.add.at(df, ids, seg_df[live])
        np.add.at(cf, ids, seg_cf[live])
    scalars = {k: sum(c[2][k] for c in counts) for k in SCALARS}
    write_vocabulary(root / (PART if field is None else field_stats_part(field)), terms, df, cf)
    for (name, _, _), words in zip(segments, vocabularies):
        ids = np.array([position.get(t, -1) for t in words], dtype=np.int64)
        known = ids >= 0
        out = root / name if field is None else root / name / f"{FIELD_PART}{field}"
        out.mkdir(exist_ok=True)
        storage.save_array(out / "df.npy", np.where(known, df[ids], 0))
        storage.save_array(out / "cf.npy", np.where(known, cf[ids], 0))
        storage.write_json_atomic(out / SEGMENT_STATS, scalars)
    return counts, terms


def load_generation_statistics(index: Index, root: Path, field: str | None = None
                               ) -> tuple[CollectionStats, np.ndarray]:
    """A live segment's collection statistics (of its flat part, or of a field's) and deleted docnos
    from its generation directory."""
    import json

    deleted = load_deleted(root / "deleted.npy", index.num_docs)
    inverted = index.inverted
    if field is not None:
        root, inverted = root / f"{FIELD_PART}{field}", index.field_index(field)
    try:
        scalars = json.loads((root / SEGMENT_STATS).read_text())
    except (OSError, ValueError, RecursionError) as e:
        raise InputError(f"cannot read the segment's statistics ({e}); the index is damaged", root) from None
    check_scalars(scalars, root / SEGMENT_STATS)
    df, cf = storage.load_array(root / "df.npy"), storage.load_array(root / "cf.npy")
    if len(df) != inverted.num_terms or len(cf) != len(df):
        raise InputError("segment statistics do not match the segment; the index is damaged", root)
    for name, counts in (("df", df), ("cf", cf)):
        if counts.ndim != 1 or counts.dtype.kind not in "iu" or (len(counts) and counts.min() < 0):
            raise InputError("expected counts >= 0 per term; the index is damaged", root / f"{name}.npy")
    stats = CollectionStats(**{k: int(scalars[k]) for k in SCALARS}, df=np.asarray(df), cf=np.asarray(cf))
    return stats, deleted


def check_scalars(scalars: object, path: Path) -> None:
    """A generation's collection scalars: whole numbers, at least one document, no more documents with
    terms than documents."""
    def whole(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    ok = isinstance(scalars, dict) and all(whole(scalars.get(k)) for k in SCALARS)
    if not ok or scalars["num_docs"] < 1 or scalars["doc_count"] > scalars["num_docs"]:
        raise InputError(f"expected the collection's {', '.join(SCALARS)} as whole numbers >= 0 (at least"
                         " one document); the index is damaged", path)


def load_deleted(path: Path, documents: int | None = None) -> np.ndarray:
    """A segment's deleted docnos (int64): distinct integers in rising order, each a docno of the
    segment (below `documents`, when known)."""
    deleted = storage.load_array(path, mmap=False)
    ok = deleted.ndim == 1 and deleted.dtype.kind in "iu" and (
        not len(deleted) or (deleted[0] >= 0 and bool(np.all(deleted[1:] > deleted[:-1]))
                             and (documents is None or deleted[-1] < documents)))
    if not ok:
        raise InputError("expected the deleted documents' numbers: distinct integers in rising order,"
                         " each below the segment's document count; the index is damaged", path)
    return deleted.astype(np.int64)
