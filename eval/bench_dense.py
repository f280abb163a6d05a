"""Dense retrieval benchmark on SciFact: encoding speed and quality per precision, FAISS index types.

    python eval/bench_dense.py [--threads 2] [--sample 256] [--repeats 5] [--paths ...]

Like with like: every path of ours and of the peer (sentence-transformers' own
`encode`) encodes the same random sample of SciFact documents at max length
256 on the same number of cores, each at its best batch size from
--batch-sizes and, for the peer, its best layout (torch threads, or its own
multi-process pool with one thread per process, for fp32). The peer runs at the same
precision where it has one: fp32 as shipped, int8 with the same torch dynamic
quantisation applied to its model, bf16 (where the CPU has it) with its model
cast to bf16 as sentence-transformers documents. Timings: round-robin over all
paths after a warm-up (so load from other processes hits every path alike),
median and range over --repeats. nDCG@10 on SciFact test, and on the SciFact
training queries (validation: int8 is chosen for `auto` there, never on test),
from a full-corpus encoding with each path (flat index, query id removed from
its hits), cached; and the mean cosine of each path's document embeddings to
fp32's.
Prints one Markdown table and writes it as this machine's section of
eval/results/dense.md (one section per machine and command); with
RETRIEVAL_EMULATE_CPU=avx2 it measures what an AVX2 CPU gets, peer included
(ONNX Runtime cannot be capped, so its paths are left out there). The file
keeps runs on an Intel Xeon (AMX bf16), an AMD EPYC Zen 4 (bf16 without AMX)
and an AMD EPYC Zen 3 (a real AVX2 CPU: no AVX-512, no emulation).
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import faiss
import ir_measures
import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import machine_line, mean_of, precision_decisions, publish, timing_sample  # noqa: E402

from retrieval.collections import load_documents, load_qrels, load_topics  # noqa: E402
from retrieval.dense import encoder as dense_encoder  # noqa: E402
from retrieval.dense.encoder import Encoder  # noqa: E402
from retrieval.dense.faiss_index import build_faiss  # noqa: E402
from retrieval.runtime import cpu_emulation  # noqa: E402
from retrieval.runtime import precision as precisions  # noqa: E402
from retrieval.runtime.int8_outliers import stored_channels  # noqa: E402
from retrieval.runtime.local_models import cache_root, default_model_dir, model_checksum  # noqa: E402
from retrieval.types import Run  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=DeprecationWarning)
PEER = "sentence-transformers"
NDCG = ir_measures.parse_measure("nDCG@10")
LIMIT = 0.005  # nDCG@10 a precision may change for the dense encoder, either way (issue 13)
# Which peer precision each of our paths is compared with (ONNX fp32 is fp32 arithmetic).
SAME_PRECISION = {"fp32": "fp32", "onnx": "fp32", "int8": "int8", "onnx-int8": "int8", "bf16": "bf16"}


class PeerPath:
    """sentence-transformers' own encode at one precision; `processes` > 1 uses its multi-process pool."""

    def __init__(self, precision: str, threads: int, processes: int = 1):
        from sentence_transformers import SentenceTransformer

        kwargs = {"model_kwargs": {"torch_dtype": torch.bfloat16}} if precision == "bf16" else {}
        self.model = SentenceTransformer(str(default_model_dir()), device="cpu", local_files_only=True,
                                         **kwargs)
        self.model.max_seq_length = 256
        if precision == "int8":
            self.model[0].auto_model = precisions.prepare(self.model[0].auto_model, "int8",
                                                                 stored_channels(model_checksum(None)))
        self.threads, self.batch_size, self.pool = threads, 32, None
        if processes > 1:
            torch.set_num_threads(1)  # the pool's processes inherit one thread each
            self.pool = self.model.start_multi_process_pool(["cpu"] * processes)
            atexit.register(self.model.stop_multi_process_pool, self.pool)

    @property
    def effective_batch_size(self) -> int:
        return self.batch_size

    def encode(self, texts: list[str], desc: str = "") -> np.ndarray:
        torch.set_num_threads(self.threads)
        return np.asarray(self.model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                            show_progress_bar=False, convert_to_numpy=True, pool=self.pool),
                          dtype=np.float32)


def our_path(name: str, threads: int) -> Encoder:
    return Encoder(precision=name, threads=threads, progress=False)


def per_query_ndcg(doc_ids: list[str], docs: np.ndarray, queries: np.ndarray, qids: list[str],
                   qrels) -> dict[str, float]:
    """nDCG@10 of each judged query, searching the documents exactly (query id removed from its hits)."""
    index, _ = build_faiss(docs)
    scores, rows = index.search(queries, 1000)
    run = Run({q: [(doc_ids[r], float(s)) for r, s in zip(rows[i], scores[i])]
               for i, q in enumerate(qids)}).without_query_ids()
    return {m.query_id: float(m.value) for m in ir_measures.iter_calc([NDCG], qrels, run.scores())}


def evaluate(doc_ids: list[str], docs: np.ndarray, queries: np.ndarray, qids: list[str], qrels) -> float:
    """Mean nDCG@10 over the judged queries (per_query_ndcg)."""
    return mean_of(per_query_ndcg(doc_ids, docs, queries, qids, qrels))


def encoding_identity(name: str, path) -> list:
    """What decides a path's embeddings besides the texts (int8, which quantises a batch at a time: also
    its outlier channels and batch size)."""
    checksum = model_checksum(None)
    identity = [checksum, name, precisions.instruction_sets(), precisions.ARITHMETIC_VERSION]
    if name == "int8":
        identity += [stored_channels(checksum), path.effective_batch_size]
    return identity


def full_encoding(name: str, path, texts: list[str], qtexts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Corpus and query embeddings of one path, cached on disk (.npz keyed by the model's checksum, the
    path, the CPU's instruction sets, int8's outlier channels and the texts) so a rerun re-measures speed
    without re-encoding."""
    key = json.dumps([*encoding_identity(name, path), texts, qtexts])
    cache = cache_root() / "bench-dense" / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.npz"
    if cache.is_file():
        with np.load(cache, allow_pickle=False) as stored:
            return stored["docs"], stored["queries"]
    print(f"full-corpus encoding with {name} ...", file=sys.stderr, flush=True)
    docs, queries = path.encode(texts), path.encode(qtexts)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, docs=docs, queries=queries)
    return docs, queries


def query_encoding(name: str, path, qtexts: list[str]) -> np.ndarray:
    """Query embeddings of one path, cached like `full_encoding` (validation queries)."""
    key = json.dumps([*encoding_identity(name, path), "queries", qtexts])
    cache = cache_root() / "bench-dense" / f"{name}-q-{hashlib.sha256(key.encode()).hexdigest()[:16]}.npy"
    if cache.is_file():
        return np.load(cache, allow_pickle=False)
    vectors = path.encode(qtexts)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, vectors, allow_pickle=False)
    return vectors


def seconds(path, sample: list[str]) -> float:
    start = time.perf_counter()
    path.encode(sample)
    return time.perf_counter() - start


def best_batch_sizes(paths: dict, sample: list[str], sizes: list[int]) -> None:
    """Give each path the batch size that encoded the sample fastest (one timed run per size)."""
    for name, path in paths.items():
        if path.effective_batch_size != path.batch_size:
            print(f"{name}: one text a batch (fixed)", file=sys.stderr, flush=True)
            continue
        timings = {}
        for size in sizes:
            path.batch_size = size
            timings[size] = seconds(path, sample)
        path.batch_size = min(timings, key=timings.get)
        tried = ", ".join(f"{size}: {t:.1f}s" for size, t in timings.items())
        print(f"{name}: batch size {path.batch_size} ({tried})", file=sys.stderr, flush=True)


def fastest_peer(threads: int, sample: list[str], sizes: list[int]) -> PeerPath:
    """The peer as shipped (fp32, torch threads), warmed up, at its best batch size of `sizes` on the
    sample."""
    peer = PeerPath("fp32", threads)
    peer.encode(sample[:32])
    best_batch_sizes({PEER: peer}, sample, sizes)
    return peer


def make_paths(args) -> tuple[dict, dict[str, str]]:
    """The peer's paths and ours, by row label; and each label's layout note. The peer's process pools
    start first: spawning them after ONNX Runtime sessions exist failed here (bad fds_to_keep)."""
    peers, ours, layout = {}, {}, {}
    for precision in sorted({SAME_PRECISION[p] for p in args.paths}):
        # Its process pool only for fp32, as shipped: a second pool would not start here, and its spawned
        # workers load the model afresh (no quantisation or cast).
        for processes in (1, args.threads) if args.threads > 1 and precision == "fp32" else (1,):
            label = f"{PEER} {precision}" + (f" ×{processes} processes" if processes > 1 else "")
            peers[label] = PeerPath(precision, 1 if processes > 1 else args.threads, processes)
            layout[label] = (f"{processes} processes, 1 thread each" if processes > 1
                             else f"{args.threads} torch threads")
    for name in args.paths:
        ours[name] = our_path(name, args.threads)
        layout[name] = ("ORT intra-op threads" if name.startswith("onnx")
                        else f"{args.threads} batches side by side")
    return {**ours, **peers}, layout


def encoding_table(args, corpus, qids, qtexts, qrels) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The encoding rows; returns them with the auto path's embeddings."""
    paths, layout = make_paths(args)
    doc_ids, texts = [d.id for d in corpus], [d.contents for d in corpus]
    sample = timing_sample(texts, args.sample)
    for path in paths.values():
        path.encode(sample[:32])  # warm-up
    best_batch_sizes(paths, sample, args.batch_sizes)
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(args.repeats):
        for name, path in paths.items():
            times[name].append(seconds(path, sample))
    rate = {name: args.sample / statistics.median(t) for name, t in times.items()}
    spread = {name: (args.sample / max(t), args.sample / min(t)) for name, t in times.items()}
    peers = {p: max((n for n in paths if n.startswith(f"{PEER} {p}")), key=rate.get)
             for p in set(SAME_PRECISION.values()) if any(n.startswith(f"{PEER} {p}") for n in paths)}
    default_peer = peers["fp32"]
    for name in paths:  # the timings, before the long full-corpus encodings
        low, high = spread[name]
        print(f"{name}: {rate[name]:.1f} docs/s ({low:.1f}-{high:.1f})", file=sys.stderr)
    encoded = {name: full_encoding(name, paths[name], texts, qtexts)  # (documents, test queries)
               for name in args.paths if name in args.ndcg_paths}
    ndcg = {name: evaluate(doc_ids, *encoded[name], qids, qrels) for name in encoded}
    train, train_qrels = load_topics("scifact:train"), load_qrels("scifact:train")
    train_texts = list(train.values())
    valid_per_query = {name: per_query_ndcg(doc_ids, encoded[name][0],
                                            query_encoding(name, paths[name], train_texts), list(train),
                                            train_qrels) for name in encoded}
    valid = {name: mean_of(got) for name, got in valid_per_query.items()}
    cosine = {name: float(np.mean(np.sum(encoded[name][0] * encoded["fp32"][0], 1)))
              for name in encoded}  # how closely each path's document embeddings follow fp32's
    auto = precisions.resolve(precisions.AUTO, tuple(args.paths),
                              int8_within_limit=dense_encoder.INT8_WITHIN_LIMIT)
    lines = [f"| path | layout | batch | docs/s median (range over {args.repeats}) | × peer, same precision |"
             f" × {default_peer} (peer default) | mean cosine to fp32 (documents) | validation nDCG@10 |"
             " Δ vs fp32 | test nDCG@10 | Δ vs fp32 |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, path in paths.items():
        ours = not name.startswith(PEER)
        label = f"**{name} (auto)**" if name == auto else name
        same = peers.get(SAME_PRECISION[name]) if ours else None
        quality = " | ".join(f"{got[name]:.4f} | {got[name] - got['fp32']:+.4f}" if name in got
                             else "– | –" for got in (valid, ndcg))
        lines.append(f"| {label} | {layout[name]} | {path.effective_batch_size} | {rate[name]:.1f}"
                     f" ({spread[name][0]:.1f}–{spread[name][1]:.1f}) |"
                     f" {f'{rate[name] / rate[same]:.2f}× ({same})' if same else '–'} |"
                     f" {rate[name] / rate[default_peer]:.2f}× |"
                     f" {f'{cosine[name]:.4f}' if name in cosine else '–'} | {quality} |")
    lines += ["", precision_decisions("the dense encoder", valid_per_query, LIMIT, dense_encoder,
                                      f"{len(valid_per_query['fp32'])} SciFact training queries, nDCG@10")]
    with_auto = encoded[auto] if auto in encoded else full_encoding(auto, paths[auto], texts, qtexts)
    return lines, *with_auto


def search_rows(args, doc_ids, docs, qids, queries, qrels) -> list[str]:
    """Queries/s and recall@100 against flat for flat, HNSW and IVF-PQ."""
    faiss.omp_set_num_threads(args.threads)
    lines = ["| index | params | queries/s (k=100) | × flat | recall@100 vs flat | nDCG@10 |",
             "|---|---|---:|---:|---:|---:|"]
    truth, flat_rate = None, None
    for kind in ("flat", "hnsw", "ivfpq"):
        index, params = build_faiss(docs, kind)
        index.search(queries, 100)
        runs = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            found = index.search(queries, 100)[1]
            runs.append(time.perf_counter() - start)
        rate = len(queries) / statistics.median(runs)
        truth = found if truth is None else truth
        flat_rate = flat_rate or rate
        recall = np.mean([len(set(a) & set(b)) / len(a) for a, b in zip(truth, found)])
        scores, rows = index.search(queries, 1000)
        run = Run({q: [(doc_ids[r], float(s)) for r, s in zip(rows[i], scores[i]) if r >= 0]
                   for i, q in enumerate(qids)}).without_query_ids()
        ndcg = ir_measures.calc_aggregate([NDCG], qrels, run.scores())[NDCG]
        shown = ", ".join(f"{k}={v}" for k, v in params.items()) or "exact"
        lines.append(f"| {kind} | {shown} | {rate:.0f} | {rate / flat_rate:.2f}× | {recall:.4f} |"
                     f" {ndcg:.4f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sample", type=int, default=256, help="docs timed per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 32, 64])
    onnx = () if cpu_emulation.requested() else ("onnx", "onnx-int8")  # ONNX Runtime is not capped
    paths = [p for p in (*precisions.TORCH_PRECISIONS, *onnx) if p != "bf16" or precisions.cpu_has_bf16()]
    parser.add_argument("--paths", nargs="+", default=paths)
    parser.add_argument("--ndcg-paths", nargs="+", default=None,
                        help="our paths to evaluate on the full corpus (default: all; minutes each)")
    parser.add_argument("--out", type=Path, default=ROOT / "eval" / "results" / "dense.md")
    args = parser.parse_args()
    args.paths = list(dict.fromkeys(["fp32", precisions.resolve(precisions.AUTO), *args.paths]))
    args.ndcg_paths = args.paths if args.ndcg_paths is None else ["fp32", *args.ndcg_paths]
    corpus = list(load_documents("scifact"))
    topics, qrels = load_topics("scifact"), load_qrels("scifact")
    qids, qtexts = list(topics), list(topics.values())
    enc_lines, docs, queries = encoding_table(args, corpus, qids, qtexts, qrels)
    search = search_rows(args, [d.id for d in corpus], docs, qids, queries, qrels)
    publish(args.out, "\n".join(
        ["# Dense retrieval: SciFact (5,183 docs, 300 test queries), all-MiniLM-L6-v2", "",
         f"Encoding {args.sample} SciFact documents, max length 256, {args.threads} cores; each path at its"
         f" best batch size of {args.batch_sizes} (int8: one text a batch, so that a text's embedding does"
         " not depend on its batch-mates) and the peer also at its best layout. **auto** is the"
         " default on this CPU. \"Same precision\" compares with the peer's fastest layout at that"
         " precision (ONNX fp32 counts as fp32); \"peer default\" is sentence-transformers as shipped"
         " (fp32) at its fastest layout.", "",
         *enc_lines, "", f"Search over the auto path's embeddings, {args.threads} threads:",
         "", *search, "", "Machine: " + machine_line("torch", "transformers", "sentence-transformers",
                                                       "onnxruntime", "faiss-cpu"), "",
         "Medians after a warm-up, all paths round-robin in one run.", ""]))


if __name__ == "__main__":
    main()
