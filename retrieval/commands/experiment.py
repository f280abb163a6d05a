"""`retrieval run`: an experiment config, end to end."""

from __future__ import annotations

import argparse
from pathlib import Path

from retrieval.commands.common import precision_flag


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run an experiment config: index, search, evaluate, report",
                       description="Run every pipeline of a YAML experiment config: build the "
                       "index if missing or stale, search (reusing cached run files when nothing "
                       "changed), evaluate, print one systems x measures table with significance "
                       "tests against the baseline, and write report.md / report.html beside the "
                       "runs.")
    p.add_argument("config", type=Path, help="experiment config, e.g. configs/cacm.yaml")
    p.add_argument("--output-dir", type=Path,
                   help="where runs and the report go (default: runs/<config name>)")
    precision_flag(p, "how the neural stages encode (a config's index.dense.precision wins for "
                   "the dense part)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> None:
    from retrieval.experiments.runner import main as run_experiment

    run_experiment(args.config, args.output_dir, args.precision)
