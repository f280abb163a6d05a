"""Benchmark: do the neural stages pay their way? First stages against late-interaction cascades.

    python eval/bench_neural.py [--workdir /tmp/bench_neural] [--cache-dir DIR] [--threads 1]
        [--validation-only]

For each of CACM, Cranfield, Vaswani and SciFact (test): bm25, hybrid (BM25 +
dense, the registry's defaults), bm25>>late and hybrid>>late (the late
reranker fused with its first stage, the hits below its depth kept after the
reranked ones: the stage's defaults' form), and zero-shot MaxSim (BM25's top
100, MaxSim alone); nDCG@10 and MAP, each late pipeline with a paired t-test
against its own first stage, and the same over the pooled queries of the four.

The late reranker's fused weight and depth are chosen by leave-one-collection-out
validation, before any test figure is computed: for collection X, the grid
point with the best mean of (nDCG@10 + MAP) / 2 over the other judged
collections among CACM, Cranfield, Vaswani and SciFact *train* (for SciFact,
the first three: none of SciFact's topics or judgements), and over both first
stages (bm25, hybrid). Of SciFact train, only the 121 queries the checkpoint's
training held out (it was trained on the others, so they would validate
nothing; the held-out ones chose its epoch, not its weights). The shipped default (retrieval.pipeline.params
LATE_WEIGHT and RERANK_DEPTH) is the choice over all four. Ties go to the
larger weight (more of the first stage), then the smaller depth (cheaper).
`--validation-only` stops after writing those choices.

MaxSim comes from cached frozen encoder states of each whole corpus
(`retrieval.late.cache`, the checkpoint's projection applied as the reranker
does: retrieval.late.train.rerank_cached) and is fused by the stage's own
function (retrieval.late.reranker.reranked). The late model is the shipped
checkpoint (trained on SciFact train judgements only, so on CACM, Cranfield and
Vaswani it has seen none of their topics). Writes eval/results/neural.md.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from benchlib import machine_line, publish  # noqa: E402

from retrieval.collections import load_documents, load_qrels, load_topics  # noqa: E402
from retrieval.evaluation.measures import per_query  # noqa: E402
from retrieval.evaluation.significance import p_values  # noqa: E402
from retrieval.index.native import Index  # noqa: E402
from retrieval.late.reranker import reranked  # noqa: E402
from retrieval.registry import build  # noqa: E402
from retrieval.types import Qrels, Queries, Run  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "neural.md"
COLLECTIONS = ("cacm", "cranfield", "vaswani", "scifact")
VALIDATION = {"cacm": "cacm", "cranfield": "cranfield", "vaswani": "vaswani", "scifact": "scifact:train"}
WEIGHTS = [round(0.1 * i, 1) for i in range(10)]  # 0 (MaxSim alone) .. 0.9 on the first stage
DEPTHS = [10, 20, 30, 50, 100]
MAX_DEPTH = max(DEPTHS)
FIRST = ("bm25", "hybrid")
TRAINED_ON = "scifact:train"  # the shipped checkpoint's training topics: validation uses its held-out ones
MEASURES = ["nDCG@10", "MAP"]
ALPHA = 0.05


def index_for(name: str, workdir: Path) -> Index:
    """The collection's index with its dense part (built once with `retrieval index --dense`)."""
    from retrieval.cli import main as cli

    path = workdir / name
    if not (path / "dense").is_dir():
        assert cli(["index", "--collection", name, "--index", str(path), "--dense", "--force"]) == 0
    return Index.open(path)


class TopicSet:
    """One topic set of a collection: its first-stage runs and the MaxSim of their top hits."""

    def __init__(self, collection: str, topics: str, index: Index, cache_dir: Path | None, threads: int):
        from retrieval.late import DEFAULT_CHECKPOINT
        from retrieval.late.cache import cached_states
        from retrieval.late.encoder import TokenEncoder
        from retrieval.late.model import load_checkpoint
        from retrieval.late.train import rerank_cached

        self.name, self.queries, self.qrels = topics, load_topics(topics), load_qrels(topics)
        docs = list(load_documents(collection))
        if topics == TRAINED_ON:  # only the checkpoint's held-out training queries: it learnt the others
            held = self.held_out(docs)
            self.name = f"{topics} held out ({len(held)})"
            self.queries = Queries({q: t for q, t in self.queries.items() if q in held})
            self.qrels = Qrels({q: r for q, r in self.qrels.items() if q in held})
        self.runs: dict[str, Run] = {}
        for first in FIRST:
            run = build(first, index, threads=threads)(self.queries)
            self.runs[first] = run.without_query_ids() if collection == "scifact" else run
        enc = TokenEncoder(None, threads=threads, progress=False)
        ds = cached_states(enc, [d.contents for d in docs], False, cache_dir)
        qs = cached_states(enc, list(self.queries.values()), True, cache_dir)
        dindex, qindex = {d.id: i for i, d in enumerate(docs)}, {q: i for i, q in enumerate(self.queries)}
        proj, _ = load_checkpoint(DEFAULT_CHECKPOINT)
        self.maxsim = {}  # (first stage, model) -> {query: MaxSim of its top MAX_DEPTH, in rank order}
        for first, model, w in [*((f, "trained", proj) for f in FIRST), ("bm25", "zero-shot", None)]:
            scored = rerank_cached(w, qs, qindex, ds, dindex, self.runs[first], MAX_DEPTH)
            by_doc = {q: dict(hits) for q, hits in scored.items()}
            self.maxsim[first, model] = {q: [by_doc[q][d] for d, _ in hits[:MAX_DEPTH]]
                                         for q, hits in self.runs[first].items()}
        self._per_query: dict[tuple, dict] = {}

    @staticmethod
    def held_out(docs: list) -> set[str]:
        """The checkpoint's held-out training queries (the training's own split; its record's count)."""
        import json

        from safetensors import safe_open

        from retrieval.late import DEFAULT_CHECKPOINT
        from retrieval.late.config import TrainConfig
        from retrieval.late.train import training_split

        with safe_open(str(DEFAULT_CHECKPOINT), framework="numpy") as f:
            info = json.loads(f.metadata()["info"])
        cfg = TrainConfig(**{k: v for k, v in info["config"].items() if k in ("seed", "holdout")})
        _, held = training_split(load_topics(TRAINED_ON), load_qrels(TRAINED_ON), {d.id for d in docs}, cfg)
        assert len(held) == info["heldout_queries"], (len(held), info["heldout_queries"])
        return held

    def late(self, first: str, weight: float, depth: int, model: str = "trained") -> Run:
        """The first stage's run reranked as the stage does: top `depth` fused, the rest after."""
        scores = self.maxsim[first, model]
        return Run({q: reranked(hits, scores[q][:depth], weight) for q, hits in self.runs[first].items()},
                   presorted=False)

    def measured(self, system: tuple) -> dict[str, dict[str, float]]:
        """Per-query nDCG@10 and MAP of a system: ("bm25",) / ("hybrid",) or (first, w, depth[, model])."""
        if system not in self._per_query:
            run = self.runs[system[0]] if len(system) == 1 else self.late(*system)
            self._per_query[system] = per_query(run, self.qrels, MEASURES)
        return self._per_query[system]

    def mean(self, system: tuple, measure: str) -> float:
        values = self.measured(system)
        return float(np.mean([v[measure] for v in values.values()]))


def objective(sets: list[TopicSet], weight: float, depth: int, firsts: tuple[str, ...] = FIRST) -> float:
    """Mean over topic sets and first stages of (nDCG@10 + MAP) / 2 of the fused cascade."""
    return float(np.mean([(s.mean((f, weight, depth), "nDCG@10") + s.mean((f, weight, depth), "MAP")) / 2
                          for s in sets for f in firsts]))


def choose(sets: list[TopicSet], firsts: tuple[str, ...] = FIRST) -> tuple[float, int, float]:
    """The grid's best (weight, depth) on `sets`, and its objective; ties: larger weight, smaller depth."""
    scored = {(w, d): objective(sets, w, d, firsts) for w in WEIGHTS for d in DEPTHS}
    (w, d), best = max(scored.items(), key=lambda kv: (round(kv[1], 10), kv[0][0], -kv[0][1]))
    return w, d, best


def validation_section(sets: dict[str, TopicSet]) -> tuple[str, dict[tuple[str, str], tuple[float, int]]]:
    """The leave-one-collection-out choices and the validation figures behind them: one weight and depth
    for both first stages (the default's form), and, beside it, one for each first stage alone."""
    lines = ["| held out | chosen on | for first stages | weight | depth | validation objective |"
             " first stages' objective |", "|---|---|---|---:|---:|---:|---:|"]
    choices = {}
    for held in [*COLLECTIONS, "shipped default"]:
        on = [s for c, s in sets.items() if c != held]
        for firsts in (FIRST, *((f,) for f in FIRST)):
            w, d, best = choose(on, firsts)
            base = float(np.mean([(s.mean((f,), "nDCG@10") + s.mean((f,), "MAP")) / 2
                                  for s in on for f in firsts]))
            choices[held, "+".join(firsts)] = (w, d)
            lines.append(f"| {held} | {', '.join(s.name for s in on)} | {' and '.join(firsts)} | {w} | {d} | "
                         f"{best:.4f} | {base:.4f} |")
    grid = ["| weight \\ depth | " + " | ".join(str(d) for d in DEPTHS) + " |",
            "|---:|" + "---:|" * len(DEPTHS)]
    on = list(sets.values())
    for w in WEIGHTS:
        grid.append(f"| {w} | " + " | ".join(f"{objective(on, w, d):.4f}" for d in DEPTHS) + " |")
    per_set = ["| validation topics | first stage | nDCG@10 | MAP | fused at the shipped default: nDCG@10 "
               "| MAP |",
               "|---|---|---:|---:|---:|---:|"]
    w, d = choices["shipped default", "+".join(FIRST)]
    for s in on:
        for f in FIRST:
            per_set.append(f"| {s.name} | {f} | {s.mean((f,), 'nDCG@10'):.4f} | {s.mean((f,), 'MAP'):.4f} | "
                           f"{s.mean((f, w, d), 'nDCG@10'):.4f} | {s.mean((f, w, d), 'MAP'):.4f} |")
    text = ("## Validation: the fused weight and depth, leave one collection out\n\n"
            "Objective: mean over the validation topic sets and both first stages (bm25, hybrid) of "
            "(nDCG@10 + MAP) / 2 of the cascade; grid weight " + ", ".join(map(str, WEIGHTS))
            + " (on the first stage; 0 is MaxSim alone), depth " + ", ".join(map(str, DEPTHS)) + ".\n\n"
            + "\n".join(lines) + "\n\nThe objective over all four validation sets (the shipped default's "
            "choice) on the whole grid:\n\n" + "\n".join(grid)
            + "\n\nEach validation set at the shipped default:\n\n" + "\n".join(per_set) + "\n")
    return text, choices


def compare(a: list[float], b: list[float]) -> str:
    """Mean difference and paired t-test p (marked * when significant at ALPHA)."""
    diff = float(np.mean(np.array(a) - np.array(b)))
    p = p_values(np.array(a), np.array(b))["t"]
    return f"{diff:+.4f} (p={p:.3f}{'*' if p < ALPHA else ''})"


def test_section(tests: dict[str, TopicSet], choices: dict[tuple[str, str], tuple[float, int]]) -> str:
    """The test table: every system on every collection, late pipelines against their first stage."""
    rows = ["| collection | system | nDCG@10 | MAP | vs first stage: nDCG@10 | MAP |",
            "|---|---|---:|---:|---|---|"]
    pooled: dict[str, dict[str, tuple[list[float], list[float]]]] = {}  # row kind -> measure -> (it, first)
    best = []
    joint = "+".join(FIRST)
    for c, s in tests.items():
        systems = [("bm25", "bm25", ("bm25",), None), ("hybrid", "hybrid", ("hybrid",), None)]
        for f in FIRST:
            w, d = choices[c, joint]
            systems.append((f"{f}>>late", f"{f}>>late (fused, w={w}, depth {d})", (f, w, d), (f,)))
        for f in FIRST:
            w, d = choices[c, f]
            systems.append((f"{f}>>late, weight for {f}", f"{f}>>late (weight for {f}: w={w}, depth {d})",
                            (f, w, d), (f,)))
        systems.append(("zero-shot MaxSim", "zero-shot MaxSim (bm25 top 100)",
                        ("bm25", 0.0, 100, "zero-shot"), ("bm25",)))
        means = {}
        for kind, label, system, against in systems:
            values = s.measured(system)
            qids = sorted(values)
            m = {k: float(np.mean([values[q][k] for q in qids])) for k in MEASURES}
            means[label] = m
            cells = ["", ""]
            if against is not None:
                base = s.measured(against)
                cells = [compare([values[q][k] for q in qids], [base[q][k] for q in qids]) for k in MEASURES]
                for k in MEASURES:
                    it, first = pooled.setdefault(kind, {}).setdefault(k, ([], []))
                    it.extend(values[q][k] for q in qids)
                    first.extend(base[q][k] for q in qids)
            rows.append(f"| {c} ({len(qids)} queries) | {label} | {m['nDCG@10']:.4f} | {m['MAP']:.4f} | "
                        f"{cells[0]} | {cells[1]} |")
        top = max(means, key=lambda k: means[k]["nDCG@10"])
        best.append(f"{c}: {top}")
    pool = ["| pooled queries | n | nDCG@10 | MAP | vs first stage: nDCG@10 | MAP |",
            "|---|---:|---:|---:|---|---|"]
    for kind, by_measure in pooled.items():
        a = by_measure["nDCG@10"][0]
        pool.append(f"| {kind} | {len(a)} | {np.mean(a):.4f} | {np.mean(by_measure['MAP'][0]):.4f} | "
                    + " | ".join(compare(*by_measure[k]) for k in MEASURES) + " |")
    return ("## Test: the four collections (each with its leave-one-out weight and depth)\n\n"
            "Paired t-test against the row's own first stage (zero-shot MaxSim: against bm25); * "
            f"significant at {ALPHA} (two-sided, uncorrected).\n\n" + "\n".join(rows)
            + "\n\nPooled over the four collections' queries:\n\n" + "\n".join(pool)
            + "\n\nBest system by nDCG@10: " + "; ".join(best) + ".\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/bench_neural"))
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--validation-only", action="store_true")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    indexes = {c: index_for(c, args.workdir) for c in COLLECTIONS}
    sets = {c: TopicSet(c, VALIDATION[c], indexes[c], args.cache_dir, args.threads) for c in COLLECTIONS}
    validation, choices = validation_section(sets)
    print(validation, flush=True)
    if args.validation_only:
        return
    tests = {c: sets[c] if c != "scifact" else TopicSet(c, c, indexes[c], args.cache_dir, args.threads)
             for c in COLLECTIONS}
    text = test_section(tests, choices)
    shipped = choices["shipped default", "+".join(FIRST)]
    s = tests["scifact"]
    note = (f"\nThe choice over all four validation sets (shipped as retrieval.pipeline.params LATE_WEIGHT "
            f"and RERANK_DEPTH): weight {shipped[0]}, depth {shipped[1]}. SciFact test, the checkpoint alone "
            "reranking BM25's top 100 (MaxSim, "
            f"weight 0): nDCG@10 {s.mean(('bm25', 0.0, 100), 'nDCG@10'):.4f}; at the shipped default: "
            f"bm25>>late {s.mean(('bm25', *shipped), 'nDCG@10'):.4f}, hybrid>>late "
            f"{s.mean(('hybrid', *shipped), 'nDCG@10'):.4f}.\n")
    body = (f"# Neural stages against their first stages\n\nMachine: {machine_line('torch', 'faiss-cpu')}"
            f"; {time.perf_counter() - start:.0f} s.\n\n{validation}\n{text}{note}")
    print(text + note)
    publish(RESULTS, body)


if __name__ == "__main__":
    main()
