"""`Experiment`: `retrieval run` from Python, PyTerrier style, a DataFrame out.

    from retrieval import BM25, QueryLikelihood, Experiment
    bm25 = BM25("indexes/cranfield")
    Experiment([bm25, bm25 % 100 >> QueryLikelihood("indexes/cranfield")], "cranfield", "cranfield",
               ["MAP", "nDCG@10"], names=["bm25", "bm25>>qld"], baseline=0)

Systems are stages or PyTerrier transformers (run on the topics), Runs or run files. The figures
come from the functions `retrieval run` calls (evaluation.measures.evaluate / per_query,
significance.compare: paired t-test and Wilcoxon, Holm-corrected over the systems), and the table
from its report (report.table), so an Experiment over the same systems and topics gives `retrieval
run`'s table. The judged-document and depth warnings of `retrieval run` are printed too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from retrieval import collections
from retrieval.errors import InputError
from retrieval.evaluation.measures import evaluate, parse_measures, per_query, run_depth
from retrieval.evaluation.significance import compare
from retrieval.experiments import report
from retrieval.experiments.checks import depth_warnings, index_doc_ids, judged_warnings, warn
from retrieval.experiments.config import Config
from retrieval.experiments.outcome import Outcome
from retrieval.formats.trec import read_run
from retrieval.index.kinds import open_index
from retrieval.pipeline.stage import document_index, is_pyterrier
from retrieval.types import Qrels, Queries, Run, pandas

System = Any  # a Stage (or callable (queries, run=None) -> Run), a PyTerrier transformer, a Run, a run file


def Experiment(systems: Sequence[System] | Mapping[str, System], topics: Any, qrels: Any,
               measures: str | Sequence[Any], *, names: Sequence[str] | None = None,
               baseline: int | str | None = None, alpha: float = 0.05, only_answered: bool = False,
               remove_query_ids: bool = False, index: Any = None) -> Any:  # noqa: N802 (PyTerrier's name)
    """Evaluate and compare systems: a DataFrame with one row per system (`name`, then per measure
    its mean and, with a `baseline` (position or name), `<measure> p(t)` and `<measure> p(w)`: the
    Holm-adjusted p-values, and `<measure> marks`: t / w where significant at `alpha`, † where the
    system ranks to another depth than the baseline on a measure that looks past the shallower).

    `topics`: Queries, a {qid: text} dict, a DataFrame (qid, query), a collection name or a topics
    file; `qrels` likewise (DataFrame: qid, docno, label). Means count every judged query (0 when a
    system answers nothing), or with `only_answered` only those it answers. `index` (or the first
    index a stage searches) is where judged documents are looked up: a count of those missing is
    warned about. `df.attrs` holds `table` (the text table `retrieval run` prints), `legend` and
    `warnings`."""
    named = _named(systems, names)
    queries, judged = _topics(topics), _qrels(qrels)
    measure_names = [name for name, _ in parse_measures(measures)]
    base = _baseline(baseline, list(named))
    if not 0 < alpha < 1:
        raise InputError(f"alpha (the significance level) must be in (0, 1), got {alpha}")
    runs = {name: _run(system, queries, remove_query_ids) for name, system in named.items()}
    means = {name: evaluate(run, judged, measure_names, only_answered) for name, run in runs.items()}
    values = {name: per_query(run, judged, measure_names, only_answered) for name, run in runs.items()}
    depths = {name: run_depth(run) for name, run in runs.items()}
    warnings = judged_warnings(judged, index_doc_ids(_index(index, named.values())))
    warnings += depth_warnings(depths, base, measure_names) if base else []
    warn(warnings)
    cfg = _config(measure_names, base or "", alpha, only_answered, remove_query_ids)
    outcome = Outcome(cfg, Path("."), {n: repr(s) for n, s in named.items()}, {}, means, values, {},
                      compare(values, base, measure_names) if base else {}, [], depths=depths,
                      warnings=warnings)
    return _frame(outcome)


def _named(systems: Sequence[System] | Mapping[str, System],
           names: Sequence[str] | None) -> dict[str, System]:
    if isinstance(systems, Mapping):
        if names is not None:
            raise InputError("systems given as {name: system} take no names")
        named = dict(systems)
    else:
        systems = list(systems)
        names = list(names) if names is not None else [_default_name(s, i) for i, s in enumerate(systems)]
        if len(names) != len(systems):
            raise InputError(f"{len(systems)} systems but {len(names)} names; expected one name each")
        named = dict(zip(names, systems))
        if len(named) != len(systems):
            raise InputError("two systems have the same name; expected each name once")
    if not named:
        raise InputError("an experiment needs at least one system")
    return {str(n): s for n, s in named.items()}


def _default_name(system: System, position: int) -> str:
    if isinstance(system, (str, Path)):
        return str(system)
    return f"run {position + 1}" if isinstance(system, Run) else repr(system)


def _baseline(baseline: int | str | None, names: list[str]) -> str | None:
    if baseline is None:
        return None
    if isinstance(baseline, int) and not isinstance(baseline, bool):
        if not 0 <= baseline < len(names):
            raise InputError(f"baseline {baseline} is not a system's position (0..{len(names) - 1})")
        return names[baseline]
    if baseline not in names:
        raise InputError(f"baseline {baseline!r} is not one of the systems: {', '.join(names)}")
    return baseline


def _topics(topics: Any) -> Queries:
    if isinstance(topics, (str, Path)):
        return collections.load_topics(str(topics))
    if hasattr(topics, "columns"):
        return Queries.from_df(topics)
    if isinstance(topics, Mapping):
        return Queries(topics)
    raise InputError("topics are Queries, a dict, a DataFrame, a collection or a file; got"
                     f" {type(topics).__name__}")


def _qrels(qrels: Any) -> Qrels:
    if isinstance(qrels, (str, Path)):
        return collections.load_qrels(str(qrels))
    if hasattr(qrels, "columns"):
        return Qrels.from_df(qrels)
    if isinstance(qrels, Mapping):
        return Qrels(qrels)
    raise InputError("qrels are Qrels, a dict, a DataFrame, a collection or a file; got"
                     f" {type(qrels).__name__}")


def _run(system: System, queries: Queries, remove_query_ids: bool) -> Run:
    """A system's Run on the topics: a stage run on them, a Run as it is, a run file read."""
    if isinstance(system, Run):
        run = system
    elif isinstance(system, (str, Path)):
        run = read_run(system)
    elif is_pyterrier(system):  # a PyTerrier transformer, as pt.Experiment takes
        from retrieval.pipeline.pyterrier import from_pyterrier

        run = from_pyterrier(system)(queries)
    elif callable(system):
        run = system(queries)
        if not isinstance(run, Run):
            raise InputError(f"system {system!r} returned {type(run).__name__}, not a Run")
    else:
        raise InputError(f"a system is a stage, a Run or a run file; got {type(system).__name__}")
    return run.without_query_ids() if remove_query_ids else run


def _index(index: Any, systems: Any) -> Any:
    """The index to look judged documents up in: the one given, else the first a stage searches."""
    if index is not None:
        return open_index(index)
    return next((found for s in systems if (found := document_index(s)) is not None), None)


def _config(measures: list[str], baseline: str, alpha: float, only_answered: bool,
            remove_query_ids: bool) -> Config:
    """The settings report.py reads, as a config holds them (no file, no pipelines)."""
    return Config(path=Path("<python>"), name="experiment", collection="", topics="", topic_field="title",
                  qrels="", remove_query_ids=remove_query_ids, index_path=Path("."), stopwords=True,
                  stemmer="porter", threads=1, measures=measures, only_answered=only_answered,
                  baseline=baseline, alpha=alpha, pipelines={})


def _frame(outcome: Outcome) -> Any:
    """The DataFrame: figures as numbers, marks as report.table writes them, the text table in attrs."""
    pd, cfg = pandas(), outcome.cfg
    deeper = report.other_depths(outcome)
    rows = []
    for system, means in outcome.means.items():
        row: dict[str, Any] = {"name": system}
        for m in cfg.measures:
            row[m] = means[m]
            if cfg.baseline:
                c = outcome.comparisons.get((system, m))
                row[f"{m} p(t)"] = c.p_holm["t"] if c else None
                row[f"{m} p(w)"] = c.p_holm["wilcoxon"] if c else None
                row[f"{m} marks"] = report.marks(outcome, system, m) + (
                    report.DEPTH_MARK if m in deeper.get(system, []) else "")
        rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs["table"] = report.pipe_table(*report.table(outcome))
    df.attrs["legend"] = report.legend(outcome) if cfg.baseline else ""
    df.attrs["warnings"] = list(outcome.warnings)
    return df
