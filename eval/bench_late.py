"""Benchmark: late-interaction reranking of BM25 top-100 (quality, latency, store size).

    python eval/bench_late.py [--model retrieval/models/late/late.safetensors] [--candidates CKPT ...]
        [--threads 2] [--workdir /tmp/bench_late] [--cache-dir DIR] [--latency-queries 30]

In one run, on 2 cores: SciFact test nDCG@10 of BM25, zero-shot MaxSim, the
trained checkpoint alone and fused with BM25 (the weight stored in the
checkpoint, chosen on held-out *training* queries); the same through the
index's late store (fp16 and int8, built by `build_late` / `convert_late`)
with bytes per token and total size; CACM, Vaswani and Cranfield (no
training data: out of domain) MAP / nDCG@10 of the checkpoint against BM25
and zero-shot MaxSim (same top-100 candidates); per-query reranking latency (median, p95) with
stored embeddings and with on-the-fly encoding; training wall time as recorded
in the checkpoint. SciFact quality rows for the model variants are computed
from cached frozen encoder states (`retrieval.late.cache`; same arithmetic as
the reranker). Prints one Markdown table and writes eval/results/late.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from benchlib import cpu_line, publish  # noqa: E402

from retrieval.collections import load_documents, load_qrels, load_topics  # noqa: E402
from retrieval.evaluation.measures import evaluate, per_query  # noqa: E402
from retrieval.evaluation.significance import p_values, paired  # noqa: E402
from retrieval.index.native import Index, build_index  # noqa: E402
from retrieval.late import DEFAULT_CHECKPOINT, LateModel, LateReranker, build_late, convert_late  # noqa: E402
from retrieval.late.cache import cached_states  # noqa: E402
from retrieval.late.model import load_checkpoint  # noqa: E402
from retrieval.late.train import PAIR_KINDS, fuse, rerank_cached  # noqa: E402
from retrieval.sparse.rankers import BM25  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "late.md"
DEPTH = 100
OUT_OF_DOMAIN = ("cacm", "vaswani", "cranfield")  # no training data of their own


def machine(threads: int) -> str:
    cpu = cpu_line()
    import transformers

    return (f"{os.cpu_count()} cores ({cpu}), torch threads {threads}; Python {platform.python_version()}, "
            f"numpy {np.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")


def index_for(name: str, workdir: Path) -> Index:
    path = workdir / name
    if not (path / "manifest.json").is_file():
        build_index(load_documents(name), path, source=f"collection:{name}", progress=False)
    return Index.open(path)


def first_stage(index: Index, topics: str) -> object:
    run = BM25(index, k1=0.9, b=0.4, hits=1000)(load_topics(topics))
    return (run.without_query_ids() if topics.startswith("scifact") else run).cut(DEPTH)


def overlap_rows(bm25, late) -> list[str]:
    """SciFact test nDCG@10 split by whether a query's relevant abstract is also a relevant
    abstract of some training query (the trained model may have learned those documents)."""
    qrels, train = load_qrels("scifact"), load_qrels("scifact:train")
    seen = {d for judged in train.values() for d, rel in judged.items() if rel > 0}
    base, ours = per_query(bm25, qrels, ["nDCG@10"]), per_query(late, qrels, ["nDCG@10"])
    groups = {"a relevant abstract is a training positive": [], "none is": []}
    for q, judged in qrels.items():
        hit = any(rel > 0 and d in seen for d, rel in judged.items())
        groups["a relevant abstract is a training positive" if hit else "none is"].append(q)
    rows = ["| SciFact test queries | n | BM25 nDCG@10 | trained nDCG@10 |", "|---|---:|---:|---:|"]
    for label, qids in groups.items():
        mean = [float(np.mean([r.get(q, {"nDCG@10": 0.0})["nDCG@10"] for q in qids])) for r in (base, ours)]
        rows.append(f"| {label} | {len(qids)} | {mean[0]:.4f} | {mean[1]:.4f} |")
    return rows


def late_store(index: Index, model: LateModel, compression: str) -> tuple[dict, float | None]:
    """The index's late part in `compression`, (re)built for `model`; (entry, seconds to build)."""
    part = index.parts.get("late", {})
    start, built = time.perf_counter(), None
    if not part or part.get("checkpoint_sha256") != model.checkpoint_sha256:
        build_late(index, model, compression="fp16", progress=False)
        built = time.perf_counter() - start
    index = Index.open(index.path)
    if index.parts["late"]["compression"] != compression:
        convert_late(index, compression)
    return Index.open(index.path).parts["late"], built


def latencies(stage: LateReranker, queries, run, n: int) -> tuple[float, float]:
    """Median and p95 ms per query of stage.rerank_hits over the first n queries (1 warm-up)."""
    qids = list(run)[:n + 1]
    stage.rerank_hits(queries[qids[0]], run[qids[0]])
    times = []
    for q in qids[1:]:
        start = time.perf_counter()
        stage.rerank_hits(queries[q], run[q])
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), float(np.percentile(times, 95))


def scifact_variants(model_path: Path, cache_dir: Path | None, bm25) -> list[tuple[str, float]]:
    """nDCG@10 of zero-shot and trained MaxSim (and fusion) from cached encoder states."""
    from retrieval.late.encoder import TokenEncoder

    proj, settings = load_checkpoint(model_path)
    weight = json.loads(_meta(model_path)["info"])["interpolate"]
    docs = list(load_documents("scifact"))
    dindex = {d.id: i for i, d in enumerate(docs)}
    queries, qrels = load_topics("scifact"), load_qrels("scifact")
    qindex = {q: i for i, q in enumerate(queries)}
    rows = []
    for label, w, augment in (("zero-shot MaxSim (MiniLM token states)", None, False),
                              ("zero-shot MaxSim, [MASK] augmentation", None, True),
                              ("trained projection", proj, settings.get("augment", False))):
        enc = TokenEncoder(None, **{**{k: settings[k] for k in ("query_length", "doc_length", "markers")
                                       if k in settings},
                                    "augment": augment}, progress=False)
        ds = cached_states(enc, [d.contents for d in docs], False, cache_dir)
        qs = cached_states(enc, list(queries.values()), True, cache_dir)
        late = rerank_cached(w, qs, qindex, ds, dindex, bm25, DEPTH)
        rows.append((label, evaluate(late, qrels, ["nDCG@10"])["nDCG@10"]))
        if w is not None:
            fused = evaluate(fuse(bm25, late, weight, DEPTH), qrels, ["nDCG@10"])["nDCG@10"]
            rows.append((f"trained, fused with BM25 (w={weight}, chosen on train)", fused))
    return rows


def cached_late(name: str, run, cache_dir: Path | None, proj: np.ndarray | None = None,
                whole_corpus: bool = False) -> dict:
    """nDCG@10 and MAP of MaxSim (zero-shot, or through `proj`) over `run`'s candidates, from cached
    encoder states of those documents (or of the whole corpus, which SciFact's training cached)."""
    return evaluate(cached_late_run(name, run, cache_dir, proj, whole_corpus), load_qrels(name),
                    ["nDCG@10", "MAP"])


def cached_late_run(name: str, run, cache_dir: Path | None, proj: np.ndarray | None = None,
                    whole_corpus: bool = False):
    """The run of `cached_late`."""
    from retrieval.late.encoder import TokenEncoder

    texts = {d.id: d.contents for d in load_documents(name)}
    ids = list(texts) if whole_corpus else sorted({d for hits in run.values() for d, _ in hits[:DEPTH]})
    queries = load_topics(name)
    enc = TokenEncoder(None, progress=False)
    ds = cached_states(enc, [texts[d] for d in ids], False, cache_dir)
    qs = cached_states(enc, list(queries.values()), True, cache_dir)
    return rerank_cached(proj, qs, {q: i for i, q in enumerate(queries)}, ds,
                         {d: i for i, d in enumerate(ids)}, run, DEPTH)


def versus_zero_shot(trained, zero_shot, qrels) -> str:
    """The trained run's nDCG@10 difference from zero-shot MaxSim and its paired p-values: with a
    few dozen queries, a difference in the third decimal is usually noise."""
    a, b = paired(per_query(trained, qrels, ["nDCG@10"]), per_query(zero_shot, qrels, ["nDCG@10"]),
                  "nDCG@10")
    p = p_values(a, b)
    return (f"vs zero-shot {float(np.mean(a - b)):+.4f} over {len(a)} queries, paired t p={p['t']:.2f}, "
            f"Wilcoxon p={p['wilcoxon']:.2f}")


def candidates_table(paths: list[Path], runs: dict, cache_dir: Path | None) -> str:
    """Checkpoints side by side: validation figures (which choose) and test figures (reported only).

    Validation: held-out SciFact training queries (each checkpoint's record; same split for all)
    and held-out ICT MRR on the out-of-domain corpora (the same pairs for every checkpoint).
    The choice: best held-out nDCG@10 among checkpoints at or above zero-shot ICT MRR on each.
    """
    from retrieval.late.config import TrainConfig
    from retrieval.late.encoder import TokenEncoder
    from retrieval.late.train import mrr_guard, pair_states, pairs_mrr

    enc = TokenEncoder(None, progress=False)
    ict = {n: pair_states(enc, n, TrainConfig(), cache_dir) for n in OUT_OF_DOMAIN}
    rows, eligible = [], []
    zero = {n: pairs_mrr(np.eye(enc.dim, dtype=np.float32), *ict[n]) for n in OUT_OF_DOMAIN}
    for path in paths:
        proj, _ = load_checkpoint(path)
        held = json.loads(_meta(path)["info"])["heldout_ndcg10"]
        mrr = {n: pairs_mrr(proj, *ict[n]) for n in OUT_OF_DOMAIN}
        test = {n: cached_late(n, runs[n], cache_dir, proj, n == "scifact")["nDCG@10"] for n in runs}
        if mrr_guard([{"ict_mrr": zero}, {"ict_mrr": mrr}], list(OUT_OF_DOMAIN)):
            eligible.append((held, shown(path)))
        rows.append(f"| `{shown(path)}` | {held} | " + " | ".join(f"{mrr[n]:.4f}" for n in OUT_OF_DOMAIN)
                    + " | " + " | ".join(f"{test[n]:.4f}" for n in runs) + " |")
    head = ("| checkpoint | held-out SciFact train nDCG@10 | "
            + " | ".join(f"{n} ICT MRR" for n in OUT_OF_DOMAIN) + " | "
            + " | ".join(f"{n} test nDCG@10" for n in runs) + " |")
    zero_row = ("| zero-shot | | " + " | ".join(f"{zero[n]:.4f}" for n in OUT_OF_DOMAIN) + " | "
                + " | ".join(f"{cached_late(n, runs[n], cache_dir, None, n == 'scifact')['nDCG@10']:.4f}"
                             for n in runs) + " |")
    chosen = max(eligible)[1] if eligible else "zero-shot"
    return ("\n".join([head, "|---|" + "---:|" * (1 + len(OUT_OF_DOMAIN) + len(runs)), zero_row, *rows])
            + f"\n\nChosen on validation (best held-out nDCG@10 among checkpoints at or above "
            f"zero-shot ICT MRR on {', '.join(OUT_OF_DOMAIN)}): `{chosen}`. Test columns are reported, "
            "never used to choose.\n")


def training_record(info: dict) -> str:
    """What the checkpoint was trained on and how its epoch was chosen, from its own record."""
    cfg = info["config"]
    signal, rules = "", []
    for kind, (what, field) in PAIR_KINDS.items():
        corpora, guard = cfg.get(field) or [], info.get(f"{kind}_guard") or []
        if corpora:
            signal += (f" and {what} pairs from the corpora of {', '.join(corpora)} "
                       f"({cfg['pairs_per_collection']} per corpus, {cfg['holdout']} held out)")
        if guard:
            rules.append(f"whose held-out {what} MRR is at least epoch 0's (zero-shot) on {', '.join(guard)}")
    rule = f" among those {' and '.join(rules)}" if rules else ""
    rows = ["| epoch | held-out SciFact train nDCG@10 | held-out unlabelled-pair MRR |", "|---:|---:|---|"]
    for h in info.get("history", []):
        mrr = [f"{what} {name} {value}" for kind, (what, _) in PAIR_KINDS.items()
               for name, value in h.get(f"{kind}_mrr", {}).items()]
        rows.append(f"| {h['epoch']} | {h['heldout_ndcg10']} | {'; '.join(mrr) or '-'} |")
    return (f"Training signal: SciFact train qrels ({info['heldout_queries']} training queries held out)"
            f"{signal}; {info['training_pairs']} training pairs, anchor {cfg.get('anchor')}, "
            f"{cfg['epochs']} epochs. The epoch is the best on the held-out training queries{rule}; no "
            "test topic or qrel is read.\n\n" + "\n".join(rows) + "\n")


def shown(path: Path) -> str:
    """A model path as written in the results: relative to the repository when inside it."""
    root = Path(__file__).resolve().parents[1]
    path = path.resolve()
    return str(path.relative_to(root)) if path.is_relative_to(root) else path.name


def _meta(path: Path) -> dict:
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        return f.metadata() or {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=DEFAULT_CHECKPOINT)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/bench_late"))
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--latency-queries", type=int, default=30)
    ap.add_argument("--fly-queries", type=int, default=10)
    ap.add_argument("--candidates", type=Path, nargs="*", default=[],
                    help="other checkpoints to compare with --model on validation (and test, reported)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    args.workdir.mkdir(parents=True, exist_ok=True)
    info = json.loads(_meta(args.model)["info"])
    weight = info["interpolate"]
    model = LateModel(args.model, threads=args.threads)
    lines = ["| collection | system | nDCG@10 | MAP | notes |", "|---|---|---:|---:|---|"]

    sci = index_for("scifact", args.workdir)
    queries, qrels = load_topics("scifact"), load_qrels("scifact")
    bm25 = first_stage(sci, "scifact")
    base = evaluate(bm25, qrels, ["nDCG@10", "MAP"])
    lines.append(f"| scifact | BM25 top-100 | {base['nDCG@10']:.4f} | {base['MAP']:.4f} | k1=0.9 b=0.4 |")
    for label, value in scifact_variants(args.model, args.cache_dir, bm25):
        lines.append(f"| scifact | {label} | {value:.4f} | | cached states |")
    sizes, lat, overlap = [], {}, []
    for compression in ("fp16", "int8"):
        entry, built = late_store(sci, model, compression)
        sci = Index.open(sci.path)
        stage = LateReranker(sci, model, interpolate=0.0, use_store=True)  # the checkpoint alone
        reranked = stage(queries, bm25)
        late = evaluate(reranked, qrels, ["nDCG@10", "MAP"])
        overlap = overlap_rows(bm25, reranked)
        fused = evaluate(LateReranker(sci, model, interpolate=weight, use_store=True)(queries, bm25), qrels,
                         ["nDCG@10"])["nDCG@10"]
        lines.append(f"| scifact | trained, late store {compression} | {late['nDCG@10']:.4f} | "
                     f"{late['MAP']:.4f} | fused w={weight}: {fused:.4f} |")
        sizes.append((compression, entry, built))
        lat[compression] = latencies(stage, queries, bm25, args.latency_queries)
    fly = LateReranker(sci, model, interpolate=0.0, use_store=False)
    lat["on the fly"] = latencies(fly, queries, bm25, args.fly_queries)

    runs = {"scifact": bm25}
    for name in OUT_OF_DOMAIN:
        idx = index_for(name, args.workdir)
        q, qr = load_topics(name), load_qrels(name)
        run = first_stage(idx, name)
        late_store(idx, model, "fp16")
        idx = Index.open(idx.path)
        zero = cached_late_run(name, run, args.cache_dir)
        stages = (("BM25 top-100", None), ("trained late", LateReranker(idx, model, interpolate=0.0)),
                  (f"trained late fused w={weight}", LateReranker(idx, model, interpolate=weight)))
        for label, stage in stages:
            reranked = run if stage is None else stage(q, run)
            r = evaluate(reranked, qr, ["nDCG@10", "MAP"])
            note = versus_zero_shot(reranked, zero, qr) if label == "trained late" else ""
            lines.append(f"| {name} | {label} | {r['nDCG@10']:.4f} | {r['MAP']:.4f} | {note} |")
        r = evaluate(zero, qr, ["nDCG@10", "MAP"])
        runs[name] = run
        lines.append(f"| {name} | zero-shot MaxSim | {r['nDCG@10']:.4f} | {r['MAP']:.4f} | cached states |")

    table = "\n".join(lines)
    if args.candidates:
        table += ("\n\nCheckpoints compared (trained alone, BM25 top-100; cached states):\n\n"
                  + candidates_table([args.model, *args.candidates], runs, args.cache_dir))
    size_rows = ["| compression | bytes/token | total (MB) | tokens | store build (s) |",
                 "|---|---:|---:|---:|---:|"]
    for compression, entry, built in sizes:
        how = "converted from fp16" if built is None else f"{built:.0f}"
        size_rows.append(f"| {compression} | {entry['bytes_per_token']} | {entry['bytes'] / 1e6:.1f} | "
                         f"{entry['tokens']:,} | {how} |")
    lat_rows = ["| documents from | median ms/query | p95 ms/query |", "|---|---:|---:|"]
    lat_rows += [f"| {k} | {m:.0f} | {p:.0f} |" for k, (m, p) in lat.items()]
    text = (f"# Late-interaction reranking (BM25 top-{DEPTH})\n\nMachine: {machine(args.threads)}\n\n"
            f"Model: `{shown(args.model)}` (dim {model.dim}).\n\n"
            f"{table}\n\nSciFact late store ({model.dim} dims):\n\n" + "\n".join(size_rows)
            + f"\n\nReranking latency per query, top-{DEPTH}, SciFact test (query encoding included; "
            f"{args.latency_queries} queries stored, {args.fly_queries} on the fly):\n\n"
            + "\n".join(lat_rows)
            + "\n\nWhat the SciFact figure means: train and test claims cite overlapping abstracts "
            "(trained model, late store):\n\n" + "\n".join(overlap)
            + f"\n\nTraining wall time (recorded in the checkpoint, encoder states cached): "
            f"{info['train_seconds']:.0f} s; best epoch {info['best_epoch']}, held-out train nDCG@10 "
            f"{info['heldout_ndcg10']} (BM25 {info['heldout_first_stage_ndcg10']}).\n\n"
            + training_record(info))
    publish(RESULTS, text)


if __name__ == "__main__":
    main()
