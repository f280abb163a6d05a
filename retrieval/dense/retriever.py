"""DenseRetriever: a stage that encodes queries and searches (or rescores a run with) the dense part."""

from __future__ import annotations

import copy
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

import faiss
import numpy as np

from retrieval.dense.encoder import Encoder
from retrieval.dense.faiss_index import check_search_params, configure_search, load_dense_part
from retrieval.errors import InputError, UnknownDocument
from retrieval.index.filters import allow_mask, as_filter
from retrieval.index.native import native_index
from retrieval.pipeline import params
from retrieval.pipeline.stage import Stage
from retrieval.runtime.local_models import DEFAULT_MODEL
from retrieval.types import Queries, Run


def _index_dir(index: Any) -> Path:
    """An index directory from a path or an Index handle (anything with `.path`)."""
    return Path(getattr(index, "path", index))


def part_encoder(entry: dict[str, Any], where: Path, model: str | Path | Encoder | None = None, *,
                 precision: str | None = None, threads: int | None = None, batch_size: int = 64) -> Encoder:
    """The encoder of a dense part (its manifest `entry`): `model` (an Encoder or a model directory),
    else the part's own model, with the part's settings; refuses weights other than the part's."""
    if isinstance(model, Encoder):
        encoder = model
    else:
        if model is None and entry["model"] != DEFAULT_MODEL and not Path(entry["model"]).is_dir():
            raise InputError(f"the dense part was built with the model {entry['model']!r}, which is not"
                             " bundled; pass its directory as the encoder (--encoder DIR)", where)
        encoder = Encoder(model if model is not None else entry["model"], precision=precision,
                          max_length=entry.get("max_length"), threads=threads, pooling=entry.get("pooling"),
                          normalize=entry.get("normalize"), batch_size=batch_size)
    if encoder.checksum != entry["model_sha256"]:
        raise InputError(f"the dense part was built with another model ({entry['model']}, weights sha256"
                         f" {entry['model_sha256'][:12]}…) than {encoder.name} (sha256"
                         f" {encoder.checksum[:12]}…); use the part's model or rebuild the dense part", where)
    return encoder


class QueryEncoder(Protocol):
    """Anything that turns query texts into embedding rows (e.g. `retrieval.qa.realm.QueryEncoder`)."""

    def encode(self, texts: list[str]) -> np.ndarray: ...


class DenseRetriever(Stage):
    """Top `hits` documents by inner product of query and document embeddings.

    `model` defaults to the model the index was built with; a model whose
    weights differ (SHA-256) from the index's is refused. `precision` defaults to
    `auto`, this machine's fastest path, whatever the index was built with.
    `ef_search` / `nprobe` override HNSW / IVF search settings. `query_encoder`
    (anything with `.encode(texts) -> array`, e.g. a REALM-trained question
    encoder) encodes the queries instead of the index's model; the documents'
    stored vectors are used either way. Given a run, the stage rescores exactly
    the run's documents of each query (inner product with their stored vectors);
    a run naming a query without text in `queries` is refused, as by every stage.
    `filter` (index/filters.py) keeps only passing documents inside the top k: a flat part
    searches only them (a FAISS ID selector, exact); HNSW and IVF parts search deeper until `hits`
    passing documents are found or every vector was returned (the unfiltered ranking, filtered).
    """

    def __init__(self, index: Any, model: str | Path | Encoder | None = None, hits: int = 1000, *,
                 precision: str | None = None, threads: int | None = None,
                 ef_search: int | None = None, nprobe: int | None = None,
                 batch_size: int = 64, query_encoder: QueryEncoder | None = None, filter: object = None):
        params.check(hits=hits, threads=threads, ef_search=ef_search, nprobe=nprobe)
        self.index_dir = _index_dir(index)
        self.filter = as_filter(filter)
        self._index = index
        self.faiss, self.doc_ids, self.entry = load_dense_part(self.index_dir)
        self.encoder = part_encoder(self.entry, self.index_dir, model, precision=precision, threads=threads,
                                    batch_size=batch_size)
        self.hits = hits
        self.query_encoder = query_encoder
        self.threads = self.encoder.threads
        self._rows: dict[str, int] | None = None
        search_params = {key: v for key, v in (("ef_search", ef_search), ("nprobe", nprobe)) if v}
        check_search_params(self.entry.get("index_type", "flat"), search_params)
        configure_search(self.faiss, search_params)

    def encode(self, queries: Queries) -> np.ndarray:
        """Query embeddings, one row per query in `queries` order."""
        texts = list(queries.values())
        if self.query_encoder is not None:
            return self.query_encoder.encode(texts)
        return self.encoder.encode(texts, desc="encoding queries")

    def with_filter(self, filter: object) -> DenseRetriever:
        """This retriever searching only the documents `filter` passes, sharing its loaded model."""
        other = copy.copy(self)
        other.filter = as_filter(filter)
        other.__dict__.pop("row_allow", None)
        return other

    @cached_property
    def row_allow(self) -> np.ndarray | None:
        """The filter's allow mask by row of the dense part (None without a filter)."""
        if self.filter is None:
            return None
        index = native_index(self._index)
        mask = allow_mask(self.filter, index)
        docno = index.docno
        try:
            return mask[np.array([docno[str(d)] for d in self.doc_ids], dtype=np.int64)]
        except KeyError as e:
            raise UnknownDocument(e.args[0], self.index_dir, "dense part") from None

    def search_vectors(self, qids: list[str], vectors: np.ndarray) -> Run:
        """A Run from query embeddings (rows in `qids` order)."""
        faiss.omp_set_num_threads(self.threads)
        x = np.ascontiguousarray(vectors, dtype=np.float32)
        if self.row_allow is not None:
            return self._filtered(qids, x, self.row_allow)
        k = min(self.hits, self.faiss.ntotal)
        scores, rows = self.faiss.search(x, k)
        return Run({q: [(str(self.doc_ids[r]), float(s)) for r, s in zip(rows[i], scores[i])
                        if r >= 0] for i, q in enumerate(qids)})

    def _filtered(self, qids: list[str], x: np.ndarray, allow: np.ndarray) -> Run:
        """The top `hits` passing documents of each query."""
        passing = int(np.count_nonzero(allow))
        k = min(self.hits, passing)
        if k == 0:
            return Run({q: [] for q in qids})
        if isinstance(self.faiss, faiss.IndexFlat):  # exact: score only the passing vectors
            bits = np.packbits(allow.astype(bool), bitorder="little")
            selector = faiss.IDSelectorBitmap(len(allow), faiss.swig_ptr(bits))
            scores, rows = self.faiss.search(x, k, params=faiss.SearchParameters(sel=selector))
            return Run({q: [(str(self.doc_ids[r]), float(s)) for r, s in zip(rows[i], scores[i]) if r >= 0]
                        for i, q in enumerate(qids)})
        out = {}
        for i, q in enumerate(qids):
            depth = min(self.faiss.ntotal, max(2 * k, k * len(allow) // passing))
            while True:
                scores, rows = self.faiss.search(x[i:i + 1], depth)
                hits = [(str(self.doc_ids[r]), float(s)) for r, s in zip(rows[0], scores[0])
                        if r >= 0 and allow[r]]
                if len(hits) >= k or depth >= self.faiss.ntotal:
                    break
                depth = min(self.faiss.ntotal, depth * 4)
            out[q] = hits[:k]
        return Run(out)

    def rescore_vectors(self, qids: list[str], vectors: np.ndarray, run: Run) -> Run:
        """Each query's documents in `run` scored by inner product with their stored vectors."""
        if self._rows is None:
            self._rows = {str(d): i for i, d in enumerate(self.doc_ids)}
        out = {}
        for i, q in enumerate(qids):
            ids = [d for d, _ in run.get(q, [])]
            try:
                rows = [self._rows[d] for d in ids]
            except KeyError as e:
                raise UnknownDocument(e.args[0], self.index_dir, "dense part") from None
            if self.row_allow is not None:  # a filtered rescorer drops the candidates that fail
                ids = [d for d, r in zip(ids, rows) if self.row_allow[r]]
                rows = [r for r in rows if self.row_allow[r]]
            if not rows:
                out[q] = []
                continue
            scores = np.stack([self.faiss.reconstruct(r) for r in rows]) @ vectors[i]
            out[q] = zip(ids, scores.tolist())
        return Run(out)

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        """Retrieve for every query, or with a run rescore each query's documents in it."""
        params.check_queries(queries)
        params.check_run(run, queries)
        empty = [q for q, text in queries.items() if not str(text).strip()]
        if empty:
            raise InputError(f"empty query text for query id(s) {', '.join(empty[:5])}")
        vectors = self.encode(queries)
        if run is not None:
            return self.rescore_vectors(list(queries), vectors, run)
        return self.search_vectors(list(queries), vectors)
