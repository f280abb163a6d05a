"""How fast any encoder that does all-MiniLM-L6-v2's work could be on this CPU, against the peer.

    python eval/dense_speed_bound.py [--threads 2] [--sample 256] [--repeats 5]

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
- attention: torch's fused kernel, and its two batched products alone
  (softmax left out), in fp32 (and bf16 where the CPU has it).
Each round's bounds charge nothing for anything but multiply-adds (no
embedding, LayerNorm, GELU, softmax, pooling, quantisation, padding or
tokenisation) and run each at the fastest rate any kernel reached in that
round: the linear maps at the best low-precision rate for their shape;
attention at its fastest way or, more generous still, at the best
low-precision matrix-product rate; and divide by that round's peer. Writes
eval/results/dense-speed-bound.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "eval"))

from bench_dense import PEER, PeerPath, best_batch_sizes  # noqa: E402
from benchlib import machine_line, publish, round_robin, timing_sample  # noqa: E402

from retrieval.collections import load_documents  # noqa: E402
from retrieval.dense.encoder import Encoder  # noqa: E402
from retrieval.local_models import default_model_dir  # noqa: E402
from retrieval.precision import cpu_has_bf16  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=DeprecationWarning)
RESULTS = ROOT / "eval" / "results" / "dense-speed-bound.md"
# Issue 13: dense document encoding at >= 2.5x the peer's docs/s on a CPU without bf16, >= 3x with it.
GOAL = 3.0 if cpu_has_bf16() else 2.5
LINEAR_SHAPES = {"Q, K, V, output (384 -> 384, 4 a layer)": (384, 384, 4),
                 "feed-forward up (384 -> 1,536)": (384, 1536, 1),
                 "feed-forward down (1,536 -> 384)": (1536, 384, 1)}
TOKENS = (256, 1024, 4096)  # the tokens of 1, 4 and 16 texts of 256
LOW = "int8 or bf16" if cpu_has_bf16() else "int8"  # the low precisions this CPU runs fast
# The two bounds, as the table names them; the first, attention as fast as it runs, decides the verdict.
BOUNDS = ("attention as fast as it runs here",
          f"attention at the best {LOW} matrix-product rate of any shape (no kernel here does that)")


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


def attention_products(dtype: torch.dtype) -> dict[str, object]:
    """Attention of 16 texts of 256 tokens, 12 heads of 32, two ways: torch's fused kernel (softmax
    included) and its two batched products alone (softmax left out)."""
    q = torch.randn(16, 12, 256, 32, dtype=dtype)
    name = str(dtype).removeprefix("torch.").replace("float32", "fp32").replace("bfloat16", "bf16")
    return {f"fused kernel, {name}": lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q),
            f"two batched products, {name}": lambda: torch.matmul(torch.matmul(q, q.transpose(-1, -2)), q)}


ATTENTION_MACS = 2 * 256 * 256 * 384 * 16  # of one call of attention_products' functions


def sample_work(sample: list[str]) -> tuple[dict[str, float], float]:
    """Multiply-adds of the six layers over the sample, unpadded: per linear shape, and attention's."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir(), local_files_only=True)
    lengths = np.array([len(ids) for ids in tokenizer(sample, truncation=True, max_length=256)["input_ids"]])
    linear = {shape: 6 * lengths.sum() * k * n * count for shape, (k, n, count) in LINEAR_SHAPES.items()}
    return linear, float(6 * (2 * lengths.astype(float) ** 2 * 384).sum())


def bounds_of_round(times: dict[str, list[float]], r: int, linear: dict[str, float],
                    attention: float) -> tuple[dict[str, float], dict[str, float]]:
    """Round r's rates (multiply-adds a second: "kernel|shape" at the best over TOKENS, and "attention"
    at its fastest way) and its BOUNDS (seconds for the sample)."""
    rates = {(kernel, shape): max(m * k * n / times[f"{kernel}|{shape}|{m}"][r] for m in TOKENS)
             for kernel in KERNELS for shape, (k, n, _) in LINEAR_SHAPES.items()}
    best_low = {shape: max(rates[kernel, shape] for kernel, (_, low) in KERNELS.items() if low)
                for shape in LINEAR_SHAPES}
    fastest_attention = max(ATTENTION_MACS / t[r] for key, t in times.items() if key.startswith("attention|"))
    linear_seconds = sum(linear[shape] / best_low[shape] for shape in LINEAR_SHAPES)
    shown = {**{f"{kernel}|{shape}": rate for (kernel, shape), rate in rates.items()},
             "attention": fastest_attention}
    return shown, dict(zip(BOUNDS, (linear_seconds + attention / fastest_attention,
                                    linear_seconds + attention / max(best_low.values()))))


def calls_to_time(sample: list[str], peer, ours: dict) -> dict:
    """The peer's and our paths' encodings of the sample, each kernel at each shape and M, and each way
    of attention."""
    calls = {"peer": lambda: peer.encode(sample)}
    calls.update({f"ours|{name}": lambda path=path: path.encode(sample) for name, path in ours.items()})
    for kernel, (make, _) in KERNELS.items():
        for shape, (k, n, _) in LINEAR_SHAPES.items():
            calls.update({f"{kernel}|{shape}|{m}": make(m, k, n) for m in TOKENS})
    for dtype in (torch.float32, torch.bfloat16) if cpu_has_bf16() else (torch.float32,):
        calls.update({f"attention|{way}": call for way, call in attention_products(dtype).items()})
    return calls


def spread(values: list[float], digits: int = 1, unit: str = "") -> str:
    """"median (min–max)" of values."""
    return (f"{statistics.median(values):.{digits}f}{unit} ({min(values):.{digits}f}–"
            f"{max(values):.{digits}f}{unit})")


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
    peer = PeerPath("fp32", args.threads)
    peer.encode(sample[:32])
    best_batch_sizes({PEER: peer}, sample, args.batch_sizes)
    ours = {name: Encoder(precision=name, threads=args.threads, progress=False) for name in ("fp32", "int8")}
    linear, attention = sample_work(sample)
    with torch.inference_mode():
        times = round_robin(calls_to_time(sample, peer, ours), args.repeats)
    rounds, bounds = zip(*(bounds_of_round(times, r, linear, attention) for r in range(args.repeats)))
    peer_rates = [len(sample) / t for t in times["peer"]]
    ratios = {label: [len(sample) / got[label] / rate for got, rate in zip(bounds, peer_rates)]
              for label in BOUNDS}
    work = sum(linear.values()) + attention
    ours_ratios = {name: [peer_t / t for peer_t, t in zip(times["peer"], times[f"ours|{name}"])]
                   for name in ours}
    lines = ["# Dense encoding on this CPU: an upper bound on any encoder doing all-MiniLM-L6-v2's work", "",
             f"{len(sample)} SciFact documents (eval/bench_dense.py's sample), max length 256: "
             f"{sum(linear.values()) / 1e9:.0f} G multiply-adds in the linear maps and "
             f"{attention / 1e9:.1f} G in attention, counted without padding. {args.threads} threads. "
             f"Everything is timed in one run, round-robin: each of {args.repeats} rounds times the peer "
             "once and every kernel once, and each round gives its own bound against its own peer time; "
             "medians (range) over the rounds. A kernel's rate is its best over M = "
             + ", ".join(map(str, TOKENS)) + " tokens.", "",
             "| kernel, G multiply-adds a second | " + " | ".join(LINEAR_SHAPES) + " |",
             "|---|" + "---:|" * len(LINEAR_SHAPES)]
    for kernel in KERNELS:
        lines.append(f"| {kernel} | " + " | ".join(spread([got[f"{kernel}|{shape}"] / 1e9 for got in rounds])
                                                   for shape in LINEAR_SHAPES) + " |")
    lines += ["", f"Attention, the fastest of torch's fused kernel and its two batched products alone: "
              f"{spread([got['attention'] / 1e9 for got in rounds])} G multiply-adds a second. The peer, "
              f"{PEER} fp32 at batch {peer.batch_size}, encodes {spread(peer_rates)} docs/s, i.e. "
              f"{spread([work * rate / len(sample) / 1e9 for rate in peer_rates])} G multiply-adds a second"
              " over the whole encoder. Our encoder as shipped (eval/bench_dense.py's layouts): "
              + "; ".join(f"{name} {spread(ratio, 2, '×')} the peer" for name, ratio in ours_ratios.items())
              + ".", "",
              f"| bound: nothing but multiply-adds costs time, the linear maps run at the best {LOW} rate"
              f" for their shape, and | × peer (docs/s at most ÷ the peer's, per round) | goal |",
              "|---|---:|---:|"]
    lines += [f"| {label} | {spread(ratios[label], 2, '×')} | {GOAL}× |" for label in BOUNDS]
    realistic = max(ratios[BOUNDS[0]])
    share = statistics.median(ours_ratios["int8"]) / statistics.median(ratios[BOUNDS[0]])
    lines += ["", f"In its best round, the bound with attention as fast as it runs here is {realistic:.2f}×"
              f" the peer: {'below' if realistic < GOAL else 'at or above'} {GOAL}×"
              + (", so no encoder doing this model's work with the kernels at hand can reach the goal on this"
                 " CPU, even if LayerNorm, GELU, softmax, quantisation and padding cost nothing."
                 if realistic < GOAL else
                 ", so the goal is not ruled out on this CPU; it leaves "
                 f"{1 - GOAL / realistic:.0%} of the time for everything but multiply-adds.")
              + f" Our int8 path runs at {share:.0%} of that bound (medians).",
              "", "Machine: " + machine_line("torch", "onnxruntime", "sentence-transformers")]
    publish(args.out, "\n".join(lines))


if __name__ == "__main__":
    main()
