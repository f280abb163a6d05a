"""Evaluation through ir-measures (which runs trec_eval's own code).

Measures are named as ir-measures names them ("AP", "nDCG@10", "P@30",
"R@100", "RR", "nDCG(dcg='exp-log2')@10", "ERR@20"), or given as ir-measures
objects (`ir_measures.nDCG@10`); "MAP" and "MRR" are accepted as aliases, and
trec_eval's names ("map", "ndcg_cut_10", "P_30", "recip_rank", "recall_100",
"bpref", "iprec_at_recall_0.10", ...) as the ir-measures measure they name. A
measure no installed provider computes is refused in one line that says which
package would.

Every judged query counts: a query in the qrels that the run answers with
nothing scores 0 on every measure (trec_eval's -c), so a system that fails on
hard queries is not flattered by leaving them out of its mean or out of the
paired tests. `only_answered=True` gives trec_eval's default instead (means
over the judged queries the run answers).

RBP (`RBP(p=0.8)`, `RBP(p=0.5,rel=2)@100`) and its residual (`RBPres(p=0.8)`) are
computed by rbp.py, which no installed provider does; every other measure by
ir-measures' providers.

ERR and nDCG(dcg='exp-log2') come only from gdeval (a Perl script) which reads
numeric query ids and grades 0..4: query ids are numbered for it and the
figures given back under the real ids; a grade above 4 is refused.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence

import ir_measures

from retrieval.errors import InputError
from retrieval.evaluation import rbp
from retrieval.types import Qrels, Run, natural_key

ALIASES = {"MAP": "AP", "MRR": "RR", "map": "AP", "mrr": "RR", "ndcg": "nDCG"}
GDEVAL_MAX_GRADE = 4  # gdeval.pl's MAX_JUDGMENT
# a measure's name in a list: anything up to a comma or blank that is not inside (...) or quotes
_NAME = re.compile(r"""(?:[^\s,('"]|\([^)]*\)|'[^']*'|"[^"]*")+""")


def split_names(text: str) -> list[str]:
    """Measure names in a string, separated by commas or blanks outside parentheses and quotes
    (`"MAP, nDCG(dcg='exp-log2',judged_only=False)@10 P@30"` is three names)."""
    return _NAME.findall(text)


def parse_measures(names: str | object | Iterable[str | object]) -> list[tuple[str, object]]:
    """[(name as the user wrote it, ir-measures measure)], in order, each checked to be computable.

    `names`: a string of names, an ir-measures measure, or a list of either."""
    if isinstance(names, str):
        names = split_names(names)
    elif isinstance(names, ir_measures.Measure):
        names = [names]
    if not isinstance(names, Iterable) or not all(isinstance(n, (str, ir_measures.Measure)) for n in names):
        raise InputError(f"measures must be names such as 'MAP' or 'nDCG@10' or ir-measures objects,"
                         f" got {names!r}")
    parsed = []
    for item in names:
        name, measure = (str(item), item) if isinstance(item, ir_measures.Measure) else (item, _parse(item))
        _check_params(name, measure)
        _check_computable(name, measure)
        parsed.append((name, measure))
    if not parsed:
        raise InputError("no measures given")
    return parsed


def _parse(name: str) -> object:
    """The ir-measures measure a name stands for: an ir-measures name (or alias), else trec_eval's."""
    base, sep, cutoff = name.partition("@")
    try:
        return ir_measures.parse_measure(ALIASES.get(base, base) + sep + cutoff)
    except Exception:  # ir-measures raises many kinds (ValueError, NameError, TypeError, ...)
        pass
    try:
        measures = ir_measures.parse_trec_measure(name)
    except ValueError as e:
        if "not yet supported" in str(e):
            raise InputError(f"measure {name!r}: trec_eval's {name} has no ir-measures counterpart;"
                             " expected e.g. map, ndcg_cut_10, P_30, recip_rank, recall_100") from None
        measures = []
    except Exception:
        measures = []
    if len(measures) == 1:
        return measures[0]
    if len(measures) > 1:
        raise InputError(f"measure {name!r} stands for {len(measures)} measures"
                         f" ({', '.join(map(str, measures[:4]))}, ...); name one, e.g. {measures[1]}")
    raise InputError(f"unknown measure {name!r}; expected e.g. MAP, nDCG@10, P@30, R@100, MRR,"
                     " nDCG(dcg='exp-log2')@10, or trec_eval's map, ndcg_cut_10, P_30") from None


def _check_params(name: str, measure: object) -> None:
    """The measure's parameters against its own declaration (names, types, choices, required ones),
    cutoffs and relevance levels integers (cutoff >= 1), numbers finite: trec_eval aborts the process
    on a cutoff of 0 and fails on fractions."""
    declared, given = measure.SUPPORTED_PARAMS, getattr(measure, "params", {})
    for key in given.keys() - declared.keys():
        raise InputError(f"measure {name!r} takes no parameter {key!r}; it takes {', '.join(declared)}")
    for key, info in declared.items():
        if key not in given:
            if info.required:
                raise InputError(f"measure {name!r} needs the parameter {key} ({info.desc or 'no default'})")
            continue
        value = given[key]
        if key == "cutoff" and measure.AT_PARAM == "cutoff":
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
            expected = "a whole number >= 1"
        elif key == "rel":
            ok = isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**31
            expected = "a whole number"
        elif info.validate(value):
            ok, expected = not isinstance(value, float) or math.isfinite(value), "a finite number"
        else:
            choices = getattr(info, "choices", None)
            ok, expected = False, (f"one of {', '.join(map(repr, choices))}" if isinstance(choices, list)
                                   else f"a {getattr(info.dtype, '__name__', info.dtype)}")
        if not ok:
            raise InputError(f"measure {name!r}: {key} must be {expected}, got {value!r}")


def providers(measure: object) -> list[object]:
    """The ir-measures providers that support the measure, the one used first."""
    found = []
    for provider in ir_measures.DefaultPipeline.providers:
        try:
            if provider.supports(measure):
                found.append(provider)
        except Exception:  # a provider's own parameter check failing: it does not support it
            continue
    return found


def _check_computable(name: str, measure: object) -> None:
    """InputError in one line unless an installed provider computes the measure (naming the package
    that would, when one would)."""
    if rbp.is_local(measure):
        reason = rbp.check(measure)
        if reason:
            raise InputError(f"measure {name!r}: {reason}")
        return
    supporting = providers(measure)
    if not supporting:
        raise InputError(f"measure {name!r}: no ir-measures provider computes it")
    if not any(p.is_available() for p in supporting):
        how = "; ".join(f"{p.NAME}: {p.install_instructions()}" for p in supporting)
        raise InputError(f"measure {name!r} needs a provider that is not installed ({how})")
    try:
        _aggregate([measure], Qrels({"1": {"d": 1}}), Run({"1": [("d", 1.0)]}))
    except InputError:
        raise
    except Exception as e:  # the provider fails on the simplest input
        reason = str(e).splitlines()[0][:80] if str(e) else type(e).__name__
        raise InputError(f"measure {name!r} cannot be computed here ({reason})") from None


def _gdeval(measures: Iterable[object]) -> bool:
    """Whether any measure is computed by gdeval (the first available provider supporting it)."""
    for measure in measures:
        available = [p for p in providers(measure) if p.is_available()]
        if available and available[0].NAME == "gdeval":
            return True
    return False


def _numbered(measures: Sequence[object], qrels: Qrels, run: Run
              ) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]], dict[str, str]]:
    """The qrels and the run's scores as ir-measures reads them, and {id given to it: query id}:
    query ids numbered 1, 2, ... (natural order) where gdeval computes a measure, which reads
    numeric ids only (and grades up to 4); unchanged otherwise."""
    scores = run.scores()
    if not _gdeval(measures):
        return qrels, scores, {q: q for q in set(qrels) | set(scores)}
    for q, judged in qrels.items():
        for d, grade in judged.items():
            if grade > GDEVAL_MAX_GRADE:
                raise InputError(f"ERR and nDCG(dcg='exp-log2') come from gdeval, which takes grades up to"
                                 f" {GDEVAL_MAX_GRADE}; query {q!r} grades {d!r} {grade}")
    number = {q: str(i) for i, q in enumerate(sorted(set(qrels) | set(scores), key=natural_key), 1)}
    return ({number[q]: j for q, j in qrels.items()}, {number[q]: s for q, s in scores.items()},
            {n: q for q, n in number.items()})


def _aggregate(measures: Sequence[object], qrels: Qrels, run: Run) -> dict[object, float]:
    """ir-measures' means of the measures (over the judged queries the run answers); RBP's from rbp.py."""
    local = [m for m in measures if rbp.is_local(m)]
    others = [m for m in measures if not rbp.is_local(m)]
    means: dict[object, float] = {}
    if others:
        judged, scores, _ = _numbered(others, qrels, run)
        means |= ir_measures.calc_aggregate(others, judged, scores)
    for measure in local:
        values = rbp.per_query(measure, qrels, _rankings(run))
        means[measure] = sum(values.values()) / len(values) if values else 0.0
    return means


def _rankings(run: Run) -> dict[str, list[str]]:
    """Each query's doc ids in the run's order (score descending, ties by doc id)."""
    return {q: [d for d, _ in hits] for q, hits in run.items()}


def _each_query(measures: Sequence[object], qrels: Qrels, run: Run) -> Iterable[tuple[str, object, float]]:
    """(query id, measure, value) for every judged query the run answers."""
    others = [m for m in measures if not rbp.is_local(m)]
    if others:
        judged, scores, query_id = _numbered(others, qrels, run)
        for metric in ir_measures.iter_calc(others, judged, scores):
            yield query_id[metric.query_id], metric.measure, float(metric.value)
    for measure in (m for m in measures if rbp.is_local(m)):
        for qid, value in rbp.per_query(measure, qrels, _rankings(run)).items():
            yield qid, measure, value


def _judged(run: Run, qrels: Qrels, only_answered: bool) -> tuple[Qrels, list[str]]:
    """The judgements to score the run against, and the judged queries it leaves unanswered."""
    if not isinstance(run, Run):
        raise InputError(f"expected a Run to evaluate (e.g. from read_run), got {type(run).__name__}")
    if not isinstance(qrels, Mapping) or not all(isinstance(j, Mapping) for j in qrels.values()):
        raise InputError("expected qrels as {query id: {doc id: relevance}} (e.g. from read_qrels),"
                         f" got {type(qrels).__name__}")
    for q, judged in qrels.items():
        for d, grade in judged.items():
            if not isinstance(d, str) or type(grade) is not int:  # what pytrec_eval takes
                raise InputError(f"qrels of query {q!r}: expected a doc id string and an int"
                                 f" grade, got {d!r}: {grade!r}")
    answered = Qrels({q: j for q, j in qrels.items() if run.get(q)})
    if not answered:
        raise InputError("the run and the qrels share no query ids; wrong qrels for this run?")
    unanswered = [] if only_answered else [q for q in qrels if q not in answered]
    return answered, unanswered


def evaluate(run: Run, qrels: Qrels, measures: str | object | Sequence[str | object],
             only_answered: bool = False) -> dict[str, float]:
    """Mean of each measure over every judged query (0 where the run has no hits), or with
    `only_answered` over the judged queries the run answers (trec_eval without -c)."""
    answered, unanswered = _judged(run, qrels, only_answered)
    parsed = parse_measures(measures)
    if not unanswered:
        values = _aggregate([m for _, m in parsed], answered, run)
        return {name: float(values[m]) for name, m in parsed}
    sums: Counter[str] = Counter()
    for values in _per_query(run, answered, unanswered, parsed).values():
        sums.update(values)
    total = len(answered) + len(unanswered)
    return {name: sums[name] / total for name, _ in parsed}


def per_query(run: Run, qrels: Qrels, measures: str | object | Sequence[str | object],
              only_answered: bool = False) -> dict[str, dict[str, float]]:
    """{query id: {measure: value}} for every judged query (0 for those the run does not
    answer), or with `only_answered` for the judged queries the run answers."""
    answered, unanswered = _judged(run, qrels, only_answered)
    return _per_query(run, answered, unanswered, parse_measures(measures))


def _per_query(run: Run, answered: Qrels, unanswered: list[str],
               parsed: list[tuple[str, object]]) -> dict[str, dict[str, float]]:
    """Each query's values, in natural query id order; 0 for the unanswered ones (RBPres 1), and 0 for
    any value a provider leaves out, as gdeval does for a query without a relevant document."""
    values: dict[tuple[str, object], float] = {}
    for qid, measure, value in _each_query(list(dict.fromkeys(m for _, m in parsed)), answered, run):
        values[qid, measure] = value
    for q in unanswered:  # nothing retrieved: 0, but RBP's residual is then all of RBP's weight
        values.update({(q, m): rbp.unanswered(m) for _, m in parsed})
    queries = sorted([*answered, *unanswered], key=natural_key)
    return {q: {name: values.get((q, m), 0.0) for name, m in parsed} for q in queries}


# ---------------------------------------------------------------- what a comparison should know

def run_depth(run: Run) -> int:
    """The most hits the run gives any one query (how deep it ranks)."""
    return max((len(hits) for hits in run.values()), default=0)


def looks_past(measure: object, depth: int) -> bool:
    """Whether the measure's value depends on documents ranked below `depth`: any measure without a
    rank cutoff (AP, nDCG, RR, R-prec, IPrec, ...), or one whose cutoff is deeper."""
    cutoff = measure.params.get("cutoff") if measure.AT_PARAM == "cutoff" else None
    return cutoff is None or cutoff > depth


def depth_differences(depths: Mapping[str, int], baseline: str,
                      measures: str | Sequence[str | object]) -> dict[str, list[str]]:
    """{system: the measures on which it and the baseline are compared at different depths}: systems
    ranking to another depth than the baseline, on measures that look past the shallower of the two
    (a reranked run cut at 100 against a 1000-deep baseline differs on MAP for that reason alone)."""
    parsed = parse_measures(measures)
    out = {}
    for system, depth in depths.items():
        if system != baseline and baseline in depths and depth != depths[baseline]:
            names = [name for name, m in parsed if looks_past(m, min(depth, depths[baseline]))]
            if names:
                out[system] = names
    return out


def depth_warning(system: str, depth: int, baseline: str, baseline_depth: int, names: Sequence[str]) -> str:
    """The one-line warning for a comparison at different depths."""
    shallower = min(depth, baseline_depth)
    deeper = baseline if baseline_depth > depth else system
    verb = "counts" if len(names) == 1 else "count"
    return (f"{system} ranks at most {depth} documents per query and the baseline {baseline}"
            f" {baseline_depth}: {', '.join(names)} {verb} documents below rank {shallower} for {deeper}"
            f" only, so the difference is partly one of depth (cut both runs to {shallower} to compare"
            " like with like)")


def missing_judgements(qrels: Qrels, doc_ids: Collection[str]) -> tuple[int, int, int, list[str]]:
    """(judgements naming a document not in `doc_ids`, of them relevant ones, all judgements, the
    first such doc ids): judged documents no run over this collection can retrieve."""
    missing = [(d, grade) for judged in qrels.values() for d, grade in judged.items() if d not in doc_ids]
    total = sum(len(judged) for judged in qrels.values())
    examples = list(dict.fromkeys(d for d, _ in missing))
    return len(missing), sum(grade > 0 for _, grade in missing), total, examples


def missing_warning(qrels: Qrels, doc_ids: Collection[str]) -> str | None:
    """A one-line warning with the count when the qrels judge documents absent from the collection."""
    missing, relevant, total, examples = missing_judgements(qrels, doc_ids)
    if not missing:
        return None
    shown = ", ".join(examples[:3])
    return (f"{missing} of the qrels' {total} judgements ({relevant} relevant) name documents that are not in"
            f" the collection (e.g. {shown}); no run can retrieve them, so every system's recall is capped")
