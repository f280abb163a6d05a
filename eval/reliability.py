"""Reliability cases shared by the tests and the summary table (eval/results/reliability.md).

Every reader gets malformed input from hypothesis (random bytes, token soup and
mutations of a valid sample: truncation, deleted/duplicated slices, inserted tags,
fields, invalid UTF-8 and NUL bytes). The only outcomes allowed are a parse
result of the right type or an `InputError` whose message names the file;
anything else is a bug ("other"). Then: writes killed mid-way (crash_cases.py), stored files
damaged, hostile use of the commands (hostile_fs.py, hostile_values.py, hostile_paths.py) and of
the service (hostile_service.py), and a full disk (full_disk.py).

    python eval/reliability.py [--examples N]     # regenerates eval/results/reliability.md

The tests (tests/test_reliability_*.py) import this module and run the same
generators with fewer examples; this script runs more, with a fixed seed.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "eval"):  # the package, and crash_cases beside this script
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import crash_cases  # noqa: E402

from retrieval.errors import InputError  # noqa: E402
from retrieval.formats import html, jsonl, read_documents, read_topics, smart, trec  # noqa: E402
from retrieval.types import Document, Qrels, Queries, Run  # noqa: E402

RESULTS = ROOT / "eval" / "results" / "reliability.md"

# ---------------------------------------------------------------- valid samples

TREC_DOCS = b"""<DOC>
<DOCNO> D1 </DOCNO>
<TITLE>Cats</TITLE>
<TEXT>The cat sat on the mat.</TEXT>
</DOC>
<DOC>
<DOCNO>D2</DOCNO>
<TEXT>Dogs chase cats &amp; birds.</TEXT>
</DOC>
"""
TREC_TOPICS_TOP = b"""<top>
<num> Number: 401
<title> foreign minorities, Germany
<desc> Description:
What language and cultural differences impede the integration?
<narr> Narrative:
A relevant document will focus on the causes.
</top>
<top>
<num> Number: 402 <title> behavioral genetics
<desc> What is happening in the field?
</top>
"""
TREC_TOPICS_DOC = b"""<DOC>
<DOCNO> 1 </DOCNO>
 What articles exist which deal with TSS (Time Sharing System)?
</DOC>
<DOC>
<DOCNO> 2 </DOCNO>
 I am interested in articles written by Prieve or Udo Pooch
</DOC>
"""
TSV_TOPICS = b"1\twhat is information retrieval\n2\tbm25 ranking function\n"
QRELS_TREC = b"1 0 CACM-1410 1\n1 0 CACM-1572 1\n2 0 CACM-2434 2\n3 0 CACM-1 0\n"
QRELS_BEIR = b"query-id\tcorpus-id\tscore\n1\t31715818\t1\n3\t14717500\t1\n5\t13734012\t2\n"
RUN = (b"1 Q0 CACM-1410 1 12.5 bm25\n1 Q0 CACM-1572 2 11.25 bm25\n"
       b"2 Q0 CACM-2434 1 3.0e1 bm25\n2 Q0 CACM-1 2 -1.5 bm25\n")
BEIR_CORPUS = (b'{"_id": "d1", "title": "Cats", "text": "The cat sat on the mat."}\n'
               b'{"_id": 2, "title": "", "text": "Dogs chase cats."}\n'
               b'{"_id": "d3", "text": "no title here \\u00e9"}\n')
ANSERINI_JSON = (b'{"id": "doc1", "contents": "The cat sat on the mat."}\n'
                 b'{"id": 2, "contents": "Dogs chase cats \\u00e9", "url": "http://x"}\n')
ANSERINI_ARRAY = (b'[\n {"id": "doc1", "contents": "The cat sat on the mat."},\n'
                  b' {"_id": 2, "title": "Dogs", "text": "chase cats \\u00e9"}\n]\n')
BEIR_QUERIES = (b'{"_id": "1", "text": "0-dimensional biomaterials show inductive properties."}\n'
                b'{"_id": "3", "text": "1,000 genes are expressed", "metadata": {}}\n')
SMART_DOCS = b""".I 1
.T
experimental investigation of the aerodynamics of a
wing in a slipstream .
.A
brenckman,m.
.B
j. ae. scs. 25, 1958, 324.
.W
experimental investigation of the aerodynamics of a
wing in a slipstream .
.I 2
.T
simple shear flow past a flat plate
.W
simple shear flow past a flat plate in an incompressible fluid .
"""
SMART_QUERIES = b""".I 001
.W
what similarity laws must be obeyed when constructing aeroelastic models
of heated high speed aircraft .
.I 002
.W
what are the structural and aeroelastic problems associated with flight
"""
CRANFIELD_QRELS = b"1 184 2\n1 29 2\n1 31 2\n2 12 3\n2 15 -1\n"
HTML_DOC = b"""<html><head><title>CACM-0001 Preliminary Report</title>
<style>p {color: red}</style><script>var x = "<p>";</script></head>
<body><pre>Preliminary Report-International Algebraic Language &amp; more &#233;
<b>CACM December, 1958</b></pre></body></html>
"""
SQUAD = json.dumps({"version": "v2.0", "data": [{"title": "T", "paragraphs": [
    {"context": "The cat sat on the mat.", "qas": [
        {"id": "q1", "question": "Where did the cat sit?",
         "answers": [{"text": "the mat", "answer_start": 15}]},
        {"id": "q2", "question": "Who?", "answers": [], "is_impossible": True}]}]}]}).encode()
CONFIG = b"""name: fuzz
collection: cacm
index: {path: indexes/fuzz, stopwords: true, stemmer: porter, dense: false}
threads: 1
measures: [MAP, P@30, nDCG@10]
baseline: bm25
pipelines:
  bm25: {model: bm25, k1: 0.9, b: 0.4}
  qld: {model: qld, mu: 1000}
  bm25>>qld:
    - {model: bm25, cutoff: 100}
    - qld
sweeps:
  tuned:
    pipeline: bm25
    grid: {k1: [0.6, 0.9], b: [0.3, 0.4]}
    measure: MAP
    select_on: folds
"""

# Tokens the mutations insert: the structure every format relies on, and bytes that break text.
TOKENS = [b"<DOC>", b"</DOC>", b"<DOCNO>", b"</DOCNO>", b"<top>", b"</top>", b"<num>", b"<title>",
          b"<desc>", b"<narr>", b"<TEXT>", b"</TEXT>", b"<", b">", b".I", b".I ", b".W", b".T", b".A",
          b"\n.I 7\n", b"\n.W\n", b"\t", b"\n", b" ", b"{", b"}", b"[", b"]", b'"_id"', b'"text"',
          b'"title"', b":", b",", b'"', b"null", b"1e309", b"NaN", b"-", b"0", b"Q0", b"query-id",
          b"corpus-id", b"\x00", b"\xff", b"\xc3", b"\xe9", b"\xef\xbb\xbf", b"\r", b"\r\n", b"\\",
          b"&amp;", b"&#", b"<!--", b"<script>", b"]]>", b"- ", b"? ", b"*a", b"&a ",
          b"!!python/object:os.system",
          b"model:", b"pipelines:", b"  ", b"---", b"%YAML 1.1\n", b"!!binary", b"\x85", "\u2028".encode(),
          "\u00b2".encode(), "\u0663".encode(), "\uff11".encode()]

# Hand-picked bad files, tried against every reader.
HAND_PICKED = {
    "empty": b"",
    "blank": b"\n\n  \n",
    "invalid-utf8": b"\xff\xfe garbage",
    "nul": b"ok\x00ok",
    "bom-only": b"\xef\xbb\xbf",
    "deep-json": b'{"_id": "x", "text": "t", "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
    "deep-yaml-flow": b"name: x\ncollection: cacm\nindex: " + b"[" * 20_000 + b"]" * 20_000 + b"\n",
    "deep-yaml-block": b"".join(b"  " * i + b"a:\n" for i in range(2000)),
    "deep-html": b"<div>" * 50_000 + b"text",
    "long-line": b"x" * 2_000_000,
    "unicode-digits": ".I \u00b2\n.W\nquery\n1 2 \u00b2\n".encode(),
    "crlf": b"<DOC>\r\n<DOCNO>1</DOCNO>\r\ntext\r\n</DOC>\r\n",
}
# Known failures in code this suite may not change (reported, kept visible).
KNOWN_BUGS: dict[tuple[str, str], str] = {}  # (reader, case) -> why; none open

# ---------------------------------------------------------------- readers


def _config(path: Path) -> Any:
    from retrieval.experiments.config import load_config

    return load_config(path)


def _squad(path: Path) -> Any:
    from retrieval.formats.squad import read_squad

    return read_squad(path)


def _html_file(path: Path) -> list[Document]:
    return [html.read_html_file(path)]


def _html_tar(path: Path) -> list[Document]:
    return list(html.read_html_tarball(path))


@dataclass(frozen=True)
class Reader:
    """A reader under test: how to call it, a valid sample, the file name, the result type."""

    name: str
    read: Callable[[Path], Any]
    sample: bytes
    filename: str
    kind: type | tuple[type, ...]


def _html_tarball_sample() -> bytes:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in ("CACM-0001.html", "CACM-0002.html"):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(HTML_DOC), 0
            tar.addfile(info, io.BytesIO(HTML_DOC))
    return buf.getvalue()


READERS = [
    Reader("TREC documents", lambda p: list(trec.read_trec_documents(p)), TREC_DOCS, "docs.trec", list),
    Reader("TREC topics <top>", trec.read_trec_topics, TREC_TOPICS_TOP, "topics.txt", Queries),
    Reader("TREC topics <DOC>", trec.read_trec_topics, TREC_TOPICS_DOC, "topics.txt", Queries),
    Reader("TSV topics", trec.read_tsv_topics, TSV_TOPICS, "topics.tsv", Queries),
    Reader("TREC qrels", trec.read_qrels, QRELS_TREC, "qrels.txt", Qrels),
    Reader("BEIR qrels TSV", trec.read_qrels, QRELS_BEIR, "test.tsv", Qrels),
    Reader("TREC run", trec.read_run, RUN, "run.txt", Run),
    Reader("BEIR corpus JSONL", lambda p: list(jsonl.read_jsonl_documents(p)), BEIR_CORPUS, "corpus.jsonl",
           list),
    Reader("BEIR corpus .jsonl.gz", lambda p: list(jsonl.read_jsonl_documents(p)),
           gzip.compress(BEIR_CORPUS, mtime=0), "corpus.jsonl.gz", list),
    Reader("Anserini JsonCollection", lambda p: list(jsonl.read_jsonl_documents(p)), ANSERINI_JSON,
           "docs.jsonl", list),
    Reader("JSON array", lambda p: list(jsonl.read_jsonl_documents(p)), ANSERINI_ARRAY, "docs.json",
           list),
    Reader("BEIR queries JSONL", jsonl.read_beir_queries, BEIR_QUERIES, "queries.jsonl", Queries),
    Reader("SMART documents", lambda p: list(smart.read_smart_documents(p)), SMART_DOCS, "cran.all.1400",
           list),
    Reader("SMART queries", smart.read_smart_queries, SMART_QUERIES, "cran.qry", Queries),
    Reader("Cranfield qrels", smart.read_cranfield_qrels, CRANFIELD_QRELS, "cranqrel", Qrels),
    Reader("HTML file", _html_file, HTML_DOC, "CACM-0001.html", list),
    Reader("HTML tarball", _html_tar, _html_tarball_sample(), "cacm.tar.gz", list),
    Reader("sniffed collection", lambda p: list(read_documents(p)), TREC_DOCS, "collection.txt", list),
    Reader("sniffed topics", read_topics, TREC_TOPICS_TOP, "topics.any", Queries),
    Reader("sniffed SMART topics", read_topics, SMART_QUERIES, "cran.qry", Queries),
    Reader("SQuAD JSON", _squad, SQUAD, "dev.json", list),
    Reader("YAML config", _config, CONFIG, "exp.yaml", object),
]
BY_NAME = {r.name: r for r in READERS}

# ---------------------------------------------------------------- generators


@st.composite
def mutated(draw: st.DrawFn, sample: bytes) -> bytes:
    """A valid sample after 1-4 random edits (truncate, delete, duplicate, insert, flip)."""
    data = bytearray(sample)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["truncate", "delete", "duplicate", "insert", "flip"]))
        i = draw(st.integers(0, len(data)))
        if op == "truncate":
            del data[i:]
        elif op == "delete":
            del data[i:i + draw(st.integers(1, 40))]
        elif op == "duplicate":
            data[i:i] = data[i:i + draw(st.integers(1, 80))]
        elif op == "insert":
            token = st.sampled_from(TOKENS) if draw(st.booleans()) else st.binary(min_size=1, max_size=8)
            data[i:i] = draw(token)
        elif data:
            j = min(i, len(data) - 1)
            data[j] = draw(st.integers(0, 255))
    return bytes(data)


def malformed(sample: bytes) -> st.SearchStrategy[bytes]:
    """Mutations of a valid sample (most), token soup, and plain random bytes."""
    soup = st.lists(st.sampled_from(TOKENS + [b"x", b"word", b"1", b"D1"]), max_size=40).map(b"".join)
    return st.one_of(mutated(sample), mutated(sample), mutated(sample), soup, st.binary(max_size=300))


def outcome(reader: Reader, data: bytes, workdir: Path) -> str:
    """Run one case: "parsed", "InputError", or "other: ..." (a bug) with the reason."""
    path = workdir / reader.filename
    path.write_bytes(data)
    try:
        result = reader.read(path)
    except InputError as e:
        if str(workdir) not in str(e) or reader.filename not in str(e):
            return f"other: InputError without the file name: {e}"
        if "\n" in str(e).strip():
            return f"other: InputError message spans lines: {e!r}"
        return "InputError"
    except Exception as e:  # noqa: BLE001 (anything else is what we are looking for)
        return f"other: {type(e).__name__}: {e}"[:300]
    if not isinstance(result, reader.kind):
        return f"other: returned {type(result).__name__}"
    return "parsed"


def fuzz(reader: Reader, examples: int, seed: int | None = 0,
         tally: collections.Counter | None = None, failures: list | None = None) -> collections.Counter:
    """Run `examples` generated malformed inputs through `reader`; count outcomes.

    With `failures` None an "other" outcome raises AssertionError (test mode);
    otherwise it is appended there and fuzzing goes on (summary mode).
    """
    tally = collections.Counter() if tally is None else tally
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        workdir = Path(tmp)

        @settings(max_examples=examples, deadline=None, database=None, derandomize=seed is not None,
                  suppress_health_check=list(HealthCheck), print_blob=False)
        @given(data=malformed(reader.sample))
        def case(data: bytes) -> None:
            result = outcome(reader, data, workdir)
            kind = "other" if result.startswith("other") else result
            tally[kind] += 1
            if kind == "other":
                if failures is None:
                    raise AssertionError(f"{reader.name}: {result}\ninput: {data!r}")
                failures.append((reader.name, result, data))

        case()
    return tally


# ---------------------------------------------------------------- summary


def hand_picked_rows() -> list[tuple[str, int, int, int, int]]:
    """(reader, tried, parsed, InputError, other) over HAND_PICKED."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="hand-") as tmp:
        for reader in READERS:
            tally = collections.Counter(outcome(reader, data, Path(tmp)).split(":")[0]
                                        for data in HAND_PICKED.values())
            rows.append((reader.name, sum(tally.values()), tally["parsed"], tally["InputError"],
                         tally["other"]))
    return rows


def crash_rows(points: int) -> list[tuple[str, int, int, int, int, int, int]]:
    """(write, kill points, killed before the end, previous, new, clear error, other) per kind."""
    rows = []
    kinds = ("inverted", "inverted-fresh", "dense", "dense-replace", "parts-replace", "late", "run", "json")
    for kind in kinds:
        with tempfile.TemporaryDirectory(prefix="crash-") as tmp:
            results, summary = crash_cases.drive(kind, Path(tmp), points)
        before = summary.get("old") or summary.get("base")
        after = summary.get("complete")
        tally = collections.Counter()
        for r in results:
            state = r["state"]
            if state in ("old", before):
                tally["previous"] += 1
            elif state == "new" or state == after or state.startswith("docs=4000 "):
                tally["new"] += 1
            elif kind.endswith("replace") and state.startswith("docs=20 parts=inverted "):
                tally["dropped"] += 1  # killed after the old part left the manifest, before the new came
            elif state.startswith("InputError"):
                tally["error"] += 1
            else:
                tally["other"] += 1
        rows.append((kind, len(results), sum(not r["finished"] for r in results), tally["previous"],
                     tally["new"], tally["dropped"], tally["error"], tally["other"]))
        print(f"crash {kind}: {dict(tally)}", file=sys.stderr)
    return rows


def integrity_rows() -> list[tuple[str, int, int, int]]:
    """(file, damaged copies tried, refused naming the file, other) for every stored file."""
    import shutil

    from retrieval.dense.faiss_index import add_dense
    from retrieval.index.native import build_index
    from retrieval.late import build_late

    rows = []
    with tempfile.TemporaryDirectory(prefix="integrity-") as tmp:
        path = Path(tmp) / "idx"
        build_index([Document(f"d{i:02d}", "", f"document {i} about cats and gardens") for i in range(30)],
                    path, progress=False)
        add_dense(path)
        build_late(path, progress=False)
        for rel in sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()):
            if rel == "manifest.json":
                continue
            tally = collections.Counter()
            for how in ("truncate", "flip"):
                copy = Path(tmp) / "copy"
                shutil.copytree(path, copy)
                crash_cases.damage(copy / rel, how)
                for load in crash_cases.loaders(copy, rel):
                    try:
                        load()
                        tally["other"] += 1
                    except InputError as e:
                        tally["named" if e.path == str(copy / rel) else "other"] += 1
                shutil.rmtree(copy)
            rows.append((rel, sum(tally.values()), tally["named"], tally["other"]))
    return rows


def hostile_rows() -> list[tuple[str, int, int, int, int, int, int, int]]:
    """Hostile use of the CLI, the API and the service (eval/hostile_fs.py, hostile_values.py,
    hostile_paths.py, hostile_service.py), tallied per category: (category, cases, error, fine,
    traceback, crash, silent, hang)."""
    sys.path.insert(0, str(ROOT / "eval"))
    import hostile_fs
    import hostile_paths
    import hostile_service
    import hostile_values

    tally: dict[str, collections.Counter] = {}
    for module in (hostile_fs, hostile_values, hostile_paths, hostile_service):
        with tempfile.TemporaryDirectory() as tmp:
            for category, _, outcome in module.run_cases(Path(tmp)):
                tally.setdefault(category, collections.Counter())[outcome] += 1
    return [(category, sum(t.values()), *(t[o] for o in HOSTILE_OUTCOMES))
            for category, t in tally.items()]


HOSTILE_OUTCOMES = ("error", "fine", "traceback", "crash", "silent", "hang")
FULL_DISK_OUTCOMES = ("error", "fine", "traceback", "crash", "unclear", "leftover")


def full_disk_rows(points: int) -> tuple[list[tuple], str | None]:
    """Each command that writes, on a disk with 0 bytes up to enough free (eval/full_disk.py):
    (command, what it runs, bytes written, attempts, outcomes...); and why it could not run, if so."""
    import full_disk

    why = full_disk.available()
    if why:
        return [], why
    rows = []
    for case, what in full_disk.CASES.items():
        with tempfile.TemporaryDirectory(prefix="full-disk-") as tmp:
            report = full_disk.drive(case, Path(tmp), points)
        tally = collections.Counter(r["outcome"] for r in report["results"])
        rows.append((case, what, f"{report['written']:,}", len(report["results"]),
                     *(tally[o] for o in FULL_DISK_OUTCOMES)))
        print(f"full disk {case}: {dict(tally)}", file=sys.stderr)
    return rows, None


def _table(header: list[str], rows: list[tuple]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    for row in rows:
        out.append("| " + " | ".join(f"{c:.1f}" if isinstance(c, float) else str(c) for c in row) + " |")
    return out


def main(argv: list[str] | None = None) -> int:
    """Fuzz every reader with a fixed seed, run the crash and integrity cases, write the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=2000, help="generated inputs per reader")
    parser.add_argument("--kill-points", type=int, default=40, help="SIGKILL points per write kind")
    parser.add_argument("--free-points", type=int, default=24,
                        help="amounts of free space tried per command on a full disk")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows, failures, start = [], [], time.time()
    for reader in READERS:
        t0 = time.time()
        tally = fuzz(reader, args.examples, seed=0, failures=failures)
        tried = sum(tally.values())
        rows.append((reader.name, tried, tally["parsed"], tally["InputError"], tally["other"],
                     time.time() - t0))
        print(f"{reader.name:22} {tried:6} parsed {tally['parsed']:5} InputError {tally['InputError']:5}"
              f" other {tally['other']}", file=sys.stderr)
    total = tuple(sum(r[i] for r in rows) for i in range(1, 5))
    hand = hand_picked_rows()
    crashes = crash_rows(args.kill_points)
    integrity = integrity_rows()
    hostile = hostile_rows()
    full_disk, full_disk_missing = full_disk_rows(args.free_points)
    hostile_total = tuple(sum(r[i] for r in hostile) for i in range(1, 2 + len(HOSTILE_OUTCOMES)))
    lines = [
        "# Reliability: bad input, crashes, corruption, hostile use",
        "",
        f"Took {time.time() - start:.0f} s here. The tests"
        " (tests/test_reliability_*.py) run the same generators and drivers with fewer cases.",
        "",
        "## Malformed input, fuzzed (hypothesis)",
        "",
        f"Derandomized (fixed seed), {args.examples} generated inputs per reader: mutations of a valid"
        " sample (truncation, deleted/duplicated slices, inserted tags/fields/bytes, invalid UTF-8,"
        " NUL), token soup and random bytes. Allowed: a parse of the right type, or `InputError` naming"
        " the file in one line. \"other\" is anything else (a bug).",
        "",
        *_table(["reader", "cases tried", "parsed", "InputError", "other", "seconds"],
                rows + [("**all**", *total, time.time() - start)]),
        "",
        "## Hand-picked bad files (every reader)",
        "",
        "Cases: " + ", ".join(HAND_PICKED) + ". Known open bugs: "
        + ("; ".join(f"{r} / {c}: {why}" for (r, c), why in KNOWN_BUGS.items()) or "none") + ".",
        "",
        *_table(["reader", "cases", "parsed", "InputError", "other"], hand),
        "",
        "## Crash safety (SIGKILL during a write)",
        "",
        f"{args.kill_points} kill points per write, spread over 0-1.1x the measured duration of a"
        " complete write; then the index is opened and verified (every part loaded) or the file read."
        " previous = the complete data from before; new = the complete new data; clear error ="
        " InputError (\"no index here\": a fresh build killed before its rename); part dropped = a"
        " part being replaced is no longer in the manifest and the new one not yet (the index opens,"
        " verifies, and says the part is missing); other = partial data loaded or wrong bytes (a bug)."
        " write kinds: inverted = build_index over a previous index, inverted-fresh = no previous"
        " index, dense / late = add_dense / build_late on an index without that part, dense-replace ="
        " add_dense over an existing dense part (the Python API: the index is replaced as a whole,"
        " index.changing_part), parts-replace = building.replace_parts over an existing dense part"
        " (what `retrieval index --index I --dense` runs: the index is replaced as a whole), run ="
        " write_run of a 300 x 1000 run over an old file,"
        " json = storage.write_json_atomic (manifests, report results.json) over an old file.",
        "",
        *_table(["write", "kill points", "killed before done", "previous", "new", "part dropped",
                 "clear error", "other"],
                crashes),
        "",
        "## Integrity (each stored file truncated, or one byte flipped)",
        "",
        "Loaders: `Index.open` (verifies every checksum) and, for dense files, `load_dense_part`.",
        "",
        *_table(["file", "damaged loads", "refused, naming the file", "other"], integrity),
        "",
        "## Hostile use of the commands and the API",
        "",
        "Cases in eval/hostile_fs.py (what may be replaced, written or followed: non-index paths,"
        " special outputs, crafted manifests and arrays, path traversal, interrupted replaces, cache"
        " keys), eval/hostile_values.py (measures, model parameters, ids, candidates, messages,"
        " API types, updates and `serve` flags), eval/hostile_paths.py (directories that are not the"
        " tool's, paths inside an index, clean-up of what is someone else's, crafted indexes with"
        " their checksums recomputed) and eval/hostile_service.py (`retrieval serve` against other"
        " origins, other Host names, server paths in requests, unbounded work, the index going away)."
        " error = exit 2 with one line saying what was expected (or the API's InputError, or the"
        " service's expected 4xx/503 with a JSON one-line error), nothing harmed; fine = the right"
        " result; traceback (a 5xx or a traceback in the server's log, for the service), crash"
        " (killed by a signal), silent (exit 0 or 200 with a wrong result, something replaced or"
        " deleted, or an error that does not say what it should) and hang (no end within its time"
        " limit) are bugs. The tests also run hypothesis properties over paths and CLI values.",
        "",
        *_table(["category", "cases", *HOSTILE_OUTCOMES], hostile + [("**all**", *hostile_total)]),
        "",
        "## A full disk",
        "",
        f"eval/full_disk.py: each command that writes runs on a tmpfs (in a private mount namespace) with"
        f" {args.free_points} amounts of free space, from 0 bytes to twice what a complete run writes"
        " plus 64 KiB. error = exit 2 with one line `retrieval: error: <file>: No space left on device`"
        " and the disk exactly as before (inputs byte-identical, nothing left behind but the empty lock"
        " file an update keeps beside the index); fine = exit 0 and the output whole. traceback, crash"
        " (killed by a signal, such as SIGBUS in a memory-mapped"
        " write), unclear (not that one line) and leftover (the disk changed) are bugs.",
        "",
        *(_table(["command", "what it runs", "bytes written", "attempts", *FULL_DISK_OUTCOMES], full_disk)
          if full_disk else [f"Not run here: {full_disk_missing}."]),
    ]
    if failures:
        seen: dict[tuple[str, str], tuple[str, bytes]] = {}
        for name, why, data in failures:
            seen.setdefault((name, why[:60]), (why, data))
        lines += ["", "## Failures", ""]
        lines += [f"- {name}: {why[:200]} (input {data[:80]!r})" for (name, _), (why, data) in seen.items()]
    sys.path.insert(0, str(ROOT / "eval"))
    from benchlib import publish

    publish(args.out, "\n".join(lines) + "\n")
    unexpected = sum(r[-1] for r in hand) - len(KNOWN_BUGS) + sum(r[-1] for r in crashes + integrity)
    unexpected += sum(sum(r[4:]) for r in hostile) + sum(sum(r[6:]) for r in full_disk)
    return 1 if failures or unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
