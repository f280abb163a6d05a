"""Reranking with late interaction: the `LateReranker` stage and the `rerank` function.

The reranker rescores each query's top `depth` hits by MaxSim. It reads
document embeddings from the index's `late/` part when the part was built by
the same model (or is the zero-shot part of the model's encoder, which the
model's projection maps to its own embeddings), and otherwise encodes the documents' text (from the doc store,
or given directly to `rerank`) on the fly, each distinct document of a run
once per group of queries. The score of a reranked hit is
w * minmax(first-stage score) + (1 - w) * minmax(MaxSim) per query, w =
`interpolate` (0 is MaxSim alone), so the reranker keeps what the first stage
knew. The weight, depth and fusion not given are the validated defaults of
the kind of first stage (params.LATE_DEFAULTS: `hybrid` after a fused stage,
`bm25` after anything else): a Pipeline settles them from the stage before
(`LateReranker.following`), `first_stage` names the kind outright (a run
file's). Hits below `depth`
follow the reranked ones in their first-stage order (fusion.with_tail): the
result is as long as the run given, cut to `hits` if set. A
run naming a query that `queries` has no text for is refused (InputError
naming it), as by every stage (pipeline/stage.py).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from retrieval.errors import InputError
from retrieval.index.kinds import AnyIndex
from retrieval.late.choice import keeps
from retrieval.late.model import LateModel, maxsim
from retrieval.pipeline import params
from retrieval.pipeline.fusion import RRF_K, interpolate_ranking, rrf_ranking, with_tail
from retrieval.pipeline.stage import Stage
from retrieval.types import Queries, Ranking, Result, Results, Run, rank

# Documents encoded together when reranking a run on the fly: a document among several queries' candidates
# is encoded once per group (SciFact's BM25 top 100: 5,012 distinct documents among 29,966 hits). The group
# bounds memory, since the embeddings of a whole group (one group at a time) are held at once.
GROUP_DOCS = 4096


def _as_model(model: LateModel | str | Path | None, threads: int | None,
              precision: str | None) -> LateModel:
    if isinstance(model, LateModel):
        return model
    return LateModel(model, threads=threads, precision=precision)


def reranked(hits: Sequence[tuple[str, float]], scores: Sequence[float], weight: float,
             fusion: str = "interpolate", rrf_k: int = RRF_K) -> Ranking:
    """One query's ranking from its first-stage `hits` and the MaxSim `scores` of its top len(scores):
    those fused with the first stage (`fusion` "interpolate": min-max, `weight` on the first stage, 0
    MaxSim alone; "rrf": reciprocal-rank fusion of the two rankings, constant `rrf_k`), then the rest
    of `hits` in their order; interpolation at weight 1.0 is `hits` unchanged (the first stage kept,
    choice.keep). The stage's arithmetic, also used by eval/bench_neural.py."""
    if keeps((fusion, weight, len(scores))):
        return list(hits)
    top = list(hits[:len(scores)])
    late = rank(zip((d for d, _ in top), scores))
    if fusion == "rrf":
        return with_tail(rrf_ranking(top, late, rrf_k), hits)
    if fusion != "interpolate":
        raise InputError(f"unknown fusion {fusion!r}; expected interpolate or rrf")
    return with_tail(late if weight == 0 else interpolate_ranking(top, late, weight), hits)


def zero_shot_of(store: object, model: LateModel) -> bool:
    """Whether `store` holds the zero-shot embeddings of `model`'s own encoder (same base model and
    settings) while `model` has a projection: normalise(P normalise(s)) = normalise(P s), so projecting
    the stored tokens gives the model's embeddings exactly (up to the store's compression)."""
    if model.projection is None:
        return False
    want = model.identity() | {"checkpoint_sha256": None, "dim": model.encoder.dim}
    return all(all(s.entry.get(k) == v for k, v in want.items()) for s in getattr(store, "stores", [store]))


class LateReranker(Stage):
    """Rerank a Run's top `depth` hits per query by MaxSim fused with the first stage's scores (a stage
    that needs a run), the hits below `depth` after them; keep `hits`.

    `interpolate`, `depth` and `fusion` None are the validated defaults for the kind of first stage
    (params.LATE_DEFAULTS[first_stage]; `first_stage` None: "bm25" until a Pipeline puts the stage after
    a fused one, then "hybrid"); 0.0 is MaxSim alone, 1.0 the first stage's run unchanged (no MaxSim
    computed: what the guarded choice of `choice` gives when validation shows no gain). `fusion` is
    "interpolate" (min-max) or "rrf"
    (reciprocal-rank fusion with constant `rrf_k`); a given `interpolate` means interpolation and a
    given `rrf_k` RRF unless `fusion` says otherwise (then refused). `precision` (default `auto`) is how
    queries and on-the-fly documents are encoded here.
    """

    def __init__(self, index: AnyIndex | str | Path | None = None,
                 model: LateModel | str | Path | None = None, *, interpolate: float | None = None,
                 depth: int | None = None, hits: int | None = None, use_store: bool | None = None,
                 threads: int | None = None, precision: str | None = None, filter: object = None,
                 fusion: str | None = None, rrf_k: int | None = None, first_stage: str | None = None):
        from retrieval.index.filters import as_filter
        from retrieval.index.kinds import open_index
        from retrieval.late.store import PART, LateStore

        params.check(depth=depth, hits=hits, interpolate=interpolate, threads=threads, fusion=fusion,
                     rrf_k=rrf_k, first_stage=first_stage)
        self.index = None if index is None else open_index(index)
        self.filter = as_filter(filter)
        if self.filter is not None and (self.index is None or self.index.kind != "native"):
            raise InputError("a filtered reranker needs a single native index (its documents' metadata)")
        self.model = _as_model(model, threads, precision)
        self.given = {"interpolate": interpolate, "depth": depth, "fusion": fusion, "rrf_k": rrf_k,
                      "first_stage": first_stage}
        self._settle(first_stage or "bm25")
        self.hits = hits
        self.store = None
        self.projects_store = False  # the store is zero-shot: this model's projection maps it to its own
        if self.index is not None and self.index.has(PART) and use_store is not False:
            store = LateStore(self.index) if self.index.kind == "native" else self.index.late_store()
            if store.compatible(self.model):
                self.store = store
            elif zero_shot_of(store, self.model):
                self.store, self.projects_store = store, True
            elif use_store:
                raise InputError("the index's late store was built with another model; rebuild it"
                                 " with `retrieval index --late` or rerank on the fly", self.index.path)
            else:
                print("retrieval: note: the index's late store was built with another model;"
                      " encoding documents on the fly", file=sys.stderr)
        elif use_store:
            raise InputError("no late store in this index; build it with `retrieval index --late`",
                             None if self.index is None else self.index.path)

    def _settle(self, kind: str) -> None:
        """The settings in effect: those given, the rest the validated defaults of first stage `kind`."""
        given, defaults = self.given, params.LATE_DEFAULTS[kind]
        fusion = given["fusion"]
        if fusion is None:  # a given weight means interpolation, a given RRF constant RRF
            fusion = ("interpolate" if given["interpolate"] is not None else
                      "rrf" if given["rrf_k"] is not None else defaults["fusion"])
        if fusion == "rrf" and given["interpolate"] is not None:
            raise InputError("late: interpolate applies only with fusion interpolate")
        if fusion == "interpolate" and given["rrf_k"] is not None:
            raise InputError("late: rrf_k applies only with fusion rrf")
        self.first_stage, self.fusion = kind, fusion
        self.interpolate = defaults["interpolate"] if given["interpolate"] is None else given["interpolate"]
        self.depth = given["depth"] or defaults["depth"]
        self.rrf_k = params.default("rrf_k") if given["rrf_k"] is None else given["rrf_k"]

    def following(self, previous: object) -> LateReranker:
        """This stage as it runs after `previous` in a pipeline: with the defaults of a `hybrid` first
        stage when `previous` is fused (its class sets `fused`, as fusion.Interpolate and RRF do), of
        `bm25` otherwise; itself when `first_stage` was given or nothing changes, else a copy (the model
        and store shared), so one stage can follow different first stages in different pipelines."""
        kind = "hybrid" if getattr(previous, "fused", False) else "bm25"
        if self.given["first_stage"] is not None or kind == self.first_stage:
            return self
        other = copy.copy(self)
        other._settle(kind)
        return other

    def settings(self) -> dict[str, object]:
        """As every stage's, but only the fusion's own settings: the weight when interpolating (the
        default, not named), the fusion and its constant when fusing by reciprocal rank; the first
        stage's kind only as the values it sets."""
        shown = super().settings()
        shown.pop("first_stage", None)
        if self.fusion == "rrf":
            shown.pop("interpolate", None)
        else:
            shown.pop("fusion", None)
            shown.pop("rrf_k", None)
        return shown

    def score(self, query: str, doc_ids: Sequence[str], texts: Sequence[str] | None = None,
              encoded: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """MaxSim of `query` against each document (stored embeddings, else `encoded` ones, else
        encoded texts)."""
        if not doc_ids:
            return np.zeros(0, dtype=np.float32)
        q = self.model.queries([query])[0]
        if self.store is not None and texts is None:
            emb, offsets = self.store.gather(doc_ids)
            if self.projects_store:
                emb = self.model.project(emb)
        else:
            docs = self._embeddings(doc_ids, texts, encoded)
            offsets = np.concatenate([[0], np.cumsum([len(x) for x in docs])]).astype(np.int64)
            emb = np.concatenate(docs) if docs else np.zeros((0, self.model.dim), np.float32)
        return maxsim(q, emb, offsets)

    def _embeddings(self, doc_ids: Sequence[str], texts: Sequence[str] | None,
                    encoded: Mapping[str, np.ndarray] | None) -> list[np.ndarray]:
        """Token embeddings of documents with no stored ones: already `encoded`, else of their texts."""
        if texts is None and encoded is not None:
            return [encoded[d] for d in doc_ids]
        if texts is None:
            if self.index is None:
                raise InputError("reranking a run needs document texts: give an index (doc store)"
                                 " or pass texts")
            texts = [self._text(d) for d in doc_ids]
        return self.model.documents(texts)

    def _text(self, doc_id: str) -> str:
        return self.index.text(doc_id)  # InputError names an unknown id

    def rerank_hits(self, query: str, hits: Ranking, texts: Sequence[str] | None = None,
                    encoded: Mapping[str, np.ndarray] | None = None) -> Ranking:
        """One query's hits: the top `depth` reranked, then the rest in their order."""
        top = hits[:self.depth]
        if not query.strip():
            raise InputError("empty query text")
        scores = self.score(query, [d for d, _ in top], None if texts is None else texts[:self.depth],
                            encoded)
        ranked = reranked(hits, scores.tolist(), self.interpolate, self.fusion, self.rrf_k)
        return ranked[:self.hits] if self.hits else ranked

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        params.check_queries(queries)
        params.check_run(run, queries)
        if run is None:
            raise InputError("the late-interaction reranker needs a run to rerank (a first stage's"
                             " output or a run file)")
        if self.filter is not None:  # failing documents never reach the reranked list
            from retrieval.index.filters import keep_passing

            run = keep_passing(run, self.filter, self.index)
        if keeps((self.fusion, self.interpolate, 0)):  # the first stage kept
            return Run({q: hits[:self.hits] if self.hits else hits for q, hits in run.items()},
                       presorted=True)
        if self.store is not None or self.index is None:
            return Run({q: self.rerank_hits(queries[q], hits) for q, hits in run.items()}, presorted=True)
        ranked = {}
        for group, ids in self._groups(run):  # on the fly: each document encoded once per group
            encoded = dict(zip(ids, self.model.documents([self._text(d) for d in ids])))
            ranked.update({q: self.rerank_hits(queries[q], run[q], encoded=encoded) for q in group})
            del encoded  # before the next group is encoded: one group's embeddings held at a time
        return Run(ranked, presorted=True)

    def _groups(self, run: Run) -> Iterator[tuple[list[str], list[str]]]:
        """Queries in run order, grouped so that each group's distinct documents number at most
        GROUP_DOCS (which bounds the token states held at once); with each group, its distinct
        documents in order of first appearance."""
        group: list[str] = []
        ids: dict[str, None] = {}
        for q, hits in run.items():
            docs = dict.fromkeys(d for d, _ in hits[:self.depth])
            if group and len(ids) + sum(d not in ids for d in docs) > GROUP_DOCS:
                yield group, list(ids)
                group, ids = [], {}
            group.append(q)
            ids.update(docs)
        if group:
            yield group, list(ids)


Docs = Sequence[str | tuple[str, str] | Mapping[str, str]]


def rerank(query: str | Mapping[str, str] | Sequence[str], docs: Docs | Mapping[str, Docs] | Sequence[Docs],
           model: LateModel | str | Path | None = None, *, first_scores: Sequence[float] | None = None,
           interpolate: float | None = None, k: int | None = None
           ) -> Results | dict[str, Results] | list[Results]:
    """Rerank documents by late interaction (MaxSim); the ranked `Results` (id, score, rank, text).

    One query: `rerank("a query", docs)`, where `docs` are plain strings (ids "0", "1", ... by
    position), (id, text) pairs, or dicts {"id": ..., "text": ...} ("docno" for "id" as in
    PyTerrier). Many queries, the model loaded once: `rerank({"q1": "text", ...}, {"q1": docs, ...})`
    gives {query id: Results}, `rerank(["text", ...], [docs, ...])` a list of Results.
    With `first_scores` (one query: one per document) the score is w * minmax(first score) +
    (1 - w) * minmax(MaxSim), as the stage fuses, w = `interpolate` (default params.LATE_WEIGHT);
    without them, MaxSim alone (`interpolate` must then be None or 0). `k` keeps the top k.
    `model`: None (the checkpoint shipped in the package), "zero-shot", a checkpoint path or a
    loaded LateModel. An empty or blank query text is refused (InputError)."""
    params.check(interpolate=interpolate, hits=k)
    loaded = _as_model(model, None, None)
    if isinstance(query, str):
        return _rerank_one(query, _documents(docs), loaded, first_scores, interpolate, k)
    if first_scores is not None:
        raise InputError("first_scores go with one query; give each document's first-stage score per query")
    if isinstance(query, Mapping):
        if not isinstance(docs, Mapping) or set(docs) != set(query):
            raise InputError("many queries as {query id: text} take docs as {query id: documents}, same ids")
        return {q: _rerank_one(text, _documents(docs[q]), loaded, None, interpolate, k)
                for q, text in query.items()}
    if not isinstance(query, Sequence) or isinstance(docs, (str, Mapping)) or len(docs) != len(query):
        raise InputError("many queries as a list of texts take docs as a list (documents per query), as long")
    return [_rerank_one(text, _documents(d), loaded, None, interpolate, k) for text, d in zip(query, docs)]


def _rerank_one(query: str, docs: list[tuple[str, str]], model: LateModel,
                first_scores: Sequence[float] | None, interpolate: float | None, k: int | None) -> Results:
    """One query's documents reranked by the stage's own arithmetic."""
    if not isinstance(query, str):
        raise InputError(f"a query is a text, got {query!r}")
    if first_scores is None and interpolate:
        raise InputError("interpolation needs one first-stage score per document")
    if first_scores is not None and len(first_scores) != len(docs):
        raise InputError("interpolation needs one first-stage score per document")
    interpolate = 0.0 if first_scores is None else interpolate
    reranker = LateReranker(model=model, interpolate=interpolate, depth=max(len(docs), 1), hits=k,
                            fusion=None if first_scores is not None else "interpolate")
    scores = first_scores if first_scores is not None else [0.0] * len(docs)
    hits = [(d, float(s)) for (d, _), s in zip(docs, scores)]
    texts = dict(docs)
    ranked = reranker.rerank_hits(query, hits, [t for _, t in docs]) if docs else []
    return Results(Result(d, s, i, texts[d]) for i, (d, s) in enumerate(ranked, 1))


def _documents(docs: Docs) -> list[tuple[str, str]]:
    """(id, text) of each document given as a string (id: its position), an (id, text) pair or a dict
    with "id" (or "docno") and "text"; InputError naming the first one that is none of these."""
    if isinstance(docs, (str, Mapping)) or not isinstance(docs, Sequence):
        raise InputError(f"documents are a list of texts, (id, text) pairs or dicts: {type(docs).__name__}")
    out = []
    for position, doc in enumerate(docs):
        if isinstance(doc, str):
            out.append((str(position), doc))
        elif isinstance(doc, Mapping) and isinstance(doc.get("id", doc.get("docno")), str) \
                and isinstance(doc.get("text"), str):
            out.append((doc.get("id", doc.get("docno")), doc["text"]))
        elif isinstance(doc, (tuple, list)) and len(doc) == 2 and all(isinstance(x, str) for x in doc):
            out.append((doc[0], doc[1]))
        else:
            raise InputError(f"document {position} is {doc!r}; expected a text, an (id, text) pair or a dict"
                             " with 'id' and 'text'")
    if len({d for d, _ in out}) != len(out):
        raise InputError("two documents have the same id; expected each id once")
    return out
