"""Hostile values through the CLI, YAML configs and the Python API: measures, parameters, ids.

Each case gives "error" (exit 2 and one `retrieval: error:` line, or the
package's InputError from the API, saying what was expected), "fine" (the right
result), or a bug: "traceback" (another exception), "crash" (the process died
of a signal, e.g. trec_eval's abort), "silent" (exit 0 with a wrong or empty
result, or an error that does not say what it should). Cases that could abort
run in a child process. eval/reliability.py tallies them;
tests/test_reliability_hostile_values.py asserts every case is "error" or "fine".
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "eval"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from hostile_fs import CONFIG, DOCS, QRELS, TOPICS, outcome, print_cases, run_cli, tally  # noqa: E402,F401

from retrieval.errors import InputError  # noqa: E402
from retrieval.formats import read_run  # noqa: E402
from retrieval.index.native import Index, build_index  # noqa: E402
from retrieval.storage import MANIFEST  # noqa: E402
from retrieval.types import Document, Run  # noqa: E402

Result = tuple[int, str, bool]  # exit code, stderr, result correct (or message says what it should)


class Fixture:
    """A tiny collection (TREC docs), topics, qrels, an index and a run under `root`."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.docs, self.topics, self.qrels = root / "docs.trec", root / "topics.tsv", root / "qrels.txt"
        self.docs.write_text(DOCS)
        self.topics.write_text(TOPICS)
        self.qrels.write_text(QRELS)
        self.index = root / "index"
        build_index([Document(f"d{i}", "", t) for i, t in enumerate(
            ["cats sit on mats", "dogs chase cats", "neural ranking of documents",
             "sparse retrieval with bm25", "dense retrieval with vectors", "cats and dogs in gardens"])],
            self.index, progress=False)
        self.run = root / "run.txt"
        code, err = self.search()
        assert code == 0, err
        self.n = 0

    def path(self, name: str) -> Path:
        self.n += 1
        return self.root / f"{self.n:03d}-{name}"

    def search(self, *extra: object, output: Path | None = None) -> tuple[int, str]:
        return run_cli("search", "--index", self.index, "--topics", self.topics,
                       "--output", output or self.run, *extra)


def child(*args: object, timeout: float = 300) -> tuple[int, str]:
    """(exit code, stderr) of `retrieval ARGS` in a child process (an abort there is a "crash", no
    end within `timeout` a "hang")."""
    proc = subprocess.run([sys.executable, "-m", "retrieval.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)
    return proc.returncode, proc.stderr


def valid_run(path: Path) -> bool:
    """The file is a run our own reader accepts, with hits and finite scores."""
    try:
        run = read_run(path)
    except InputError:
        return False
    return bool(run) and all(math.isfinite(s) for r in run.values() for _, s in r)


# ---------------------------------------------------------------- 3. measures

def measure(names: str) -> Callable[[Fixture], Result]:
    def case(fx: Fixture) -> Result:
        code, err = child("eval", "--qrels", fx.qrels, fx.run, "--measures", names)
        return code, err, True
    return case


def huge_relevance(fx: Fixture) -> Result:
    qrels = fx.path("qrels")
    qrels.write_text("1 0 d0 100000000000000000000000\n")
    code, err = child("eval", "--qrels", qrels, fx.run, "--measures", "nDCG@10")
    return code, err, ":1:" in err


def config_measure(fx: Fixture) -> Result:
    where = fx.path("cfg")
    where.mkdir()
    config = where / "c.yaml"
    config.write_text(CONFIG.format(name="c", docs=fx.docs, topics=fx.topics, qrels=fx.qrels,
                                    index=where / "idx", pipelines="  bm25: bm25")
                      .replace("measures: [MAP]", "measures: [nDCG@0]"))
    code, err = child("run", config, "--output-dir", where / "out")
    return code, err, not (where / "idx").exists() and not (where / "out").exists()


# ---------------------------------------------------------------- 4. model parameters

def search_with(*flags: object) -> Callable[[Fixture], Result]:
    def case(fx: Fixture) -> Result:
        out = fx.path("run")
        code, err = fx.search(*flags, output=out)
        return code, err, (valid_run(out) if code == 0 else not out.exists())
    return case


def yaml_parameter(fx: Fixture) -> Result:
    where = fx.path("cfg")
    where.mkdir()
    config = where / "c.yaml"
    config.write_text(CONFIG.format(name="c", docs=fx.docs, topics=fx.topics, qrels=fx.qrels,
                                    index=where / "idx", pipelines="  bm25: {model: bm25, k1: -1}"))
    code, err = run_cli("run", config, "--output-dir", where / "out")
    return code, err, f"{config}:" in err


def api(call: Callable[[Fixture], object], expect_error: bool = True) -> Callable[[Fixture], Result]:
    """An API call: InputError becomes (2, its line); success (0, "")."""
    def case(fx: Fixture) -> Result:
        try:
            call(fx)
        except InputError as e:
            return 2, f"retrieval: error: {e}\n", True
        return 0, "", not expect_error
    return case


def _bm25(fx: Fixture, **params):
    from retrieval.sparse.rankers import BM25

    return BM25(fx.index, **params)


# ---------------------------------------------------------------- 5. ids and runs

def collection(name: str, text: str) -> Callable[[Fixture], Result]:
    def case(fx: Fixture) -> Result:
        source = fx.path(name)
        source.write_text(text)
        code, err = run_cli("index", "--collection", source, "--index", fx.path("idx"))
        return code, err, True
    return case


def topics(text: str) -> Callable[[Fixture], Result]:
    def case(fx: Fixture) -> Result:
        source = fx.path("topics.tsv")
        source.write_text(text)
        code, err = run_cli("search", "--index", fx.index, "--topics", source, "--output", fx.path("r"))
        return code, err, True
    return case


def run_file(text: str) -> Callable[[Fixture], Result]:
    def case(fx: Fixture) -> Result:
        source = fx.path("run.txt")
        source.write_text(text)
        code, err = child("eval", "--qrels", fx.qrels, source)
        return code, err, True
    return case


def write(run: dict) -> Callable[[Fixture], Result]:
    def case(fx: Fixture) -> Result:
        from retrieval.formats import write_run

        out = fx.path("w.txt")
        try:
            write_run(Run(run, presorted=True), out)
        except InputError as e:
            return 2, f"retrieval: error: {e}\n", not out.exists()
        return 0, "", valid_run(out)
    return case


def tag_flag(tag: str) -> Callable[[Fixture], Result]:
    """`search --tag TAG`: argparse refuses a bad tag with its own one line (`retrieval search: error:`)."""
    def case(fx: Fixture) -> Result:
        out = fx.path("r.txt")
        try:
            code, err = fx.search("--tag", tag, output=out)
        except SystemExit as e:  # the usage error, one line on stderr (not captured here)
            code, err = int(e.code or 0), f"retrieval: error: --tag {tag!r} refused\n"
        return code, err, not out.exists() if code else valid_run(out)
    return case


# ---------------------------------------------------------------- 6. candidates

def candidates(text: str) -> Callable[[Fixture], Result]:
    def case(fx: Fixture) -> Result:
        source, out = fx.path("cand.txt"), fx.path("r.txt")
        source.write_text(text)
        code, err = fx.search("--candidates", source, output=out)
        return code, err, (valid_run(out) if code == 0 else not out.exists())
    return case


# ---------------------------------------------------------------- 11. messages that say what is wrong

def says(case: Callable[[Fixture], Result], *words: str) -> Callable[[Fixture], Result]:
    def checked(fx: Fixture) -> Result:
        code, err, ok = case(fx)
        return code, err, ok and all(w in err for w in words)
    return checked


def late_model_without_late_part(command: str) -> Callable[[Fixture], Result]:
    """`add`/`optimize --late-model FILE` on an index without a late part: refused, not ignored."""
    def case(fx: Fixture) -> Result:
        import shutil

        index = fx.path("idx")
        shutil.copytree(fx.index, index)
        before = (index / MANIFEST).read_bytes()
        checkpoint = fx.path("late.safetensors")
        checkpoint.write_bytes(b"not used")
        new = fx.path("new.trec")
        new.write_text("<DOC>\n<DOCNO>n1</DOCNO>\nbirds\n</DOC>\n")
        extra = [new] if command == "add" else []
        code, err = run_cli(command, "--index", index, "--late-model", checkpoint, *extra)
        return code, err, (index / MANIFEST).read_bytes() == before
    return case


def serve(*flags: object) -> Callable[[Fixture], Result]:
    """`retrieval serve` with a bad model flag: refused before it listens (a server that starts
    anyway never ends: a hang)."""
    def case(fx: Fixture) -> Result:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        code, err = child("serve", "--index", fx.index, "--port", port, *flags, timeout=60)
        return code, err, True
    return case


def version_string(fx: Fixture) -> Result:
    import shutil

    index = fx.path("idx")
    shutil.copytree(fx.index, index)
    manifest = json.loads((index / MANIFEST).read_text())
    manifest["format_version"] = "1"
    (index / MANIFEST).write_text(json.dumps(manifest))
    code, err = run_cli("info", "--index", index)
    return code, err, True


def select_on_missing_split(fx: Fixture) -> Result:
    where = fx.path("cfg")
    where.mkdir()
    config = where / "c.yaml"
    config.write_text(CONFIG.format(name="c", docs="cacm", topics="cacm", qrels="cacm",
                                    index=where / "idx", pipelines="  bm25: bm25")
                      + "sweeps:\n  tune:\n    pipeline: bm25\n    grid: {k1: [0.9, 1.2]}\n"
                        "    select_on: train\n")
    code, err = run_cli("run", config, "--output-dir", where / "out")
    return code, err, not (where / "idx").exists()


DUPLICATE = "<DOC>\n<DOCNO>a</DOCNO>\nx\n</DOC>\n<DOC>\n<DOCNO>a</DOCNO>\ny\n</DOC>\n"
E, F = "error", "fine"
CASES: list[tuple[str, str, Callable[[Fixture], Result], str]] = [
    *[("measures", f"--measures {m!r}", measure(m), E)
      for m in ("nDCG@0", "nDCG@10.5", "Judged@0", "P@-1", "MAP@x", "bogus", "P(rel=1.5)@5", ",")],
    ("measures", "--measures 'MAP nDCG@10 P@5'", measure("MAP nDCG@10 P@5"), F),
    ("measures", "relevance 10^23", huge_relevance, E),
    ("measures", "config measure nDCG@0 (before any work)", config_measure, E),
    *[("model parameters", " ".join(flags), search_with(*flags), E) for flags in [
        ("--k1", "-1"), ("--b", "2"), ("--k1", "inf"), ("--k1", "nan"), ("--mu", "0"),
        ("--model", "qld", "--mu", "-5"), ("--model", "qljm", "--lam", "0"), ("--hits", "0"),
        ("--rm3", "--fb-docs", "0"), ("--rm3", "--original-weight", "1.5"), ("--threads", "0")]],
    ("model parameters", "--k1 1.2 --b 0.75", search_with("--k1", "1.2", "--b", "0.75"), F),
    ("model parameters", "--k1 1e308 (overflows)", search_with("--k1", "1e308"), E),
    ("model parameters", "API BM25(k1=1e308)", api(lambda fx: _bm25(fx, k1=1e308)), E),
    ("model parameters", "--model qld --mu 1e-9 (finite scores)",
     search_with("--model", "qld", "--mu", "1e-9"), F),
    ("model parameters", "YAML k1: -1 (file:line)", yaml_parameter, E),
    ("model parameters", "API BM25(k1=-1)", api(lambda fx: _bm25(fx, k1=-1)), E),
    ("model parameters", "API BM25(b=float('nan'))", api(lambda fx: _bm25(fx, b=float("nan"))), E),
    ("ids and runs", "<DOCNO>a b</DOCNO>", collection("d.trec", "<DOC>\n<DOCNO>a b</DOCNO>\nx\n</DOC>\n"), E),
    ("ids and runs", "BEIR _id ''", collection("c.jsonl", '{"_id": "", "text": "x"}\n'), E),
    ("ids and runs", "BEIR _id 'a b'", collection("c.jsonl", '{"_id": "a b", "text": "x"}\n'), E),
    ("ids and runs", "topic id 'a b'", topics("a b\tcats\n"), E),
    ("ids and runs", "run score inf", run_file("1 Q0 d0 1 inf t\n"), E),
    ("ids and runs", "write_run duplicate doc", write({"1": [("d0", 2.0), ("d0", 1.0)]}), E),
    ("ids and runs", "write_run NaN score", write({"1": [("d0", float("nan"))]}), E),
    ("ids and runs", "write_run empty doc id", write({"1": [("", 1.0)]}), E),
    ("ids and runs", "write_run doc id with a space", write({"1": [("d 0", 1.0)]}), E),
    ("ids and runs", "write_run valid", write({"1": [("d0", 1.0), ("d1", 0.5)]}), F),
    ("ids and runs", "Run() duplicate doc", api(lambda fx: Run({"1": [("d0", 1.0), ("d0", 0.5)]})), E),
    ("ids and runs", "Run() NaN score", api(lambda fx: Run({"1": [("d0", float("nan"))]})), E),
    ("ids and runs", "<DOCNO> with U+0090 (C1 control)",
     collection("c1.trec", "<DOC>\n<DOCNO>a\u0090b</DOCNO>\nx\n</DOC>\n"), E),
    ("ids and runs", "BEIR _id with U+009B (C1 control)",
     collection("c1.jsonl", '{"_id": "a\\u009bb", "text": "x"}\n'), E),
    ("ids and runs", "topic id with U+0091", topics("a\u0091\tcats\n"), E),
    ("ids and runs", "run file doc id with U+0090", run_file("1 Q0 d\u00900 1 1.0 t\n"), E),
    ("ids and runs", "write_run tag with U+0090", api(lambda fx: _format(tag="t\u0090")), E),
    ("ids and runs", "search --tag with U+009C", tag_flag("t\u009c"), E),
    ("updates", "add --late-model FILE (no late part)", late_model_without_late_part("add"), E),
    ("updates", "optimize --late-model FILE (no late part)", late_model_without_late_part("optimize"), E),
    ("updates", "add without --late-model", api(lambda fx: _add_to_copy(fx), expect_error=False), F),
    ("serve", "serve --reader /nonexistent", serve("--reader", "/nonexistent"), E),
    ("serve", "serve --reader (a file)", serve("--reader", ROOT / "README.md"), E),
    ("serve", "serve --late-model /nonexistent", serve("--late-model", "/nonexistent"), E),
    ("candidates", "no query in common", candidates("99 Q0 d0 1 1.0 t\n"), E),
    ("candidates", "empty file", candidates(""), E),
    ("candidates", "some queries in common", candidates("1 Q0 d0 1 1.0 t\n99 Q0 d1 1 1.0 t\n"), F),
    ("messages", "duplicate doc id names file and record", says(collection("dup.trec", DUPLICATE),
                                                                "dup.trec:5", "first at", "'a'"), E),
    ("messages", "format_version '1'", says(version_string, "'1'", "integer"), E),
    ("messages", "--topic-field bogus", says(search_with("--topic-field", "bogus"), "topic field"), E),
    ("messages", "select_on: train on CACM", says(select_on_missing_split, "splits", "test"), E),
    ("python API", "BM25(idx)(['q'])", api(lambda fx: _bm25(fx)(["q"])), E),
    ("python API", "BM25(123)", api(lambda fx: _bm25_at(123)), E),
    ("python API", "BM25('no/such/index')", api(lambda fx: _bm25_at("no/such/index")), E),
    ("python API", "BM25(idx)(queries, run=[...])",
     api(lambda fx: _bm25(fx)({"1": "cats"}, [("d0", 1.0)])), E),
    ("python API", "evaluate(run, 'qrels')", api(lambda fx: _evaluate(fx, "qrels")), E),
    ("python API", "evaluate(run, qrels, 'nDCG@0')", api(lambda fx: _evaluate(fx, None, "nDCG@0")), E),
    ("python API", "RM3('x')", api(lambda fx: _rm3("x")), E),
    ("python API", "Index.open(None)", api(lambda fx: Index.open(None)), E),
    ("python API", "BM25(idx)({'1': 'cats'})",
     api(lambda fx: _bm25(fx)({"1": "cats"}), expect_error=False), F),
]


def _bm25_at(where: object):
    from retrieval.sparse.rankers import BM25

    return BM25(where)


def _format(tag: str) -> str:
    from retrieval.formats.trec import format_run

    return format_run(Run({"1": [("d0", 1.0)]}), tag)


def _add_to_copy(fx: Fixture) -> None:
    import shutil

    from retrieval.shards.live import add_documents

    index = fx.path("idx")
    shutil.copytree(fx.index, index)
    add_documents(index, [Document("n1", "", "birds")], progress=False)


def _rm3(ranker: object):
    from retrieval.sparse.rankers import RM3

    return RM3(ranker)


def _evaluate(fx: Fixture, qrels: object, measures: str = "MAP"):
    from retrieval import evaluate, read_qrels

    return evaluate(read_run(fx.run), read_qrels(fx.qrels) if qrels is None else qrels, measures)


def run_cases(workdir: Path) -> list[tuple[str, str, str]]:
    """(category, case, outcome) for every case."""
    fx = Fixture(Path(workdir))
    return tally(CASES, lambda _, case: case(fx))


if __name__ == "__main__":
    print_cases(run_cases)
