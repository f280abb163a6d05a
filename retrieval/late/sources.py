"""Training sources for the late-interaction projection: judged topics of several collections at once.

A `Source` is one collection's training material in frozen-encoder form: its
documents' token states, its queries' token states, the qrels, a first-stage
run (BM25: hard negatives, and the held-out queries' candidates), and the
held-out share of its queries that validates (`train.heldout_queries`, so the
same split whichever script asks). `train.train_sources` trains one projection
on any number of them.

Sources:

- `collection_source`: a judged collection's topics (e.g. ``cacm``,
  ``scifact:train``) over its index.
- `squad_source`: SQuAD questions -> the paragraph that answers them (DPR
  style), the retrieval corpus being the file's paragraphs; unanswerable
  questions are dropped, and so is every paragraph whose text occurs in the
  `exclude` file (xquad-en, where QA is evaluated), with its questions (the
  rule the reader's training follows, formats.squad.exclude_paragraphs: each
  of squad2-dev's 16 articles has xquad-en paragraphs, so leaving out whole
  articles would leave nothing).

Document token states come from the index's late store when it holds
zero-shot embeddings (unit-normalised frozen states, which a projection
followed by L2 normalisation treats exactly as the raw states), else from the
scratch cache (`cache.cached_states`, encoded once).
"""

from __future__ import annotations

import random
from collections.abc import Container
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from retrieval import collections
from retrieval.late.cache import Packed, cached_states
from retrieval.late.config import TrainConfig
from retrieval.types import Document, Qrels, Queries, Run

if TYPE_CHECKING:
    from retrieval.index.native import Index
    from retrieval.late.encoder import TokenEncoder


@dataclass
class Source:
    """One collection's training material: states, judgements, first-stage run, held-out queries."""

    name: str
    docs: Packed
    dindex: dict[str, int]
    queries: Packed
    qindex: dict[str, int]
    qrels: Qrels
    run: Run
    held: set[str] = field(default_factory=set)
    negative_runs: list[Run] = field(default_factory=list)  # more first stages' hard negatives (dense)
    teacher: Run | None = None  # a stronger first stage's scores, distilled into the projection

    @property
    def training_ids(self) -> list[str]:
        """The queries that train (judged, not held out), in query order."""
        return [q for q in self.qindex if q not in self.held]


def stored_states(index: Index, encoder: TokenEncoder) -> tuple[Packed, dict[str, int]] | None:
    """The index's late store as frozen token states, when it holds zero-shot embeddings of this encoder's
    document settings (else None), and doc id -> row."""
    from retrieval.late.model import ZERO_SHOT
    from retrieval.late.store import LateStore

    if "late" not in index.parts:
        return None
    store = LateStore(index)
    entry = store.entry
    same = (entry.get("model") == ZERO_SHOT and entry.get("compression", "fp16") == "fp16"
            and entry.get("doc_length") == encoder.doc_length and entry.get("markers") == encoder.markers
            and entry.get("model_sha256") == encoder.checksum)
    if not same:
        return None
    return Packed(np.asarray(store.embeddings), np.asarray(store.offsets, dtype=np.int64)), dict(index.docno)


def corpus_states(index: Index, encoder: TokenEncoder, cache_dir: str | Path | None,
                  only: set[str] | None = None) -> tuple[Packed, dict[str, int]]:
    """Frozen token states of the documents of `index` and doc id -> row: the late store's zero-shot
    embeddings when it has them, else the scratch cache (title and text as one passage), of every
    document or, to save encoding, only those in `only` (e.g. the first stages' top hits)."""
    stored = stored_states(index, encoder)
    if stored is not None:
        return stored
    docs = [d for d in index.docstore if only is None or d.id in only]
    states = cached_states(encoder, [d.contents for d in docs], False, cache_dir, desc="documents")
    return states, {d.id: i for i, d in enumerate(docs)}


def judged_in(queries: Queries, qrels: Qrels, ids: Container[str]) -> tuple[list[str], Qrels]:
    """The queries judged relevant to a document among `ids`, in query order, and their judgements of
    documents among `ids`: what a training source can use of a collection."""
    qids = [q for q in queries if q in qrels and any(g > 0 and d in ids for d, g in qrels[q].items())]
    return qids, Qrels((q, {d: g for d, g in qrels[q].items() if d in ids}) for q in qids)


def squad_paragraph_index(passages: dict[str, tuple[str, str]], workdir: str | Path,
                          name: str) -> tuple[list[Document], Index]:
    """The SQuAD paragraphs kept (`squad_questions`) as documents, and their index, built once in
    WORKDIR/NAME-paragraphs."""
    from retrieval.index.native import Index, build_index

    where = Path(workdir) / f"{name}-paragraphs"
    documents = [Document(pid, t, x) for pid, (t, x) in passages.items()]
    if not (where / "manifest.json").is_file():
        build_index(documents, where, source=name, progress=False, force=True)
    return documents, Index.open(where)


def _finish(name: str, docs: Packed, dindex: dict[str, int], queries: Queries, qrels: Qrels, run: Run,
            encoder: TokenEncoder, cfg: TrainConfig, cache_dir: str | Path | None) -> Source:
    """A Source from its parts: the judged queries (a judged document in the corpus) encoded, their
    judgements of documents in the corpus, and the held-out share chosen as `train.heldout_queries`
    chooses it."""
    from retrieval.late.train import heldout_queries

    qids, qrels = judged_in(queries, qrels, dindex)
    qstates = cached_states(encoder, [queries[q] for q in qids], True, cache_dir, desc=f"{name} queries")
    return Source(name, docs, dindex, qstates, {q: i for i, q in enumerate(qids)},
                  qrels, Run({q: run.get(q, []) for q in qids}),
                  heldout_queries(qids, cfg))


def collection_source(topics: str, index: Index, encoder: TokenEncoder, cfg: TrainConfig,
                      cache_dir: str | Path | None = None, qrels: str | None = None,
                      only: set[str] | None = None) -> Source:
    """A judged collection's topics over its index (BM25 run for negatives; a named collection's
    self-hits dropped, as `train.training_inputs` does); `only`: as `corpus_states`."""
    from retrieval.sparse.rankers import BM25

    queries, judged = collections.load_topics(topics), collections.load_qrels(qrels or topics)
    run = BM25(index, hits=max(cfg.depth, cfg.negative_depth))(queries)
    if collections.drops_self_hits(topics):
        run = run.without_query_ids()
    docs, dindex = corpus_states(index, encoder, cache_dir, only)
    run = Run({q: [(d, s) for d, s in hits if d in dindex] for q, hits in run.items()})
    return _finish(topics, docs, dindex, queries, judged, run, encoder, cfg, cache_dir)


def squad_questions(path: str | Path, exclude: str | Path | None,
                    limit: int | None, seed: int) -> tuple[dict[str, tuple[str, str]], Queries, Qrels]:
    """SQuAD paragraphs (id -> (title, text)), answerable questions and their paragraph as qrels; every
    paragraph whose text is in `exclude` left out, with its questions; at most `limit` questions (a
    seeded sample)."""
    from retrieval.formats.squad import exclude_paragraphs, paragraphs, passage_id, read_squad

    examples = read_squad(path)
    if exclude:
        examples = exclude_paragraphs(examples, read_squad(exclude))
    passages = {pid: (t.replace("_", " "), x) for pid, (t, x) in paragraphs(examples).items()}
    answerable = [ex for ex in examples if not ex.impossible]
    if limit is not None and len(answerable) > limit:
        answerable = sorted(random.Random(seed).sample(answerable, limit), key=lambda ex: ex.id)
    queries = Queries((ex.id, ex.question) for ex in answerable)
    qrels = Qrels((ex.id, {passage_id(ex.context): 1}) for ex in answerable)
    return passages, queries, qrels


def squad_source(path: str | Path, encoder: TokenEncoder, cfg: TrainConfig, workdir: str | Path,
                 cache_dir: str | Path | None = None, exclude: str | Path | None = None,
                 limit: int | None = None, name: str = "squad") -> Source:
    """SQuAD questions -> their paragraph, BM25 over the kept paragraphs (an index built in `workdir`)."""
    from retrieval.sparse.rankers import BM25

    passages, queries, qrels = squad_questions(path, exclude, limit, cfg.seed)
    documents, index = squad_paragraph_index(passages, workdir, name)
    run = BM25(index, hits=max(cfg.depth, cfg.negative_depth))(queries)
    states = cached_states(encoder, [d.contents for d in documents], False, cache_dir,
                           desc=f"{name} paragraphs")
    return _finish(name, states, {d.id: i for i, d in enumerate(documents)}, queries, qrels, run, encoder,
                   cfg, cache_dir)


def with_negatives_from(source: Source, run: Run) -> Source:
    """`source` whose training queries also draw hard negatives from `run` (another first stage over the
    same corpus, e.g. the dense retriever's; documents outside the source's corpus dropped)."""
    kept = Run({q: [(d, s) for d, s in run.get(q, []) if d in source.dindex] for q in source.qindex})
    source.negative_runs.append(kept)
    return source


def top_and_judged(index: Index, topics: list[str], depth: int = 100) -> set[str]:
    """The documents in BM25's top `depth` for any of `topics` or judged for one of them: all a
    benchmark or a training run over those topics reads, so all that need encoding."""
    from retrieval.sparse.rankers import BM25

    needed: set[str] = set()
    for name in topics:
        run = BM25(index, hits=depth)(collections.load_topics(name))
        needed |= {d for hits in run.values() for d, _ in hits}
        needed |= {d for judged in collections.load_qrels(name).values() for d in judged}
    return needed
