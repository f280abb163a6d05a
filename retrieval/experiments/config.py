"""Experiment configs: YAML with line numbers, checked into plain dataclasses.

A YAML config names a collection, index settings, pipelines, measures, the
baseline and optional parameter sweeps (see configs/cacm.yaml)::

    collection: cacm                 # named collection or a path; topics/qrels default to it
    index: {path: indexes/cacm, stopwords: true, stemmer: porter}   # + dense, late, shards, ray
    measures: [MAP, P@30, nDCG@10]   # means over every judged topic (0 if unanswered)
    baseline: bm25
    pipelines:
      bm25: bm25                     # a ranker name ...
      qld: {model: qld, mu: 1000}    # ... a ranker with parameters ...
      bm25>>qld:                     # ... or stages in order, each with an optional cutoff
        - {model: bm25, cutoff: 100}
        - qld
    sweeps:
      bm25-tuned:                    # becomes a system when a setting is selected
        pipeline: bm25
        grid: {k1: [0.6, 0.9, 1.2], b: [0.3, 0.4, 0.75]}
        measure: MAP
        select_on: folds             # a train split ("scifact:train"), "folds", or omitted

`model` is any ranker registered in retrieval.registry; the other keys are its
parameters, checked against the registry (unknown ones refused, file:line).
The index is (re)built or given a missing part as experiment.ensure_index
says. Run files are cached beside a key (hash of the pipeline config, the
index manifest and the topics), so a re-run with nothing changed reads them
back instead of searching.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from retrieval import collections
from retrieval.errors import InputError
from retrieval.evaluation.measures import parse_measures, split_names
from retrieval.formats.textfile import decode
from retrieval.formats.trec import check_topic_field
from retrieval.index.kinds import AnyIndex
from retrieval.pipeline.params import PARAMS
from retrieval.pipeline.stage import Cut, Pipeline
from retrieval.registry import RANKERS, build

TOP_KEYS = {"name", "collection", "topics", "topic_field", "qrels", "remove_query_ids", "index",
            "threads", "measures", "only_answered", "baseline", "alpha", "pipelines", "sweeps", "qa",
            "filter"}
QA_KEYS = {"questions", "reader", "passages", "temperature", "systems", "select_on", "select_passages"}

# ---------------------------------------------------------------- YAML with line numbers


class Located(dict):
    """A YAML mapping that remembers its file and the line of each key."""

    path: str
    line: int
    lines: dict[Any, int]

    def where(self, key: Any = None) -> tuple[str, int]:
        return self.path, self.lines.get(key, self.line)

    def fail(self, message: str, key: Any = None) -> InputError:
        return InputError(message, *self.where(key))


class _Loader(yaml.SafeLoader):
    path = "<config>"


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> Located:
    loader.flatten_mapping(node)
    out = Located()
    out.path, out.line, out.lines = loader.path, node.start_mark.line + 1, {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if not isinstance(key, (str, int, float)):
            raise InputError("mapping keys must be plain words", loader.path, line)
        if key in out:
            raise InputError(f"duplicate key {key!r}", loader.path, line)
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = line
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml(path: str | Path) -> Located:
    """Parse a YAML file whose top level is a mapping; syntax errors name file:line."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read config ({e})", path) from None
    text = decode(data, path)  # invalid UTF-8: InputError naming the line
    try:
        loader = _Loader(text)  # checks for unprintable characters already
    except yaml.reader.ReaderError as e:
        raise InputError(f"invalid YAML: unacceptable character {e.character!r}", path,
                         text.count("\n", 0, e.position) + 1) from None
    loader.path = str(path)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        line = mark.line + 1 if mark else None
        raise InputError(f"invalid YAML: {' '.join(str(problem).split())}", path, line) from None
    except RecursionError:
        raise InputError("invalid YAML: nested too deeply", path) from None
    finally:
        loader.dispose()
    if not isinstance(data, Located):
        raise InputError("a config must be a YAML mapping (key: value lines)", path, 1)
    return data


# ---------------------------------------------------------------- the config


@dataclass(frozen=True)
class StageSpec:
    """One ranker of a pipeline: registered model name, parameters, optional rank cut-off."""

    model: str
    params: dict[str, Any]
    cutoff: int | None = None
    where: tuple[str, int] = ("<config>", 0)

    def keyed(self) -> dict[str, Any]:
        """What determines the stage's output (for cache keys)."""
        params = {k: v for k, v in sorted(self.params.items()) if PARAMS[k].keyed}
        return {"model": self.model, "params": params, "cutoff": self.cutoff}

    def label(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in sorted(self.params.items()) if PARAMS[k].keyed)
        text = self.model + (f"({params})" if params else "")
        return text + (f" % {self.cutoff}" if self.cutoff else "")


@dataclass(frozen=True)
class SweepSpec:
    """A parameter grid over one stage of a pipeline, and how a setting is selected."""

    name: str
    pipeline: str
    stage: int
    grid: dict[str, list[Any]]
    measure: str
    select_on: str | None  # a topics spec (train split), "folds", or None: report only
    where: tuple[str, int]


@dataclass(frozen=True)
class QAConfig:
    """Retrieve-then-read on a SQuAD-format set: systems (first stages for p(z|x)) and passage
    counts. A setting given as a list (temperature, a system's bm25_weight) is chosen on
    `select_on`, a validation set sharing no article with `questions`, never on `questions`."""

    questions: str
    reader: str | None
    passages: tuple[int, ...]
    temperature: list[float]
    systems: dict[str, dict[str, list[float]]]  # name -> {"bm25_weight": candidates}
    select_on: str | None = None
    select_passages: int = 5  # F1 at this many passages picks the setting
    where: tuple[str, int] = ("<config>", 0)


@dataclass
class Config:
    """An experiment config, validated."""

    path: Path
    name: str
    collection: str
    topics: str
    topic_field: str
    qrels: str
    remove_query_ids: bool
    index_path: Path
    stopwords: bool
    stemmer: str | None
    threads: int
    measures: list[str]
    only_answered: bool  # means over answered queries only (trec_eval without -c); default: all judged
    baseline: str
    alpha: float
    pipelines: dict[str, list[StageSpec]]
    sweeps: list[SweepSpec] = field(default_factory=list)
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)  # e.g. {"dense": {...}, "late": {}}
    qa: QAConfig | None = None
    shards: int | None = None  # a sharded index of this many shards
    ray: str | None = None  # search the shards on Ray ("local" or a cluster address)
    fields: list[str] = field(default_factory=list)  # fields indexed apart (`fields: [title, text]`)
    lines: dict[str, tuple[str, int]] = field(default_factory=dict)  # "index.dense" -> (file, line)

    @contextmanager
    def blame(self, key: str) -> Iterator[None]:
        """Report an InputError raised inside at the config line of `key` (e.g. a topics file
        that does not exist), so the user knows which setting to fix."""
        path, line = self.lines.get(key, (str(self.path), None))
        try:
            yield
        except InputError as e:
            if e.path == path:  # already at the config's line
                raise
            raise InputError(f"{key}: {e}", path, line) from None


def _get(m: Located, key: str, kind: type | tuple[type, ...], default: Any = None,
         what: str = "") -> Any:
    value = m.get(key, default)
    if value is None and default is None:
        return None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in kinds):
        names = what or (kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__
                                                                               for k in kind))
        raise m.fail(f"{key!r} must be {names}, got {value!r}", key)
    return value


def _check_keys(m: Located, allowed: set[str], what: str) -> None:
    for key in m:
        if key not in allowed:
            raise m.fail(f"unknown key {key!r} in {what}; expected one of "
                         + ", ".join(sorted(allowed)), key)


def _check_param(model: str, name: str, value: Any, where: tuple[str, int]) -> None:
    """The registry's check of one parameter, reported at its config line."""
    try:
        RANKERS[model].check(name, value)
    except InputError as e:
        raise InputError(e.message, *where) from None


def _stage(raw: Any, parent: Located, key: Any, threads: int) -> StageSpec:
    where = parent.where(key)
    if isinstance(raw, str):
        raw_map: dict[str, Any] = {"model": raw}
        lines: dict[str, int] = {}
    elif isinstance(raw, Located):
        raw_map, lines, where = dict(raw), raw.lines, raw.where()
    else:
        raise InputError(f"a stage is a ranker name or a mapping with 'model', got {raw!r}", *where)
    model = raw_map.pop("model", None)
    if not isinstance(model, str) or model not in RANKERS:
        raise InputError(f"unknown or missing model {model!r}; expected one of "
                         + ", ".join(sorted(RANKERS)), *where)
    cutoff = raw_map.pop("cutoff", None)
    if cutoff is not None and (not isinstance(cutoff, int) or isinstance(cutoff, bool)
                               or cutoff < 1):
        raise InputError(f"cutoff must be a positive integer, got {cutoff!r}",
                         where[0], lines.get("cutoff", where[1]))
    for name, value in raw_map.items():
        _check_param(model, name, value, (where[0], lines.get(name, where[1])))
    try:
        RANKERS[model].resolve(raw_map)  # checks between parameters (e.g. fb_docs needs rm3)
    except InputError as e:
        raise InputError(e.message, *where) from None
    if "threads" not in raw_map and "threads" in RANKERS[model].params:
        raw_map["threads"] = threads
    return StageSpec(model, raw_map, cutoff, where)


def build_pipeline(stages: list[StageSpec], index: AnyIndex, precision: str | None = None) -> Pipeline:
    """The Pipeline for stage specs; ranker errors point at the config line. `precision` is how
    encoding stages run here unless a stage sets its own."""
    built = []
    for spec in stages:
        try:
            given = ({"precision": precision} if "precision" in RANKERS[spec.model].params else {})
            built.append(build(spec.model, index, **(given | spec.params)))
        except InputError as e:
            raise e.at(*spec.where) from None
        if spec.cutoff:
            built.append(Cut(spec.cutoff))
    return Pipeline(*built)


def refuse_feedback(specs: list[StageSpec], where: str, placed: bool = False) -> None:
    """RM3 given a run takes it as feedback and searches the whole index again, past the run's
    documents and any filter, so it can only be a first stage: refuse it among `specs` (`placed`: the
    error names the stage's config line)."""
    for spec in specs:
        if spec.params.get("rm3"):
            error = InputError(f"rm3 searches the whole index again, so it cannot be used {where}; make it"
                               " the first stage")
            raise error.at(*spec.where) if placed else error


def stage_specs(raw: Any, source: str = "<request>", threads: int = 1) -> list[StageSpec]:
    """A pipeline given as plain data (a ranker name, or a list of names and mappings with
    'model', 'cutoff' and parameters, as in a config's `pipelines`), checked as a config is."""
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise InputError("a pipeline needs at least one stage", source)
    parent = _located({}, source)
    return [_stage(_located(item, source) if isinstance(item, dict) else item, parent, None, threads)
            for item in items]


def _located(mapping: dict, source: str, line: int = 0) -> Located:
    located = Located(mapping)
    located.path, located.line, located.lines = source, line, {}
    return located


def _check_system_name(name: Any, parent: Located, what: str = "system") -> None:
    """A pipeline's or sweep's name becomes a table row and part of file names: plain words only."""
    if not isinstance(name, str):
        raise parent.fail(f"{what} name {name!r} is not text; quote it ('{name}')", name)
    if not re.fullmatch(r"[\w.+>@=-]+", name):
        raise parent.fail(f"{what} name {name!r} may hold only letters, digits and _.+>@=-", name)


def _top_filter(m: Located) -> str | None:
    """The config's top-level `filter:` (index/filters.py), checked; None without one."""
    value = m.get("filter")
    if value is None:
        return None
    from retrieval.index.filters import parse_filter

    if not isinstance(value, str):
        raise m.fail("'filter' must be a filter expression (e.g. year >= 1990)", "filter")
    try:
        parse_filter(value)
    except InputError as e:
        raise m.fail(e.message, "filter") from None
    return value


def _with_filter(stages: list[StageSpec], expression: str, raw: Located, name: str) -> None:
    """Give every stage that takes a filter the top-level one (and-ed with its own): the first
    stage must take it, so every pipeline ranks passing documents only."""
    if "filter" not in RANKERS[stages[0].model].params:
        raise raw.fail(f"pipeline {name!r} starts with {stages[0].model}, which takes no filter; the"
                       " top-level 'filter' applies to every pipeline", name)
    for spec in stages:
        if "filter" in RANKERS[spec.model].params:
            own = spec.params.get("filter")
            spec.params["filter"] = expression if own is None else f"({expression}) and ({own})"


def _pipelines(m: Located, threads: int) -> dict[str, list[StageSpec]]:
    raw = m.get("pipelines")
    top_filter = _top_filter(m)
    if not isinstance(raw, Located) or not raw:
        raise m.fail("'pipelines' must be a mapping of system name -> stages", "pipelines")
    out = {}
    for name, value in raw.items():
        _check_system_name(name, raw)
        items = value if isinstance(value, list) else [value]
        if not items:
            raise raw.fail(f"pipeline {name!r} has no stages", name)
        out[name] = [_stage(v, raw, name, threads) for v in items]
        first = out[name][0].model
        if RANKERS[first].needs_run:
            raise raw.fail(f"pipeline {name!r} starts with {first}, a reranker; put a first stage before"
                           f" it (e.g. [{{model: bm25, cutoff: 100}}, {first}])", name)
        refuse_feedback(out[name][1:], "after the first stage (it would not rescore the run it is given)",
                        placed=True)
        if top_filter is not None:
            _with_filter(out[name], top_filter, raw, name)
    return out


def _sweep(name: Any, m: Any, parent: Located, cfg: Config) -> SweepSpec:
    _check_system_name(name, parent, "sweep")
    if not isinstance(m, Located):
        raise parent.fail(f"sweep {name!r} must be a mapping", name)
    _check_keys(m, {"pipeline", "stage", "grid", "measure", "select_on"}, f"sweep {name!r}")
    pipeline = _get(m, "pipeline", str)
    if pipeline not in cfg.pipelines:
        raise m.fail(f"sweep pipeline {pipeline!r} is not one of the pipelines", "pipeline")
    stages = cfg.pipelines[pipeline]
    stage = _get(m, "stage", int, 0)
    if not 0 <= stage < len(stages):
        raise m.fail(f"stage must be 0..{len(stages) - 1}", "stage")
    grid = m.get("grid")
    if not isinstance(grid, Located) or not 1 <= len(grid) <= 2:
        raise m.fail("grid must map one or two parameters to lists of values", "grid")
    for param, values in grid.items():
        if not isinstance(values, list) or not values:
            raise grid.fail(f"grid values of {param!r} must be a non-empty list", param)
        for v in values:
            _check_param(stages[stage].model, str(param), v, grid.where(param))
    for point in itertools.product(*grid.values()):  # checks between parameters (fb_docs needs rm3)
        params = stages[stage].params | dict(zip(grid, point))
        try:
            RANKERS[stages[stage].model].resolve(params)
            if stage:
                refuse_feedback([StageSpec(stages[stage].model, params)], "after the first stage")
        except InputError as e:
            raise grid.fail(e.message) from None
    measure = _get(m, "measure", str, cfg.measures[0])
    _measures(m, "measure", [measure])
    if name in cfg.pipelines:
        raise parent.fail(f"sweep name {name!r} is also a pipeline name", name)
    select_on = _select_on(_get(m, "select_on", str), cfg.collection, m)
    return SweepSpec(str(name), pipeline, stage, {str(k): list(v) for k, v in grid.items()},
                     measure, select_on, m.where("select_on"))


def _select_on(value: str | None, collection: str, m: Located) -> str | None:
    """`folds`, a named collection's split (NAME:SPLIT) or a topics file; a bare split name is refused
    with the splits the config's collection has."""
    if value in (None, "folds") or Path(value).is_file():
        return value
    name, split = collections.split_name(value)
    named = collections.named(name, files_only=True)  # topics: a directory of that name does not hide it
    if named is None:
        own = collections.named(collection)
        has = f"; {own.name} has the splits {', '.join(sorted(own.topics))}" if own else ""
        raise m.fail(f"select_on {value!r} is neither 'folds', a collection split (NAME:SPLIT) nor a"
                     f" topics file{has}", "select_on")
    if split is not None and split not in named.topics:
        raise m.fail(f"select_on {value!r}: collection {named.name!r} has no split {split!r}; it has"
                     f" {', '.join(sorted(named.topics))} (or use 'folds')", "select_on")
    return value


def _measures(m: Located, key: str, names: Any) -> list[str]:
    if isinstance(names, str):
        names = split_names(names)
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise m.fail(f"{key!r} must be a list of measure names", key)
    try:
        return [n for n, _ in parse_measures(names)]
    except InputError as e:
        raise m.fail(e.message, key) from None


PART_KEYS = {"dense": {"encoder", "precision", "type", "params"}, "late": {"model", "compression"}}
INDEX_KEYS = {"path", "stopwords", "stemmer", "dense", "late", "shards", "ray", "fields"}


def _parts(index: Located) -> dict[str, dict[str, Any]]:
    """Extra index parts: `dense: true` or `dense: {encoder, precision, type, params}`;
    `late: true` or `late: {model, compression}`."""
    parts = {}
    for name, keys in PART_KEYS.items():
        value = index.get(name, False)
        if value is True:
            parts[name] = {}
        elif isinstance(value, Located):
            _check_keys(value, keys, f"index.{name}")
            _check_part(name, value)
            parts[name] = dict(value)
        elif value not in (False, None):
            raise index.fail(f"{name!r} must be true, false or a mapping ({', '.join(sorted(keys))})", name)
    return parts


def _check_part(name: str, part: Located) -> None:
    """A dense or late part's settings, checked before any index is built (file:line on error)."""
    from retrieval.dense.faiss_index import index_params

    try:
        if name == "dense":
            _get(part, "encoder", str, what="a model directory or name")
            params = _get(part, "params", Located, Located(), "a mapping of FAISS settings")
            index_params(_get(part, "type", str, "flat"), dict(params))
            PARAMS["precision"].check(part.get("precision"))
        else:
            from retrieval.late.store import COMPRESSIONS

            _get(part, "model", str, what="a checkpoint path or 'zero-shot'")
            if _get(part, "compression", str, "fp16") not in COMPRESSIONS:
                raise InputError(f"compression must be one of {', '.join(COMPRESSIONS)}, got"
                                 f" {part['compression']!r}")
    except InputError as e:
        if e.path is not None:
            raise
        raise part.fail(f"index.{name}: {e.message}") from None


def _index_path(index: Located, name: str) -> Path:
    path = _get(index, "path", str, f"indexes/{name}")
    if not path.strip():
        raise index.fail("path must name the index directory, got an empty string", "path")
    return Path(path)


def _fields(index: Located) -> list[str]:
    """`fields: [title, text]`: the fields indexed apart (for multifield and bm25f)."""
    from retrieval.index.native import check_field_names

    fields = index.get("fields", [])
    if not isinstance(fields, list):
        raise index.fail(f"fields must be a list of field names (e.g. [title, text]), got {fields!r}",
                         "fields")
    try:
        return check_field_names(fields)
    except InputError as e:
        raise index.fail(e.message, "fields") from None


def _shards(index: Located) -> tuple[int | None, str | None]:
    """`shards: N` (a sharded index) and `ray: local|ADDRESS` (search its shards on Ray)."""
    shards = _get(index, "shards", int)
    if shards is not None and shards < 1:
        raise index.fail(f"shards must be a whole number >= 1, got {shards}", "shards")
    ray = _get(index, "ray", str)
    if ray is not None and shards is None:
        raise index.fail("ray searches a sharded index; add shards: N", "ray")
    return shards, ray


def _qa(m: Located) -> QAConfig | None:
    """The `qa:` section; values checked against params.PARAMS (passages, temperature, bm25_weight)."""
    from retrieval.pipeline.params import PARAMS

    if "qa" not in m:
        return None
    qa = m["qa"]
    if not isinstance(qa, Located):
        raise m.fail("'qa' must be a mapping (" + ", ".join(sorted(QA_KEYS)) + ")", "qa")
    _check_keys(qa, QA_KEYS, "qa")

    def values(name: str, value: Any, key: str) -> list[Any]:
        """A value or a non-empty list of candidates, each checked."""
        candidates = value if isinstance(value, list) else [value]
        if not candidates:
            raise qa.fail(f"{key}: an empty list", key)
        for v in candidates:
            try:
                PARAMS[name].check(v)
            except InputError as e:
                raise qa.fail(e.message, key) from None
        return candidates

    systems = qa.get("systems", {"dense": {}})
    if not isinstance(systems, dict) or not systems or not all(isinstance(v, dict) for v in systems.values()):
        raise qa.fail("systems maps a name to {} (dense p(z|x)) or {bm25_weight: W or [W, ...]}",
                      "systems")
    for name, options in systems.items():
        _check_keys(options, {"bm25_weight"}, f"qa system {name!r}")
    cfg = QAConfig(
        questions=_get(qa, "questions", str, "xquad-en"), reader=_get(qa, "reader", str),
        passages=tuple(values("passages", qa.get("passages", [1, 5, 20]), "passages")),
        temperature=values("temperature", qa.get("temperature", 0.05), "temperature"),
        systems={str(k): {n: values(n, w, "systems") for n, w in v.items()} for k, v in systems.items()},
        select_on=_get(qa, "select_on", str),
        select_passages=values("passages", _get(qa, "select_passages", int, 5), "select_passages")[0],
        where=qa.where())
    tuned = len(cfg.temperature) > 1 or any(len(w) > 1 for v in cfg.systems.values() for w in v.values())
    if tuned and not cfg.select_on:
        raise qa.fail("a list of settings needs select_on: a validation set sharing no article with the "
                      "questions (e.g. squad2-dev:validation)", "select_on")
    for key in ("select_on", "select_passages"):
        if key in qa and not tuned:
            raise qa.fail(f"{key} is for choosing a setting, and none is given as a list (temperature,"
                          " a system's bm25_weight)", key)
    return cfg


def load_config(path: str | Path) -> Config:
    """Read and validate an experiment config; errors name the file and line."""
    m = read_yaml(path)
    _check_keys(m, TOP_KEYS, "the config")
    collection = _get(m, "collection", str)
    if collection is None:
        raise m.fail("missing 'collection' (a collection name such as cacm, or a path)")
    named = collections.named(collection)
    index = m.get("index", _located({}, m.path, m.line))
    if not isinstance(index, Located):
        raise m.fail(f"'index' must be a mapping ({', '.join(sorted(INDEX_KEYS))})", "index")
    _check_keys(index, INDEX_KEYS, "index")
    name = _get(m, "name", str, Path(path).stem)
    if not re.fullmatch(r"[\w.+=@-]+", name) or name in (".", ".."):
        raise m.fail(f"name {name!r} must be one plain file name (letters, digits and _.+=@-; it names"
                     " runs/<name>)", "name" if "name" in m else None)
    stemmer = index.get("stemmer", "porter")
    if stemmer not in ("porter", None):
        raise index.fail(f"stemmer must be porter or null, got {stemmer!r}", "stemmer")
    threads = _get(m, "threads", int, 1)
    try:
        PARAMS["threads"].check(threads)
    except InputError as e:
        raise m.fail(e.message, "threads") from None
    alpha = float(_get(m, "alpha", (int, float), 0.05))
    if not 0 < alpha < 1:
        raise m.fail(f"alpha (the significance level) must be in (0, 1), got {alpha}", "alpha")
    topic_field = _get(m, "topic_field", str, "title")
    try:
        check_topic_field(topic_field)
    except InputError as e:
        raise m.fail(e.message, "topic_field") from None
    default_measures = list(named.measures) if named else ["MAP", "P@30", "nDCG@10"]
    cfg = Config(
        path=Path(path), name=name, collection=collection,
        topics=_get(m, "topics", str, collection), topic_field=topic_field,
        qrels=_get(m, "qrels", str, collection),
        remove_query_ids=_get(m, "remove_query_ids", bool,
                              bool(named and named.remove_query_ids)),
        index_path=_index_path(index, name),
        stopwords=_get(index, "stopwords", bool, True), stemmer=stemmer, threads=threads,
        measures=_measures(m, "measures", m.get("measures", default_measures)),
        only_answered=_get(m, "only_answered", bool, False),
        baseline=_get(m, "baseline", str, ""), alpha=alpha,
        pipelines=_pipelines(m, threads) if "pipelines" in m or "qa" not in m else {},
        parts=_parts(index), qa=_qa(m))
    cfg.shards, cfg.ray = _shards(index)
    cfg.fields = _fields(index)
    cfg.lines = {key: m.where(key) for key in ("collection", "topics", "qrels")}
    cfg.lines |= {f"index.{key}": index.where(key) for key in ("path", "dense", "late")}
    if isinstance(m.get("qa"), Located):
        cfg.lines |= {f"qa.{key}": m["qa"].where(key) for key in ("questions", "select_on", "reader")}
    if not cfg.pipelines:
        for key in ("baseline", "measures", "sweeps", "alpha", "only_answered", "topics", "qrels"):
            if key in m:
                raise m.fail(f"{key!r} applies to pipelines, and this config has none (only qa)", key)
    if cfg.pipelines and "baseline" not in m:
        raise m.fail("missing 'baseline', the pipeline the others are compared with: "
                     + ", ".join(cfg.pipelines))
    if cfg.pipelines and cfg.baseline not in cfg.pipelines:
        raise m.fail(f"baseline {cfg.baseline!r} is not one of the pipelines: "
                     + ", ".join(cfg.pipelines), "baseline" if "baseline" in m else None)
    sweeps = m.get("sweeps", Located())
    if not isinstance(sweeps, Located):
        raise m.fail("'sweeps' must be a mapping of name -> sweep", "sweeps")
    cfg.sweeps = [_sweep(k, v, sweeps, cfg) for k, v in sweeps.items()]
    return cfg
