"""Benchmark: do the neural stages pay their way? First stages against late-interaction cascades,
each collection with the late model trained without it (leave one collection out).

    python eval/bench_neural.py --models DIR [DIR ...] [--workdir /tmp/bench_neural] [--cache-dir DIR]
        [--states-root DIR] [--choices FILE] [--threads 1] [--validation-only]

DIR holds the checkpoints `python eval/train_late_loo.py --output-dir DIR` writes:
DIR/X/late.safetensors for X in cacm, cranfield, vaswani, scifact (trained on
every bundled judgement but X's, SQuAD 2.0 dev questions included) and
DIR/all/late.safetensors (every judgement but SciFact test: the shipped
candidate). Each DIR is a training run (same sources and held-out split).

For each of CACM, Cranfield, Vaswani and SciFact (test): bm25, hybrid (BM25 +
dense, the registry's defaults), bm25>>late and hybrid>>late (the late
reranker with the fusion validation chose for that first stage, the hits below
its depth kept after the reranked ones: the stage's defaults' form), and
zero-shot MaxSim (BM25's top 100, MaxSim alone); nDCG@10 and MAP, each late
pipeline with a paired t-test against its own first stage, and the same over
the pooled queries of the four.

Validation, before any test figure is computed, on the held-out share of each
training collection's topics (train.heldout_queries, the checkpoints' seed and
holdout; never X's for X's model; SciFact's are SciFact *train*'s), each
query's (nDCG@10 + AP) / 2 pooled over those topic sets:
- X's model: among every DIR's X checkpoint (its epoch chosen in training by
  MaxSim alone) and zero-shot MaxSim, the best mean over bm25 and hybrid of
  the fusion grid's best pooled objective (the fused objective);
- X's fusion for each first stage: the guarded rule of retrieval.late.choice.
  The grid is min-max interpolation at weight 0 to 0.9 or reciprocal-rank
  fusion (k = 60), depth 10 to 100, and "keep the first stage" (weight 1.0).
  A fused setting needs a one-sided paired t-test against the first stage at
  p < 0.05 / m (m = the grid times the candidate models); the best passing one
  wins, else the first stage is kept.
The shipped defaults (retrieval.pipeline.params LATE_DEFAULTS, one entry per
kind of first stage) are chosen by the same rule with the shipped model on the
held-out topics of all four collections (of SciFact train, the queries both
the committed checkpoint and the `all` candidate held out); the `all`
candidate replaces the committed checkpoint only if its mean chosen objective
there (over the two first stages) is higher, and it reaches the committed
checkpoint's SciFact test figure (0.7679 nDCG@10, MaxSim on BM25's top 100;
the issue's bar). The choices and their evidence are written to
WORKDIR/choices.json (or --choices; and printed) before the test topics are
read; `--validation-only` stops there.

MaxSim comes from frozen encoder states of each corpus (the index's zero-shot
late store, else the scratch cache: retrieval.late.sources.corpus_states),
the checkpoint's projection applied as the reranker does
(retrieval.late.train.rerank_cached), fused by the stage's own function
(retrieval.late.reranker.reranked). Indexes (with their dense part) are
WORKDIR/X, built with `retrieval index --dense` when missing. Writes
eval/results/neural.md.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from benchlib import machine_line, publish  # noqa: E402

from retrieval.collections import load_qrels, load_topics  # noqa: E402
from retrieval.evaluation.measures import per_query  # noqa: E402
from retrieval.evaluation.significance import p_values  # noqa: E402
from retrieval.index.native import Index  # noqa: E402
from retrieval.late import choice as guard  # noqa: E402
from retrieval.late.reranker import reranked  # noqa: E402
from retrieval.registry import build  # noqa: E402
from retrieval.types import Qrels, Queries, Run  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "neural.md"
COLLECTIONS = ("cacm", "cranfield", "vaswani", "scifact")
VALIDATION = {"cacm": "cacm", "cranfield": "cranfield", "vaswani": "vaswani", "scifact": "scifact:train"}
TEST = {"cacm": "cacm", "cranfield": "cranfield", "vaswani": "vaswani", "scifact": "scifact"}
ZERO_SHOT = "zero-shot"  # zero-shot MaxSim: a candidate model for every held-out collection (epoch 0)
SHIPPED = "all"  # the candidate trained on every judgement but SciFact test
CURRENT = "committed"  # the committed checkpoint (retrieval/models/late/late.safetensors)
BAR = 0.7679  # the committed checkpoint's SciFact test nDCG@10, MaxSim on BM25's top 100 (the issue's bar)
WEIGHTS = [round(0.1 * i, 1) for i in range(10)]  # 0 (MaxSim alone) .. 0.9 on the first stage
FUSIONS = [("interpolate", w) for w in WEIGHTS] + [("rrf", 0.0)]
DEPTHS = [10, 20, 30, 50, 100]
MAX_DEPTH = max(DEPTHS)
FIRST = ("bm25", "hybrid")
MEASURES = ["nDCG@10", "MAP"]
ALPHA = 0.05


def index_for(name: str, workdir: Path, dense: bool = True) -> Index:
    """The collection's index with its dense part (built once with `retrieval index --dense`); with
    `dense` False, whatever index WORKDIR/X holds, built without a dense part if missing (then the
    hybrid rows of X are not measured)."""
    from retrieval.cli import main as cli

    path = workdir / name
    if not (path / "manifest.json").is_file() or (dense and not (path / "dense").is_dir()):
        extra = ["--dense"] if dense else []
        assert cli(["index", "--collection", name, "--index", str(path), *extra, "--force"]) == 0
    return Index.open(path)


def checkpoint_split(path: Path) -> tuple[dict, dict]:
    """A LOO checkpoint's training record: (its config, its held-out query counts per source)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        info = json.loads(f.metadata()["info"])
    return info["config"], info["heldout_queries"]


def trained_on(path: Path) -> list[str]:
    """The collections (among COLLECTIONS) whose training topics trained the checkpoint."""
    counts = checkpoint_split(path)[1]
    return [c for c in COLLECTIONS if VALIDATION[c] in counts]


class TopicSet:
    """One topic set of a collection: first-stage runs and the MaxSim of their top hits under each model."""

    def __init__(self, collection: str, topics: str, index: Index, threads: int, states: tuple,
                 held: set[str] | None = None):
        self.name, self.queries, self.qrels = topics, load_topics(topics), load_qrels(topics)
        self.held = set(self.queries) if held is None else held
        if held is not None:
            self.name = f"{topics} held out ({len(held)})"
            self.queries = Queries({q: t for q, t in self.queries.items() if q in held})
        self.qrels = Qrels({q: r for q, r in self.qrels.items() if q in self.queries})
        self.runs: dict[str, Run] = {}
        self.firsts = tuple(f for f in FIRST if f != "hybrid" or index.has("dense"))
        for first in self.firsts:
            run = build(first, index, threads=threads)(self.queries)
            self.runs[first] = run.without_query_ids() if collection == "scifact" else run
        self.encoder, self.cache_dir, (self.ds, self.dindex) = states
        self.maxsim: dict[tuple[str, str], dict[str, list[float]]] = {}  # (first stage, model) -> scores
        self._per_query: dict[tuple, dict] = {}

    def score(self, model: str, projection: object, firsts: tuple[str, ...] = FIRST) -> None:
        """MaxSim of each first stage's top MAX_DEPTH under `projection` (None: zero-shot), as `model`."""
        firsts = tuple(f for f in firsts if f in self.firsts)
        from retrieval.late.cache import cached_states
        from retrieval.late.train import rerank_cached

        qs = cached_states(self.encoder, list(self.queries.values()), True, self.cache_dir)
        qindex = {q: i for i, q in enumerate(self.queries)}
        for first in firsts:
            scored = rerank_cached(projection, qs, qindex, self.ds, self.dindex, self.runs[first], MAX_DEPTH)
            by_doc = {q: dict(hits) for q, hits in scored.items()}
            self.maxsim[first, model] = {q: [by_doc[q][d] for d, _ in hits[:MAX_DEPTH]]
                                         for q, hits in self.runs[first].items()}

    def late(self, first: str, model: str, fusion: str, weight: float, depth: int) -> Run:
        """The first stage's run reranked as the stage does: top `depth` fused, the rest after."""
        scores = self.maxsim[first, model]
        return Run({q: reranked(hits, scores[q][:depth], weight, fusion)
                    for q, hits in self.runs[first].items()}, presorted=False)

    def measured(self, system: tuple) -> dict[str, dict[str, float]]:
        """Per-query nDCG@10 and MAP: ("bm25",) / ("hybrid",) or (first, model, fusion, weight, depth)."""
        if len(system) > 1 and guard.keeps(system[2:]):  # the stage returns its first stage's run
            return self.measured(system[:1])
        if system not in self._per_query:
            run = self.runs[system[0]] if len(system) == 1 else self.late(*system)
            self._per_query[system] = per_query(run, self.qrels, MEASURES)
        return self._per_query[system]

    def mean(self, system: tuple, measure: str) -> float:
        values = self.measured(system)
        return float(np.mean([v[measure] for v in values.values()]))


def pooled(sets: list[TopicSet], system: tuple) -> dict[tuple[str, str], float]:
    """(nDCG@10 + AP) / 2 of each query of `sets` (keyed by topic set and query id) under `system`: a
    first stage (first,) or a cascade (first, model, fusion, weight, depth)."""
    return {(s.name, q): (v["nDCG@10"] + v["MAP"]) / 2 for s in sets for q, v in s.measured(system).items()}


def pooled_mean(sets: list[TopicSet], system: tuple) -> float:
    return float(np.mean(list(pooled(sets, system).values())))


def grid_best(sets: list[TopicSet], model: str, first: str) -> tuple[guard.Setting, float]:
    """The grid's fused setting with the best pooled mean objective for `first` with `model` (unguarded:
    what chooses among a held-out collection's candidate models), and that mean."""
    scored = {(f, w, d): pooled_mean(sets, (first, model, f, w, d)) for f, w in FUSIONS for d in DEPTHS}
    best = max(scored, key=lambda k: guard.order_key(k, scored[k]))
    return best, scored[best]


def guarded(sets: list[TopicSet], model: str, first: str, m: int) -> guard.Choice:
    """The guarded choice (retrieval.late.choice) for `first` with `model` on the pooled queries of `sets`,
    at the Bonferroni level of `m` candidates."""
    grid = [(f, w, d) for f, w in FUSIONS for d in DEPTHS]
    return guard.guarded_choice(pooled(sets, (first,)), grid, lambda k: pooled(sets, (first, model, *k)), m=m)


def label(fusion: str, weight: float, depth: int) -> str:
    return guard.label((fusion, weight, depth))


def stage_label(firsts: tuple[str, ...]) -> str:
    return " and ".join(firsts)


def choice_rows(name: str, model: str, on: list[TopicSet], choices: dict, evidence: dict,
                m: int) -> list[str]:
    """The rows of one model's guarded fusion choices, one per first stage (recorded in `choices` under
    `name` as (fusion, weight, depth, validation mean) and in `evidence`); `model` names its MaxSim
    scores."""
    rows = []
    for first in FIRST:
        sets = [s for s in on if first in s.firsts]
        if not sets:
            continue
        c = guarded(sets, model, first, m)
        alone = pooled_mean(sets, (first, model, "interpolate", 0.0, 100))
        choices[name, first] = (*c.setting, round(c.mean, 4))
        evidence[name, first] = guard.record(c) | {"model": model}
        rows.append(f"| {name} | {', '.join(s.name for s in sets)}: {c.queries} | {first} | "
                    f"{c.first_mean:.4f} | {label(*c.best)} | {c.best_mean:.4f} | {c.p:.2g} | "
                    f"{c.passing} of {c.candidates} | **{label(*c.setting)}** | {c.mean:.4f} | {alone:.4f} |")
    return rows


HEAD = ("| model | chosen on: queries | first stage | first stage's objective | best fused setting | its "
        "objective | one-sided p | candidates passing | chosen | chosen's objective | MaxSim alone (depth "
        "100) |"
        "\n|---|---|---|---:|---|---:|---:|---:|---|---:|---:|")


Candidates = dict[str, tuple[Path | None, object]]  # candidate key -> (checkpoint, projection or Head)


def model_key(held: str, key: str) -> str:
    """The name a candidate's MaxSim scores go by (zero-shot MaxSim is one model for every collection)."""
    return ZERO_SHOT if key == ZERO_SHOT else f"{held}/{key}"


def validation_sets(val: dict[str, TopicSet], held: str, cands: Candidates) -> list[TopicSet]:
    """The held-out topic sets that validate `held`'s models: its training collections', never its own."""
    path = next(p for p, _ in cands.values() if p is not None)
    return [s for c, s in val.items() if c != held and c in trained_on(path)]


def choose_models(val: dict[str, TopicSet],
                  models: dict[str, Candidates]) -> tuple[dict[str, str], list[str]]:
    """Each held-out collection's model among its candidates (the training runs' checkpoints and zero-shot
    MaxSim), by the fused objective: the mean over the first stages of the grid's best pooled validation
    objective (ties: the earlier candidate); with the table rows of that choice."""
    chosen, rows = {}, []
    for held, cands in models.items():
        if held == SHIPPED:
            continue
        sets = validation_sets(val, held, cands)
        value = {k: float(np.mean([grid_best([s for s in sets if g in s.firsts], model_key(held, k), g)[1]
                                   for g in FIRST if any(g in s.firsts for s in sets)])) for k in cands}
        keys = list(cands)
        chosen[held] = max(keys, key=lambda k: (round(value[k], 10), -keys.index(k)))
        rows.append(f"| {held} | " + " | ".join(
            (f"**{value[k]:.4f}**" if k == chosen[held] else f"{value[k]:.4f}")
            + ("" if cands[k][0] is None else f" ({recorded_mean(cands[k][0]):.4f})") for k in keys) + " |")
    return chosen, rows


def validation_section(val: dict[str, TopicSet], models: dict[str, Candidates],
                       shipped_sets: list[TopicSet], candidates: list[str],
                       dirs: list[Path]) -> tuple[str, dict, dict, str, dict[str, str]]:
    """Each held-out collection's model (among its candidates, by the fused objective) and its guarded
    fusion choices per first stage, then the shipped candidates' guarded choices on `shipped_sets` and
    which candidate ships, with their validation figures. Returns the text, the choices (name, first
    stage) -> (fusion, weight, depth, mean), their evidence, the shipped winner and each collection's
    chosen candidate."""
    choices: dict = {}
    evidence: dict = {}
    grid = len(FUSIONS) * len(DEPTHS)
    chosen, model_rows = choose_models(val, models)
    lines = [HEAD]
    for held, key in chosen.items():
        m = grid * len(models[held])
        lines += choice_rows(held, model_key(held, key), validation_sets(val, held, models[held]), choices,
                             evidence, m)
    shipped_lines = [HEAD]
    for name in candidates:
        shipped_lines += choice_rows(name, name, shipped_sets, choices, evidence, grid * len(candidates))
    means = {n: float(np.mean([choices[n, f][3] for f in FIRST if (n, f) in choices])) for n in candidates}
    winner = max(candidates, key=lambda n: (round(means[n], 10), n == CURRENT))  # ties keep the checkpoint
    per_set = ["| validation topics | first stage | nDCG@10 | MAP | shipped model at its default: "
               "nDCG@10 | MAP |", "|---|---|---:|---:|---:|---:|"]
    for s in shipped_sets:
        for g in s.firsts:
            f, w, d, _ = choices[winner, g]
            per_set.append(f"| {s.name} | {g} | {s.mean((g,), 'nDCG@10'):.4f} | {s.mean((g,), 'MAP'):.4f} | "
                           f"{s.mean((g, winner, f, w, d), 'nDCG@10'):.4f} | "
                           f"{s.mean((g, winner, f, w, d), 'MAP'):.4f} |")
    epochs = ["| model | run | epoch chosen | mean held-out nDCG@10 (MaxSim, BM25 top 100) | zero-shot "
              "(epoch 0) |",
              "|---|---|---:|---:|---:|"]
    for name, cands in models.items():
        epochs += [epoch_row(name, key, path) for key, (path, _) in cands.items() if path is not None]
    keys = list(next(c for n, c in models.items() if n != SHIPPED))
    verdict = ", ".join(f"{n} {means[n]:.4f}" for n in candidates)
    text = ("## Validation: each held-out collection's model, and its fusion per first stage, guarded\n\n"
            "The training runs: " + ", ".join(f"run {i + 1} `{d}`" for i, d in enumerate(dirs))
            + ". Each run's epoch was chosen in training (the mean over its training sources of held-out "
            "nDCG@10, MaxSim on BM25's top 100; epoch 0 is zero-shot MaxSim):\n\n" + "\n".join(epochs)
            + "\n\nValidation objective: (nDCG@10 + AP) / 2 of a first stage's cascade, pooled over the "
            "held-out queries of the collections the model trained on (never the collection it is measured "
            "on; SciFact's are SciFact train's). Fusion grid: interpolation weight "
            + ", ".join(map(str, WEIGHTS)) + " (on the first stage; 0 is MaxSim alone) or rrf (k = 60), "
            "depth " + ", ".join(map(str, DEPTHS)) + f" ({grid} fused settings), and keep the first stage "
            "(weight 1.0).\n\nEach held-out collection's model, chosen among the runs' checkpoints and "
            "zero-shot MaxSim by the fused objective (the mean over bm25 and hybrid of the grid's best "
            "pooled objective; each run's recorded MaxSim-alone figure in brackets; bold: chosen):\n\n"
            "| model | " + " | ".join(keys) + " |\n|---|" + "---:|" * len(keys) + "\n" + "\n".join(model_rows)
            + "\n\nThe guarded rule (retrieval.late.choice, docs/design/late-interaction.md): a fused "
            "setting "
            f"is chosen only if a one-sided paired t-test of it against the first stage on those pooled "
            f"queries gives p < {guard.ALPHA} / m, m = the fused candidates validation looked at (the grid "
            "times the candidate models); the best mean among those that pass, else the first stage is "
            "kept:\n\n" + "\n".join(lines)
            + "\n\nThe shipped defaults (retrieval.pipeline.params.LATE_DEFAULTS), chosen by the same rule "
            f"for each candidate on the held-out topics of every judged collection ({CURRENT}: the committed "
            f"checkpoint; {SHIPPED}: trained on every judgement but SciFact test):\n\n"
            + "\n".join(shipped_lines)
            + f"\n\nMean of the two first stages' chosen objectives: {verdict}; on validation: **{winner}**"
            + (f" (it ships only if it also reaches {BAR} nDCG@10 on SciFact test with BM25's top 100)"
               if winner != CURRENT else "") + ".\n\nEach validation set with that model at its "
            "defaults:\n\n" + "\n".join(per_set) + "\n")
    return text, choices, evidence, winner, chosen


def epoch_row(name: str, key: str, path: Path) -> str:
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        info = json.loads(f.metadata()["info"])
    zero = info["history"][0]["mean_heldout_ndcg10"]
    return (f"| {name} ({', '.join(info['sources'])}) | {key} | {info['best_epoch']} | "
            f"{info['mean_heldout_ndcg10']:.4f} | "
            f"{zero:.4f} |")


def compare(a: list[float], b: list[float]) -> str:
    """Mean difference and paired t-test p (marked * when significant at ALPHA)."""
    diff = float(np.mean(np.array(a) - np.array(b)))
    p = p_values(np.array(a), np.array(b))["t"]
    return f"{diff:+.4f} (p={p:.3f}{'*' if p < ALPHA else ''})"


def test_section(tests: dict[str, TopicSet], choices: dict) -> str:
    """The test table: every system on every collection, late pipelines against their first stage."""
    rows = ["| collection | system | nDCG@10 | MAP | vs first stage: nDCG@10 | MAP |",
            "|---|---|---:|---:|---|---|"]
    pooled: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    best = []
    for c, s in tests.items():
        systems = [(g, g, (g,), None) for g in s.firsts]
        systems += [(f"{g}>>late", f"{g}>>late ({c} held out; {label(*choices[c, g][:3])})",
                     (g, c, *choices[c, g][:3]), (g,)) for g in s.firsts]
        systems.append(("zero-shot MaxSim", "zero-shot MaxSim (bm25 top 100)",
                        ("bm25", ZERO_SHOT, "interpolate", 0.0, 100), ("bm25",)))
        systems.append(("LOO model alone", f"{c}-held-out model alone (bm25 top 100, MaxSim)",
                        ("bm25", c, "interpolate", 0.0, 100), ("bm25",)))
        means = {}
        for kind, name, system, against in systems:
            values = s.measured(system)
            qids = sorted(values)
            m = {k: float(np.mean([values[q][k] for q in qids])) for k in MEASURES}
            means[kind] = m
            cells = ["", ""]
            if against is not None:
                base = s.measured(against)
                cells = [compare([values[q][k] for q in qids], [base[q][k] for q in qids]) for k in MEASURES]
                for k in MEASURES:
                    it, first = pooled.setdefault(kind, {}).setdefault(k, ([], []))
                    it.extend(values[q][k] for q in qids)
                    first.extend(base[q][k] for q in qids)
            rows.append(f"| {c} ({len(qids)} queries) | {name} | {m['nDCG@10']:.4f} | {m['MAP']:.4f} | "
                        f"{cells[0]} | {cells[1]} |")
        top = max(means, key=lambda k: means[k]["nDCG@10"])
        best.append(f"{c}: {top}")
    pool = ["| pooled queries | n | nDCG@10 | MAP | vs first stage: nDCG@10 | MAP |",
            "|---|---:|---:|---:|---|---|"]
    for kind, by_measure in pooled.items():
        a = by_measure["nDCG@10"][0]
        pool.append(f"| {kind} | {len(a)} | {np.mean(a):.4f} | {np.mean(by_measure['MAP'][0]):.4f} | "
                    + " | ".join(compare(*by_measure[k]) for k in MEASURES) + " |")
    return (f"## Test: the {words(len(tests))} collections, each with its leave-one-out model and fusions\n\n"
            "Paired t-test against the row's own first stage (zero-shot MaxSim and the model alone: against "
            f"bm25); * significant at {ALPHA} (two-sided, uncorrected).\n\n" + "\n".join(rows)
            + f"\n\nPooled over the {words(len(tests))} collections' queries:\n\n" + "\n".join(pool)
            + "\n\nBest system by nDCG@10: " + "; ".join(best) + ".\n")


def words(n: int) -> str:
    return {1: "one", 2: "two", 3: "three", 4: "four"}.get(n, str(n))


def recorded_mean(path: Path) -> float:
    """A LOO checkpoint's validation figure: the mean over its sources of held-out nDCG@10 at its epoch."""
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        return float(json.loads(f.metadata()["info"])["mean_heldout_ndcg10"])


def load_models(models_dirs: list[Path], collections: list[str]) -> dict[str, Candidates]:
    """Each held-out collection's candidates: each training run's checkpoint ("run i", from the i-th
    directory) and zero-shot MaxSim (epoch 0 of every run); the shipped candidate `all`, when there is
    one, the checkpoint with the best recorded mean held-out nDCG@10 (ties: the first given)."""
    from retrieval.late.model import load_head

    out: dict[str, Candidates] = {}
    for name in [*collections, SHIPPED]:
        paths = {f"run {i + 1}": d / name / "late.safetensors" for i, d in enumerate(models_dirs)}
        paths = {k: p for k, p in paths.items() if p.is_file()}
        if not paths:
            if name != SHIPPED:
                raise SystemExit(f"no checkpoint for {name} in {', '.join(map(str, models_dirs))}")
            continue
        if name == SHIPPED:
            best = max(paths, key=lambda k: (recorded_mean(paths[k]), -list(paths).index(k)))
            paths = {best: paths[best]}
        out[name] = {k: (p, load_head(p)[0]) for k, p in paths.items()}
        if name != SHIPPED:
            out[name][ZERO_SHOT] = (None, None)
    return out


def held_out_topics(models: dict[str, Candidates], collection: str) -> set[str]:
    """The held-out share of `collection`'s training topics, as every model trained on them held it out
    (checked against each such model's record)."""
    from retrieval.late.config import TrainConfig
    from retrieval.late.train import heldout_queries

    topics = VALIDATION[collection]
    queries, qrels = load_topics(topics), load_qrels(topics)
    qids = [q for q in queries if q in qrels and any(g > 0 for g in qrels[q].values())]
    held = set()
    for cands in models.values():  # one seed and holdout for all (train_late_loo.py): the same split
        for path, _ in cands.values():
            if path is None:
                continue
            config, counts = checkpoint_split(path)
            cfg = TrainConfig(**{k: v for k, v in config.items() if k in ("seed", "holdout")})
            held = heldout_queries(qids, cfg)
            assert topics not in counts or len(held) == counts[topics], (topics, len(held), counts[topics])
    return held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=Path, nargs="+", required=True,
                    help="directories of LOO checkpoints (train_late_loo.py --output-dir); each held-out"
                    " collection's model is chosen among them and zero-shot MaxSim by the fused validation"
                    " objective")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/bench_neural"))
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--validation-only", action="store_true")
    ap.add_argument("--collections", nargs="*", default=list(COLLECTIONS),
                    help="the collections measured (default all four), each with its held-out model")
    ap.add_argument("--no-dense", nargs="*", default=[], metavar="COLLECTION",
                    help="collections measured without the hybrid (no dense index built: time)")
    ap.add_argument("--subset", nargs="*", default=[], metavar="COLLECTION",
                    help="--no-dense collections whose corpus is encoded only where BM25's top 100 of its "
                    "topics or its judgements reach (retrieval.late.sources.top_and_judged)")
    ap.add_argument("--choices", type=Path, default=None,
                    help="where the validation choices are written before any test topic is read (default "
                    "WORKDIR/choices.json)")
    ap.add_argument("--states-root", type=Path, default=None,
                    help="DIR/X: another index of collection X whose zero-shot late store (`retrieval index "
                    "--late --late-model zero-shot`) gives X's frozen document states (else the cache)")
    args = ap.parse_args()
    import torch

    from retrieval.late.encoder import TokenEncoder
    from retrieval.late.model import DEFAULT_CHECKPOINT, load_checkpoint
    from retrieval.late.sources import corpus_states, top_and_judged

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    collections = args.collections
    models = load_models(args.models, collections)
    encoder = TokenEncoder(None, threads=args.threads, progress=False)
    indexes = {c: index_for(c, args.workdir, c not in args.no_dense) for c in collections}
    stored = {c: Index.open(args.states_root / c) for c in collections
              if args.states_root and (args.states_root / c / "manifest.json").is_file()}
    states = {c: (encoder, args.cache_dir, corpus_states(
        stored.get(c, indexes[c]), encoder, args.cache_dir,
        top_and_judged(indexes[c], [TEST[c]]) if c in args.subset and c in args.no_dense else None))
        for c in collections}
    val = {c: TopicSet(c, VALIDATION[c], indexes[c], args.threads, states[c], held_out_topics(models, c))
           for c in collections if any(c in trained_on(p) for cands in models.values()
                                       for p, _ in cands.values() if p is not None)}
    for c, s in val.items():
        s.score(ZERO_SHOT, None)
        for name in (x for x in models
                     if x != c and x != SHIPPED and s in validation_sets(val, x, models[x])):
            for key, (_, projection) in models[name].items():
                if key != ZERO_SHOT:
                    s.score(model_key(name, key), projection)
    candidates = {CURRENT: load_checkpoint(DEFAULT_CHECKPOINT)[0]}
    if SHIPPED in models:
        candidates[SHIPPED] = next(iter(models[SHIPPED].values()))[1]
    shipped_sets = [val[c] for c in collections if c in val and c != "scifact"]
    if "scifact" in collections:  # of SciFact train: what the committed checkpoint (and LOO models) held out
        held = committed_heldout(indexes["scifact"])
        held &= val["scifact"].held if "scifact" in val else held
        shipped_sets.append(TopicSet("scifact", VALIDATION["scifact"], indexes["scifact"], args.threads,
                                     states["scifact"], held))
    for s in shipped_sets:
        for name, projection in candidates.items():
            s.score(name, projection)
    validation, choices, evidence, winner, chosen = validation_section(val, models, shipped_sets,
                                                                       list(candidates), args.models)
    picked = {n: models[n][k] for n, k in chosen.items()}
    choices_file = args.choices or args.workdir / "choices.json"
    choices_file.parent.mkdir(parents=True, exist_ok=True)
    choices_file.write_text(json.dumps(
        {"written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "shipped_model_on_validation": winner,
         "models": {n: f"{k}: {models[n][k][0] or ZERO_SHOT}" for n, k in chosen.items()}
         | {n: str(p) for n, c in models.items() if n == SHIPPED for p, _ in c.values()},
         "choices": {f"{m} / {f}": v for (m, f), v in choices.items()},
         "evidence": {f"{m} / {f}": v for (m, f), v in evidence.items()}}, indent=1))
    print(validation, flush=True)
    if args.validation_only:
        return
    tests = {c: TopicSet(c, TEST[c], indexes[c], args.threads, states[c]) for c in collections}
    for c, s in tests.items():
        s.score(c, picked[c][1])
        s.score(ZERO_SHOT, None, ("bm25",))
    text = test_section(tests, choices)
    note = ""
    if "scifact" in tests:
        for name, projection in candidates.items():
            tests["scifact"].score(name, projection)
        note = shipped_note(tests["scifact"], choices, list(candidates), winner)
    body = (f"# Neural stages against their first stages\n\nMachine: {machine_line('torch', 'faiss-cpu')}"
            f"; {time.perf_counter() - start:.0f} s.\n\n{validation}\n{text}{note}")
    print(text + note)
    publish(RESULTS, body)


def committed_heldout(index: Index) -> set[str]:
    """The SciFact train queries the committed checkpoint held out (its record's seed and holdout, the
    split `retrieval train late` made: train.training_split)."""
    from retrieval.late.config import TrainConfig
    from retrieval.late.model import DEFAULT_CHECKPOINT
    from retrieval.late.train import training_split

    config = checkpoint_split(DEFAULT_CHECKPOINT)[0]
    cfg = TrainConfig(**{k: v for k, v in config.items() if k in ("seed", "holdout")})
    topics = VALIDATION["scifact"]
    return training_split(load_topics(topics), load_qrels(topics), dict(index.docno), cfg)[1]


def shipped_note(s: TopicSet, choices: dict, candidates: list[str], winner: str) -> str:
    """SciFact test: each shipped candidate alone and at its defaults, beside the SciFact-held-out model,
    and which one ships."""
    rows = ["| model | alone (MaxSim, BM25 top 100) | bm25>>late at its defaults | hybrid>>late at its "
            "defaults |", "|---|---:|---:|---:|"]
    alone = {}
    for name in [*candidates, "scifact"]:
        alone[name] = s.mean(("bm25", name, "interpolate", 0.0, 100), "nDCG@10")
        cells = [f"{s.mean((g, name, *choices[name, g][:3]), 'nDCG@10'):.4f} ({label(*choices[name, g][:3])})"
                 if (name, g) in choices and g in s.firsts else "-" for g in FIRST]
        shown = f"{name} (SciFact held out)" if name == "scifact" else name
        rows.append(f"| {shown} | {alone[name]:.4f} | {cells[0]} | {cells[1]} |")
    ships = winner if winner == CURRENT or alone[winner] >= BAR else CURRENT
    why = ("it is the committed checkpoint" if ships == winner == CURRENT else
           f"it won on validation and reaches {BAR}" if ships == winner else
           f"{winner} won on validation but gives {alone[winner]:.4f} < {BAR}")
    return ("\n## SciFact test: the shipped candidates\n\nnDCG@10 on SciFact test (300 queries):\n\n"
            + "\n".join(rows) + f"\n\nShipped: **{ships}** ({why}); its defaults per first stage are "
            + "; ".join(f"{g}: {label(*choices[ships, g][:3])}" for g in FIRST if (ships, g) in choices)
            + " (retrieval.pipeline.params.LATE_DEFAULTS).\n")


if __name__ == "__main__":
    main()
