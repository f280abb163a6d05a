"""Every model parameter, declared once: type, default, allowed range and help.

The ranker registry (retrieval/registry.py) says which of these each ranker takes; the
CLI flags, the YAML schema and the range checks are all generated from this
table, and the stage classes take their defaults from it. A value out of
range would otherwise give NaN or infinite scores (`mu 0`), silently wrong
rankings (`b 2`) or a crash deep in a library, so every way in (CLI, YAML,
API) gets the same one-line error from `check`.

One vocabulary: `hits` is how many results a stage returns, `depth` how many
of its input it looks at, `rrf_k` the reciprocal-rank constant, `passages`
how many passages a reader reads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from retrieval.errors import InputError
from retrieval.runtime import precision as precisions


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _at_least(low: float) -> Callable[[Any], bool]:
    return lambda v: _number(v) and v >= low


def _above(low: float) -> Callable[[Any], bool]:
    return lambda v: _number(v) and v > low


def _within(low: float, high: float) -> Callable[[Any], bool]:
    return lambda v: _number(v) and low <= v <= high


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


@dataclass(frozen=True)
class Param:
    """One parameter: its type, default, allowed values and one line of help."""

    name: str
    type: type
    default: Any
    help: str
    test: Callable[[Any], bool] | None = None
    expected: str = ""
    choices: tuple[str, ...] = ()
    keyed: bool = True  # False: does not change results (left out of cache keys)
    path: bool = False  # names a file or directory (never taken from a service request)

    @property
    def flag(self) -> str:
        """The CLI flag, e.g. --fb-docs."""
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any) -> None:
        """InputError unless `value` has the right type and range (None means "the default")."""
        if value is None:
            return
        if self.choices and value not in self.choices:
            raise InputError(f"{self.name} must be one of {', '.join(self.choices)}, got {value!r}")
        kinds = {bool: (bool,), str: (str,), int: (int,), float: (int, float)}[self.type]
        if not isinstance(value, kinds) or (isinstance(value, bool) and self.type is not bool):
            raise InputError(f"{self.name} must be {self.type.__name__}, got {value!r}")
        if self.test is not None and not self.test(value):
            raise InputError(f"{self.name} must be {self.expected}, got {value!r}")


def _real(name: str, default: float | None, help: str, test: Callable[[Any], bool],
          expected: str) -> Param:
    return Param(name, float, default, help, test, expected)


def _weight(name: str, default: float | None, help: str) -> Param:
    return Param(name, float, default, help, _within(0.0, 1.0), "a number in [0, 1]")


def _counter(name: str, default: int | None, help: str, keyed: bool = True) -> Param:
    return Param(name, int, default, help, _count, "a whole number >= 1", keyed=keyed)


PRECISIONS = (precisions.AUTO, *precisions.ENCODER_PRECISIONS)
# The late-interaction reranker's defaults (registry and LateReranker), per kind of first stage: it reranks
# a run's top `depth` and fuses W * minmax(first stage) + (1 - W) * minmax(MaxSim), W = `interpolate`
# (fusion "interpolate"; "rrf": reciprocal-rank fusion of the two rankings, W unused); the hits below the
# depth follow in their order; weight 1.0 keeps the first stage's run unchanged. "hybrid" applies after a
# fused first stage (BM25 + dense, `hybrid`: any stage whose class sets `fused`), "bm25" after any other
# stage or a run file. Each chosen with the shipped checkpoint by the guarded rule (retrieval.late.choice:
# a fused setting only if it beats the first stage by a one-sided paired t-test at 0.05 / 110 on the
# pooled held-out topics of the bundled judged collections, never SciFact test; else weight 1.0):
# eval/bench_neural.py, its 2026-11-28 guarded run (eval/results/neural.md): pooled objective 0.5888
# against BM25's 0.5211 (p 1e-05), 0.5795 against the hybrid's 0.5639 (the one hybrid setting of 110 that
# passed); docs/design/late-interaction.md.
LATE_DEFAULTS: dict[str, dict[str, Any]] = {
    "bm25": {"fusion": "interpolate", "interpolate": 0.1, "depth": 100},
    "hybrid": {"fusion": "interpolate", "interpolate": 0.7, "depth": 50},
}
FIRST_STAGES = tuple(LATE_DEFAULTS)
RERANK_DEPTH = LATE_DEFAULTS["bm25"]["depth"]
LATE_WEIGHT = LATE_DEFAULTS["bm25"]["interpolate"]

PARAMS: dict[str, Param] = {p.name: p for p in (
    _counter("hits", 1000, "results per query"),
    _counter("depth", None, "input hits per query the stage looks at"),
    _counter("threads", 1, "threads", keyed=False),
    _real("k1", 0.9, "BM25 k1 (at most 1000: far larger values overflow the formula)",
          _within(0.0, 1000.0), "a number from 0 to 1000"),
    _weight("b", 0.4, "BM25 b"),
    _real("mu", 1000.0, "Dirichlet mu", _above(0.0), "a finite number > 0"),
    _real("lam", 0.1, "Jelinek-Mercer lambda, weight of the collection model",
          lambda v: _number(v) and 0.0 < v < 1.0, "a number in (0, 1)"),
    Param("field_weights", str, None, "fielded rankers: weight of each field, e.g. title=1.5,text=1 "
          "(default 1 for every field of the index)"),
    Param("field_b", str, None, "BM25F: b of each field, e.g. title=0.3,text=0.75 (default: b)"),
    Param("filter", str, None, "keep only documents whose metadata pass this filter, inside the top k, "
          "e.g. 'year >= 1990 and venue in [\"CACM\", \"JACM\"]' (docs/design/fields-and-filters.md)"),
    Param("rm3", bool, False, "add RM3 pseudo-relevance feedback"),
    _counter("fb_docs", 10, "RM3 feedback documents"),
    _counter("fb_terms", 10, "RM3 feedback terms"),
    _weight("original_weight", 0.5, "RM3 weight of the original query"),
    _real("alpha", 1.0, "Rocchio: weight of the original query", _at_least(0.0), "a finite number >= 0"),
    _real("beta", 0.75, "Rocchio: weight of the (pseudo-)relevant documents' centroid", _at_least(0.0),
          "a finite number >= 0"),
    _real("gamma", 0.0, "Rocchio: weight of the non-relevant documents' centroid (pseudo: the first"
          " ranking's last fb_docs; with qrels: the judged non-relevant of the top fb_docs)",
          _at_least(0.0), "a finite number >= 0"),
    Param("qrels", str, None, "Rocchio: explicit feedback from these judgements (collection name,"
          " NAME:split or a file): the judged documents among the first ranking's top fb_docs",
          path=True),
    Param("feature_set", str, "all", "features: which scorers (all: those the index has parts for; or"
          " names joined by '+' from bm25, qld, qljm, rm3, dense, late)"),
    Param("cache", str, None, "features: a directory keeping computed features, one LETOR file per"
          " index, queries, candidates and feature set", path=True, keyed=False),
    _weight("weight", 0.5, "weight of normalised BM25 against dense"),
    Param("fusion", str, "interpolate", "min-max interpolation or reciprocal-rank fusion",
          choices=("interpolate", "rrf")),
    _counter("rrf_k", 60, "reciprocal-rank fusion constant k in 1 / (k + rank)"),
    Param("encoder", str, None, "local Hugging Face model directory (default: the index's model)", path=True),
    Param("precision", str, "auto", "how a neural stage computes on this machine (auto: the fastest "
          "path on this CPU within the model's loss limit of fp32; retrieval/runtime/precision.py)",
          choices=PRECISIONS),
    _counter("ef_search", None, "HNSW: ef at search time (default: the index's, set when it was built)"),
    _counter("nprobe", None, "IVF-PQ: lists probed (default: the index's, set when it was built)"),
    Param("checkpoint", str, None, "late: zero-shot or a checkpoint .safetensors (default: the "
          "committed checkpoint); features: the late feature's, the same; ltr: the trained model's"
          " directory", path=True),
    _weight("interpolate", LATE_WEIGHT, "score = W * minmax(first stage) + (1 - W) * minmax(MaxSim) "
            "over the top `depth` (0: MaxSim only; default chosen on validation per first stage)"),
    Param("first_stage", str, None, "late: the kind of first stage whose validated defaults (interpolate,"
          " depth, fusion) apply (default: hybrid after a fused stage in a pipeline, else bm25)",
          choices=FIRST_STAGES),
    _counter("passages", 5, "passages read per question"),
    _real("temperature", 0.05, "p(z|x) softmax temperature", _above(0.0), "a finite number > 0"),
    _real("bm25_weight", 0.0, "passage score = cos + W * BM25", _at_least(0.0), "a finite number >= 0"),
    _counter("top", 5, "answers shown per question"),
)}


def default(name: str) -> Any:
    """The declared default of a parameter (what a stage uses when not told otherwise)."""
    return PARAMS[name].default


def check(**values: Any) -> None:
    """Raise InputError for the first value outside its declared range (None means "the default")."""
    for name, value in values.items():
        if name in PARAMS:
            PARAMS[name].check(value)


def check_run(run: Any, queries: Mapping[str, str] | None = None) -> None:
    """A stage's input run: None (first stage) or a retrieval.types.Run; given `queries`, one whose
    every query has its text there. The one policy for queries without text, which every stage that
    uses a given run applies: such a run is refused (InputError naming the query ids), never
    reranked in part with the others dropped or passed on unranked."""
    from retrieval.types import Run

    if run is not None and not isinstance(run, Run):
        raise InputError(f"run must be a Run (e.g. from read_run or a first stage), got {type(run).__name__}")
    missing = [q for q in run if q not in queries] if run is not None and queries is not None else []
    if missing:
        shown = ", ".join(repr(q) for q in missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise InputError(f"the run has {len(missing)} quer{'y' if len(missing) == 1 else 'ies'} with no query"
                         f" text ({shown}); give their text (topics) or drop them from the run")


def check_queries(queries: Any) -> None:
    """Queries are a mapping of query id -> text (retrieval.types.Queries or a dict)."""
    if not isinstance(queries, Mapping):
        raise InputError("queries must be a Queries or dict of {query id: text}, got"
                         f" {type(queries).__name__}")
    for qid, text in queries.items():
        if not isinstance(qid, str) or not isinstance(text, str):
            raise InputError(f"queries must map query id strings to text strings, got {qid!r}:"
                             f" {type(text).__name__}")
