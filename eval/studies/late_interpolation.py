"""Weight-space interpolation of the late projection towards its zero-shot start (WiSE-FT), on validation.

    retrieval index --collection scifact --index indexes/scifact
    retrieval train late --index indexes/scifact --topics scifact:train --output /tmp/wise/late.safetensors \\
        --cache-dir /tmp/late-cache --threads 2
    python eval/studies/late_interpolation.py --checkpoint /tmp/wise/late.safetensors \\
        --index indexes/scifact \\
        --cache-dir /tmp/late-cache

Issue 16 asks for a late model not worse than zero-shot MaxSim out of domain
(CACM, Vaswani, Cranfield) with SciFact test nDCG@10 >= 0.76. Interpolating
a fine-tuned model's weights with its starting point (Wortsman et al. 2022,
WiSE-FT) is a known way to keep a zero-shot model's robustness out of domain.
For W_a = W0 + a (W - W0), a = 0, 0.1, ..., 1 (W the checkpoint, W0 the
start its training computed from the same cached SciFact states, pca_init),
this reports on validation only: nDCG@10 of BM25 top-100 reranked for the
checkpoint's held-out SciFact training queries, and held-out ICT MRR on the
three out-of-domain corpora. It chooses a by the rule bench_late.py applies
to checkpoints: the best held-out nDCG@10 among the a at or above zero-shot
ICT MRR on each corpus (ties: the larger a). Only then are the test figures
of the chosen a computed (nDCG@10 of BM25 top-100 reranked), beside BM25 and
zero-shot MaxSim, and reported whatever they are.

W0 is recomputed, so the checkpoint must have been trained from these
cached states: at a = 1 the held-out nDCG@10 must equal the one the
checkpoint records, or the script stops (a checkpoint trained in another
precision, such as the committed one from bf16 states, needs the retrain
above). Writes eval/studies/results/late-interpolation.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # eval/, for its benchmarks
from bench_late import OUT_OF_DOMAIN, _meta, cached_late, first_stage, index_for  # noqa: E402
from benchlib import machine_line, publish  # noqa: E402

from retrieval import collections  # noqa: E402
from retrieval.evaluation.measures import evaluate  # noqa: E402
from retrieval.index.native import Index  # noqa: E402
from retrieval.late.cache import cached_states  # noqa: E402
from retrieval.late.config import TrainConfig  # noqa: E402
from retrieval.late.encoder import TokenEncoder  # noqa: E402
from retrieval.late.model import load_checkpoint  # noqa: E402
from retrieval.late.train import (  # noqa: E402
    document_states,
    pair_states,
    pairs_mrr,
    pca_init,
    rerank_cached,
    training_inputs,
    training_split,
)
from retrieval.types import Qrels, Run  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "late-interpolation.md"
GRID = [round(0.1 * i, 1) for i in range(11)]
TOPICS = "scifact:train"


def validation_set(index: Index, cfg: TrainConfig, encoder: TokenEncoder, cache_dir: Path) -> tuple:
    """(cached query states and rows, cached document states and rows, held-out run and qrels) as
    `retrieval train late` builds them from the training topics: the same split, the same states."""
    docs, queries, qrels, run, _ = training_inputs(index, TOPICS, None, cfg)
    dindex = {d: i for i, d in enumerate(docs)}
    qids, held = training_split(queries, qrels, dindex, cfg)
    dstates = document_states(encoder, docs, cache_dir)
    qstates = cached_states(encoder, [queries[q] for q in qids], True, cache_dir, desc="queries")
    held_run = Run({q: run[q][:cfg.depth] for q in qids if q in held and q in run})
    return (qstates, {q: i for i, q in enumerate(qids)}, dstates, dindex, held_run,
            Qrels((q, qrels[q]) for q in held_run))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, required=True, help="trained by `retrieval train late`")
    ap.add_argument("--index", type=Path, required=True, help="the SciFact index it was trained with")
    ap.add_argument("--cache-dir", type=Path, required=True, help="the cache of its training")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/bench_late"), help="indexes for test runs")
    args = ap.parse_args()
    cfg = TrainConfig()
    encoder = TokenEncoder(None, query_length=cfg.query_length, doc_length=cfg.doc_length,
                           markers=cfg.markers, augment=cfg.augment, progress=None)
    qstates, qindex, dstates, dindex, held_run, held_qrels = validation_set(Index.open(args.index), cfg,
                                                                            encoder, args.cache_dir)
    start = pca_init(dstates.states, cfg.dim, cfg.seed)
    trained, _ = load_checkpoint(args.checkpoint)
    ict = {name: pair_states(encoder, name, cfg, args.cache_dir) for name in OUT_OF_DOMAIN}
    zero = {name: pairs_mrr(np.eye(encoder.dim, dtype=np.float32), *ict[name]) for name in OUT_OF_DOMAIN}
    rows = {}
    for a in GRID:
        proj = (start + a * (trained - start)).astype(np.float32)
        late = rerank_cached(proj, qstates, qindex, dstates, dindex, held_run, cfg.depth)
        rows[a] = (evaluate(late, held_qrels, ["nDCG@10"])["nDCG@10"],
                   {name: pairs_mrr(proj, *ict[name]) for name in OUT_OF_DOMAIN})
    recorded = json.loads(_meta(args.checkpoint)["info"])["heldout_ndcg10"]
    if round(rows[1.0][0], 4) != recorded:
        raise SystemExit(f"at a = 1 the held-out nDCG@10 is {rows[1.0][0]:.4f}, the checkpoint records"
                         f" {recorded}: it was trained from other states; retrain it from --cache-dir")
    eligible = [a for a in GRID if all(rows[a][1][n] >= zero[n] for n in OUT_OF_DOMAIN)]
    chosen = max(eligible, key=lambda a: (rows[a][0], a))
    publish(RESULTS, report(args.checkpoint, len(held_run), rows, zero, eligible, chosen,
                            test_rows(start + chosen * (trained - start), args)))


def test_rows(proj: np.ndarray, args: argparse.Namespace) -> list[str]:
    """nDCG@10 on each test collection (BM25 top-100): BM25, zero-shot MaxSim, the chosen projection."""
    lines = []
    for name in ("scifact", *OUT_OF_DOMAIN):
        run = first_stage(index_for(name, args.workdir), name)
        bm25 = evaluate(run, collections.load_qrels(name), ["nDCG@10"])["nDCG@10"]
        zero, chosen = (cached_late(name, run, args.cache_dir, p, name == "scifact")["nDCG@10"]
                        for p in (None, proj.astype(np.float32)))
        lines.append(f"| {name} | {bm25:.4f} | {zero:.4f} | {chosen:.4f} |")
    return lines


def report(checkpoint: Path, held: int, rows: dict, zero: dict, eligible: list, chosen: float,
           tests: list[str]) -> str:
    """The Markdown of the results file."""
    lines = ["# Late interaction: the projection interpolated towards its zero-shot start (WiSE-FT)",
             "", machine_line("numpy", "torch"), "",
             f"Checkpoint `{checkpoint.name}` (W), trained by `retrieval train late` from the cached states"
             f" this run reads; W0 its start. Validation: the checkpoint's {held} held-out SciFact training"
             " queries (BM25 top-100 reranked) and held-out ICT pairs of the out-of-domain corpora. No test"
             " topic or qrel is read before the choice. The checkpoint comes first from `retrieval train late"
             " --index <scifact index> --topics scifact:train --output <checkpoint> --cache-dir <cache>"
             " --threads 2`, the committed checkpoint's settings (the committed one was trained from bf16"
             " states, so W0 cannot be recomputed for it where they differ).", "",
             "| a (W0 + a (W - W0)) | held-out SciFact train nDCG@10 | "
             + " | ".join(f"{n} ICT MRR" for n in OUT_OF_DOMAIN) + " | eligible |",
             "|---:|---:|" + "---:|" * len(OUT_OF_DOMAIN) + "---|",
             "| zero-shot | | " + " | ".join(f"{zero[n]:.4f}" for n in OUT_OF_DOMAIN) + " | |"]
    for a, (ndcg, mrr) in rows.items():
        lines.append(f"| {a} | {ndcg:.4f} | " + " | ".join(f"{mrr[n]:.4f}" for n in OUT_OF_DOMAIN)
                     + f" | {'yes' if a in eligible else 'no'} |")
    lines += ["", f"Chosen: a = {chosen} (best held-out nDCG@10 among the a at or above zero-shot ICT MRR on"
              f" {', '.join(OUT_OF_DOMAIN)}; ties to the larger a). Its test figures, computed after the"
              " choice (nDCG@10, BM25 top-100 reranked):", "",
              "| collection | BM25 | zero-shot MaxSim | chosen |", "|---|---:|---:|---:|", *tests]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
