"""What the search service does, without HTTP: search, rerank, ask, add, delete, describe.

One `Engine` serves one index directory. Requests take the engine's lock one
at a time (the stages are not written for concurrent calls, and two cores
gain little from it); an update holds it too, so a search sees the index
before or after an update, and the index is reopened when its manifest
changes (an update by this engine or by `retrieval add` elsewhere).

A request names no file of the server: models are the server's settings,
chosen when it starts, and a pipeline carrying a path-valued parameter
(`encoder`, `checkpoint`) or another server setting is refused whatever the
value. Its work is bounded: at most MAX_STAGES stages, every depth, hits and
cutoff within REQUEST_LIMITS, and a `deadline` checked before the lock is
taken and between stages, so a request past its time limit stops there
(TimeUp) and the lock goes to the next one.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from retrieval.analysis import token_spans
from retrieval.errors import InputError
from retrieval.experiments.config import StageSpec, build_pipeline, refuse_feedback, stage_specs
from retrieval.formats.jsonl import record_extras
from retrieval.formats.textfile import check_id, check_utf8
from retrieval.index.kinds import open_index
from retrieval.pipeline.params import PARAMS, default
from retrieval.registry import RANKERS
from retrieval.types import Document, Queries, Run

MAX_HITS = 1000
MAX_QUERY_CHARS = 2000
MAX_IDS = 10_000        # filter lists, candidates, ids to delete
MAX_DOCUMENTS = 1000    # documents per add
DOCUMENT_FIELDS = {"id", "title", "text", "metadata"}
SNIPPET_CHARS = 320
MAX_PIPELINES = 16      # built pipelines kept, least recently used dropped first
MAX_STAGES = 8          # stages per requested pipeline
MAX_DEPTH = 1000        # any stage's cutoff, hits and depth
REQUEST_LIMITS = {      # (model or "*", parameter) -> the largest value a request may give
    ("*", "hits"): MAX_DEPTH, ("*", "depth"): MAX_DEPTH, ("late", "depth"): 200,  # late encodes per hit
    ("*", "fb_docs"): 100, ("*", "fb_terms"): 100, ("*", "ef_search"): MAX_DEPTH, ("*", "nprobe"): MAX_DEPTH,
}
SERVER_SETTINGS = {"threads": "retrieval serve --threads", "precision": "retrieval serve --precision"}


class TimeUp(Exception):
    """The request's deadline passed before its work was done (the service answers 503)."""


class Unavailable(Exception):
    """The served index cannot be read now: missing, being replaced, or damaged (503)."""


class Engine:
    """An index served: opened once, reopened after updates; pipelines built once per spec.

    `late_model` is the checkpoint late-interaction stages use (requests cannot name one).
    """

    def __init__(self, path: str | Path, precision: str | None = None, threads: int = 1,
                 reader: str | Path | None = None, late_model: str | Path | None = None):
        self.path = Path(path)
        self.precision, self.threads, self.reader = precision, threads, reader
        self.late_model = late_model
        self.lock = threading.Lock()
        self.index: Any = None
        self.version: tuple = ()
        self.pipelines: OrderedDict[str, Any] = OrderedDict()
        self.qa: Any = None
        with self.lock:
            self._fresh()

    # ------------------------------------------------------------ reading

    def _fresh(self) -> Any:
        """The opened index, reopened if its manifest changed since it was opened; Unavailable if
        it is gone or cannot be opened (deleted, or being replaced, while serving)."""
        try:
            stat = os.stat(self.path / "manifest.json")
        except OSError:
            raise Unavailable(f"the index {self.path} is missing (deleted or being replaced); try again"
                              " later") from None
        version = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if version != self.version:
            if hasattr(self.index, "close"):
                self.index.close()
            self.index, self.version, self.qa = None, (), None
            self.pipelines.clear()
            try:
                self.index = open_index(self.path)
            except (InputError, OSError) as e:
                raise Unavailable(f"the index {self.path} cannot be opened now ({e}); try again"
                                  " later") from None
            self.version = version
        return self.index

    @contextlib.contextmanager
    def _locked(self, deadline: float | None) -> Iterator[Any]:
        """Hold the lock (waiting no longer than `deadline`) with the fresh index."""
        if not self.lock.acquire(timeout=-1 if deadline is None else max(0.0, deadline - time.monotonic())):
            raise TimeUp("the request waited past its time limit for the engine")
        try:
            yield self._fresh()
        finally:
            self.lock.release()

    def _built(self, specs: list[Any]) -> Any:
        """The Pipeline of stage specs for the opened index; the MAX_PIPELINES used last are kept
        (each may hold a model's impacts, and requests can name endless parameter values)."""
        specs = [self._configured(s) for s in specs]
        key = repr([(s.model, sorted(s.params.items()), s.cutoff) for s in specs])
        if key in self.pipelines:
            self.pipelines.move_to_end(key)
        else:
            self.pipelines[key] = build_pipeline(specs, self.index, self.precision)
            while len(self.pipelines) > MAX_PIPELINES:
                self.pipelines.popitem(last=False)
        return self.pipelines[key]

    def _configured(self, spec: StageSpec) -> StageSpec:
        """A requested stage with the server's own model settings (the late checkpoint)."""
        if spec.model == "late" and self.late_model is not None:
            return StageSpec(spec.model, {**spec.params, "checkpoint": str(self.late_model)}, spec.cutoff,
                             spec.where)
        return spec

    def _specs(self, pipeline: Any) -> list[StageSpec]:
        """A requested pipeline's stages, checked: no file paths or server settings, at most
        MAX_STAGES stages, every depth within REQUEST_LIMITS."""
        check_request_pipeline(pipeline)
        specs = stage_specs(pipeline, "pipeline", self.threads)
        for i, spec in enumerate(specs):
            check_limits(spec, i)
        return specs

    def search(self, query: str, pipeline: Any = "bm25", k: int = 10, include: list[str] | None = None,
               exclude: list[str] | None = None, deadline: float | None = None,
               filter: str | None = None) -> dict[str, Any]:
        """The top k for one query with highlighted snippets.

        `filter` (a metadata expression, index/filters.py) and `include` / `exclude` (doc ids)
        keep only the documents passing them. A first stage that filters inside its top k
        (sparse and dense stages on a single native index) is given them; on other indexes,
        include/exclude filter the first stage's results before any cut, the first stage being
        asked for enough results that the filtered top k (and the next stage's candidates) are
        exactly what searching only the allowed documents would give.
        """
        check_text(query, "query")
        check_count(k, "k", MAX_HITS)
        for name, ids in (("include", include), ("exclude", exclude)):
            check_ids(ids, name)
        if filter is not None:
            check_text(filter, "filter")
            from retrieval.index.filters import parse_filter

            parse_filter(filter)
        specs = self._specs(pipeline)
        refuse_feedback(specs[1:], "after the first stage (it would ignore include and exclude)")
        start = time.perf_counter()
        with self._locked(deadline) as index:
            head, rest = specs[0], specs[1:]
            needed = head.cutoff or (head.params.get("hits", default("hits")) if rest else k)
            queries = Queries({"q": query})
            first = self._filtering(index, head, needed, filter, include, exclude)
            if first is None:
                if filter is not None:
                    raise InputError("filter needs a first stage that filters (bm25, qld, qljm, multifield,"
                                     " bm25f, dense; bm25, qld, qljm on a sharded or live index)")
                first = self._built([first_stage_for(head, hits_for(index, needed, include, exclude))])
                ranking = filtered(first(queries).get("q", []), include, exclude)[:head.cutoff or None]
            else:
                ranking = first(queries).get("q", [])[:head.cutoff or None]
            if rest:
                ranking = run_stages(self._built(rest), queries, Run({"q": ranking}), deadline).get("q", [])
            results = [self._hit(index, rank, d, s, query) for rank, (d, s) in enumerate(ranking[:k], 1)]
        return {"query": query, "pipeline": pipeline, "k": k, "results": results,
                "took_ms": round(1000 * (time.perf_counter() - start), 2)}

    def _filtering(self, index: Any, head: StageSpec, needed: int, expression: str | None,
                   include: list[str] | None, exclude: list[str] | None) -> Any:
        """The first stage searching only the documents passing the filters, inside its top k
        (None when the stage or the index cannot, or there is nothing to filter)."""
        from retrieval.index.filters import Filter

        if expression is None and include is None and not exclude:
            return None
        if getattr(index, "kind", None) != "native":  # sharded and live: the filter as a parameter
            if expression is None or "filter" not in RANKERS[head.model].params:
                return None
            spec = first_stage_for(head, needed)
            params = {**spec.params, "filter": Filter(expression, include, exclude).to_expression()}
            return self._built([StageSpec(spec.model, params, None, spec.where)])
        built = self._built([first_stage_for(head, needed)])
        stage = built.stages[0] if len(built.stages) == 1 else None
        if not hasattr(stage, "with_filter"):
            return None
        return stage.with_filter(Filter(expression, include, exclude))

    def rerank(self, query: str, candidates: list[str], pipeline: Any = "late",
               k: int | None = None, deadline: float | None = None,
               filter: str | None = None) -> dict[str, Any]:
        """A posted candidate list reordered by a reranking (or rescoring) pipeline; with `filter`
        (a metadata expression, index/filters.py), the failing candidates are dropped first (a
        reranker only reorders its candidates, so every result passes and none that passes is lost)."""
        check_text(query, "query")
        check_ids(candidates, "candidates")
        if filter is not None:
            check_text(filter, "filter")
            from retrieval.index.filters import parse_filter

            parse_filter(filter)
        if not candidates:
            raise InputError("candidates must list at least one doc id")
        k = len(candidates) if k is None else k
        check_count(k, "k", MAX_IDS)
        specs = self._specs(pipeline)
        refuse_feedback(specs, "in a rerank (it would rank documents beyond the candidates)")
        start = time.perf_counter()
        with self._locked(deadline) as index:
            unknown = [d for d in candidates if not has_document(index, d)]
            if unknown:
                raise InputError(f"{len(unknown)} candidate(s) are not documents of the index (e.g."
                                 f" {unknown[0]!r})")
            kept = list(dict.fromkeys(candidates))
            if filter is not None:
                kept = passing_candidates(index, query, kept, filter)
            given = Run({"q": [(d, float(-i)) for i, d in enumerate(kept)]})
            ranking = run_stages(self._built(specs), Queries({"q": query}), given, deadline).get("q", [])[:k]
            results = [self._hit(index, rank, d, s, query) for rank, (d, s) in enumerate(ranking, 1)]
        return {"query": query, "pipeline": pipeline, "results": results,
                "took_ms": round(1000 * (time.perf_counter() - start), 2)}

    def ask(self, question: str, passages: int = 5, top: int = 3,
            deadline: float | None = None) -> dict[str, Any]:
        """Answers with their evidence (retrieve, then read); needs an index with a dense part."""
        check_text(question, "question")
        check_count(passages, "passages", 100)
        check_count(top, "top", 20)
        start = time.perf_counter()
        with self._locked(deadline) as index:
            if not index.has("dense"):
                raise InputError("questions need a passage index with a dense part (retrieval index --dense)")
            if self.qa is None:
                from retrieval.qa.pipeline import RetrieveThenRead, first_stage

                stage = first_stage(index, precision=self.precision, threads=self.threads)
                self.qa = RetrieveThenRead(stage, self.reader, index, precision=self.precision,
                                           threads=self.threads)
            check_deadline(deadline)
            self.qa.passages = passages
            answers = [a.to_json() for a in self.qa.ask(question)[:top]]
            for answer in answers:
                for e in answer["evidence"]:
                    e["passage"] = index.passage(e["passage_id"])  # what the reader read
        return {"question": question, "answers": answers,
                "took_ms": round(1000 * (time.perf_counter() - start), 2)}

    def info(self, deadline: float | None = None) -> dict[str, Any]:
        """The index's description and the pipelines the page offers for it."""
        with self._locked(deadline) as index:
            return {"index": index.describe(), "pipelines": offered_pipelines(index)}

    def _hit(self, index: Any, rank: int, doc_id: str, score: float, query: str) -> dict[str, Any]:
        text = index.text(doc_id)
        snippet, marks = highlight(text, query, index.analyzer)
        return {"rank": rank, "id": doc_id, "score": score, "snippet": snippet, "highlights": marks}

    # ------------------------------------------------------------ writing

    def add(self, documents: list[dict[str, Any]]) -> dict[str, Any]:
        """Add documents ({id, title?, text}) as a new segment."""
        from retrieval.shards.live import add_documents

        docs = parse_documents(documents)
        with self._locked(None):
            manifest = add_documents(self.path, docs, source="request", progress=False,
                                     precision=self.precision, late_model=self._late_for_updates())
            self._fresh()
        return {"added": len(docs), "documents": manifest["stats"]["documents"],
                "generation": manifest["live"]["generation"]}

    def _late_for_updates(self) -> str | Path | None:
        """The late checkpoint new documents are encoded with (only where the index has a late part)."""
        return self.late_model if self.index is not None and self.index.has("late") else None

    def delete(self, ids: list[str]) -> dict[str, Any]:
        """Mark documents deleted."""
        from retrieval.shards.live import delete_documents

        check_ids(ids, "ids")
        with self._locked(None):
            manifest = delete_documents(self.path, ids, source="request")
            self._fresh()
        return {"deleted": len(set(ids)), "documents": manifest["stats"]["documents"],
                "generation": manifest["live"]["generation"]}


# ---------------------------------------------------------------- helpers


def check_deadline(deadline: float | None) -> None:
    """TimeUp once `deadline` (a time.monotonic() value) has passed."""
    if deadline is not None and time.monotonic() >= deadline:
        raise TimeUp("the request ran past its time limit; its remaining stages were not run")


def run_stages(pipeline: Any, queries: Queries, run: Run, deadline: float | None) -> Run:
    """A built Pipeline's stages one at a time on `run`, the deadline checked before each."""
    for stage in pipeline.stages:
        check_deadline(deadline)
        run = stage(queries, run)
    return run


def check_request_pipeline(raw: Any) -> None:
    """A requested pipeline names no file and no server setting, and has at most MAX_STAGES stages.
    Checked on the request's data before anything else looks at it, so the error is the same
    whatever the value (no probing of the server's files)."""
    items = raw if isinstance(raw, list) else [raw]
    if len(items) > MAX_STAGES:
        raise InputError(f"a pipeline may have at most {MAX_STAGES} stages, got {len(items)}")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        for name in sorted(item):
            if name in PARAMS and PARAMS[name].path:
                raise InputError(f"pipeline stage {i + 1}: {name!r} would name a file of the server;"
                                 " requests cannot (models are the server's, chosen when it starts)")
            if name in SERVER_SETTINGS:
                raise InputError(f"pipeline stage {i + 1}: {name!r} is the server's setting"
                                 f" ({SERVER_SETTINGS[name]}), not a request's")


def check_limits(spec: StageSpec, i: int) -> None:
    """A stage's cutoff and counted parameters within what a request may ask (REQUEST_LIMITS)."""
    values = {**spec.params, "cutoff": spec.cutoff}
    limits = {name: most for (model, name), most in REQUEST_LIMITS.items() if model == "*"}
    limits |= {name: most for (model, name), most in REQUEST_LIMITS.items() if model == spec.model}
    limits["cutoff"] = MAX_DEPTH
    for name, most in limits.items():
        value = values.get(name)
        if isinstance(value, int) and value > most:
            raise InputError(f"pipeline stage {i + 1} ({spec.model}): {name} may be at most {most} in a"
                             f" request, got {value}")


def check_text(text: Any, name: str) -> None:
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{name} must be a non-empty string")
    if len(text) > MAX_QUERY_CHARS:
        raise InputError(f"{name} is longer than {MAX_QUERY_CHARS} characters")
    check_utf8(text, name)


def check_count(value: Any, name: str, most: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise InputError(f"{name} must be an integer from 1 to {most}, got {value!r}")


def check_ids(ids: Any, name: str) -> None:
    if ids is None:
        return
    if not isinstance(ids, list) or not all(isinstance(d, str) and d for d in ids):
        raise InputError(f"{name} must be a list of doc id strings")
    if len(ids) > MAX_IDS:
        raise InputError(f"{name} may list at most {MAX_IDS} doc ids")
    for d in ids:
        check_utf8(d, name)


def parse_documents(rows: Any) -> list[Document]:
    """Documents from request JSON: a list of {id, title (optional), text}."""
    if not isinstance(rows, list) or not rows:
        raise InputError("documents must be a non-empty list of {id, title, text}")
    if len(rows) > MAX_DOCUMENTS:
        raise InputError(f"at most {MAX_DOCUMENTS} documents per request")
    docs = []
    for i, row in enumerate(rows):
        if not (isinstance(row, dict) and isinstance(row.get("id"), str) and row["id"].strip()
                and isinstance(row.get("text"), str) and isinstance(row.get("title", ""), str)):
            raise InputError(f"documents[{i}] must be {{id: non-empty string, title: string, text: string}}")
        unknown = sorted(set(row) - DOCUMENT_FIELDS)
        if unknown:
            raise InputError(f"documents[{i}] has unknown field(s) {unknown}; expected"
                             f" {sorted(DOCUMENT_FIELDS)}")
        check_id(row["id"], f"documents[{i}].id")  # the rule of collection files (UTF-8 included)
        for key in ("title", "text"):
            check_utf8(row.get(key, ""), f"documents[{i}].{key}")
        meta = row.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise InputError(f"documents[{i}].metadata must be an object of strings, numbers and lists"
                             " of strings")
        _, meta = record_extras({"metadata": meta or {}}, (), f"documents[{i}].metadata")
        docs.append(Document(row["id"], row.get("title", ""), row["text"], None, meta))
    return docs


def first_stage_for(spec: StageSpec, hits: int) -> StageSpec:
    """The first stage's spec asking for `hits` results, without its cut (applied after filtering)."""
    if "hits" not in RANKERS[spec.model].params:
        raise InputError(f"{spec.model} cannot start a pipeline (it reranks a run); put a first stage"
                         " such as bm25 before it")
    return StageSpec(spec.model, {**spec.params, "hits": hits}, None, spec.where)


def hits_for(index: Any, needed: int, include: list[str] | None, exclude: list[str] | None) -> int:
    """How many results the first stage must return so that `needed` remain after filtering:
    every document for an include list, else `needed` plus the excluded ones."""
    if include is not None:
        return max(1, int(index.statistics["documents"]))
    return needed + len(set(exclude or []))


def passing_candidates(index: Any, query: str, candidates: list[str], expression: str) -> list[str]:
    """The candidates passing a filter, in their order, on any index kind: a filtered BM25
    rescorer given the candidates drops exactly the failing ones (native, sharded and live)."""
    from retrieval.registry import build

    rescored = build("bm25", index, filter=expression)(Queries({"q": query}),
                                                        Run({"q": [(d, 0.0) for d in candidates]}))
    passing = {d for d, _ in rescored.get("q", [])}
    return [d for d in candidates if d in passing]


def filtered(ranking: Any, include: list[str] | None, exclude: list[str] | None) -> list:
    keep, drop = (set(include) if include is not None else None), set(exclude or [])
    return [(d, s) for d, s in ranking if d not in drop and (keep is None or d in keep)]


def has_document(index: Any, doc_id: str) -> bool:
    try:
        index.text(doc_id)
    except InputError:
        return False
    return True


def highlight(text: str, query: str, analyzer: Any) -> tuple[str, list[list[int]]]:
    """A snippet of `text` around the first query term, and the [start, end) of each query-term
    token in it (tokens whose analysed form is a query term)."""
    terms = set(analyzer(query)) if analyzer is not None else set(query.lower().split())
    hits = [(a, b) for a, b, token in token_spans(text)
            if (set(analyzer(token)) if analyzer is not None else {token.lower()}) & terms]
    start = max(0, hits[0][0] - SNIPPET_CHARS // 4) if hits else 0
    while 0 < start < len(text) and not text[start - 1].isspace():
        start += 1  # begin at a word
    end = min(len(text), start + SNIPPET_CHARS)
    marks = [[a - start, b - start] for a, b in hits if a >= start and b <= end]
    return text[start:end], marks


def offered_pipelines(index: Any) -> list[dict[str, Any]]:
    """The pipelines the search page lists for this index (any registered one can be posted)."""
    out = [{"name": "BM25", "pipeline": "bm25"},
           {"name": "Query likelihood (Dirichlet)", "pipeline": "qld"},
           {"name": "BM25 + RM3", "pipeline": [{"model": "bm25", "rm3": True}]}]
    if index.has("dense"):
        out += [{"name": "Dense", "pipeline": "dense"}, {"name": "Hybrid", "pipeline": "hybrid"}]
    if index.has("late"):
        out += [{"name": "BM25 >> late interaction", "pipeline": [{"model": "bm25", "cutoff": 100}, "late"]}]
    return out
