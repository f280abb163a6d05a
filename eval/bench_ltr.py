"""Learning to rank in the cascade, leave-one-collection-out, against the hybrid (issue 52).

    python eval/bench_ltr.py [--indexes DIR] [--cache DIR] [--depth 100]

On CACM, Cranfield, Vaswani and SciFact (test topics): the single stages
(BM25, QLD, BM25+RM3, BM25+Rocchio, dense, dense Rocchio, late MaxSim over the
hybrid's top `depth`), the hybrid (the registry's `hybrid`: min-max BM25 and dense,
weight 0.5), and two learned rankers over the features of the hybrid's top
`depth` (`hybrid % 1000 >> features`: first-stage score and rank, BM25, QLD,
QLJM, RM3, dense, late MaxSim, the candidates' hybrid, doc length, query length,
idf): LambdaMART (LightGBM) and the linear pair-wise logistic model. The
learned rankers rerank the top `depth` and keep the hybrid's order below it.

Leave one collection out: the model evaluated on collection X is trained and
validated only on the other three collections' judgements (SciFact's training
queries when SciFact is a training collection; the others' test topics, their
only judgements). Every setting is chosen by nested leave-one-collection-out
validation on those training collections: each setting of the grid is trained
on two of them and scored (nDCG@10, every judged query) on the third, in turn;
the best mean over the three wins, and the number of trees is the median of its
early-stopping points. The final model is then trained on all three with it.
LambdaMART's `base` setting boosts its trees from `base` times the normalised
first-stage (hybrid) score instead of from 0 (retrieval/ltr/model.py).
X's judgements are never seen. nDCG@10 and MAP, each system against the
hybrid by paired t-test and Wilcoxon (Holm over the systems of a table), per
collection and over the pooled queries of the four.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import machine_line, publish  # noqa: E402

from retrieval import registry  # noqa: E402
from retrieval.collections import load_documents, load_qrels, load_topics  # noqa: E402
from retrieval.evaluation.measures import evaluate, per_query  # noqa: E402
from retrieval.evaluation.significance import compare  # noqa: E402
from retrieval.index.kinds import open_index  # noqa: E402
from retrieval.ltr.train import fit, score, settings_grid  # noqa: E402
from retrieval.types import Qrels, Run  # noqa: E402

COLLECTIONS = ("cacm", "cranfield", "vaswani", "scifact")
TRAINING_SPLIT = {"scifact": "scifact:train"}  # the others' only judgements are their test topics
MEASURES = ["nDCG@10", "MAP"]
BASELINE = "hybrid"
SINGLE = ("bm25", "qld", "bm25+rm3", "rocchio", "dense", "dense_rocchio", "late")
GRIDS = {  # nested-validated; few leaves, many rows per leaf: strong regularisation
    "lambdamart": {"objective": ("lambdarank", "rank_xendcg", "regression"), "num_leaves": (3, 7),
                   "min_data_in_leaf": (100,), "normalisation": ("minmax", "zscore"),
                   "base": (0.0, 1.0, 4.0)},
    "linear": {"l2": (0.1, 10.0, 1000.0), "normalisation": ("minmax", "zscore")},
}
LABELS = {"lambdamart": "LTR LambdaMART", "linear": "LTR linear"}


def index_for(name: str, root: Path):
    """The collection's index with its dense and late parts (built when missing)."""
    path = root / name
    if not (path / "manifest.json").is_file():
        from retrieval.analysis import Analyzer
        from retrieval.building import build_with_parts, dense_part, late_part

        build_with_parts(load_documents(name), path, source=f"collection:{name}", analyzer=Analyzer(),
                         dense=dense_part(None, None), late=late_part(None, None))
    return open_index(path)


def with_tail(top: Run, full: Run) -> Run:
    """`top`'s order for its documents, then `full`'s for the rest (scores replaced by rank order)."""
    out = {}
    for q, hits in full.items():
        head = [d for d, _ in top.get(q, [])]
        seen = set(head)
        order = head + [d for d, _ in hits if d not in seen]
        out[q] = [(d, float(len(order) - i)) for i, d in enumerate(order)]
    return Run(out)


def column_run(features, name: str) -> Run:
    """The candidates ordered by one feature."""
    return Run({q: list(zip(ids, m[:, features.names.index(name)].tolist()))
                for q, (ids, m) in features.features.items()})


def nested_choice(kind: str, names, data: dict, train: list[str]) -> tuple[dict, float, int | None, list]:
    """The setting with the best mean validation nDCG@10 over inner leave-one-out folds of `train`."""
    tried = []
    for settings in settings_grid(kind, GRIDS[kind]):
        values, trees = [], []
        for held in train:
            inner = [c for c in train if c != held]
            model = fit(kind, settings, names, [data[c][0] for c in inner], [data[c][1] for c in inner],
                        [data[held][0]], [data[held][1]])
            values.append(score(model, [data[held][0]], [data[held][1]]))
            trees.append(model.info["settings"].get("trees"))
        mean = float(np.mean(values))
        tree = int(statistics.median(trees)) if trees[0] is not None else None
        tried.append((mean, settings, tree, values))
    best = max(tried, key=lambda t: t[0])
    return best[1], best[0], best[2], tried


def table(per_system: dict[str, dict], means: dict[str, dict]) -> list[str]:
    comparisons = compare(per_system, BASELINE, MEASURES)
    versus = "vs hybrid (p t / Wilcoxon, Holm)"
    lines = [f"| system | nDCG@10 | {versus} | MAP | {versus} |", "|---|---:|---|---:|---|"]
    for system in per_system:
        cells = [system]
        for m in MEASURES:
            cells.append(f"{means[system][m]:.4f}")
            if system == BASELINE:
                cells.append("baseline")
                continue
            c = comparisons[system, m]
            mark = "**" if c.significant("t", 0.05) and c.significant("wilcoxon", 0.05) else ""
            p = f"{c.p_holm['t']:.3g} / {c.p_holm['wilcoxon']:.3g}"
            cells.append(f"{mark}{c.mean_difference:+.4f} ({p}){mark}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--indexes", type=Path, default=ROOT / "indexes" / "ltr")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/bench_ltr"))
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--models", type=Path, default=None, help="also save each trained model here")
    args = ap.parse_args()

    data, test, runs = {}, {}, {}
    for name in COLLECTIONS:
        index = index_for(name, args.indexes)
        hybrid = registry.build("hybrid", index)
        features = registry.build("features", index, depth=args.depth, cache=str(args.cache / "features"))
        splits = {"test": name} | ({"train": TRAINING_SPLIT[name]} if name in TRAINING_SPLIT else {})
        for split, spec in splits.items():
            topics, qrels = load_topics(spec), load_qrels(spec)
            first = hybrid(topics)
            feats = features(topics, first)
            if split == "test":
                test[name] = (topics, qrels, first, feats)
            if spec == TRAINING_SPLIT.get(name, name):
                data[name] = (feats, Qrels({q: j for q, j in qrels.items() if q in feats.features}))
        topics, qrels, first, feats = test[name]
        runs[name] = {
            "bm25": registry.build("bm25", index)(topics),
            "qld": registry.build("qld", index)(topics),
            "bm25+rm3": registry.build("bm25", index, rm3=True)(topics),
            "rocchio": registry.build("rocchio", index)(topics),
            "dense": registry.build("dense", index)(topics),
            "dense_rocchio": registry.build("dense_rocchio", index)(topics),
            "late": with_tail(column_run(feats, "late"), first),
            BASELINE: first,
        }
        print(f"{name}: features of {len(feats.features)} test queries", file=sys.stderr, flush=True)
    names = data[COLLECTIONS[0]][0].names

    chosen = []
    for name in COLLECTIONS:
        train = [c for c in COLLECTIONS if c != name]
        topics, qrels, first, feats = test[name]
        for kind in ("lambdamart", "linear"):
            settings, value, trees, tried = nested_choice(kind, names, data, train)
            model = fit(kind, settings, names, [data[c][0] for c in train], [data[c][1] for c in train],
                        trees=trees)
            if args.models is not None:
                model.save(args.models / f"{kind}-without-{name}")
            runs[name][LABELS[kind]] = with_tail(model.rerank(feats), first)
            shown = ", ".join(f"{k}={v}" for k, v in settings.items()) + (f", trees={trees}" if trees else "")
            runner_up = sorted(tried, key=lambda t: -t[0])[1]
            top = sorted(model.importances().items(), key=lambda kv: -kv[1])[:5]
            chosen.append(f"| {name} | {LABELS[kind]} | {shown} | {value:.4f} ("
                          + " / ".join(f"{v:.4f}" for v in sorted(tried, key=lambda t: -t[0])[0][3])
                          + f") | {runner_up[0]:.4f} | " + ", ".join(f"{n} {w:.2f}" for n, w in top) + " |")
            print(f"{name} {kind}: {shown} ({value:.4f})", file=sys.stderr, flush=True)

    out = ["# Learning to rank: leave-one-collection-out against the hybrid\n",
           f"{machine_line('numpy', 'lightgbm', 'scipy', 'ir-measures')}. Candidates: the hybrid's top"
           f" {args.depth} (features of each); below them every system keeps the hybrid's order."
           " Bold: significant against the hybrid at 5% by both tests after Holm's correction over the"
           " table's systems. Single stages ranked to 1000 (late: MaxSim over the hybrid's top"
           f" {args.depth}). No setting was chosen on a test collection's judgements (see the module"
           " docstring).\n"]
    pooled_values: dict[str, dict] = {}
    for name in COLLECTIONS:
        _, qrels, _, _ = test[name]
        per_system = {s: per_query(r, qrels, MEASURES) for s, r in runs[name].items()}
        means = {s: evaluate(r, qrels, MEASURES) for s, r in runs[name].items()}
        best = max(SINGLE, key=lambda s: means[s]["nDCG@10"])
        out += [f"## {name} ({len(qrels)} judged test queries; best single stage by test nDCG@10: {best})\n",
                *table(per_system, means), ""]
        for s, values in per_system.items():
            pooled_values.setdefault(s, {}).update({f"{name}:{q}": v for q, v in values.items()})
    pooled_means = {s: {m: float(np.mean([v[m] for v in values.values()])) for m in MEASURES}
                    for s, values in pooled_values.items()}
    out += [f"## Pooled ({len(pooled_values[BASELINE])} queries of the four collections)\n",
            *table(pooled_values, pooled_means), ""]
    out += ["## Settings chosen by nested leave-one-collection-out validation\n",
            "Per test collection, on the other three only: the setting with the best mean validation"
            " nDCG@10 (each training collection held out in turn; the three values in brackets), the"
            " runner-up's mean, and the final model's five most important features (LightGBM gain share;"
            " linear: |weight| share over normalised features). Grids: "
            + "; ".join(f"{k}: " + ", ".join(f"{p} {list(v)}" for p, v in g.items())
                        for k, g in GRIDS.items())
            + ". LightGBM: learning rate 0.05, L2 1.0, up to 300 trees, early stopping after 30 on the"
            " held-out collection's nDCG@10.\n",
            "| test collection | model | chosen settings | validation nDCG@10 (per held-out collection) |"
            " runner-up | top features |", "|---|---|---|---|---:|---|", *chosen]
    publish(ROOT / "eval" / "results" / "ltr.md", "\n".join(out))


if __name__ == "__main__":
    main()
