"""Config-driven experiments: build what is missing, run every pipeline, evaluate, compare.

The config format is described in retrieval/experiments/config.py. The index is (re)built
or given a missing part as `ensure_index` says. Run files are cached beside a
key (hash of the pipeline config, the index manifest and the topics), so a
re-run with nothing changed reads them back instead of searching.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from retrieval import collections, storage
from retrieval.analysis import Analyzer
from retrieval.building import add_parts, build_with_parts, dense_part, late_part
from retrieval.errors import InputError
from retrieval.evaluation.measures import evaluate, per_query, run_depth
from retrieval.evaluation.significance import compare
from retrieval.experiments.checks import depth_warnings, index_doc_ids, judged_warnings, warn
from retrieval.experiments.config import Config, StageSpec, SweepSpec, build_pipeline, load_config
from retrieval.experiments.outcome import Outcome, SweepResult
from retrieval.formats.trec import read_run, write_run
from retrieval.index.kinds import AnyIndex, open_index
from retrieval.index.native import Index
from retrieval.ownership import check_not_inside_index, is_index_dir
from retrieval.registry import RANKERS
from retrieval.runtime import precision as precisions
from retrieval.types import Qrels, Queries, Run, natural_key

CACHE_VERSION = 7  # bumped when a cached record changes shape or its arithmetic (2: QA rows carry their
# settings; 3: the dense encoder's int8 keeps outlier channels in fp32, runtime.int8_outliers; 4: so does
# the late encoder's, and the late encoder and the reader run int8 one text or window a batch; 5: bf16 casts
# the whole model, LayerNorm and softmax included; 6: auto on AVX2 CPUs runs the dense and late encoders int8;
# 7: auto runs the dense and late encoders fp32 on CPUs without bf16, int8 not shown within their limits)
IPREC = [f"IPrec@{r / 10:.1f}" for r in range(11)]

# ---------------------------------------------------------------- building and running


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _note(message: str) -> None:
    print(f"retrieval: {message}", file=sys.stderr)


def ensure_index(cfg: Config, precision: str | None = None) -> AnyIndex:
    """Open the config's index, (re)building it first if missing, built differently, or lacking a
    part the config asks for (a sharded index is rebuilt whole; a single one gets the part added)."""
    with cfg.blame("index.path"):  # a shard or segment of another index is never built or changed
        check_not_inside_index(cfg.index_path)
    source = collections.describe(cfg.collection)
    analyzer = Analyzer(stopwords=cfg.stopwords, stemmer=cfg.stemmer)
    wanted = "sharded" if cfg.shards else "native"
    try:
        index = open_index(cfg.index_path)
    except InputError as e:
        index, reason = None, "missing" if not (cfg.index_path / storage.MANIFEST).is_file() else e.message
    if index is not None:
        m = index.manifest or {}  # a Lucene index Anserini wrote has none
        same = (m.get("source") == source and m.get("analyzer") == analyzer.settings
                and m.get("fields", []) == cfg.fields)
        if same and index.kind == wanted and (not cfg.shards or len(index.shards) == cfg.shards):
            if index.kind == "native":
                return ensure_parts(cfg, index, precision)
            if set(cfg.parts) <= set(index.parts):
                return _with_backend(cfg, index)
            reason = f"lacks the {', '.join(sorted(set(cfg.parts) - set(index.parts)))} part"
        else:
            reason = "built from another source, with another analyzer, fields or layout"
    with cfg.blame("index.path"):  # never replace what is not an index, before any note
        storage.check_replaceable(cfg.index_path, is_index_dir, remedy="remove it or change index.path")
        storage.check_keeps_input(cfg.index_path, collections.check_source(cfg.collection))
    _note(f"building index {cfg.index_path} ({reason})")
    parts = _part_sources(cfg, precision)
    with cfg.blame("collection"):  # e.g. a malformed record, or no documents
        build_with_parts(collections.load_documents(cfg.collection), cfg.index_path, source=source,
                         analyzer=analyzer, shards=cfg.shards, workers=cfg.threads, fields=cfg.fields,
                         **parts)
    if cfg.shards:
        return _with_backend(cfg, open_index(cfg.index_path, verify=False))
    return Index.open(cfg.index_path, verify=False)


def _with_backend(cfg: Config, index: Any) -> Any:
    """A sharded index searched in this process, or on Ray when the config says `ray:`."""
    if cfg.ray:
        from retrieval.shards.ray_backend import RayBackend

        index.use_backend(RayBackend(index, cfg.ray))
    return index


def _part_sources(cfg: Config, precision: str | None, only: set[str] | None = None) -> dict[str, Any]:
    """The config's dense and late parts (those in `only` if given) as building.build_with_parts
    takes them; a model that cannot be loaded is reported at its config line."""
    parts = {name: part for name, part in cfg.parts.items() if only is None or name in only}
    sources: dict[str, Any] = {}
    if "dense" in parts:
        d = parts["dense"]
        with cfg.blame("index.dense"):
            sources["dense"] = dense_part(d.get("encoder"), d.get("precision", precision),
                                          d.get("type", "flat"), d.get("params"))
    if "late" in parts:
        part = parts["late"]
        with cfg.blame("index.late"):
            sources["late"] = late_part(part.get("model"), precision, part.get("compression", "fp16"))
    return sources


def ensure_parts(cfg: Config, index: Index, precision: str | None = None) -> Index:
    """Add the extra parts the config asks for (dense, late) when the index lacks them."""
    missing = {name for name in cfg.parts if not index.has(name)}
    if not missing:
        return index
    parts = " and ".join(sorted(missing))
    _note(f"adding the {parts} part{'s' if len(missing) > 1 else ''} to {cfg.index_path}")
    add_parts(index, **_part_sources(cfg, precision, missing))
    return Index.open(cfg.index_path, verify=False)


def slug(name: str) -> str:
    """A file-name and run-tag safe form of a system name (bm25>>qld -> bm25-then-qld)."""
    return re.sub(r"[^\w.+=@-]+", "_", name.replace(">>", "-then-"))


def read_cache(path: Path, empty: Any) -> Any:
    """A JSON cache file's content; `empty` if it is missing, unreadable or not what was written
    (a damaged cache only costs a recomputation)."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return empty
    return value if isinstance(value, type(empty)) or empty is None else empty


def file_stem(name: str) -> str:
    """A system's file name: its slug, plus a hash of the exact name when the slug changed it,
    so `a>>b` and `a-then-b` never share a cached run."""
    stem = slug(name)
    return stem if stem == name else f"{stem}.{hashlib.sha256(name.encode()).hexdigest()[:8]}"


@dataclass
class RunFile:
    """A system's run file and its cache key; `run` is None until needed (cache hit)."""

    path: Path
    key: str
    run: Run | None

    def load(self) -> Run:
        if self.run is None:
            self.run = read_run(self.path)
        return self.run


@dataclass
class Context:
    """What every run of an experiment shares, and the caches of runs and evaluations."""

    cfg: Config
    index: AnyIndex
    queries: Queries
    qrels: Qrels
    output_dir: Path
    progress: bool = True
    precision: str | None = None
    reused: int = 0
    computed: int = 0
    evaluations: dict[str, Any] = field(default_factory=dict)

    def key(self, what: Any, queries: Queries) -> str:
        return _digest({"v": CACHE_VERSION, "what": what, "index": self.index.manifest,
                        "queries": _digest(queries), "remove_ids": self.cfg.remove_query_ids,
                        "precision": precisions.cache_signature(self.precision)})

    def search(self, stages: list[StageSpec], queries: Queries) -> Run:
        run = build_pipeline(stages, self.index, self.precision)(queries)
        return run.without_query_ids() if self.cfg.remove_query_ids else run

    def cached_run(self, name: str, what: Any, compute: Callable[[], Run]) -> RunFile:
        """The system's run file, recomputed only if its key changed or the file was altered."""
        path = self.output_dir / "runs" / f"{file_stem(name)}.run"
        keyfile = path.with_suffix(".key")
        key = self.key(what, self.queries)
        if path.is_file() and read_cache(keyfile, None) == {"key": key, "sha256": storage.sha256_file(path)}:
            self.reused += 1
            return RunFile(path, key, None)
        run = compute()
        write_run(run, path, tag=slug(name))
        storage.write_json_atomic(keyfile, {"key": key, "sha256": storage.sha256_file(path)})
        self.computed += 1
        return RunFile(path, key, run)

    def evaluate(self, rf: RunFile) -> dict[str, Any]:
        """Means, per-query values and 11-point IPrec of a run (cached by run key and qrels)."""
        key = _digest([rf.key, _digest(self.qrels), self.cfg.measures, self.cfg.only_answered])
        if "depth" not in self.evaluations.get(key, {}):
            run, measures = rf.load(), self.cfg.measures
            answered = self.cfg.only_answered
            values = evaluate(run, self.qrels, measures + IPREC, answered)
            self.evaluations[key] = {"means": {m: values[m] for m in measures},
                                     "iprec": [values[m] for m in IPREC],
                                     "per_query": per_query(run, self.qrels, measures, answered),
                                     "depth": run_depth(run)}
        return self.evaluations[key]


# ---------------------------------------------------------------- sweeps


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, first parameter varying slowest."""
    points: list[dict[str, Any]] = [{}]
    for param, values in grid.items():
        points = [{**p, param: v} for p in points for v in values]
    return points


def with_params(stages: list[StageSpec], i: int, params: dict[str, Any]) -> list[StageSpec]:
    """A copy of the stages with stage i's parameters updated."""
    s = stages[i]
    return [*stages[:i], StageSpec(s.model, {**s.params, **params}, s.cutoff, s.where),
            *stages[i + 1:]]


def _sweep_values(ctx: Context, spec: SweepSpec, queries: Queries,
                  qrels: Qrels) -> list[dict[str, float]]:
    """Per-query values of the sweep measure at every grid point (cached by key)."""
    cache_path = ctx.output_dir / "sweeps" / f"{file_stem(spec.name)}.json"
    cache = read_cache(cache_path, {})
    stages, out, fresh = ctx.cfg.pipelines[spec.pipeline], [], {}
    for point in tqdm(grid_points(spec.grid), desc=f"sweep {spec.name}", unit=" settings",
                      disable=None if ctx.progress else True):
        swept = with_params(stages, spec.stage, point)
        key = _digest([ctx.key([s.keyed() for s in swept], queries), _digest(qrels),
                       spec.measure, ctx.cfg.only_answered])
        if key not in cache:
            run = ctx.search(swept, queries)
            cache[key] = {q: v[spec.measure] for q, v in
                          per_query(run, qrels, [spec.measure], ctx.cfg.only_answered).items()}
        fresh[key] = cache[key]
        out.append(cache[key])
    storage.write_json_atomic(cache_path, fresh)
    return out


def _mean(values: dict[str, float], keep: set[str] | None = None) -> float:
    chosen = [v for q, v in values.items() if keep is None or q in keep]
    return sum(chosen) / len(chosen) if chosen else 0.0


def _best(points: list[dict[str, Any]], values: list[dict[str, float]],
          keep: set[str] | None = None) -> dict[str, Any]:
    means = [_mean(v, keep) for v in values]
    return points[means.index(max(means))]  # first best in grid order


def folds(qids: list[str], k: int = 2) -> list[set[str]]:
    """Query ids split into k folds by position in (natural) id order: i % k."""
    ordered = sorted(qids, key=natural_key)
    return [{q for i, q in enumerate(ordered) if i % k == f} for f in range(k)]


def run_sweep(ctx: Context, spec: SweepSpec) -> tuple[SweepResult, RunFile | None, str]:
    """Evaluate the grid; select on a train split or by 2-fold cross-validation if asked."""
    points, cfg = grid_points(spec.grid), ctx.cfg
    stages = cfg.pipelines[spec.pipeline]
    if spec.select_on not in (None, "folds"):
        train_q = collections.load_topics(spec.select_on, cfg.topic_field)
        train_qrels = collections.load_qrels(spec.select_on)
        if set(train_q) & set(ctx.queries):
            raise InputError(f"select_on {spec.select_on!r} shares queries with the test topics;"
                             " select on a train split, never on test", *spec.where)
        values = _sweep_values(ctx, spec, train_q, train_qrels)
        best = _best(points, values)
        swept = with_params(stages, spec.stage, best)
        run = ctx.cached_run(spec.name, [s.keyed() for s in swept],
                             lambda: ctx.search(swept, ctx.queries))
        result = SweepResult(spec, points, [_mean(v) for v in values], spec.select_on, [best],
                             f"setting selected on {spec.select_on} (never on test)")
        return result, run, _label(best)
    values = _sweep_values(ctx, spec, ctx.queries, ctx.qrels)
    means = [_mean(v) for v in values]
    if spec.select_on is None:
        return SweepResult(spec, points, means, "test", [],
                           "descriptive only: no setting was selected on the test topics"), None, ""
    return _cross_validate(ctx, spec, points, values, means)


def _cross_validate(ctx: Context, spec: SweepSpec, points: list[dict[str, Any]],
                    values: list[dict[str, float]], means: list[float]
                    ) -> tuple[SweepResult, RunFile, str]:
    """2-fold CV on test: each fold is ranked with the setting best on the other fold."""
    split = folds(list(ctx.queries))
    chosen = [_best(points, values, split[1 - f]) for f in range(2)]
    stages = ctx.cfg.pipelines[spec.pipeline]

    def compute() -> Run:
        merged: dict[str, list] = {}
        for f, best in enumerate(chosen):
            fold_q = Queries((q, t) for q, t in ctx.queries.items() if q in split[f])
            merged.update(ctx.search(with_params(stages, spec.stage, best), fold_q))
        return Run({q: merged[q] for q in ctx.queries if q in merged}, presorted=True)

    what = {"folds": [[s.keyed() for s in with_params(stages, spec.stage, b)] for b in chosen],
            "split": [sorted(s) for s in split]}
    run = ctx.cached_run(spec.name, what, compute)
    note = ("2-fold cross-validation on test: queries alternate between folds in id order; "
            "each fold is ranked with the setting best on the other fold")
    label = " / ".join(_label(b) for b in chosen)
    return SweepResult(spec, points, means, "test (2-fold CV)", chosen, note), run, label


def _label(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


# ---------------------------------------------------------------- the experiment


def _describe(stages: list[StageSpec]) -> str:
    return " >> ".join(s.label() for s in stages)


def _runs(ctx: Context) -> tuple[dict[str, RunFile], dict[str, str], list[SweepResult]]:
    """Every pipeline's run, then every sweep's (a selected setting becomes a system)."""
    cfg = ctx.cfg
    runs, systems = {}, {}
    for name in tqdm(cfg.pipelines, desc="systems", unit=" systems",
                     disable=None if ctx.progress else True):
        stages = cfg.pipelines[name]
        runs[name] = ctx.cached_run(name, [s.keyed() for s in stages],
                                    lambda s=stages: ctx.search(s, ctx.queries))
        systems[name] = _describe(stages)
    sweeps = []
    for spec in cfg.sweeps:
        result, run, label = run_sweep(ctx, spec)
        sweeps.append(result)
        if run is not None:
            runs[spec.name] = run
            systems[spec.name] = f"{spec.pipeline} with {label} ({result.evaluated_on})"
    return runs, systems, sweeps


def check_output_dir(out: Path) -> None:
    """The experiment's output directory must be a directory (or creatable as one), before any work."""
    for sub_dir in (out, out / "runs", out / "sweeps", out / "plots"):
        if os.path.lexists(sub_dir) and not sub_dir.is_dir():
            raise InputError("exists and is not a directory; expected the experiment's output directory",
                             sub_dir)
    storage.check_creatable(out, "the output directory", out)


def run_experiment(config: str | Path | Config, output_dir: str | Path | None = None,
                   progress: bool = True, precision: str | None = None) -> Outcome:
    """Build what is missing, run every pipeline and sweep, evaluate and compare; `precision`
    (default auto) is how the neural stages run on this machine."""
    cfg = config if isinstance(config, Config) else load_config(config)
    out = Path(output_dir) if output_dir else Path("runs") / cfg.name
    check_output_dir(out)
    inputs = read_inputs(cfg)
    index = ensure_index(cfg, precision)
    check_parts(cfg, index)
    outcome = Outcome(cfg, out, {}, {}, {}, {}, {}, {}, [])
    if cfg.pipelines:
        outcome = _ranking(cfg, index, inputs, out, progress, precision)
    if cfg.qa:
        outcome.qa, outcome.qa_notes = _question_answering(cfg, index, inputs, out, progress, precision)
    return outcome


@dataclass
class Inputs:
    """What an experiment reads besides its index: topics and qrels, and the QA sets."""

    queries: Queries | None = None
    qrels: Qrels | None = None
    questions: list | None = None
    validation: list | None = None  # the QA set settings are chosen on (qa.select_on)
    reader_dir: Path | None = None


def read_inputs(cfg: Config) -> Inputs:
    """Read every input before any index work, so a mistyped name fails first, at its config line."""
    inputs = Inputs()
    with cfg.blame("collection"):
        collections.check_source(cfg.collection)
    if cfg.pipelines:
        with cfg.blame("topics"):
            inputs.queries = collections.load_topics(cfg.topics, cfg.topic_field)
        with cfg.blame("qrels"):
            inputs.qrels = collections.load_qrels(cfg.qrels)
    if cfg.qa:
        from retrieval.collections import load_examples
        from retrieval.qa.reader import DEFAULT_READER

        with cfg.blame("qa.questions"):
            inputs.questions = load_examples(cfg.qa.questions)
        if cfg.qa.select_on:
            with cfg.blame("qa.select_on"):
                inputs.validation = load_examples(cfg.qa.select_on)
        inputs.reader_dir = Path(cfg.qa.reader) if cfg.qa.reader else DEFAULT_READER
        with cfg.blame("qa.reader"):
            if not (inputs.reader_dir / "model.safetensors").is_file():
                raise InputError("not a reader directory (model.safetensors is missing)", inputs.reader_dir)
    return inputs


def check_parts(cfg: Config, index: AnyIndex) -> None:
    """Refuse, before any search, a pipeline whose ranker needs an index part the index lacks."""
    for stages in cfg.pipelines.values():
        for spec in stages:
            lacking = [part for part in RANKERS[spec.model].needs_parts if not index.has(part)]
            if lacking:
                raise InputError(f"{spec.model} needs the index's {lacking[0]} part; add"
                                 f" `{lacking[0]}: true` under index:", *spec.where)
    if cfg.qa and not index.has("dense"):
        raise InputError("retrieve-then-read needs the index's dense part (p(z|x)); add `dense: true`"
                         " under index:", *cfg.qa.where)


def _ranking(cfg: Config, index: AnyIndex, inputs: Inputs, out: Path, progress: bool,
             precision: str | None) -> Outcome:
    """Every pipeline and sweep, evaluated and compared with the baseline."""
    ctx = Context(cfg, index, inputs.queries, inputs.qrels, out, progress, precision)
    cache = out / "evaluations.json"
    ctx.evaluations = read_cache(cache, {})
    runs, systems, sweeps = _runs(ctx)
    values = {name: ctx.evaluate(rf) for name, rf in runs.items()}
    storage.write_json_atomic(cache, {k: v for k, v in ctx.evaluations.items()
                                      if v in values.values()})
    pq = {name: v["per_query"] for name, v in values.items()}
    depths = {name: v["depth"] for name, v in values.items()}
    warnings = (judged_warnings(inputs.qrels, index_doc_ids(index))
                + depth_warnings(depths, cfg.baseline, cfg.measures))
    warn(warnings)
    return Outcome(cfg, out, systems, {n: rf.path for n, rf in runs.items()},
                   {n: v["means"] for n, v in values.items()}, pq,
                   {n: v["iprec"] for n, v in values.items()},
                   compare(pq, cfg.baseline, cfg.measures), sweeps, ctx.reused, ctx.computed,
                   depths=depths, warnings=warnings)


def _question_answering(cfg: Config, index: AnyIndex, inputs: Inputs, out: Path, progress: bool,
                        precision: str | None) -> tuple[list[dict[str, Any]], list[str]]:
    """The `qa:` section: settings given as lists chosen on the validation set, then every system
    on the questions at every passage count (cached in qa.json until anything changes)."""
    import dataclasses

    from retrieval.qa import evaluation
    from retrieval.qa.reader import SpanReader

    qa, reader_dir = cfg.qa, inputs.reader_dir
    settings_given = {k: v for k, v in dataclasses.asdict(qa).items() if k != "where"}
    key = _digest({"v": CACHE_VERSION, "qa": settings_given, "index": index.manifest,
                   "reader": storage.sha256_file(reader_dir / "model.safetensors"),
                   "precision": precisions.cache_signature(precision)})
    cached = read_cache(out / "qa.json", {})
    if cached.get("key") == key:
        return cached["rows"], cached["notes"]
    reader = SpanReader(reader_dir, precision=precision, threads=cfg.threads)
    settings, notes = {}, []
    for name, options in qa.systems.items():
        weights = options.get("bm25_weight", [0.0])
        if len(weights) == 1 and len(qa.temperature) == 1:
            settings[name] = (weights[0], qa.temperature[0])
            continue
        choice = evaluation.choose(index, inputs.validation, name, weights, qa.temperature,
                                   qa.select_passages, reader, precision=precision, threads=cfg.threads,
                                   progress=progress)
        settings[name] = (choice.bm25_weight, choice.temperature)
        tried = ", ".join(f"w={w} t={t}: {f1:.1f}" for w, t, f1 in choice.tried)
        notes.append(f"{name}: bm25_weight {choice.bm25_weight}, temperature {choice.temperature} chosen"
                     f" on {qa.select_on} (F1 at {qa.select_passages} passages; {tried})")
    for name, (w, t) in settings.items():
        notes.append(f"{name}: p(z|x) = softmax((cos + {w} * BM25) / {t})" if w else
                     f"{name}: p(z|x) = softmax(cos / {t})")
    rows = [dataclasses.asdict(r) for r in evaluation.run_qa(
        index, inputs.questions, settings, reader, qa.passages, precision=precision,
        threads=cfg.threads, progress=progress)]
    storage.write_json_atomic(out / "qa.json", {"key": key, "rows": rows, "notes": notes})
    return rows, notes


def main(config: str | Path, output_dir: str | Path | None = None, precision: str | None = None) -> Outcome:
    """What `retrieval run` does: run, print the table, write the report."""
    from retrieval.experiments import report

    outcome = run_experiment(config, output_dir, precision=precision)
    print(report.text_table(outcome))
    paths = report.write_report(outcome)
    _note(f"{outcome.computed} runs computed, {outcome.reused} reused from "
          f"{outcome.output_dir / 'runs'}; report: {paths[1]}")
    return outcome
