"""Learning to rank in the cascade, leave-one-collection-out, against the hybrid (issue 52).

    python eval/bench_ltr.py [--indexes DIR] [--cache DIR] [--depth 100] [--choices FILE [--choose-only]]
                             [--late-loo NAME=CHECKPOINT ...] [--protocol nested|transfer|shift|shift+squad]
                             [--squad-index DIR]

On CACM, Cranfield, Vaswani and SciFact (test topics): the single stages
(BM25, QLD, BM25+RM3, BM25+Rocchio, dense, dense Rocchio, late MaxSim over the
hybrid's top `depth`), the hybrid (the registry's `hybrid`: min-max BM25 and dense,
weight 0.5), and two learned rankers over the features of the hybrid's top
`depth` (`hybrid % 1000 >> features`: first-stage score and rank, BM25, QLD,
QLJM, RM3, dense, late MaxSim, the candidates' hybrid, doc length, query length,
idf): LambdaMART (LightGBM), the linear pair-wise logistic model and coordinate
ascent (a linear model fitted to the training queries' nDCG@10 or MAP). The
learned rankers rerank the top `depth` and keep the hybrid's order below it.

The late feature (and the `late` row) is zero-shot MaxSim (all-MiniLM-L6-v2's
token states, no trained projection; the indexes' late parts are built with it),
so no feature comes from a model trained on any of the four collections' queries:
the packaged checkpoint was trained on SciFact's training queries, which made
the feature far stronger on SciFact than on the collections a ranker is
validated on. `--late-loo X=CHECKPOINT` (repeatable) gives, for held-out
collection X, a late checkpoint trained without X: every feature of that fold
(the training collections' and X's) is then computed with it, encoded on the fly.

Leave one collection out: the model evaluated on collection X is trained and
validated only on the other three collections' judgements (SciFact's training
queries when SciFact is a training collection; the others' test topics, their
only judgements). Every setting is chosen by nested leave-one-collection-out
validation on those training collections: each setting of the grid is trained
on two of them and scored (nDCG@10, every judged query) on the third, in turn;
the best mean over the three wins, and the number of trees is the median of its
early-stopping points. The final model is then trained on all three with it.
With `--choices FILE` the choices (and their validation figures) are written to
FILE before any test figure is computed, and read back from it when it exists;
`--choose-only` stops there.
LambdaMART's `base` setting boosts its trees from `base` times the normalised
first-stage (hybrid) score instead of from 0 (retrieval/ltr/model.py); it is in
the grid (0 or 1) like every other setting. `gain` is lambdarank's label gain
(`exp` 2^grade - 1 or `linear`, trec_eval's; Cranfield is graded), and the
`rank` normalisation replaces each document feature by its rank among the
query's candidates (retrieval/ltr/train.py, model.py). The first stage's score
and rank (`first_score`, `first_rank`) are the hybrid's fused score and rank.
X's judgements are never seen.

`--protocol transfer` (issue 52b) adds two things aimed at transfer to an unseen
collection, fixed before any of its test figures were computed: the linear
model's L2 grid extends past its former edge (1e4, 1e5), and the hybrid itself is a
candidate of every choice: a learned ranker is used only when its chosen
setting's mean validation nDCG@10 (the same nested folds) is strictly above the
hybrid's own on the same validation queries; otherwise its row is the hybrid's
ranking (a fallback, shown in the settings table). `--protocol shift`
(issue 52c), also fixed before any of its figures were computed, is `transfer`
with LambdaMART's grid extended against the distribution shift between
collections: `monotone` (false or true: LightGBM's monotone constraints, the
output only rising with each stage score and the first stage's score, only
falling with its rank) and `num_leaves` 3 or 7, beside the former settings
(normalisation z-score or rank, `base` 0 or 1, i.e. trees from nothing or a
residual over the hybrid's normalised score, gain exp or linear). The default
protocol (`nested`) is the earlier one, unchanged.

`--protocol shift+squad` (issue 52d), fixed before any of its figures were
computed, is `shift` with a sparse-judgement collection that is never a test
collection in every fold's training and validation: SQuAD 2.0 dev questions
(the bundled squad2-dev, answerable ones) with the paragraph that answers them
as the one relevant document (DPR style, as retrieval/late/sources.py
`squad_questions` builds it: every paragraph whose text is in xquad-en left out
with its questions), over an index of the kept paragraphs (`--squad-index`,
built with the same dense encoder and zero-shot late part as the collections').
A seeded sample of SQUAD_QUESTIONS questions (seed SQUAD_SEED) is split by
paragraph: the questions of a seeded SQUAD_HELD_SHARE of the paragraphs validate,
the rest train. Every inner fold trains on its training collections and the
SQuAD training questions; one more inner fold validates on the SQuAD held-out
questions (training on all the fold's training collections and the SQuAD
training questions), so the mean validation figure over the inner folds sees a
one-relevant-document regime beside the training collections'; the final model of
a fold trains on its training collections and every sampled SQuAD question. The
hybrid-as-candidate fallback compares on the same inner folds. Neither encoder
saw these questions: the dense encoder and the zero-shot late feature are stock
all-MiniLM-L6-v2 (trained by sentence-transformers on SQuAD 2.0 *train* pairs,
whose articles are disjoint from dev's, among a billion other pairs), and
`--late-loo` checkpoints (trained by eval/train_late_loo.py on these SQuAD
questions) are refused with this protocol. nDCG@10 and MAP, each system against the
hybrid by paired t-test and Wilcoxon (Holm over the systems of a table), per
collection and over the pooled queries of the four.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import machine_line, publish  # noqa: E402

from retrieval import registry  # noqa: E402
from retrieval.collections import data_dir, load_documents, load_qrels, load_topics  # noqa: E402
from retrieval.evaluation.measures import evaluate, per_query  # noqa: E402
from retrieval.evaluation.significance import compare  # noqa: E402
from retrieval.index.kinds import open_index  # noqa: E402
from retrieval.ltr.train import fit, score, settings_grid, split_queries, subset  # noqa: E402
from retrieval.types import Qrels, Run  # noqa: E402

COLLECTIONS = ("cacm", "cranfield", "vaswani", "scifact")
TRAINING_SPLIT = {"scifact": "scifact:train"}  # the others' only judgements are their test topics
MEASURES = ["nDCG@10", "MAP"]
BASELINE = "hybrid"
SINGLE = ("bm25", "qld", "bm25+rm3", "rocchio", "dense", "dense_rocchio", "late")
GRIDS = {  # nested-validated; few leaves, many rows per leaf: strong regularisation
    "lambdamart": {"objective": ("lambdarank",), "num_leaves": (7,), "min_data_in_leaf": (100,),
                   "learning_rate": (0.05,), "normalisation": ("zscore", "rank"), "base": (0.0, 1.0),
                   "gain": ("exp", "linear")},
    "linear": {"l2": (0.1, 10.0, 1000.0), "normalisation": ("zscore", "rank")},
    "coordascent": {"measure": ("nDCG@10",), "normalisation": ("zscore", "rank"), "restarts": (1,)},
}
LABELS = {"lambdamart": "LTR LambdaMART", "linear": "LTR linear", "coordascent": "LTR coord. ascent"}
ZERO_SHOT = "zero-shot"
PROTOCOLS = ("nested", "transfer", "shift", "shift+squad")
FALLBACK_PROTOCOLS = ("transfer", "shift", "shift+squad")  # the hybrid is a candidate of every choice
SQUAD_PROTOCOLS = ("shift+squad",)  # SQuAD questions in every fold's training and validation
SQUAD = "squad2-dev"  # the bundled SQuAD 2.0 dev split; never a test collection here
SQUAD_EXCLUDE = "xquad-en"  # its paragraphs (and their questions) left out, as the reader's training does
SQUAD_QUESTIONS = 600  # answerable questions sampled (seeded), a CPU budget
SQUAD_SEED = 52
SQUAD_HELD_SHARE = 0.25  # of the sampled questions' paragraphs: their questions validate
TRANSFER_L2 = (0.1, 10.0, 1000.0, 1e4, 1e5)  # --protocol transfer: past the former edge (1000)
SHIFT_LAMBDAMART = GRIDS["lambdamart"] | {"num_leaves": (3, 7), "monotone": (False, True)}


def grids_for(protocol: str) -> dict:
    """The grids of a protocol: `transfer` extends the linear model's L2 past 1000; `shift` also tries
    LambdaMART with monotone constraints and with 3-leaf trees (a superset of the former grid)."""
    if protocol in FALLBACK_PROTOCOLS:
        grids = GRIDS | {"linear": GRIDS["linear"] | {"l2": TRANSFER_L2}}
        return grids | {"lambdamart": SHIFT_LAMBDAMART} if protocol.startswith("shift") else grids
    return GRIDS


def index_for(name: str, root: Path):
    """The collection's index with its dense and zero-shot late parts (built when missing)."""
    path = root / name
    if not (path / "manifest.json").is_file():
        from retrieval.analysis import Analyzer
        from retrieval.building import build_with_parts, dense_part, late_part

        build_with_parts(load_documents(name), path, source=f"collection:{name}", analyzer=Analyzer(),
                         dense=dense_part(None, None), late=late_part(ZERO_SHOT, None))
    return open_index(path)


def squad_split(qrels: Qrels, share: float = SQUAD_HELD_SHARE, seed: int = SQUAD_SEED
                ) -> tuple[set[str], set[str]]:
    """(training, validation) SQuAD question ids: the questions of a seeded `share` of the relevant
    paragraphs validate, so no paragraph is relevant in both."""
    paragraphs = sorted({d for judged in qrels.values() for d, g in judged.items() if g > 0})
    random.Random(seed).shuffle(paragraphs)
    held = set(paragraphs[:round(len(paragraphs) * share)])
    valid = {q for q, judged in qrels.items() if any(g > 0 and d in held for d, g in judged.items())}
    return set(qrels) - valid, valid


def squad_data(data_dir: Path, where: Path, cache: Path, depth: int, checkpoint: str,
               questions: int = SQUAD_QUESTIONS) -> tuple[tuple, tuple]:
    """((training features, qrels), (validation features, qrels)) of a seeded sample of SQuAD 2.0 dev
    questions over an index of its paragraphs (xquad-en's left out), built at `where` when missing with
    the dense encoder and zero-shot late part of the collections' indexes."""
    from retrieval.late.sources import squad_questions
    from retrieval.types import Document

    passages, topics, qrels = squad_questions(data_dir / SQUAD / "dev-v2.0.json",
                                              data_dir / SQUAD_EXCLUDE / "xquad.en.json", questions,
                                              SQUAD_SEED)
    if not (where / "manifest.json").is_file():
        from retrieval.analysis import Analyzer
        from retrieval.building import build_with_parts, dense_part, late_part

        build_with_parts([Document(pid, t, x) for pid, (t, x) in passages.items()], where, source=SQUAD,
                         analyzer=Analyzer(), dense=dense_part(None, None), late=late_part(ZERO_SHOT, None))
    index = open_index(where)
    first = registry.build("hybrid", index)(topics)
    feats = registry.build("features", index, depth=depth, cache=str(cache / "features"),
                           checkpoint=checkpoint)(topics, first)
    fitting, held = squad_split(qrels)
    print(f"{SQUAD}: features of {len(feats.features)} questions over {len(passages)} paragraphs"
          f" ({len(fitting)} training, {len(held)} validation; late: {checkpoint})",
          file=sys.stderr, flush=True)
    return ((subset(feats, fitting), Qrels({q: qrels[q] for q in fitting})),
            (subset(feats, held), Qrels({q: qrels[q] for q in held})))


def training_sets(data: dict, train: list[str]) -> list[tuple]:
    """The (features, qrels) a fold's final model trains on: its training collections' and, under a
    SQuAD protocol, every sampled SQuAD question."""
    return [data[c] for c in train] + list(data.get(SQUAD, ()))


def collect(indexes: dict, cache: Path, depth: int, checkpoint: str) -> tuple[dict, dict]:
    """({collection: (training features, qrels)}, {collection: (topics, qrels, hybrid run, test
    features)}) with the late feature from `checkpoint`."""
    data, test = {}, {}
    for name, index in indexes.items():
        hybrid = registry.build("hybrid", index)
        features = registry.build("features", index, depth=depth, cache=str(cache / "features"),
                                  checkpoint=checkpoint)
        splits = {"test": name} | ({"train": TRAINING_SPLIT[name]} if name in TRAINING_SPLIT else {})
        for split, spec in splits.items():
            topics, qrels = load_topics(spec), load_qrels(spec)
            first = hybrid(topics)
            feats = features(topics, first)
            if split == "test":
                test[name] = (topics, qrels, first, feats)
            if spec == TRAINING_SPLIT.get(name, name):
                data[name] = (feats, Qrels({q: j for q, j in qrels.items() if q in feats.features}))
        print(f"{name}: features of {len(test[name][3].features)} test queries (late: {checkpoint})",
              file=sys.stderr, flush=True)
    return data, test


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


def inner_folds(data: dict, train: list[str]):
    """(name, training [(features, qrels)], validation [(features, qrels)]) of each inner fold: each
    training collection held out in turn; with one training collection, every fifth of its queries.
    With SQuAD in `data` (a SQuAD protocol) every inner fold also trains on its training questions,
    and one more inner fold validates on its held-out questions."""
    extra, extra_held = data.get(SQUAD, ((), ()))
    extra = [extra] if extra else []
    if len(train) > 1:
        for held in train:
            yield held, [data[c] for c in train if c != held] + extra, [data[held]]
    else:
        run, qrels = data[train[0]]
        fitting, held = split_queries(run)
        yield (f"{train[0]} (every 5th query)", [(subset(run, fitting), qrels)] + extra,
               [(subset(run, held), qrels)])
    if extra_held:
        yield f"{SQUAD} (held-out questions)", [data[c] for c in train] + extra, [extra_held]


def nested_choice(kind: str, names, data: dict, train: list[str],
                  grids: dict | None = None) -> tuple[dict, float, int | None, list]:
    """The setting with the best mean validation nDCG@10 over the inner folds of `train`."""
    tried = []
    for settings in settings_grid(kind, (grids or GRIDS)[kind]):
        values, trees = {}, []
        for held, inner, valid in inner_folds(data, train):
            model = fit(kind, settings, names, [r for r, _ in inner], [q for _, q in inner],
                        [r for r, _ in valid], [q for _, q in valid])
            values[held] = score(model, [r for r, _ in valid], [q for _, q in valid])
            trees.append(model.info["settings"].get("trees"))
        mean = float(np.mean(list(values.values())))
        tree = int(statistics.median(trees)) if trees[0] is not None else None
        tried.append((mean, settings, tree, values))
    best = max(tried, key=lambda t: t[0])  # the first of equals: the grid's order
    return best[1], best[0], best[2], tried


def first_stage_validation(data: dict, train: list[str]) -> tuple[float, dict[str, float]]:
    """The first stage's (hybrid's) own nDCG@10 on the same inner validation queries the settings were
    chosen on (its ranking of the same candidates): what a learned ranker's validation figure beats."""
    values = {}
    for held, _, valid in inner_folds(data, train):
        (run, qrels), = valid
        answered = Qrels({q: j for q, j in qrels.items() if q in run.features})
        values[held] = evaluate(run.first_stage(), answered, "nDCG@10")["nDCG@10"]
    return float(np.mean(list(values.values()))), values


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


def parse_loo(items: list[str]) -> dict[str, str]:
    """{held-out collection: late checkpoint trained without it} from NAME=PATH items."""
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or name not in COLLECTIONS or not Path(path).is_file():
            raise SystemExit(f"bench_ltr: --late-loo takes NAME=CHECKPOINT, NAME one of"
                             f" {', '.join(COLLECTIONS)} and an existing file; got {item!r}")
        out[name] = path
    return out


def choose(folds, loo: dict[str, str], path: Path | None, collections: list[str], kinds: list[str],
           protocol: str = "nested") -> dict:
    """Every (test collection, learned ranker)'s nested-validated setting, read from `path` when it
    holds them for these grids, else chosen and written there (before any test figure). Under the
    `transfer` and `shift` protocols each choice also records the hybrid's validation figure on the
    same queries and `fallback` (true when the learned ranker does not beat it)."""
    table = grids_for(protocol)
    grids = json.loads(json.dumps({k: table[k] for k in kinds}))
    choices = json.loads(path.read_text()) if path is not None and path.is_file() else {}
    if choices and (choices.get("collections") != collections
                    or choices.get("protocol", "nested") != protocol
                    or any(choices.get("grids", {}).get(k, grids[k]) != grids[k] for k in kinds)):
        raise SystemExit(f"bench_ltr: {path} holds choices for another protocol, other grids or"
                         " collections; remove it to choose again")
    choices |= {"grids": choices.get("grids", {}) | grids, "collections": collections}
    if protocol != "nested":
        choices["protocol"] = protocol
    if protocol in SQUAD_PROTOCOLS:
        squad = {"questions": SQUAD_QUESTIONS, "seed": SQUAD_SEED, "held_share": SQUAD_HELD_SHARE}
        if choices.setdefault("squad", squad) != squad:
            raise SystemExit(f"bench_ltr: {path} holds choices for another SQuAD sample; remove it to"
                             " choose again")
    for name in collections:
        checkpoint = loo.get(name, ZERO_SHOT)
        data, _ = folds(checkpoint)
        names = data[name][0].names
        train = [c for c in collections if c != name]
        for kind in kinds:
            key = f"{name} {kind}"
            if key not in choices:
                settings, value, trees, tried = nested_choice(kind, names, data, train, table)
                ranked = sorted(tried, key=lambda t: -t[0])
                choices[key] = {"late": Path(checkpoint).name, "settings": settings, "trees": trees,
                                "validation": value, "per_held_out": ranked[0][3],
                                "runner_up": ranked[1][0] if len(ranked) > 1 else None,
                                "tried": [{"settings": t[1], "validation": t[0], "trees": t[2]}
                                          for t in tried]}
                shown = ", ".join(f"{k}={v}" for k, v in settings.items())
                shown += f", trees={trees}" if trees else ""
                print(f"{name} {kind}: {shown} ({value:.4f})", file=sys.stderr, flush=True)
            elif protocol == "nested" or "fallback" in choices[key]:
                continue
            if protocol in FALLBACK_PROTOCOLS:
                first, first_held = first_stage_validation(data, train)
                choices[key] |= {"hybrid_validation": first, "hybrid_per_held_out": first_held,
                                 "fallback": not choices[key]["validation"] > first}
                print(f"{name} {kind}: hybrid on the same validation queries {first:.4f}"
                      f" -> {'fallback to the hybrid' if choices[key]['fallback'] else 'learned ranker'}",
                      file=sys.stderr, flush=True)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(choices, indent=1, sort_keys=True) + "\n")
                tmp.replace(path)
    return choices


def settings_table(choices: dict, importances: dict, collections: list[str], kinds: list[str],
                   hybrid: dict[str, tuple[float, dict[str, float]]]) -> list[str]:
    lines = ["| test collection | model | late feature | chosen settings | validation nDCG@10 (per held-out"
             " collection) | runner-up | hybrid on the same validation queries | top features |",
             "|---|---|---|---|---|---:|---|---|"]
    for name in collections:
        first, first_held = hybrid[name]
        shown_hybrid = f"{first:.4f} (" + " / ".join(f"{h} {v:.4f}" for h, v in first_held.items()) + ")"
        for kind in kinds:
            c = choices[f"{name} {kind}"]
            shown = ", ".join(f"{k}={v}" for k, v in c["settings"].items())
            shown += f", trees={c['trees']}" if c["trees"] else ""
            if "fallback" in c:
                shown += ("; not above the hybrid on validation: FALLBACK, the row is the hybrid's ranking"
                          if c["fallback"] else "; above the hybrid on validation: used")
            held = " / ".join(f"{h} {v:.4f}" for h, v in c["per_held_out"].items())
            top = sorted(importances[name, kind].items(), key=lambda kv: -kv[1])[:5]
            lines.append(f"| {name} | {LABELS[kind]} | {c['late']} | {shown} | {c['validation']:.4f}"
                         f" ({held}) | {'-' if c['runner_up'] is None else format(c['runner_up'], '.4f')} |"
                         f" {shown_hybrid} | "
                         + ", ".join(f"{n} {w:.2f}" for n, w in top) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--indexes", type=Path, default=ROOT / "indexes" / "ltr")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/bench_ltr"))
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--models", type=Path, default=None, help="also save each trained model here")
    ap.add_argument("--choices", type=Path, default=None,
                    help="JSON file of the nested-validated settings: written before any test figure,"
                    " read back when present")
    ap.add_argument("--collections", nargs="+", default=list(COLLECTIONS),
                    help="the collections, each left out in turn (default all four; with two, settings"
                    " are chosen on every fifth query of the one training collection)")
    ap.add_argument("--choose-only", action="store_true", help="choose the settings, write them, stop")
    ap.add_argument("--kinds", nargs="+", default=list(GRIDS), choices=list(GRIDS),
                    help="the learned rankers (default all three)")
    ap.add_argument("--protocol", choices=PROTOCOLS, default="nested",
                    help="nested (default): nested leave-one-collection-out choice; transfer: also the"
                    " hybrid itself as a candidate (fallback) and the linear L2 grid extended to 1e5;"
                    " shift: transfer, and LambdaMART's grid adds monotone constraints and 3-leaf trees;"
                    " shift+squad: shift, with SQuAD 2.0 dev questions in every fold's training and"
                    " validation")
    ap.add_argument("--squad-index", type=Path, default=None,
                    help="where the SQuAD paragraph index is (built when missing; default"
                    " INDEXES/squad2-dev)")
    ap.add_argument("--late-loo", action="append", default=[], metavar="NAME=CHECKPOINT",
                    help="for held-out collection NAME, the late feature from a checkpoint trained without"
                    " it (default: zero-shot MaxSim for every collection)")
    args = ap.parse_args()
    loo = parse_loo(args.late_loo)
    squad = args.protocol in SQUAD_PROTOCOLS
    if squad and loo:
        raise SystemExit("bench_ltr: --late-loo's checkpoints were trained on the SQuAD questions that"
                         f" --protocol {args.protocol} validates on; use the zero-shot late feature")
    collections = [c for c in COLLECTIONS if c in args.collections]
    if len(collections) < 2 or len(collections) != len(args.collections):
        raise SystemExit(f"bench_ltr: --collections takes two or more of {', '.join(COLLECTIONS)}")
    indexes = {name: index_for(name, args.indexes) for name in collections}
    computed: dict[str, tuple[dict, dict]] = {}

    def folds(checkpoint: str) -> tuple[dict, dict]:
        if checkpoint not in computed:
            computed[checkpoint] = collect(indexes, args.cache, args.depth, checkpoint)
            if squad:
                computed[checkpoint][0][SQUAD] = squad_data(
                    data_dir(), args.squad_index or args.indexes / SQUAD, args.cache, args.depth, checkpoint)
                names = {tuple(pair[0].names) for pair in computed[checkpoint][0][SQUAD]}
                if names != {tuple(next(iter(computed[checkpoint][0].values()))[0].names)}:
                    raise SystemExit(f"bench_ltr: the SQuAD index's features {sorted(names)} are not the"
                                     " collections'")
        return computed[checkpoint]

    kinds = [k for k in GRIDS if k in args.kinds]
    grids = grids_for(args.protocol)
    choices = choose(folds, loo, args.choices, collections, kinds, args.protocol)
    if args.choose_only:
        return
    _, test = folds(ZERO_SHOT)
    runs, importances, hybrid_validation = {}, {}, {}
    for name, index in indexes.items():
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
        data, fold_test = folds(loo.get(name, ZERO_SHOT))
        train = [c for c in collections if c != name]
        hybrid_validation[name] = first_stage_validation(data, train)
        for kind in kinds:
            c = choices[f"{name} {kind}"]
            sets = training_sets(data, train)
            model = fit(kind, c["settings"], data[name][0].names, [r for r, _ in sets],
                        [q for _, q in sets], trees=c["trees"])
            if args.models is not None:
                model.save(args.models / f"{kind}-without-{name}")
            runs[name][LABELS[kind]] = (first if c.get("fallback")
                                        else with_tail(model.rerank(fold_test[name][3]), first))
            importances[name, kind] = model.importances()

    out = ["# Learning to rank: leave-one-collection-out against the hybrid\n",
           f"{machine_line('numpy', 'lightgbm', 'scipy', 'ir-measures')}. Candidates: the hybrid's top"
           f" {args.depth} (features of each); below them every system keeps the hybrid's order."
           " Bold: significant against the hybrid at 5% by both tests after Holm's correction over the"
           " table's systems. Single stages ranked to 1000 (late: zero-shot MaxSim over the hybrid's top"
           f" {args.depth}). Late feature: zero-shot MaxSim"
           + (f", except for held-out {', '.join(f'{k} ({Path(v).name})' for k, v in loo.items())}"
              if loo else "")
           + ". No setting was chosen on a test collection's judgements (see the module docstring).\n"]
    pooled_values: dict[str, dict] = {}
    for name in collections:
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
    out += [f"## Pooled ({len(pooled_values[BASELINE])} queries of {', '.join(collections)})\n",
            *table(pooled_values, pooled_means), ""]
    out += ["## Settings chosen by nested validation on the training collections\n",
            "Per test collection, on the other collections only: the setting with the best mean validation"
            " nDCG@10 (each training collection held out in turn, or with a single training collection"
            " every fifth of its queries; the value of each after its name), the runner-up's mean, the"
            " hybrid's own nDCG@10 on the same validation queries (its ranking of the same candidates), and"
            " the final model's five most important features (LightGBM gain share;"
            " linear models: |weight| share over normalised features). Grids: "
            + "; ".join(f"{k}: " + ", ".join(f"{p} {list(v)}" for p, v in grids[k].items())
                        for k in kinds)
            + (f". Protocol `{args.protocol}`: the hybrid itself is a candidate of every choice; a learned"
               " ranker whose chosen setting's mean validation nDCG@10 is not strictly above the hybrid's"
               " on the same validation queries falls back to the hybrid's ranking"
               " (its test row is then the hybrid's)"
               if args.protocol in FALLBACK_PROTOCOLS else "")
            + ("; LambdaMART's `monotone`: LightGBM's monotone constraints (the tree output only rises"
               " with every stage score and the first stage's score, only falls with its rank;"
               " retrieval/ltr/train.py MONOTONE)" if args.protocol.startswith("shift") else "")
            + (f". SQuAD ({SQUAD}, never a test collection): {SQUAD_QUESTIONS} answerable questions sampled"
               f" with seed {SQUAD_SEED} (xquad-en's paragraphs and their questions left out), the paragraph"
               " that answers each its one relevant document; the questions of a seeded"
               f" {SQUAD_HELD_SHARE:g} of the paragraphs are one more inner validation fold (`{SQUAD}"
               " (held-out questions)`), the others train in every inner fold, and every sampled question"
               " trains the final model" if squad else "")
            + ". LightGBM: L2 1.0, up to 300 trees, early stopping after 30 on the held-out collection's"
            " nDCG@10. Coordinate ascent: RankLib's, first restart from the hybrid's score alone"
            " (retrieval/ltr/coordinate.py).\n",
            *settings_table(choices, importances, collections, kinds, hybrid_validation)]
    publish(ROOT / "eval" / "results" / "ltr.md", "\n".join(out))


if __name__ == "__main__":
    main()
