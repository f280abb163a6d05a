"""Training the late-interaction projection with a contrastive loss on a frozen encoder.

The encoder is frozen, so its token states are computed once and cached
(`cache.cached_states`); training then only multiplies cached states by the
projection. Each step takes a batch of (query, relevant document) pairs, adds
`negatives` hard negatives per query sampled from the query's BM25 top
`negative_depth` (judged-relevant documents excluded), and minimises the
cross-entropy of the positive's MaxSim score against every document in the
batch (in-batch + hard negatives). With `distill` > 0 and a teacher (a
stronger first stage's scores, e.g. the hybrid's, `sources.Source.teacher`),
each query adds `distill` times the KL divergence from the teacher's softmax
(scores / `distill_temperature`) to MaxSim's over its own positive and hard
negatives, those the teacher scored. Optionally, (title, rest of the abstract)
pairs from the corpus are mixed in, and unlabelled pairs from other
collections' corpora (`pairs.py`; corpus text only, never their queries or
qrels): Inverse Cloze Task pairs (a span of a document -> the rest of it;
`pairs_from`) and title -> body pairs (`title_pairs_from`). A held-out slice
of the training queries picks the epoch and then the interpolation weight with
the first stage (`fusion_choice`: the guarded rule of `choice`, which keeps
the first stage, weight 1.0, unless a weight beats it significantly there),
the epoch among those whose MRR on each corpus's held-out unlabelled
pairs is at least the starting point's on every corpus other than the
training queries' own (out of domain: do no harm, as far as unlabelled
validation pairs can tell); test qrels are never read.
The projection starts from the principal directions of document token states,
so the first epoch starts near zero-shot quality (at dim = hidden size it *is*
zero-shot: an orthonormal basis keeps every cosine), and `anchor` > 0 adds
anchor * ||W - W0||^2 to the loss, which keeps the projection near that
starting point (L2-SP regularisation).
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Container
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from retrieval import collections
from retrieval.errors import InputError
from retrieval.evaluation.measures import evaluate
from retrieval.late import choice
from retrieval.late.cache import Packed, cached_states
from retrieval.late.config import TrainConfig
from retrieval.late.encoder import TokenEncoder
from retrieval.late.model import Head, as_head, maxsim, normalise, save_checkpoint
from retrieval.late.pairs import corpus_pairs, title_pairs
from retrieval.pipeline.fusion import interpolate_ranking
from retrieval.types import Qrels, Queries, Run

if TYPE_CHECKING:
    from retrieval.index.native import Index
    from retrieval.late.sources import Source


def _pad(packed: Packed, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(len(rows), max tokens, hidden) float32 states and their (len(rows), max tokens) mask."""
    lengths = [int(packed.offsets[i + 1] - packed.offsets[i]) for i in rows]
    out = np.zeros((len(rows), max(lengths), packed.states.shape[1]), np.float32)
    mask = np.zeros((len(rows), max(lengths)), np.float32)
    for j, i in enumerate(rows):
        out[j, :lengths[j]], mask[j, :lengths[j]] = packed[i], 1.0
    return torch.from_numpy(out), torch.from_numpy(mask)


Params = torch.Tensor | tuple[torch.Tensor, ...]  # the projection, or (projection, mlp_in, mlp_out)


def _embed(w: Params, x: torch.Tensor) -> torch.Tensor:
    """Token states -> normalised embeddings, as `model.Head.embed` computes them."""
    if isinstance(w, torch.Tensor):
        return torch.nn.functional.normalize(x @ w.T, dim=-1)
    p, a, b = w
    x = torch.nn.functional.normalize(x, dim=-1)
    mlp = torch.nn.functional.gelu(x @ a.T, approximate="tanh") @ b.T
    return torch.nn.functional.normalize(x @ p.T + mlp, dim=-1)


def _head(w: Params) -> Head:
    """The trained parameters as a numpy Head (copies)."""
    parts = [w] if isinstance(w, torch.Tensor) else list(w)
    return Head(*[t.detach().numpy().copy() for t in parts])


def _scores(w: Params, q: torch.Tensor, qmask: torch.Tensor, d: torch.Tensor,
            dmask: torch.Tensor) -> torch.Tensor:
    """MaxSim scores of every query against every document: (queries, documents)."""
    qe = _embed(w, q) * qmask[..., None]
    de = _embed(w, d)
    sims = torch.einsum("bqh,mdh->bmqd", qe, de)
    sims = sims.masked_fill(dmask[None, :, None, :] == 0, -1e4)
    return sims.max(dim=-1).values.sum(dim=-1)


def pca_init(states: np.ndarray, dim: int, seed: int) -> np.ndarray:
    """The top `dim` right singular vectors of a sample of token states (dim, hidden)."""
    rng = np.random.default_rng(seed)
    sample = states[rng.choice(len(states), size=min(len(states), 50_000), replace=False)]
    _, _, vt = np.linalg.svd(normalise(sample.astype(np.float32)), full_matrices=False)
    return vt[:dim].copy()


def rerank_cached(w: np.ndarray | Head | None, qstates: Packed, qindex: dict[str, int], dstates: Packed,
                  dindex: dict[str, int], run: Run, depth: int) -> Run:
    """Rerank `run` with cached states and projection (or Head) `w` (None: zero-shot); each document
    projected once."""
    needed = sorted({dindex[d] for hits in run.values() for d, _ in hits[:depth]})
    head = as_head(w)
    linear = head is None or head.mlp_in is None
    wt = None if head is None else torch.from_numpy(np.ascontiguousarray(head.projection.T, dtype=np.float32))
    docs: dict[int, np.ndarray] = {}
    for b in range(0, len(needed), 256):
        rows = needed[b:b + 256]
        flat = torch.from_numpy(np.concatenate([dstates[i] for i in rows]).astype(np.float32))
        if linear:
            emb = torch.nn.functional.normalize(flat if wt is None else flat @ wt, dim=-1).numpy()
        else:
            emb = head.embed(flat.numpy())
        cuts = np.cumsum([len(dstates[i]) for i in rows])[:-1]
        docs.update(zip(rows, np.split(emb, cuts)))
    out = {}
    for qid, hits in run.items():
        hits = hits[:depth]
        q = qstates[qindex[qid]].astype(np.float32)
        q = normalise(q) if head is None else head.embed(q)
        packed = Packed.pack([docs[dindex[d]] for d, _ in hits], np.float32)
        out[qid] = list(zip([d for d, _ in hits], maxsim(q, packed.states, packed.offsets).tolist()))
    return Run(out)


def heldout_queries(qids: list[str], cfg: TrainConfig) -> set[str]:
    """The training queries held out for validation: a seeded `holdout` share of `qids` (those
    with a judged document in the corpus), the same whichever machine or run asks."""
    order = sorted(qids, key=lambda q: random.Random(f"{cfg.seed}:{q}").random())
    return set(order[:int(len(order) * cfg.holdout)])


def training_split(queries: Queries, qrels: Qrels, doc_ids: Container[str],
                   cfg: TrainConfig) -> tuple[list[str], set[str]]:
    """The training queries (those with a judged document among `doc_ids`) and the held-out share
    of them that chooses the epoch: the one split training, its validation and benchmarks use."""
    qids = [q for q in queries if q in qrels and any(d in doc_ids for d in qrels[q])]
    held = heldout_queries(qids, cfg)
    if not qids:
        raise InputError("no training query has a judged document in the index; expected topics and qrels"
                         " of the indexed collection")
    if not held:
        raise InputError(f"holdout {cfg.holdout} of {len(qids)} training queries holds none out, and the"
                         " held-out queries choose the epoch: raise --holdout")
    return qids, held


def document_states(encoder: TokenEncoder, docs: dict[str, tuple[str, str]],
                    cache_dir: str | Path | None) -> Packed:
    """Cached frozen token states of each (title, text) document, title and text as one passage."""
    contents = [f"{t} {x}" if t else x for t, x in docs.values()]
    return cached_states(encoder, contents, False, cache_dir, desc="documents")


def training_inputs(index: Index, topics: str, qrels: str | None,
                    cfg: TrainConfig) -> tuple[dict[str, tuple[str, str]], Queries, Qrels, Run, str | None]:
    """What `retrieval train late` trains on: the index's (title, text) documents, the training
    topics and qrels (default: the topics' name), their BM25 run (hard negatives; a named
    collection's self-hits dropped) and the collection's name (None for files)."""
    from retrieval.sparse.rankers import BM25

    queries, judged = collections.load_topics(topics), collections.load_qrels(qrels or topics)
    run = BM25(index, hits=max(cfg.depth, cfg.negative_depth))(queries)
    named = collections.named(topics, files_only=True)
    if named and named.remove_query_ids:
        run = run.without_query_ids()
    docs = {d.id: (d.title, d.text) for d in index.docstore}
    return docs, queries, judged, run, named.name if named else None


def fuse(first: Run, late: Run, weight: float, depth: int) -> Run:
    """weight * minmax(first stage) + (1 - weight) * minmax(late), over the top `depth`."""
    return Run({q: interpolate_ranking(first[q][:depth], late[q], weight) for q in late})


def fusion_choice(first: Run, late: Run, qrels: Qrels, depth: int) -> choice.Choice:
    """The guarded choice (`choice.guarded_choice`) of the interpolation weight on the first stage (0..0.95
    by 0.05, or 1.0: the first stage kept) over the top `depth`, on the held-out queries' (nDCG@10 +
    AP) / 2."""
    grid = [("interpolate", round(0.05 * i, 2), depth) for i in range(20)]
    return choice.guarded_choice(choice.objective(first, qrels), grid,
                                 lambda s: choice.objective(fuse(first, late, s[1], depth), qrels))


def _log(msg: str) -> None:
    print(f"[train late] {msg}", file=sys.stderr, flush=True)


def train(docs: dict[str, tuple[str, str]], queries: Queries, qrels: Qrels, first_stage: Run,
          output: str | Path, config: TrainConfig | None = None, *, cache_dir: str | Path | None = None,
          encoder_model: str | Path | None = None, threads: int | None = None,
          precision: str | None = None, in_domain: str | None = None) -> dict:
    """Train a projection on (queries, qrels) with hard negatives from `first_stage`.

    `docs` maps doc id -> (title, text). Writes the checkpoint to `output` and
    returns the training report (figures on the held-out training queries).
    `precision` (default `auto`) is how the frozen encoder runs here; the
    checkpoint does not record it and runs in any precision. `in_domain` names
    the collection the training queries come from: its unlabelled pairs train but
    do not guard the epoch choice (the held-out queries speak for it).
    """
    cfg = config or TrainConfig()
    start = time.time()
    if threads:
        torch.set_num_threads(threads)  # the result depends on the thread count (float reductions)
    texts = {kind: {stored_name(n): unlabelled_pairs(n, kind, cfg) for n in getattr(cfg, field)}
             for kind, (_, field) in PAIR_KINDS.items()}  # before any model work
    rng = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    encoder = TokenEncoder(encoder_model, query_length=cfg.query_length, doc_length=cfg.doc_length,
                           markers=cfg.markers, augment=cfg.augment, threads=threads,
                           precision=precision, progress=None)
    dindex = {d: i for i, d in enumerate(docs)}
    qids, held = training_split(queries, qrels, dindex, cfg)
    dstates = document_states(encoder, docs, cache_dir)
    qstates = cached_states(encoder, [queries[q] for q in qids], True, cache_dir, desc="queries")
    qindex = {q: i for i, q in enumerate(qids)}
    pairs = [(qstates, qindex[q], dstates, dindex[d], q) for q in qids if q not in held
             for d, g in qrels[q].items() if g > 0 and d in dindex]
    if cfg.titles:
        pairs += _title_pairs(encoder, docs, cache_dir)
    unlabelled = {kind: {name: pair_states(encoder, name, cfg, cache_dir, kind, made)
                         for name, made in corpora.items()} for kind, corpora in texts.items()}
    for iq, idoc, n_train in (s for kind in unlabelled.values() for s in kind.values()):
        pairs += [(iq, j, idoc, j, None) for j in range(n_train)]
    negatives = {q: [(dstates, dindex[d]) for d, _ in first_stage.get(q, [])[:cfg.negative_depth]
                     if qrels[q].get(d, 0) <= 0 and d in dindex] for q in qids}
    _log(f"{len(pairs)} training pairs, {len(held)} held-out queries, cache ready in "
         f"{time.time() - start:.0f}s")
    start_point = torch.from_numpy(pca_init(dstates.states, cfg.dim, cfg.seed))
    w = torch.nn.Parameter(start_point.clone())
    opt = torch.optim.Adam([w], lr=cfg.lr)
    held_q = Queries((q, queries[q]) for q in qids if q in held)
    held_qrels = Qrels((q, qrels[q]) for q in held_q)
    held_run = Run({q: first_stage[q][:cfg.depth] for q in held_q if q in first_stage})
    guarded = {kind: [name for name in corpora if name != in_domain]  # out of domain: do no harm there
               for kind, corpora in unlabelled.items()}
    history, best = [], (-1.0, None, 0)
    for epoch in range(cfg.epochs + 1):
        if epoch:
            _train_epoch(w, opt, start_point, pairs, negatives, cfg, rng)
        proj = w.detach().numpy().copy()
        late = rerank_cached(proj, qstates, qindex, dstates, dindex, held_run, cfg.depth)
        ndcg = evaluate(late, held_qrels, ["nDCG@10"])["nDCG@10"]
        mrr = {kind: {name: round(pairs_mrr(proj, *states), 4) for name, states in corpora.items()}
               for kind, corpora in unlabelled.items()}
        record = {f"{kind}_mrr": values for kind, values in mrr.items()}
        history.append({"epoch": epoch, "heldout_ndcg10": round(ndcg, 4), **record,
                        "seconds": round(time.time() - start, 1)})
        note = "".join(f", held-out {PAIR_KINDS[kind][0]} MRR {v}" for kind, v in mrr.items() if v)
        eligible = all(mrr_guard(history, names, f"{kind}_mrr") for kind, names in guarded.items())
        guard = "" if eligible else " (held-out MRR below epoch 0: not eligible)"
        _log(f"epoch {epoch}: held-out nDCG@10 {ndcg:.4f}{note}{guard} ({time.time() - start:.0f}s)")
        if eligible and ndcg > best[0]:
            best = (ndcg, proj, epoch)
    ndcg, proj, epoch = best
    late = rerank_cached(proj, qstates, qindex, dstates, dindex, held_run, cfg.depth)
    chosen = fusion_choice(held_run, late, held_qrels, cfg.depth)
    weight = chosen.setting[1]
    fused = evaluate(held_run if chosen.kept else fuse(held_run, late, weight, cfg.depth), held_qrels,
                     ["nDCG@10"])["nDCG@10"]
    first = evaluate(held_run, held_qrels, ["nDCG@10"])["nDCG@10"]
    sources = {field: list(unlabelled[kind]) for kind, (_, field) in PAIR_KINDS.items()}
    info = {"config": asdict(cfg) | sources,  # corpus names, never this machine's paths
            "best_epoch": epoch, "heldout_ndcg10": round(ndcg, 4),
            "heldout_first_stage_ndcg10": round(first, 4), "interpolate": weight,
            "heldout_fused_ndcg10": round(fused, 4), "fusion_choice": choice.record(chosen),
            "train_seconds": round(time.time() - start, 1),
            "training_pairs": len(pairs), "heldout_queries": len(held),
            **{f"{kind}_guard": names for kind, names in guarded.items()}, "history": history}
    save_checkpoint(output, proj, encoder.settings(), info)
    _log(f"best epoch {epoch}: held-out nDCG@10 {ndcg:.4f} (first stage {first:.4f}); "
         f"{choice.describe(chosen)}; wrote {output}")
    return info


def source_pairs(sources: list[Source], cfg: TrainConfig,
                 max_pairs: int | None = None) -> tuple[list[tuple], dict]:
    """Training pairs of every source's training (not held-out) queries, at most `max_pairs` per source
    (a seeded sample), and each query's hard negatives from the top `negative_depth` of its source's first
    stage and of each of its `negative_runs` (judged-relevant documents excluded, each document once):
    keyed by (source name, query id)."""
    pairs, negatives = [], {}
    for s in sources:
        own = [(s.queries, s.qindex[q], s.docs, s.dindex[d], (s.name, q)) for q in s.training_ids
               for d, g in s.qrels[q].items() if g > 0 and d in s.dindex]
        if max_pairs is not None and len(own) > max_pairs:
            own = random.Random(f"{cfg.seed}:{s.name}").sample(own, max_pairs)
        pairs += own
        for q in s.training_ids:
            pool = dict.fromkeys(d for run in (s.run, *s.negative_runs)
                                 for d, _ in run.get(q, [])[:cfg.negative_depth])
            negatives[s.name, q] = [(s.docs, s.dindex[d]) for d in pool
                                    if s.qrels[q].get(d, 0) <= 0 and d in s.dindex]
    return pairs, negatives


def teacher_scores(sources: list[Source]) -> dict[tuple[str, str], dict[int, float]]:
    """Each training query's teacher scores (`Source.teacher`) by document row: keyed as `source_pairs`
    keys its negatives."""
    return {(s.name, q): {s.dindex[d]: score for d, score in s.teacher.get(q, []) if d in s.dindex}
            for s in sources if s.teacher is not None for q in s.training_ids}


def validate_sources(proj: np.ndarray | Head | None, sources: list[Source], depth: int) -> dict[str, float]:
    """nDCG@10 of MaxSim (projection `proj`; None: zero-shot) reranking each source's held-out queries'
    first-stage top `depth`."""
    out = {}
    for s in sources:
        run = Run({q: s.run[q][:depth] for q in s.held if s.run.get(q)})
        late = rerank_cached(proj, s.queries, s.qindex, s.docs, s.dindex, run, depth)
        out[s.name] = round(evaluate(late, Qrels((q, s.qrels[q]) for q in run), ["nDCG@10"])["nDCG@10"], 4)
    return out


def train_sources(sources: list[Source], output: str | Path, encoder_settings: dict,
                  config: TrainConfig | None = None, *, threads: int | None = None,
                  max_pairs: int | None = None, extra_info: dict | None = None) -> dict:
    """Train one projection on several judged sources (`sources.Source`) at once.

    Each source's held-out queries validate: the epoch kept is the one with the best mean over the
    sources of held-out nDCG@10 (MaxSim reranking the first stage's top `depth`); epoch 0 is the
    zero-shot projection (at dim = hidden size), so it is a candidate too. Writes the checkpoint to
    `output` (settings `encoder_settings`) and returns its report.
    """
    cfg = config or TrainConfig()
    start = time.time()
    if threads:
        torch.set_num_threads(threads)
    rng = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    pairs, negatives = source_pairs(sources, cfg, max_pairs)
    teacher = teacher_scores(sources) if cfg.distill else None
    sample = np.random.default_rng(cfg.seed)
    per = 50_000 // len(sources)
    states = np.concatenate([s.docs.states[sample.choice(len(s.docs.states), min(per, len(s.docs.states)),
                                                          replace=False)] for s in sources])
    start_point = torch.from_numpy(pca_init(states, cfg.dim, cfg.seed))
    w = torch.nn.Parameter(start_point.clone())
    params: Params = w
    if cfg.mlp_width:  # a residual MLP head; its output layer starts at zero, so epoch 0 is the linear start
        hidden = start_point.shape[1]
        params = (w, torch.nn.Parameter(torch.randn(cfg.mlp_width, hidden) / hidden ** 0.5),
                  torch.nn.Parameter(torch.zeros(cfg.dim, cfg.mlp_width)))
    opt = torch.optim.Adam([params] if isinstance(params, torch.Tensor) else list(params), lr=cfg.lr)
    _log(f"{len(pairs)} training pairs from {', '.join(s.name for s in sources)}; held out "
         + ", ".join(f"{s.name} {len(s.held)}" for s in sources))
    history, best = [], (-1.0, None, 0)
    for epoch in range(cfg.epochs + 1):
        if epoch:
            _train_epoch(params, opt, start_point, pairs, negatives, cfg, rng, teacher)
        proj = _head(params) if cfg.mlp_width else w.detach().numpy().copy()
        held = validate_sources(proj, sources, cfg.depth)
        mean = round(float(np.mean(list(held.values()))), 4)
        history.append({"epoch": epoch, "heldout_ndcg10": held, "mean_heldout_ndcg10": mean,
                        "seconds": round(time.time() - start, 1)})
        _log(f"epoch {epoch}: held-out nDCG@10 {held}, mean {mean} ({time.time() - start:.0f}s)")
        if mean > best[0]:
            best = (mean, proj, epoch)
    mean, proj, epoch = best
    info = {"config": asdict(cfg), "sources": [s.name for s in sources], "max_pairs_per_source": max_pairs,
            "best_epoch": epoch, "mean_heldout_ndcg10": mean, "training_pairs": len(pairs),
            "heldout_queries": {s.name: len(s.held) for s in sources},
            "train_seconds": round(time.time() - start, 1), "history": history, **(extra_info or {})}
    save_checkpoint(output, proj, encoder_settings, info)
    _log(f"best epoch {epoch}: mean held-out nDCG@10 {mean}; wrote {output}")
    return info


def _title_pairs(encoder: TokenEncoder, docs: dict[str, tuple[str, str]],
                 cache_dir: str | Path | None) -> list[tuple]:
    """(title -> rest of the document) training pairs, from every document that has both."""
    titled = [(t, x) for t, x in docs.values() if t and x]
    titles = cached_states(encoder, [t for t, _ in titled], True, cache_dir, desc="titles")
    bodies = cached_states(encoder, [x for _, x in titled], False, cache_dir, desc="abstracts")
    return [(titles, j, bodies, j, None) for j in range(len(titled))]


def _train_epoch(w: Params, opt: torch.optim.Optimizer, start_point: torch.Tensor, pairs: list,
                 negatives: dict, cfg: TrainConfig, rng: random.Random, teacher: dict | None = None) -> None:
    """One pass over the pairs, shuffled: a step per batch on the contrastive loss (plus distillation
    from `teacher`, when given) plus the anchor."""
    rng.shuffle(pairs)
    for b in range(0, len(pairs), cfg.batch_size):
        loss = _step(w, pairs[b:b + cfg.batch_size], negatives, cfg, rng, teacher)
        if cfg.anchor:  # on the projection (an MLP head's output layer starts at zero and is free)
            p = w if isinstance(w, torch.Tensor) else w[0]
            loss = loss + cfg.anchor * (p - start_point).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


def stored_name(corpus: str) -> str:
    """How a checkpoint names an ICT corpus: a bundled collection by name, a file by its name and
    SHA-256 (collections.describe), never by this machine's path to it."""
    return corpus if collections.named(corpus, files_only=True) else collections.describe(corpus)


def mrr_guard(history: list[dict], corpora: list[str], key: str = "ict_mrr") -> bool:
    """Whether the last epoch keeps held-out MRR (in its record's `key`: ICT's by default) at or
    above epoch 0's on each of `corpora`."""
    if not corpora:
        return True
    start, last = history[0][key], history[-1][key]
    return all(last[name] >= start[name] for name in corpora)


def _step(w: Params, batch: list, negatives: dict, cfg: TrainConfig,
          rng: random.Random, teacher: dict | None = None) -> torch.Tensor:
    """Contrastive loss of one batch: positive i against all batch documents; with a `teacher`
    (key -> {document row: score}), plus `cfg.distill` times the mean KL divergence from the teacher's
    softmax to MaxSim's over each query's own positive and hard negatives that the teacher scored.

    A pair is (query states, row, positive states, row, query key or None);
    only pairs with a key get hard negatives, (states, row) of `negatives[key]`.
    """
    queries = [(qsrc, qi) for qsrc, qi, _, _, _ in batch]
    docs: list[tuple[Packed, int]] = [(dsrc, di) for _, _, dsrc, di, _ in batch]
    own: list[list[tuple[int, int]]] = []  # per query: (batch column, document row) of its own documents
    for i, (*_, di, qid) in enumerate(batch):
        pool = negatives.get(qid, []) if qid else []
        picks = rng.sample(pool, min(cfg.negatives, len(pool))) if pool else []
        own.append([(i, di)] + [(len(docs) + j, row) for j, (_, row) in enumerate(picks)])
        docs += picks
    q, qmask = _pad_mixed(queries)
    d, dmask = _pad_mixed(docs)
    raw = _scores(w, q, qmask, d, dmask)
    loss = torch.nn.functional.cross_entropy(raw / cfg.temperature, torch.arange(len(batch)))
    if teacher and cfg.distill:
        terms = []
        for i, (*_, qid) in enumerate(batch):
            known = teacher.get(qid, {}) if qid else {}
            cols = [(c, known[row]) for c, row in own[i] if row in known]
            if len(cols) < 2:
                continue
            target = torch.softmax(torch.tensor([t for _, t in cols]) / cfg.distill_temperature, dim=0)
            student = torch.log_softmax(raw[i, [c for c, _ in cols]] / cfg.temperature, dim=0)
            terms.append(torch.nn.functional.kl_div(student, target, reduction="sum"))
        if terms:
            loss = loss + cfg.distill * torch.stack(terms).mean()
    return loss


# Kinds of unlabelled pairs: the name logs and reports use, and the TrainConfig field listing their corpora.
# A checkpoint records each kind's corpora under that field, its guard as `{kind}_guard` and each epoch's
# held-out MRR as `{kind}_mrr`.
PAIR_KINDS = {"ict": ("ICT", "pairs_from"), "title": ("title", "title_pairs_from")}


def unlabelled_pairs(name: str, kind: str, cfg: TrainConfig) -> list[tuple[str, str]]:
    """Up to `pairs_per_collection` (pseudo-query, positive) texts of `kind` (ict or title) from
    collection `name`'s documents; refuses a corpus that gives none."""
    from retrieval.collections import load_documents

    docs, limit = load_documents(name), cfg.pairs_per_collection
    if kind == "ict":
        pairs, why = corpus_pairs((d.contents for d in docs), limit, cfg.seed), "documents too short"
    else:
        pairs = title_pairs(((d.title, d.text) for d in docs), limit, cfg.seed)
        why = "expected documents with a title field and a body"
    if not pairs:
        raise InputError(f"no {PAIR_KINDS[kind][0]} pairs could be made from {name!r} ({why})")
    return pairs


def pair_states(encoder: TokenEncoder, name: str, cfg: TrainConfig, cache_dir: str | Path | None,
                kind: str = "ict", pairs: list[tuple[str, str]] | None = None) -> tuple[Packed, Packed, int]:
    """Encoded unlabelled pairs (`pairs`, or `unlabelled_pairs(name, kind, cfg)`):
    (pseudo-queries, positives, training count).

    Rows from the training count on are held out to measure their MRR each epoch.
    """
    pairs = pairs if pairs is not None else unlabelled_pairs(name, kind, cfg)
    what = f"{name} {PAIR_KINDS[kind][0]}"
    queries = cached_states(encoder, [q for q, _ in pairs], True, cache_dir, desc=f"{what} queries")
    positives = cached_states(encoder, [p for _, p in pairs], False, cache_dir, desc=f"{what} passages")
    n_train = len(pairs) - max(1, int(len(pairs) * cfg.holdout))
    _log(f"{name}: {len(pairs)} {PAIR_KINDS[kind][0]} pairs from the corpus, {len(pairs) - n_train} held out")
    return queries, positives, max(n_train, 0)


def pairs_mrr(w: np.ndarray, queries: Packed, positives: Packed, start: int) -> float:
    """MRR of each held-out pseudo-query's positive among all held-out positives (rows start..)."""
    rows = list(range(start, len(queries)))
    if not rows:
        return 0.0
    wt = np.ascontiguousarray(w.T, dtype=np.float32)
    docs = [normalise(positives[i].astype(np.float32) @ wt) for i in rows]
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in docs])])
    flat = np.concatenate(docs)
    ranks = []
    for j, i in enumerate(rows):
        scores = maxsim(normalise(queries[i].astype(np.float32) @ wt), flat, offsets)
        ranks.append(1.0 / (1 + int((scores > scores[j]).sum())))
    return float(np.mean(ranks))


def _pad_mixed(items: list[tuple[Packed, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    arrays = [src[i] for src, i in items]
    return _pad(Packed.pack(arrays, np.float32), list(range(len(arrays))))
