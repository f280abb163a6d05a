"""The matrix products of one MiniLM layer under each CPU's kernels: what int8 can gain where.

    python eval/bench_kernels.py [--tokens 256] [--repeats 7]

Times, on one thread, the three Linear shapes of an all-MiniLM-L6-v2 layer
(384->384 attention projections, 384->1536 up, 1536->384 down) for a batch of
--tokens tokens: fp32 (torch.mm: MKL), torch's dynamic int8 Linear (fbgemm,
per-channel weights, what `precision int8` runs), torch._int_mm (oneDNN int8
GEMM, no quantisation included) and bf16 where the CPU has it (the
down-projection's int8 Linear keeps one input channel in fp32, as the
calibrated encoders run it); once as this
CPU and once as each CPU `RETRIEVAL_EMULATE_CPU` can emulate here, each in its
own process so the libraries' dispatch caps apply from the start. Medians
(and ranges) of --repeats timed calls after warm-up; the int8 rows give the
ceiling int8 sets on the encoders' speed-up over fp32 on that kind of CPU.
Writes eval/results/kernels.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import machine_line, publish  # noqa: E402

from retrieval.runtime.cpu_emulation import emulable  # noqa: E402
from retrieval.runtime.precision import machine_cpu_flags  # noqa: E402

SHAPES = [(384, 384), (384, 1536), (1536, 384)]  # (in, out) of the layer's Linear modules

CHILD = r"""
import json, statistics, sys, time, warnings
warnings.filterwarnings("ignore")
import retrieval  # sets the dispatch caps before torch runs anything
import torch
from retrieval.runtime import precision
tokens, repeats = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(1)
torch.manual_seed(0)

def micros(fn):
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e6)
    return [statistics.median(times), min(times), max(times)]

rows = {}
for n_in, n_out in json.loads(sys.argv[3]):
    x = torch.randn(tokens, n_in)
    linear = torch.nn.Linear(n_in, n_out)
    paths = {"fp32": lambda: torch.mm(x, linear.weight.t())}
    # a narrowing layer runs int8 with its outlier channel split off in fp32, as calibrated models do
    int8 = precision.prepare(torch.nn.Sequential(linear), "int8", {"0": [0]} if n_in > n_out else None)
    paths["int8 (fbgemm, as precision int8)"] = lambda: int8(x)
    xq = torch.randint(-127, 128, (tokens, n_in), dtype=torch.int8)
    wq = torch.randint(-127, 128, (n_in, n_out), dtype=torch.int8)
    paths["int8 GEMM only (torch._int_mm)"] = lambda: torch._int_mm(xq, wq)
    if precision.cpu_has_bf16():
        xb, wb = x.bfloat16(), linear.weight.t().bfloat16()
        paths["bf16"] = lambda: torch.mm(xb, wb)
    rows[f"{n_in}->{n_out}"] = {name: micros(fn) for name, fn in paths.items()}
print(json.dumps({"cpu": precision.instruction_sets(), "rows": rows}))
"""


def measure(emulate: str | None, tokens: int, repeats: int) -> dict:
    """One process's timings, as this CPU (`emulate` None) or as the CPU it names."""
    env = {k: v for k, v in os.environ.items() if k not in ("RETRIEVAL_EMULATE_CPU", "RETRIEVAL_NO_BF16")}
    if emulate:
        env["RETRIEVAL_EMULATE_CPU"] = emulate
    out = subprocess.run([sys.executable, "-c", CHILD, str(tokens), str(repeats), json.dumps(SHAPES)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def table(label: str, got: dict) -> list[str]:
    lines = [f"As {label} ({got['cpu']}):", "",
             "| layer | path | µs median (range) | × fp32 speed |", "|---|---|---:|---:|"]
    for layer, paths in got["rows"].items():
        fp32 = paths["fp32"][0]
        for name, (median, low, high) in paths.items():
            lines.append(f"| {layer} | {name} | {median:.0f} ({low:.0f}–{high:.0f}) | {fp32 / median:.2f}× |")
    return lines + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", type=Path, default=ROOT / "eval" / "results" / "kernels.md")
    args = ap.parse_args()
    runs = [("this CPU", measure(None, args.tokens, args.repeats))]
    runs += [(f"an {name} CPU (RETRIEVAL_EMULATE_CPU={name})", measure(name, args.tokens, args.repeats))
             for name in emulable(machine_cpu_flags())]
    body = [f"One thread, {args.tokens} tokens by each Linear of an all-MiniLM-L6-v2 layer; each CPU in its"
            " own process. int8 GEMM only excludes quantising the activations, so it bounds what any int8"
            " path can gain.", ""]
    for label, got in runs:
        body += table(label, got)
    publish(args.out, "\n".join(["# Matrix-product kernels by kind of CPU", "", *body,
                                 "Machine: " + machine_line("torch"), ""]))


if __name__ == "__main__":
    main()
