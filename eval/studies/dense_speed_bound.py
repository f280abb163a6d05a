"""How fast any encoder that does all-MiniLM-L6-v2's work could be on this CPU, against the peer.

    python eval/studies/dense_speed_bound.py [--threads 2] [--sample 256] [--repeats 5]

An upper bound, for issue 13's goal of dense document encoding at >= 2.5x
sentence-transformers' docs/s on a CPU without bf16 (>= 3x where bf16
exists). It counts the multiply-adds the encoder does on
eval/bench_dense.py's sample of SciFact documents (max length 256, no
padding at all): the six layers' linear maps (4 of 384 -> 384 and
384 <-> 1,536 a token) and attention (2 L^2 x 384 a text of L tokens).
In one run, round-robin (each round times everything once) it times:
- the peer, sentence-transformers fp32 (its shipped precision), at its best
  batch size from --batch-sizes, on --threads torch threads;
- every matrix product kernel at hand at the encoder's shapes (M = the
  tokens of 1, 4 and 16 texts of 256): torch fp32 (the peer's own), torch
  int8 with dynamic activation quantisation (FBGEMM, what the int8 path
  runs), FBGEMM int8 with the activation already quantised, ONNX Runtime's
  integer product (MLAS, uint8 x int8 -> int32, inputs already quantised:
  no quantisation cost at all) and, where the CPU has bf16, torch bf16;
- attention: torch's fused kernel (softmax included), its two batched
  products with a softmax between them, and the two products alone (softmax
  left out), in fp32 (and bf16 where the CPU has it);
- the element-wise work the model prescribes beside them: GELU over the
  feed-forward's 1,536 hidden values a token (exact, as the model has it, and
  torch's faster tanh approximation) and the two LayerNorms of 384 a token a
  layer, in fp32 (and bf16 where the CPU has it).
Each timed call of a kernel does the same rows (tokens) at every M, repeating
the kernel as often as that takes, so that no call is short enough for a
hiccup of this shared machine to decide a rate. Each round gives three
bounds, from tight to generous, and a fourth (1 on fewer tokens, punctuation
word pieces dropped as eval/studies/bench_pruning.py does), and divides each by that
round's peer. Each runs every part at the fastest rate any kernel
reached in that round and charges nothing for embedding, pooling,
quantisation, padding, residual adds or tokenisation:
1. the linear maps at the best low-precision rate for their shape, attention
   with its softmax at its fastest way, and GELU and LayerNorm at theirs;
2. as 1, with softmax, GELU and LayerNorm free;
3. as 2, with attention at the best low-precision matrix-product rate.
Only multiply-adds cost time in 2 and 3. The verdict rests on 1: a faster
encoder could fuse the element-wise work into its products, which saves
memory traffic but not the arithmetic, and each element-wise kernel is timed
at its best over sizes that stay in cache. Writes
eval/studies/results/dense-speed-bound.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "eval"))

from bench_dense import PEER, fastest_peer  # noqa: E402
from bench_pruning import drop_sets  # noqa: E402
from benchlib import machine_line, publish, round_robin, spread, timing_sample  # noqa: E402

from retrieval.collections import load_documents  # noqa: E402
from retrieval.dense.encoder import Encoder  # noqa: E402
from retrieval.runtime.precision import cpu_has_bf16  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=DeprecationWarning)
RESULTS = ROOT / "eval" / "studies" / "results" / "dense-speed-bound.md"
# Issue 13: dense document encoding at >= 2.5x the peer's docs/s on a CPU without bf16, >= 3x with it.
GOAL = 3.0 if cpu_has_bf16() else 2.5
LINEAR_SHAPES = {"Q, K, V, output (384 -> 384, 4 a layer)": (384, 384, 4),
                 "feed-forward up (384 -> 1,536)": (384, 1536, 1),
                 "feed-forward down (1,536 -> 384)": (1536, 384, 1)}
TOKENS = (256, 1024, 4096)  # the tokens of 1, 4 and 16 texts of 256
LOW = "int8 or bf16" if cpu_has_bf16() else "int8"  # the low precisions this CPU runs fast
# The bounds, as the table names them: three on the model's work, tight to generous (the first decides the
# verdict), and the first again on less work.
BOUNDS = ("attention with its softmax, GELU and LayerNorm, each as fast as it runs here",
          "attention without its softmax as fast as it runs here; softmax, GELU and LayerNorm free",
          f"attention at the best {LOW} matrix-product rate of any shape (no kernel here does that); "
          "softmax, GELU and LayerNorm free",
          "as the first, on fewer tokens: punctuation word pieces dropped (eval/studies/bench_pruning.py's "
          "punctuation row, eval/studies/results/pruning.md)")
# Every timed call of a kernel does this many rows (tokens): a call at M tokens repeats the kernel
# ROWS / M times, so that each call lasts long enough (0.05-0.5 s) for a hiccup of the machine not to
# decide its rate, and every M does the same work. Attention repeats its 16 texts as often.
ROWS = 8 * TOKENS[-1]
REPEATS = {m: ROWS // m for m in TOKENS}
ATTENTION_REPEATS = ROWS // TOKENS[-1]
HIDDEN, WIDTH = 1536, 384


def repeated(call, times: int):
    """A call that makes `call` `times` times."""
    return lambda: [call() for _ in range(times)]


def torch_fp32(m: int, k: int, n: int):
    layer, x = torch.nn.Linear(k, n), torch.randn(m, k)
    return lambda: layer(x)


def torch_int8_dynamic(m: int, k: int, n: int):
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    layer = quantize_dynamic(torch.nn.Sequential(torch.nn.Linear(k, n)),
                             {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)
    x = torch.randn(m, k)
    return lambda: layer(x)


def fbgemm_int8_quantised_input(m: int, k: int, n: int):
    weight = torch.quantize_per_channel(torch.randn(n, k), torch.rand(n) / 64,
                                        torch.zeros(n, dtype=torch.long), 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(weight, torch.zeros(n))
    x = torch.quantize_per_tensor(torch.randn(m, k), 0.05, 128, torch.quint8)
    return lambda: torch.ops.quantized.linear(x, packed, 0.1, 128)


def ort_integer_product(m: int, k: int, n: int):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.integers(-127, 128, (k, n), dtype=np.int8), "B")
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"], ["Y"])], "product",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [m, k])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [m, n])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = torch.get_num_threads(), 1
    # Its threads would otherwise spin between runs and slow whatever is timed next (seen here: attention
    # timed after these sessions ran at a third of its speed).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    a = rng.integers(0, 256, (m, k), dtype=np.uint8)
    return lambda: session.run(None, {"A": a})


def torch_bf16(m: int, k: int, n: int):
    layer, x = torch.nn.Linear(k, n).to(torch.bfloat16), torch.randn(m, k, dtype=torch.bfloat16)
    return lambda: layer(x)


# Each kernel's maker and whether it is low precision (int8 or bf16: what a faster path could run).
KERNELS = {"torch fp32 (the peer's)": (torch_fp32, False),
           "torch int8, dynamic (FBGEMM; our int8 path)": (torch_int8_dynamic, True),
           "FBGEMM int8, input already quantised": (fbgemm_int8_quantised_input, True),
           "ONNX Runtime MatMulInteger (MLAS), input already quantised": (ort_integer_product, True),
           **({"torch bf16": (torch_bf16, True)} if cpu_has_bf16() else {})}


def dtype_name(dtype: torch.dtype) -> str:
    """fp32 or bf16."""
    return {torch.float32: "fp32", torch.bfloat16: "bf16"}[dtype]


def attention_products(dtype: torch.dtype) -> dict[str, tuple[object, bool]]:
    """Attention of 16 texts of 256 tokens, 12 heads of 32, three ways, each with whether it computes
    the softmax: torch's fused kernel, two batched products with a softmax between, the products alone."""
    q = torch.randn(16, 12, 256, 32, dtype=dtype)
    name = dtype_name(dtype)
    return {f"fused kernel, {name}":
            (lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q), True),
            f"two batched products and a softmax, {name}":
            (lambda: torch.matmul(torch.softmax(torch.matmul(q, q.transpose(-1, -2)), -1), q), True),
            f"two batched products alone, {name}":
            (lambda: torch.matmul(torch.matmul(q, q.transpose(-1, -2)), q), False)}


def elementwise_calls(dtype: torch.dtype) -> dict[str, object]:
    """GELU (exact and tanh) over m x 1,536 and LayerNorm over m x 384, each call ROWS rows: keys
    "gelu|<way>, <dtype>|m" and "layernorm|<dtype>|m"."""
    name, calls = dtype_name(dtype), {}
    for m, repeat in REPEATS.items():
        hidden, width = torch.randn(m, HIDDEN, dtype=dtype), torch.randn(m, WIDTH, dtype=dtype)
        norm = torch.nn.LayerNorm(WIDTH, eps=1e-12).to(dtype)
        for way in ("none", "tanh"):
            gelu = partial(torch.nn.functional.gelu, hidden, approximate=way)
            calls[f"gelu|{'exact' if way == 'none' else way}, {name}|{m}"] = repeated(gelu, repeat)
        calls[f"layernorm|{name}|{m}"] = repeated(partial(norm, width), repeat)
    return calls


ATTENTION_MACS = ATTENTION_REPEATS * 2 * 256 * 256 * 384 * 16  # of one timed attention call


@dataclass(frozen=True)
class Work:
    """What the six layers do over the sample, unpadded: multiply-adds per linear shape and in attention,
    and the tokens (each gets GELU and LayerNorm)."""

    linear: dict[str, float]
    attention: float
    tokens: int


def sample_work(pieces: list[list[int]], drop: set[int] = frozenset()) -> Work:
    """The encoder's Work on the sample's word pieces (truncated to 256), with those in `drop` removed
    (as eval/studies/bench_pruning.py's PrunedEncoder does)."""
    lengths = np.array([sum(i not in drop for i in ids) for ids in pieces])
    linear = {shape: 6 * lengths.sum() * k * n * count for shape, (k, n, count) in LINEAR_SHAPES.items()}
    return Work(linear, float(6 * (2 * lengths.astype(float) ** 2 * 384).sum()), int(lengths.sum()))


def best_rate(times: dict[str, list[float]], r: int, prefix: str, work_a_call: float) -> float:
    """The best rate (work a second) in round r of the calls whose key starts with prefix."""
    return max(work_a_call / t[r] for key, t in times.items() if key.startswith(prefix))


def bounds_of_round(times: dict[str, list[float]], r: int, work: Work,
                    pruned: Work) -> tuple[dict[str, float], dict[str, float]]:
    """Round r's rates ("kernel|shape" in multiply-adds a second at the best over TOKENS; attention's with
    and without its softmax; GELU's and LayerNorm's in values a second) and its BOUNDS (seconds for the
    sample; the last on the `pruned` work)."""
    rates = {(kernel, shape): max(ROWS * k * n / times[f"{kernel}|{shape}|{m}"][r] for m in TOKENS)
             for kernel in KERNELS for shape, (k, n, _) in LINEAR_SHAPES.items()}
    best_low = {shape: max(rates[kernel, shape] for kernel, (_, low) in KERNELS.items() if low)
                for shape in LINEAR_SHAPES}
    shown = {**{f"{kernel}|{shape}": rate for (kernel, shape), rate in rates.items()},
             "attention": best_rate(times, r, "attention|", ATTENTION_MACS),
             "attention with softmax": best_rate(times, r, "attention|softmax|", ATTENTION_MACS),
             "gelu": best_rate(times, r, "gelu|", ROWS * HIDDEN),
             "layernorm": best_rate(times, r, "layernorm|", ROWS * WIDTH)}

    def linear_seconds(w: Work) -> float:
        return sum(w.linear[shape] / best_low[shape] for shape in LINEAR_SHAPES)

    def every_part(w: Work) -> float:
        elementwise = 6 * w.tokens * (HIDDEN / shown["gelu"] + 2 * WIDTH / shown["layernorm"])
        return linear_seconds(w) + w.attention / shown["attention with softmax"] + elementwise

    seconds = (every_part(work), linear_seconds(work) + work.attention / shown["attention"],
               linear_seconds(work) + work.attention / max(best_low.values()), every_part(pruned))
    return shown, dict(zip(BOUNDS, seconds))


def calls_to_time(sample: list[str], peer, ours: dict) -> dict:
    """The peer's and our paths' encodings of the sample, each kernel at each shape and M, and each way
    of attention."""
    calls = {"peer": lambda: peer.encode(sample)}
    calls.update({f"ours|{name}": lambda path=path: path.encode(sample) for name, path in ours.items()})
    for kernel, (make, _) in KERNELS.items():
        for shape, (k, n, _) in LINEAR_SHAPES.items():
            calls.update({f"{kernel}|{shape}|{m}": repeated(make(m, k, n), REPEATS[m]) for m in TOKENS})
    for dtype in (torch.float32, torch.bfloat16) if cpu_has_bf16() else (torch.float32,):
        for way, (call, softmax) in attention_products(dtype).items():
            with_softmax = "softmax" if softmax else "no softmax"
            calls[f"attention|{with_softmax}|{way}"] = repeated(call, ATTENTION_REPEATS)
        calls.update(elementwise_calls(dtype))
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sample", type=int, default=256, help="documents, as eval/bench_dense.py samples")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    texts = [d.contents for d in load_documents("scifact")]
    sample = timing_sample(texts, args.sample)  # the same texts as eval/bench_dense.py times
    peer = fastest_peer(args.threads, sample, args.batch_sizes)
    ours = {name: Encoder(precision=name, threads=args.threads, progress=False) for name in ("fp32", "int8")}
    tokenizer = peer.model.tokenizer  # the model's own, as every encoder here uses
    pieces = tokenizer(sample, truncation=True, max_length=256)["input_ids"]
    work = sample_work(pieces)
    pruned = sample_work(pieces, drop_sets(tokenizer.get_vocab())["punctuation"])
    with torch.inference_mode():
        times = round_robin(calls_to_time(sample, peer, ours), args.repeats)
    rounds, bounds = zip(*(bounds_of_round(times, r, work, pruned) for r in range(args.repeats)))
    peer_rates = [len(sample) / t for t in times["peer"]]
    ratios = {label: [len(sample) / got[label] / rate for got, rate in zip(bounds, peer_rates)]
              for label in BOUNDS}
    macs = sum(work.linear.values()) + work.attention
    ours_ratios = {name: [peer_t / t for peer_t, t in zip(times["peer"], times[f"ours|{name}"])]
                   for name in ours}
    lines = ["# Dense encoding on this CPU: an upper bound on any encoder doing all-MiniLM-L6-v2's work", "",
             f"{len(sample)} SciFact documents (eval/bench_dense.py's sample), max length 256: "
             f"{sum(work.linear.values()) / 1e9:.0f} G multiply-adds in the linear maps and "
             f"{work.attention / 1e9:.1f} G in attention, counted without padding. {args.threads} threads. "
             f"Everything is timed in one run, round-robin: each of {args.repeats} rounds times the peer "
             "once and every kernel once, and each round gives its own bound against its own peer time; "
             f"medians (range) over the rounds. Each timed call of a kernel does {ROWS:,} rows (tokens), "
             "repeating it as often as that takes; a kernel's rate is its best over M = "
             + ", ".join(map(str, TOKENS)) + " tokens.", "",
             "| kernel, G multiply-adds a second | " + " | ".join(LINEAR_SHAPES) + " |",
             "|---|" + "---:|" * len(LINEAR_SHAPES)]
    for kernel in KERNELS:
        lines.append(f"| {kernel} | " + " | ".join(spread([got[f"{kernel}|{shape}"] / 1e9 for got in rounds])
                                                   for shape in LINEAR_SHAPES) + " |")
    lines += ["", "Attention, G multiply-adds a second: with its softmax (the faster of torch's fused kernel "
              "and two batched products with a softmax between) "
              f"{spread([got['attention with softmax'] / 1e9 for got in rounds])}; at its fastest, the two "
              f"products alone included, {spread([got['attention'] / 1e9 for got in rounds])}. "
              "GELU, the faster of exact and tanh: "
              f"{spread([got['gelu'] / 1e9 for got in rounds], 2)} G values a second "
              f"({6 * work.tokens * HIDDEN / 1e9:.2f} G values in the sample); LayerNorm: "
              f"{spread([got['layernorm'] / 1e9 for got in rounds], 2)} G values a second "
              f"({12 * work.tokens * WIDTH / 1e9:.2f} G in the sample). The peer, "
              f"{PEER} fp32 at batch {peer.batch_size}, encodes {spread(peer_rates)} docs/s, i.e. "
              f"{spread([macs * rate / len(sample) / 1e9 for rate in peer_rates])} G multiply-adds a second"
              " over the whole encoder. Our encoder as shipped (eval/bench_dense.py's layouts): "
              + "; ".join(f"{name} {spread(ratio, 2, '×')} the peer" for name, ratio in ours_ratios.items())
              + ".", "",
              f"| bound: the linear maps at the best {LOW} rate for their shape; embedding, pooling, "
              "quantisation, padding and residual adds free; and | × peer (docs/s at most ÷ the peer's, "
              "per round) | goal |",
              "|---|---:|---:|"]
    lines += [f"| {label} | {spread(ratios[label], 2, '×')} | {GOAL}× |" for label in BOUNDS]
    realistic = max(ratios[BOUNDS[0]])
    pruned_ratios = ratios[BOUNDS[3]]
    share = statistics.median(ours_ratios["int8"]) / statistics.median(ratios[BOUNDS[0]])
    lines += ["", f"In its best round, the first bound (every part the model prescribes, at the fastest rate"
              f" any kernel here reached for it) is {realistic:.2f}× the peer: "
              f"{'below' if realistic < GOAL else 'at or above'} {GOAL}×"
              + (", so no encoder doing this model's work with the kernels at hand can reach the goal on this"
                 " CPU, even if embedding, quantisation and padding cost nothing."
                 if realistic < GOAL else
                 ", so the goal is not ruled out on this CPU; it leaves "
                 f"{1 - GOAL / realistic:.0%} of the time for everything else.")
              + f" Our int8 path runs at {share:.0%} of that bound (medians). Dropping punctuation word"
              " pieces, the one way to less work whose measured validation change is under the loss limit"
              " (eval/studies/results/pruning.md, a mean without an interval), lifts the bound to "
              f"{max(pruned_ratios):.2f}× in its best round "
              f"(median {statistics.median(pruned_ratios):.2f}×).",
              "", "Machine: " + machine_line("torch", "onnxruntime", "sentence-transformers")]
    publish(args.out, "\n".join(lines))


if __name__ == "__main__":
    main()
