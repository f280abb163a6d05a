"""Shared by the eval/ scripts: which machine ran them, timing, and publishing their table."""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np


def corpus_check_args(doc: str, results_name: str) -> argparse.Namespace:
    """The arguments of a check over a corpus: --corpus (a BEIR corpus.jsonl, refused in one line when it
    is not a file) and --out (eval/results/`results_name` by default)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="a BEIR corpus.jsonl")
    results = Path(__file__).resolve().parent / "results"
    parser.add_argument("--out", type=Path, default=results / results_name)
    args = parser.parse_args()
    if not args.corpus.is_file():
        raise SystemExit(f"--corpus {args.corpus}: not a file")
    return args


def timed_runs(fn: Callable[[], object], runs: int) -> list[float]:
    """Wall times of `runs` calls of fn()."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def rates(fn: Callable[[], object], items: int, repeats: int) -> tuple[float, float, float]:
    """(median, min, max) of items per second over `repeats` timed calls of fn() after one warm-up call."""
    fn()
    found = [items / t for t in timed_runs(fn, repeats)]
    return float(statistics.median(found)), min(found), max(found)


def median_time(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of fn() over `repeats` runs after one warm-up run."""
    fn()
    return statistics.median(timed_runs(fn, repeats))


def timing_sample(texts: Sequence[str], size: int) -> list[str]:
    """The texts the speed benchmarks time: `size` of them drawn without replacement by a fixed seed, so
    that every script given the same collection and size times the same texts."""
    rng = np.random.default_rng(0)
    return [texts[i] for i in rng.choice(len(texts), size, replace=False)]


def round_robin(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Seconds per call of each fn in each of `repeats` rounds (one call of each a round, after one warm-up
    call each), so that load from other processes falls on every fn alike."""
    for fn in fns.values():
        fn()
    out: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            out[name].append(time.perf_counter() - start)
    return out


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or what platform knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def cpu_line() -> str:
    """The CPU's model and the instruction sets the neural paths depend on (bf16, AVX-512, VNNI, AVX2)."""
    from retrieval.runtime.precision import instruction_sets

    return f"{cpu_model()} ({instruction_sets()})"


def ram() -> str:
    """Total memory, e.g. "24 GiB RAM" ("" when unknown)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 2**20:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return ""


def versions(*distributions: str) -> str:
    """"name version" for each installed distribution ("name not installed" otherwise)."""
    def one(name: str) -> str:
        try:
            return f"{name} {version(name)}"
        except PackageNotFoundError:
            return f"{name} not installed"
    return ", ".join(one(name) for name in distributions)


def machine_line(*distributions: str) -> str:
    """Cores, CPU, memory, Python and the versions of the libraries a benchmark compares."""
    hardware = ", ".join(x for x in (f"{len(os.sched_getaffinity(0))} cores", cpu_line(), ram()) if x)
    return f"{hardware}; Python {platform.python_version()}, " + versions(*distributions)


def command_line() -> str:
    """The command that is running, as a reader would retype it (python eval/NAME.py ARGS)."""
    script = Path(sys.argv[0]).resolve()
    root = Path(__file__).resolve().parent.parent
    where = str(script.relative_to(root)) if script.is_relative_to(root) else str(script)
    switches = ("RETRIEVAL_NO_BF16", "RETRIEVAL_EMULATE_CPU")  # they change what the command measures
    env = [f"{name}={shlex.quote(os.environ[name])}" for name in switches if os.environ.get(name)]
    repo = f"{Path(__file__).resolve().parent.parent}/"
    args = [a.removeprefix(repo) for a in sys.argv[1:]]  # the repo's own paths as a checkout has them
    return " ".join([*env, "python", where, *(shlex.quote(a) for a in args)])


PREAMBLE = ("Each section below is the whole output of the command it names, on the machine it names;"
            " rerunning a command on the same machine replaces its section, so older machines' runs stay"
            " as dated sections (eval/benchlib.py `publish`).")
SECTION = re.compile(r"^## Run of (\d{4}-\d{2}-\d{2}) on (.+)$")


@dataclass(frozen=True)
class Section:
    """One run in a results file: when, on which machine, by which command, and its text."""

    date: str
    machine: str
    command: str
    body: str

    def render(self) -> str:
        return (f"## Run of {self.date} on {self.machine}\n\n"
                f"Regenerate with `{self.command}` (this section is its output).\n{self.body.rstrip()}\n")


def read_sections(path: Path) -> tuple[str, list[Section]]:
    """A results file's title and its sections, newest first ("" and [] when there is no file)."""
    if not path.is_file():
        return "", []
    lines = path.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if SECTION.match(line)]
    sections = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(lines)
        date, machine = SECTION.match(lines[start]).groups()
        command = re.match(r"^Regenerate with `(.*)` \(this section is its output\)\.$", lines[start + 2])
        sections.append(Section(date, machine, command.group(1) if command else "",
                                "\n".join(lines[start + 3:end])))
    return lines[0], sections


def publish(path: Path, text: str) -> None:
    """Print a run's results and write them into eval/results/: its own section (date, machine, command),
    replacing the section of the same command on the same machine and keeping the others.

    Every section is the output of the one command it names (tests/test_results_files.py checks this),
    so no figure is assembled by hand; one file per benchmark holds every machine's runs.
    """
    title, _, body = text.partition("\n")
    run = Section(time.strftime("%Y-%m-%d"), cpu_line(), command_line(), body)
    _, earlier = read_sections(path)
    kept = [s for s in earlier if (s.command, s.machine) != (run.command, run.machine)]
    out = "\n".join([title, "", PREAMBLE, "", *(s.render() for s in [run, *kept])])
    print(f"{title}\n\n{run.render()}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(out)
    sys.stdout.flush()


def spread(values: Sequence[float], digits: int = 1, unit: str = "") -> str:
    """"median (min–max)" of values (rates over repeats, say)."""
    return (f"{statistics.median(values):.{digits}f}{unit} ({min(values):.{digits}f}–"
            f"{max(values):.{digits}f}{unit})")


def mean_of(per_item: dict[str, float]) -> float:
    """The mean of per-query (or per-question) scores."""
    return float(np.mean(list(per_item.values())))


def precision_decision(model: str, path: str, values: Sequence[float], fp32: Sequence[float], limit: float,
                       module, measured_on: str) -> str:
    """Whether `path` is shown to stay within the model's limit of fp32 on validation on this CPU (per-query
    scores `values` and `fp32`, paired; precision.shown_within_limit). For int8, whether the package agrees
    (the model's `module` records it in INT8_WITHIN_LIMIT per kind of int8 kernel); bf16 is reported, not
    decided: `auto` takes it wherever the CPU has it."""
    from retrieval.evaluation.significance import difference_interval
    from retrieval.runtime import precision as precisions

    within = precisions.shown_within_limit(values, fp32, limit)
    low, high = difference_interval(values, fp32)
    change = (f"{path} changes it by {np.mean(values) - np.mean(fp32):+.4g} on average, 90% confidence"
              f" interval {low:+.4g} to {high:+.4g}, against a limit of ±{limit:g}, so {path} is"
              f" {'shown to be within' if within else 'not shown to be within'} the limit (two one-sided"
              f" paired t-tests at 5%)")
    if path != "int8":
        return (f"For {model}, {path} (on {measured_on}): {change}; reported, not decided: `auto` takes"
                f" {path} wherever the CPU has it.")
    kernel = precisions.int8_kernel() or "none"
    chosen = precisions.int8_allowed(module.INT8_WITHIN_LIMIT)
    where = module.__name__.replace(".", "/") + ".py"
    agrees = ("agrees" if within == chosen else
              f"DISAGREES: change INT8_WITHIN_LIMIT[{kernel!r}] in {where}")
    return (f"Decision for {model} with {kernel} int8 kernels (on {measured_on}): {change}; `auto` without"
            f" bf16 on such a CPU uses {'int8' if chosen else 'fp32'} ({agrees}). Test columns are reported,"
            " never used to choose.")


def precision_decisions(model: str, per_item: dict[str, dict[str, float]], limit: float, module,
                        measured_on: str) -> str:
    """precision_decision for int8 and bf16 (those measured), from each path's score per validation item
    (query or question: `per_item[path][item]`), paired with fp32's; one paragraph each."""
    items = sorted(per_item["fp32"])
    fp32 = [per_item["fp32"][i] for i in items]
    return "\n\n".join(precision_decision(model, path, [per_item[path][i] for i in items], fp32, limit,
                                         module, measured_on)
                      for path in ("int8", "bf16") if path in per_item)
