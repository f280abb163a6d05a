"""What an experiment produced: the records runner.py fills and report.py renders."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrieval.evaluation.significance import Comparison
from retrieval.experiments.config import Config, SweepSpec


@dataclass
class SweepResult:
    """Mean of the sweep's measure at every grid point, and what was selected."""

    spec: SweepSpec
    points: list[dict[str, Any]]
    means: list[float]
    evaluated_on: str
    chosen: list[dict[str, Any]]  # one setting, one per fold, or none
    note: str


@dataclass
class Outcome:
    """Everything an experiment produced: what the table and the report show."""

    cfg: Config
    output_dir: Path
    systems: dict[str, str]  # system name -> description
    run_files: dict[str, Path]
    means: dict[str, dict[str, float]]
    per_query: dict[str, dict[str, dict[str, float]]]
    iprec: dict[str, list[float]]
    comparisons: dict[tuple[str, str], Comparison]
    sweeps: list[SweepResult]
    reused: int = 0
    computed: int = 0
    qa: list[dict[str, Any]] = field(default_factory=list)  # QA rows (qa.evaluation.QARow as dicts)
    qa_notes: list[str] = field(default_factory=list)  # how QA settings were chosen
    depths: dict[str, int] = field(default_factory=dict)  # system -> most hits it ranks for a query
    warnings: list[str] = field(default_factory=list)  # judged documents missing, runs of other depths
