"""The ranker registry: each ranker's parameters, and how it is built on each kind of index.

    stage = build("bm25", open_index("indexes/cacm"), k1=1.2)   # native, sharded or Lucene alike

To add a ranker: write a Stage (its constructor takes the index and its
parameters; `__call__(queries, run=None) -> Run`), declare any parameter that
is new in params.PARAMS (type, default, range, help), and add a `Ranker` to
RANKERS naming its parameters and one builder per index kind it runs on.
`retrieval search` flags, the YAML schema (experiments/config.py) and the range checks are
generated from this table; a parameter a ranker does not take is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from retrieval.errors import InputError
from retrieval.index.impacts import SPARSE_MODELS
from retrieval.index.kinds import AnyIndex
from retrieval.pipeline.params import PARAMS, Param
from retrieval.pipeline.stage import Stage

Builder = Callable[..., Stage]
FEEDBACK = ("rm3", "fb_docs", "fb_terms", "original_weight")
# parameters that apply only when a switch has a value: given otherwise, they are refused, not ignored
APPLIES_ONLY_WITH = {("rm3", True): FEEDBACK[1:], ("fusion", "interpolate"): ("weight", "interpolate"),
                     ("fusion", "rrf"): ("rrf_k",)}


@dataclass(frozen=True)
class Ranker:
    """A registered ranker: its parameters (names in params.PARAMS) and a builder per index kind."""

    name: str
    help: str
    params: tuple[str, ...]
    builders: Mapping[str, Builder]
    defaults: Mapping[str, Any] = field(default_factory=dict)  # this ranker's own defaults
    needs_run: bool = False  # a reranker: give it a first stage's run
    needs_parts: tuple[str, ...] = ()  # index parts it searches, besides the inverted index

    def parameters(self) -> dict[str, Param]:
        """Its parameters with this ranker's defaults."""
        return {n: dataclasses.replace(PARAMS[n], default=self.defaults.get(n, PARAMS[n].default))
                for n in self.params}

    def default(self, name: str) -> Any:
        return self.parameters()[name].default

    def check(self, name: str, value: Any) -> None:
        """InputError unless this ranker takes `name` and `value` is of its type and range."""
        declared = self.parameters()
        if name not in declared:
            raise InputError(f"unknown parameter {name!r} for {self.name}; expected one of "
                             + ", ".join(sorted(declared)))
        try:
            declared[name].check(value)
        except InputError as e:
            raise InputError(f"{self.name}: {e.message}") from None

    def resolve(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every parameter's value: the given ones (checked), the defaults for the rest."""
        declared = self.parameters()
        for name, value in given.items():
            self.check(name, value)
        values = {n: p.default for n, p in declared.items()} | {n: v for n, v in given.items()
                                                                if v is not None}
        for (switch, on), names in APPLIES_ONLY_WITH.items():
            ignored = [n for n in names if given.get(n) is not None]
            # a switch left at None is the stage's to settle (late: by its first stage), and so are these
            if switch in values and values[switch] is not None and values[switch] != on and ignored:
                setting = switch if on is True else f"{switch} {on}"
                verb = "apply" if len(ignored) > 1 else "applies"
                raise InputError(f"{self.name}: {', '.join(ignored)} {verb} only with {setting}")
        return values


# ---------------------------------------------------------------- builders, by index kind


def _model_params(model: str, v: dict[str, Any]) -> dict[str, Any]:
    return {n: v[n] for n in SPARSE_MODELS[model][1]}


def _native_sparse(model: str) -> Builder:
    def build(index: AnyIndex, **v: Any) -> Stage:
        from retrieval.index.impacts import sparse_model
        from retrieval.sparse.rankers import BM25, RM3, QueryLikelihood, SparseRanker

        common = {"hits": v["hits"], "threads": v["threads"], "filter": v["filter"]}
        if model == "bm25":
            stage: Stage = BM25(index, **common, **_model_params(model, v))
        elif model in ("qld", "qljm"):
            smoothing = "dirichlet" if model == "qld" else "jelinek-mercer"
            stage = QueryLikelihood(index, smoothing, **common, **_model_params(model, v))
        else:  # any other registered model
            stage = SparseRanker(index, sparse_model(model, **_model_params(model, v)), **common, name=model)
        return _feedback(RM3, stage, v)
    return build


def _fielded(name: str) -> Builder:
    def build(index: AnyIndex, **v: Any) -> Stage:
        from retrieval.sparse.fielded import BM25F, MultifieldBM25, MultifieldQLD
        from retrieval.sparse.rankers import RM3

        common = {n: v[n] for n in ("field_weights", "hits", "threads", "filter")}
        if name == "multifield_qld":
            stage: Stage = MultifieldQLD(index, mu=v["mu"], **common)
        elif name == "multifield":
            stage = MultifieldBM25(index, k1=v["k1"], b=v["b"], **common)
        else:
            stage = BM25F(index, k1=v["k1"], b=v["b"], field_b=v["field_b"], **common)
        return _feedback(RM3, stage, v)
    return build


def _sharded_fielded(name: str) -> Builder:
    def build(index: AnyIndex, **v: Any) -> Stage:
        from retrieval.shards.rankers import ShardedFielded, ShardedRM3

        own = {"multifield": ("k1", "b"), "multifield_qld": ("mu",), "bm25f": ("k1", "b", "field_b")}[name]
        stage = ShardedFielded(index, name, v["hits"], index.shard_backend(), v["threads"],
                               filter=v["filter"],
                               field_weights=v["field_weights"], **{n: v[n] for n in own})
        return _feedback(ShardedRM3, stage, v)
    return build


def fielded_builders(name: str) -> dict[str, Builder]:
    """The native and sharded (and live) builders of a fielded ranker (sparse/fielded.py)."""
    return {"native": _fielded(name), "sharded": _sharded_fielded(name)}


def _sharded_sparse(model: str) -> Builder:
    def build(index: AnyIndex, **v: Any) -> Stage:
        from retrieval.shards.rankers import ShardedRM3, ShardedSparse

        stage = ShardedSparse(index, model, v["hits"], index.shard_backend(), v["threads"],
                              filter=v["filter"], **_model_params(model, v))
        return _feedback(ShardedRM3, stage, v)
    return build


def sparse_builders(model: str) -> dict[str, Builder]:
    """The native and sharded builders of a model registered in index.impacts.SPARSE_MODELS; its
    Ranker's parameters are the model's own plus SPARSE (hits, threads, RM3's, depth), which they take."""
    return {"native": _native_sparse(model), "sharded": _sharded_sparse(model)}


def _lucene_sparse(model: str) -> Builder:
    def build(index: AnyIndex, **v: Any) -> Stage:
        from retrieval.lucene import LuceneBM25, LuceneQLD

        common = {n: v[n] for n in FEEDBACK + ("hits", "threads", "filter")} | _model_params(model, v)
        return _rescoring_depth((LuceneBM25 if model == "bm25" else LuceneQLD)(index, **common), v)
    return build


def _feedback(rm3: type, stage: Stage, v: dict[str, Any]) -> Stage:
    if v["rm3"]:
        stage = rm3(stage, fb_docs=v["fb_docs"], fb_terms=v["fb_terms"], original_weight=v["original_weight"])
    return _rescoring_depth(stage, v)


def _rescoring_depth(stage: Stage, v: dict[str, Any]) -> Stage:
    """With `depth`, a sparse ranker given a run rescores its top `depth` and keeps the rest after."""
    from retrieval.pipeline.fusion import Rescore

    return stage if v.get("depth") is None else Rescore(stage, v["depth"])


def _native_dense(index: AnyIndex, **v: Any) -> Stage:
    from retrieval.dense import DenseRetriever

    return DenseRetriever(index, v["encoder"], hits=v["hits"], precision=v["precision"],
                          threads=v["threads"], ef_search=v["ef_search"], nprobe=v["nprobe"],
                          filter=v["filter"])


def _sharded_dense(index: AnyIndex, **v: Any) -> Stage:
    from retrieval.shards.rankers import ShardedDense

    for name in ("ef_search", "nprobe"):
        if v[name] is not None:
            raise InputError(f"{name} is not supported on a sharded index (its dense parts are flat)")
    return ShardedDense(index, v["hits"], index.shard_backend(), v["encoder"], v["precision"], v["threads"],
                        filter=v["filter"])


def _hybrid(index: AnyIndex, **v: Any) -> Stage:
    """BM25 and dense, each to `depth`, fused: min-max interpolation (`weight` on BM25) or RRF."""
    from retrieval.pipeline.fusion import RRF, Interpolate

    depth = v["depth"]  # a filter applies to both inputs: every fused document passes it
    sparse = build("bm25", index, k1=v["k1"], b=v["b"], hits=depth, threads=v["threads"],
                   filter=v["filter"])
    dense = build("dense", index, hits=depth, encoder=v["encoder"], precision=v["precision"],
                  threads=v["threads"], filter=v["filter"])
    if v["fusion"] == "rrf":
        return RRF(sparse, dense, rrf_k=v["rrf_k"], depth=depth, hits=v["hits"])
    return Interpolate(sparse, dense, weight=v["weight"], depth=depth, hits=v["hits"])


def _qrels(v: dict[str, Any]) -> Any:
    from retrieval.collections import load_qrels

    return load_qrels(v["qrels"]) if v["qrels"] is not None else None


def _rocchio(index: AnyIndex, **v: Any) -> Stage:
    """BM25, then Rocchio feedback (pseudo, or explicit with qrels), searched again."""
    from retrieval.sparse.rankers import BM25
    from retrieval.sparse.rocchio import Rocchio

    bm25 = BM25(index, k1=v["k1"], b=v["b"], hits=v["hits"], threads=v["threads"])
    return Rocchio(bm25, fb_docs=v["fb_docs"], fb_terms=v["fb_terms"], alpha=v["alpha"], beta=v["beta"],
                   gamma=v["gamma"], qrels=_qrels(v))


def _dense_rocchio(index: AnyIndex, **v: Any) -> Stage:
    """Dense retrieval, then the query vector moved by Rocchio feedback, searched again."""
    from retrieval.dense.rocchio import DenseRocchio

    dense = build("dense", index, hits=v["hits"], encoder=v["encoder"], precision=v["precision"],
                  threads=v["threads"])
    return DenseRocchio(dense, fb_docs=v["fb_docs"], alpha=v["alpha"], beta=v["beta"], gamma=v["gamma"],
                        qrels=_qrels(v))


SCORERS = ("bm25", "qld", "qljm", "rm3", "dense", "late", "fields")
SHARDED_SCORERS = ("bm25", "qld", "qljm", "late")  # rescoring a run over shards
LUCENE_SCORERS = ("bm25", "qld")  # Lucene's own scores of a run's documents (LuceneRescorer)


def _feature_names(index: AnyIndex, feature_set: str) -> list[str]:
    """The scorers of `feature_set` ("all": every one the index has parts for; `fields` only when it
    has fields; on shards those that rescore over shards)."""
    fielded = bool(getattr(index, "fields", None))
    usable = {"sharded": SHARDED_SCORERS, "lucene": LUCENE_SCORERS}.get(index.kind, SCORERS)
    if feature_set == "all":
        return [n for n in usable
                if (n not in ("dense", "late") or index.has(n)) and (n != "fields" or fielded)]
    names = feature_set.split("+")
    unknown = [n for n in names if n not in SCORERS]
    if unknown or len(set(names)) != len(names) or not names:
        raise InputError(f"feature_set: expected all, or names joined by '+' from {', '.join(SCORERS)};"
                         f" got {feature_set!r}")
    for part in ("dense", "late"):
        if part in names and not index.has(part):
            raise InputError(f"feature {part} needs the index's {part} part", index.path)
    if "fields" in names and not fielded:
        raise InputError("feature fields needs an index built with fields (retrieval index --fields)",
                         index.path)
    refused = [n for n in names if n not in usable]
    if refused:
        raise InputError(f"on a {index.kind} index the features are {', '.join(usable)};"
                         f" {', '.join(refused)} rescore a run on a single native index only", index.path)
    return names


def feature_set_for(names: tuple[str, ...] | list[str]) -> str:
    """The `feature_set` that computes the scorer features among `names` (a trained model's)."""
    wanted = [n for n in SCORERS if n in names]
    if any(n.startswith("bm25_") or n == "bm25f" for n in names):
        wanted.append("fields")
    return "+".join(wanted) if wanted else "bm25"


def _field_scorers(index: AnyIndex, v: dict[str, Any]) -> dict[str, Stage]:
    """BM25 of each field alone (`bm25_FIELD`: multifield with that field's weight 1, the others 0) and
    BM25F over all (`bm25f`)."""
    common = {"threads": v["threads"], "k1": v["k1"], "b": v["b"]}
    out: dict[str, Stage] = {}
    for name in index.fields:
        weights = ",".join(f"{f}={int(f == name)}" for f in index.fields)
        out[f"bm25_{name}"] = build("multifield", index, **common, field_weights=weights)
    out["bm25f"] = build("bm25f", index, **common)
    return out


def _features(index: AnyIndex, **v: Any) -> Stage:
    """Features of the given run's top `depth`: each scorer of `feature_set` the index has parts for."""
    from retrieval.ltr.features import FeatureStage, RM3Rescorer
    from retrieval.sparse.rankers import RM3

    common = {"threads": v["threads"]}
    scorers: dict[str, Stage] = {}
    for name in _feature_names(index, v["feature_set"]):
        if name in ("bm25", "qld", "qljm"):
            own = {"bm25": ("k1", "b"), "qld": ("mu",), "qljm": ("lam",)}[name]
            scorer = build(name, index, **common, **{k: v[k] for k in own})
            if index.kind == "lucene":  # Lucene's search scores the run's documents (LUCENE_SCORERS)
                from retrieval.lucene.searcher import LuceneRescorer

                scorer = LuceneRescorer(scorer)
            scorers[name] = scorer
        elif name == "rm3":
            scorers[name] = RM3Rescorer(RM3(build("bm25", index, **common, k1=v["k1"], b=v["b"]),
                                            fb_docs=v["fb_docs"], fb_terms=v["fb_terms"],
                                            original_weight=v["original_weight"]))
        elif name == "dense":
            scorers[name] = build("dense", index, **common, encoder=v["encoder"], precision=v["precision"])
        elif name == "fields":
            scorers |= _field_scorers(index, v)
        else:
            # the feature is MaxSim alone, not the fused default
            scorers[name] = build("late", index, **common, precision=v["precision"], depth=v["depth"],
                                  checkpoint=v["checkpoint"], interpolate=0.0,
                                  fusion="interpolate")
    return FeatureStage(index, scorers, depth=v["depth"], cache=v["cache"])


def _ltr(index: AnyIndex, **v: Any) -> Stage:
    from retrieval.ltr.model import LTRStage

    if v["checkpoint"] is None:
        raise InputError("ltr needs checkpoint: the directory `retrieval train ltr` wrote")
    return LTRStage(v["checkpoint"], hits=v["hits"])


def _late(index: AnyIndex, **v: Any) -> Stage:
    from retrieval.late import LateReranker

    return LateReranker(index, v["checkpoint"], interpolate=v["interpolate"], depth=v["depth"],
                        hits=v["hits"], threads=v["threads"], precision=v["precision"], filter=v["filter"],
                        fusion=v["fusion"], rrf_k=v["rrf_k"], first_stage=v["first_stage"])


# ---------------------------------------------------------------- the registry

# depth: given a run, rescore its top `depth` only; filter: index/filters.py, inside the top k
SPARSE = ("hits", "threads", "filter") + FEEDBACK + ("depth",)
ROCCHIO = ("fb_docs", "alpha", "beta", "gamma", "qrels")
NEURAL = ("hits", "threads", "encoder", "precision")

RANKERS: dict[str, Ranker] = {r.name: r for r in (
    Ranker("bm25", "BM25 (Lucene's formula)", ("k1", "b") + SPARSE,
           sparse_builders("bm25") | {"lucene": _lucene_sparse("bm25")}),
    Ranker("qld", "query likelihood, Dirichlet smoothing", ("mu",) + SPARSE,
           sparse_builders("qld") | {"lucene": _lucene_sparse("qld")}),
    Ranker("qljm", "query likelihood, Jelinek-Mercer smoothing", ("lam",) + SPARSE, sparse_builders("qljm")),
    Ranker("multifield", "Anserini's multifield BM25: per-field BM25 summed (index built with --fields)",
           ("k1", "b", "field_weights") + SPARSE, fielded_builders("multifield")),
    Ranker("multifield_qld", "query likelihood per field: per-field Dirichlet QL, weighted and summed"
           " (--fields)", ("mu", "field_weights") + SPARSE, fielded_builders("multifield_qld")),
    Ranker("bm25f", "BM25F: field-weighted, per-field length-normalised tf, one saturation (--fields)",
           ("k1", "b", "field_weights", "field_b") + SPARSE, fielded_builders("bm25f")),
    Ranker("dense", "bi-encoder over the index's FAISS part", NEURAL + ("filter", "ef_search", "nprobe"),
           {"native": _native_dense, "sharded": _sharded_dense}, needs_parts=("dense",)),
    Ranker("hybrid", "BM25 fused with dense",
           NEURAL + ("filter", "depth", "k1", "b", "weight", "fusion", "rrf_k"),
           {"native": _hybrid, "sharded": _hybrid}, defaults={"depth": 1000}, needs_parts=("dense",)),
    Ranker("rocchio", "BM25 with Rocchio feedback (pseudo, or explicit from qrels)",
           ("k1", "b", "hits", "threads", "fb_terms") + ROCCHIO, {"native": _rocchio}),
    Ranker("dense_rocchio", "dense retrieval with Rocchio feedback on the query vector (vector PRF)",
           NEURAL + ROCCHIO, {"native": _dense_rocchio}, needs_parts=("dense",)),
    Ranker("features", "features of a run's top `depth` for learning to rank: every scorer's score,"
           " ranks, lengths, idf", ("hits", "threads", "depth", "feature_set", "cache", "k1", "b", "mu",
                                   "lam", "fb_docs", "fb_terms", "original_weight", "encoder", "precision",
                                   "checkpoint"),
           {"native": _features, "sharded": _features, "lucene": _features}, defaults={"depth": 100},
           needs_run=True),
    Ranker("ltr", "a learned ranker (LambdaMART or linear) over a features stage's candidates",
           ("hits", "threads", "checkpoint"), {"native": _ltr, "sharded": _ltr, "lucene": _ltr},
           needs_run=True),
    Ranker("late", "late-interaction (MaxSim) reranker of a run's top `depth`",
           ("hits", "threads", "precision", "depth", "checkpoint", "interpolate", "fusion", "rrf_k",
            "filter", "first_stage"),
           # None: the stage settles interpolate, depth and fusion by its kind of first stage
           # (params.LATE_DEFAULTS) and takes a given rrf_k to mean RRF, so none has a value here
           {"native": _late, "sharded": _late},
           defaults={"depth": None, "fusion": None, "interpolate": None, "rrf_k": None},
           needs_run=True),
)}


def ranker(name: str) -> Ranker:
    """The registered ranker called `name`; InputError naming the known ones otherwise."""
    if not isinstance(name, str) or name not in RANKERS:
        raise InputError(f"unknown model {name!r}; expected one of {', '.join(RANKERS)}")
    return RANKERS[name]


def build(name: str, index: AnyIndex | Any, **params: Any) -> Stage:
    """The stage for ranker `name` on `index` (any kind, or a path), parameters checked."""
    from retrieval.index.kinds import open_index

    entry = ranker(name)
    if params.get("filter") is not None and not isinstance(params["filter"], str):
        from retrieval.index.filters import as_filter

        given = as_filter(params["filter"])  # a Filter (or a dict of one): as its expression
        params = {**params, "filter": None if given is None else given.to_expression()}
    values = entry.resolve(params)  # before opening anything
    index = open_index(index)
    if index.kind not in entry.builders:
        raise InputError(f"{name} does not run on a {index.kind} index; it runs on "
                         f"{', '.join(entry.builders)} indexes", index.path)
    return entry.builders[index.kind](index, **values)

