"""Hostile use of the file system through the CLI: what may be replaced, written or followed.

Each case runs `retrieval` in this process on a tiny collection and checks the
outcome: "error" (exit 2, one `retrieval: error:` line, the victim untouched),
"fine" (exit 0 and the right result), or a bug: "traceback" (an exception
escaped), "silent" (exit 0 or a clean error, but something was deleted,
replaced or left behind, or the result is wrong), "hang" (no end in time). eval/reliability.py
tallies them; tests/test_reliability_hostile_fs.py asserts every case is "error" or "fine".
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from retrieval import storage  # noqa: E402
from retrieval.cli import main as cli  # noqa: E402
from retrieval.index.native import Index  # noqa: E402
from retrieval.storage import MANIFEST, checksum_file, save_array  # noqa: E402

DOCS = "".join(f"<DOC>\n<DOCNO>d{i}</DOCNO>\n{text}\n</DOC>\n" for i, text in enumerate([
    "cats sit on mats", "dogs chase cats", "neural ranking of documents",
    "sparse retrieval with bm25", "dense retrieval with vectors", "cats and dogs in gardens"]))
TOPICS = "1\tcats\n2\tretrieval\n"
QRELS = "1 0 d0 1\n1 0 d1 1\n2 0 d3 1\n"
CONFIG = """name: {name}
collection: {docs}
topics: {topics}
qrels: {qrels}
index:
  path: {index}
pipelines:
{pipelines}
baseline: bm25
measures: [MAP]
"""

Result = tuple[int, str, bool]  # exit code, stderr, everything as it should be


def run_cli(*args: object) -> tuple[int, str]:
    """(exit code, stderr) of `retrieval ARGS` run in this process (stdout discarded)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli([str(a) for a in args])
    return code, err.getvalue()


def leftovers(directory: Path) -> list[str]:
    """Temporary siblings a build or write left behind."""
    return [p.name for p in directory.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def dead_pid() -> int:
    """The pid of a process that has exited."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


class Fixture:
    """A tiny collection, topics, qrels and a built index under `root`."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.docs, self.topics, self.qrels = root / "docs.trec", root / "topics.tsv", root / "qrels.txt"
        self.docs.write_text(DOCS)
        self.topics.write_text(TOPICS)
        self.qrels.write_text(QRELS)
        self.index = root / "index"
        code, err = run_cli("index", "--collection", self.docs, "--index", self.index)
        assert code == 0, err

    def case_dir(self, name: str) -> Path:
        path = self.root / "cases" / name
        path.mkdir(parents=True)
        return path

    def index_copy(self, where: Path) -> Path:
        shutil.copytree(self.index, where)
        return where

    def search(self, index: Path, output: object) -> tuple[int, str]:
        return run_cli("search", "--index", index, "--topics", self.topics, "--output", output)

    def config(self, where: Path, *, name: str = "x", index: Path | None = None,
               pipelines: str = "  bm25: bm25") -> Path:
        path = where / "config.yaml"
        path.write_text(CONFIG.format(name=name, docs=self.docs, topics=self.topics, qrels=self.qrels,
                                      index=index or where / "idx", pipelines=pipelines))
        return path


# ---------------------------------------------------------------- 1. replacing what is not an index

def replace_dir_with_files(fx: Fixture, d: Path) -> Result:
    victim = d / "thesis"
    victim.mkdir()
    (victim / "t.tex").write_text("years of work")
    code, err = run_cli("index", "--collection", fx.docs, "--index", victim)
    return code, err, (victim / "t.tex").read_text() == "years of work" and not leftovers(d)


def replace_plain_file(fx: Fixture, d: Path) -> Result:
    victim = d / "notes.txt"
    victim.write_text("keep me")
    code, err = run_cli("index", "--collection", fx.docs, "--index", victim)
    return code, err, victim.read_text() == "keep me" and not leftovers(d)


def replace_symlink(fx: Fixture, d: Path) -> Result:
    (d / "real").mkdir()
    (d / "real" / "f").write_text("keep")
    (d / "link").symlink_to(d / "real")
    code, err = run_cli("index", "--collection", fx.docs, "--index", d / "link")
    return code, err, (d / "link").is_symlink() and (d / "real" / "f").read_text() == "keep"


def replace_index(fx: Fixture, d: Path) -> Result:
    target = fx.index_copy(d / "idx")
    code, err = run_cli("index", "--collection", fx.docs, "--no-stem", "--index", target)
    return code, err, Index.open(target).manifest["analyzer"]["stemmer"] is None and not leftovers(d)


def fill_empty_dir(fx: Fixture, d: Path) -> Result:
    (d / "empty").mkdir()
    code, err = run_cli("index", "--collection", fx.docs, "--index", d / "empty")
    return code, err, Index.open(d / "empty").num_docs == 6


def force_replaces(fx: Fixture, d: Path) -> Result:
    (d / "old").mkdir()
    (d / "old" / "junk").write_text("x")
    code, err = run_cli("index", "--collection", fx.docs, "--index", d / "old", "--force")
    return code, err, Index.open(d / "old").num_docs == 6 and not leftovers(d)


def run_config_over_non_index(fx: Fixture, d: Path) -> Result:
    victim = d / "data"
    victim.mkdir()
    (victim / "keep.csv").write_text("1,2")
    code, err = run_cli("run", fx.config(d, index=victim), "--output-dir", d / "out")
    return code, err, (victim / "keep.csv").read_text() == "1,2"


# ---------------------------------------------------------------- 2. special outputs

def output_dev_null(fx: Fixture, d: Path) -> Result:
    code, err = fx.search(fx.index, os.devnull)
    return code, err, Path(os.devnull).is_char_device()


def output_fifo(fx: Fixture, d: Path) -> Result:
    fifo = d / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    code, err = fx.search(fx.index, fifo)
    reader.join(timeout=30)
    return code, err, fifo.is_fifo() and b"Q0" in b"".join(received)


def output_symlink(fx: Fixture, d: Path) -> Result:
    (d / "target.txt").write_text("old")
    (d / "link.txt").symlink_to(d / "target.txt")
    code, err = fx.search(fx.index, d / "link.txt")
    return code, err, (d / "link.txt").is_symlink() and "Q0" in (d / "target.txt").read_text()


def output_directory(fx: Fixture, d: Path) -> Result:
    (d / "out").mkdir()
    (d / "out" / "keep").write_text("k")
    code, err = fx.search(fx.index, d / "out")
    return code, err, (d / "out" / "keep").read_text() == "k"


def output_under_file(fx: Fixture, d: Path) -> Result:
    (d / "file").write_text("k")
    code, err = fx.search(fx.index, d / "file" / "run.txt")
    return code, err, (d / "file").read_text() == "k"


def output_stdout(fx: Fixture, d: Path) -> Result:
    code, err = fx.search(fx.index, "-")
    return code, err, not any(d.iterdir())


def run_output_dir_is_file(fx: Fixture, d: Path) -> Result:
    (d / "out").write_text("k")
    code, err = run_cli("run", fx.config(d), "--output-dir", d / "out")
    return code, err, (d / "out").read_text() == "k"


# ---------------------------------------------------------------- 7. the manifest is not trusted

def _edit_manifest(index: Path, edit: Callable[[dict], None]) -> None:
    manifest = json.loads((index / MANIFEST).read_text())
    edit(manifest)
    (index / MANIFEST).write_text(json.dumps(manifest))


def _manifest_case(fx: Fixture, d: Path, edit: Callable[[dict], None]) -> Result:
    index = fx.index_copy(d / "idx")
    _edit_manifest(index, edit)
    code, err = fx.search(index, d / "run.txt")
    return code, err, not (d / "run.txt").exists()


def _craft_array(fx: Fixture, d: Path, rel: str, change: Callable) -> Result:
    """Replace an index array and record its new checksum, as an attacker who knows the format would."""
    import numpy as np

    index = fx.index_copy(d / "idx")
    array = np.load(index / rel, allow_pickle=False)
    save_array(index / rel, change(array.copy()))

    def fix(manifest: dict) -> None:
        where = manifest["files"] if rel in manifest["files"] else manifest["parts"]["inverted"]["files"]
        where[rel] = checksum_file(index / rel)
    _edit_manifest(index, fix)
    code, err = fx.search(index, d / "run.txt")
    return code, err, not (d / "run.txt").exists()


def _set(key: str, value: object) -> Callable[[dict], None]:
    return lambda m: m.__setitem__(key, value)


MANIFEST_EDITS: dict[str, Callable[[dict], None]] = {
    "parts-is-a-list": _set("parts", ["inverted"]),
    "files-is-a-string": _set("files", "docs.sqlite"),
    "checksums-deleted": lambda m: m.pop("files"),
    "part-checksums-deleted": lambda m: m["parts"]["inverted"].pop("files"),
    "stats-missing": lambda m: m.pop("stats"),
    "version-as-string": _set("format_version", "1"),
    "checksum-not-hex": lambda m: m["files"]["docids.npy"].__setitem__("sha256", 5),
}

CRAFTED_ARRAYS: dict[str, tuple[str, Callable]] = {
    "docno-out-of-range": ("inverted/block_lasts.npy", lambda a: a + 1000),
    "offsets-decreasing": ("inverted/indptr.npy", lambda a: a[::-1]),
    "block-width-33": ("inverted/block_widths.npy", lambda a: a * 0 + 33),
    "doc-ids-duplicated": ("docids.npy", lambda a: a[[0] * len(a)]),
}


# ---------------------------------------------------------------- 8. path traversal

def config_name_traversal(fx: Fixture, d: Path) -> Result:
    work = d / "a" / "b"
    work.mkdir(parents=True)
    config = fx.config(work, name="../../escaped")
    cwd = os.getcwd()
    os.chdir(work)
    try:
        code, err = run_cli("run", config)
    finally:
        os.chdir(cwd)
    return code, err, not (d / "escaped").exists() and not (work / "runs").exists()


def manifest_key_outside(fx: Fixture, d: Path) -> Result:
    (d / "outside.txt").write_text("secret")
    index = fx.index_copy(d / "idx")
    _edit_manifest(index, lambda m: m["files"].__setitem__("../outside.txt",
                                                          checksum_file(d / "outside.txt")))
    code, err = fx.search(index, d / "run.txt")
    return code, err, not (d / "run.txt").exists()


def manifest_key_absolute(fx: Fixture, d: Path) -> Result:
    index = fx.index_copy(d / "idx")
    _edit_manifest(index, lambda m: m["files"].__setitem__("/etc/hostname", {"sha256": "0" * 64,
                                                                           "bytes": 1}))
    code, err = fx.search(index, d / "run.txt")
    return code, err, not (d / "run.txt").exists()


def symlink_inside_index(fx: Fixture, d: Path) -> Result:
    index = fx.index_copy(d / "idx")
    shutil.copy(index / "docids.npy", d / "elsewhere.npy")
    (index / "docids.npy").unlink()
    (index / "docids.npy").symlink_to(d / "elsewhere.npy")
    code, err = fx.search(index, d / "run.txt")
    return code, err, not (d / "run.txt").exists()


def shard_name_traversal(fx: Fixture, d: Path) -> Result:
    index = d / "sharded"
    code, err = run_cli("index", "--collection", fx.docs, "--index", index, "--shards", "2")
    if code:
        return code, err, False
    _edit_manifest(index, lambda m: m["shards"][0].__setitem__("name", "../../x"))
    code, err = fx.search(index, d / "run.txt")
    return code, err, not (d / "run.txt").exists()


# ---------------------------------------------------------------- 9. former tracebacks

def index_under_file(fx: Fixture, d: Path) -> Result:
    (d / "file").write_text("k")
    code, err = run_cli("index", "--collection", fx.docs, "--index", d / "file" / "sub")
    return code, err, (d / "file").read_text() == "k" and not leftovers(d)


def index_at_dot(fx: Fixture, d: Path) -> Result:
    (d / "keep").write_text("k")
    cwd = os.getcwd()
    os.chdir(d)
    try:
        code, err = run_cli("index", "--collection", fx.docs, "--index", ".")
    finally:
        os.chdir(cwd)
    return code, err, (d / "keep").read_text() == "k" and not leftovers(d) and not leftovers(d.parent)


def index_at_root(fx: Fixture, d: Path) -> Result:
    code, err = run_cli("index", "--collection", fx.docs, "--index", "/")
    return code, err, not leftovers(Path("/"))


def html_subdir_named_html(fx: Fixture, d: Path) -> Result:
    coll = d / "site"
    (coll / "nested.html").mkdir(parents=True)
    (coll / "nested.html" / "a.html").write_text("<html><title>A</title><body>cats</body></html>")
    (coll / "b.html").write_text("<html><title>B</title><body>dogs</body></html>")
    code, err = run_cli("index", "--collection", coll, "--index", d / "idx")
    return code, err, code == 0 and Index.open(d / "idx").num_docs == 2


def broken_symlink_in_collection(fx: Fixture, d: Path) -> Result:
    coll = d / "site"
    coll.mkdir()
    (coll / "b.html").write_text("<html><title>B</title><body>dogs</body></html>")
    (coll / "gone.html").symlink_to(d / "nowhere.html")
    code, err = run_cli("index", "--collection", coll, "--index", d / "idx")
    return code, err, not (d / "idx").exists()


def corrupt_cache_key(fx: Fixture, d: Path) -> Result:
    config = fx.config(d)
    code, err = run_cli("run", config, "--output-dir", d / "out")
    if code:
        return code, err, False
    for key in (d / "out" / "runs").glob("*.key"):
        key.write_bytes(b"\xff{not json")
    code, err = run_cli("run", config, "--output-dir", d / "out")
    return code, err, all(json.loads(k.read_text()) for k in (d / "out" / "runs").glob("*.key"))


# ---------------------------------------------------------------- 10. cache keys

def cache_key_collision(fx: Fixture, d: Path) -> Result:
    pipelines = "  bm25>>qld: [bm25, qld]\n  bm25-then-qld: [bm25]\n  bm25: bm25"
    code, err = run_cli("run", fx.config(d, pipelines=pipelines), "--output-dir", d / "out")
    runs = sorted((d / "out" / "runs").glob("*.run"))
    distinct = len({r.read_text().replace("bm25-then-qld", "") for r in runs[:2]}) == 2
    return code, err, len(runs) == 3 and distinct


def cache_key_single_arrow(fx: Fixture, d: Path) -> Result:
    """`x>y`, `x_y` and `x>>y` slug alike or close; each keeps its own run file."""
    pipelines = "  x>y: [bm25, qld]\n  x_y: qld\n  x>>y: [bm25, {model: qld, mu: 500.0}]\n  bm25: bm25"
    code, err = run_cli("run", fx.config(d, pipelines=pipelines), "--output-dir", d / "out")
    runs = sorted((d / "out" / "runs").glob("*.run"))
    return code, err, len(runs) == 4 and len({r.stem for r in runs}) == 4  # one shared file would be 3


# ---------------------------------------------------------------- 13. a replace killed halfway

def _killed_between_renames(fx: Fixture, d: Path) -> Path:
    """The state a kill between a replace's two renames leaves: no index, the previous one hidden."""
    index = fx.index_copy(d / "idx")
    hidden = storage.temporary_container(index, "old", pid=dead_pid())  # as the replace made it
    os.rename(index, hidden / "previous")
    return index


def recover_on_open(fx: Fixture, d: Path) -> Result:
    index = _killed_between_renames(fx, d)
    code, err = fx.search(index, d / "run.txt")
    return code, err, (d / "run.txt").is_file() and not leftovers(d)


def recover_on_build(fx: Fixture, d: Path) -> Result:
    index = _killed_between_renames(fx, d)
    (d / "a.trec").write_text("<DOC>\n<DOCNO>z</DOCNO>\nzebra\n</DOC>\n")
    code, err = run_cli("index", "--collection", d / "a.trec", "--index", index)
    return code, err, Index.open(index).num_docs == 1 and not leftovers(d)


def recover_on_build_elsewhere(fx: Fixture, d: Path) -> Result:
    """A build at another path leaves the hidden previous index alone, and it comes back on open."""
    index = _killed_between_renames(fx, d)
    code, err = run_cli("index", "--collection", fx.docs, "--index", d / "other")
    return code, err, Index.open(index).num_docs == 6


CASES: list[tuple[str, str, Callable[[Fixture, Path], Result], str]] = [
    ("replace non-index", "directory with files", replace_dir_with_files, "error"),
    ("replace non-index", "plain file", replace_plain_file, "error"),
    ("replace non-index", "symlink to a directory", replace_symlink, "error"),
    ("replace non-index", "an index (replaced)", replace_index, "fine"),
    ("replace non-index", "empty directory (filled)", fill_empty_dir, "fine"),
    ("replace non-index", "--force", force_replaces, "fine"),
    ("replace non-index", "run: index.path not an index", run_config_over_non_index, "error"),
    ("special outputs", "/dev/null", output_dev_null, "fine"),
    ("special outputs", "FIFO", output_fifo, "fine"),
    ("special outputs", "symlink (followed)", output_symlink, "fine"),
    ("special outputs", "directory", output_directory, "error"),
    ("special outputs", "under a file", output_under_file, "error"),
    ("special outputs", "- (stdout)", output_stdout, "fine"),
    ("special outputs", "run --output-dir a file", run_output_dir_is_file, "error"),
    *[("manifest trust", name, lambda fx, d, e=edit: _manifest_case(fx, d, e), "error")
      for name, edit in MANIFEST_EDITS.items()],
    *[("manifest trust", f"crafted {name}", lambda fx, d, r=rel, c=change: _craft_array(fx, d, r, c),
       "error") for name, (rel, change) in CRAFTED_ARRAYS.items()],
    ("path traversal", "config name ../../x", config_name_traversal, "error"),
    ("path traversal", "manifest key ../x", manifest_key_outside, "error"),
    ("path traversal", "manifest key /abs", manifest_key_absolute, "error"),
    ("path traversal", "symlink inside an index", symlink_inside_index, "error"),
    ("path traversal", "shard name ../../x", shard_name_traversal, "error"),
    ("tracebacks", "--index under a file", index_under_file, "error"),
    ("tracebacks", "--index .", index_at_dot, "error"),
    ("tracebacks", "--index /", index_at_root, "error"),
    ("tracebacks", "HTML subdirectory named *.html", html_subdir_named_html, "fine"),
    ("tracebacks", "broken symlink in a collection", broken_symlink_in_collection, "error"),
    ("tracebacks", "corrupt runs/*.key", corrupt_cache_key, "fine"),
    ("cache key", "a>>b and a-then-b", cache_key_collision, "fine"),
    ("cache key", "x>y, x_y and x>>y", cache_key_single_arrow, "fine"),
    ("interrupted replace", "recovered on open", recover_on_open, "fine"),
    ("interrupted replace", "recovered on build", recover_on_build, "fine"),
    ("interrupted replace", "kept by a build elsewhere", recover_on_build_elsewhere, "fine"),
]


def outcome(result: Result | BaseException, expected: str) -> str:
    """Classify one case's result (see the module docstring); eval/hostile_values.py and
    eval/hostile_service.py use it too. A case that timed out (a child process or a request given
    up on) is a "hang"."""
    if isinstance(result, (TimeoutError, subprocess.TimeoutExpired)):
        return "hang"
    if isinstance(result, BaseException):
        return "traceback"
    code, err, ok = result
    if code < 0 or code >= 128:
        return "crash"
    if "Traceback" in err:
        return "traceback"
    one_line = err.strip().count("\n") == 0 and err.startswith("retrieval: error: ")
    if code == 2 and one_line and ok:
        return "error" if expected == "error" else "silent"
    if code == 0 and ok:
        return "fine" if expected == "fine" else "silent"
    return "silent"


def tally(cases: list[tuple[str, str, Callable, str]], run_one: Callable[[int, Callable], Result]
          ) -> list[tuple[str, str, str]]:
    """(category, case, outcome) for every case; `run_one(i, case)` runs the i-th."""
    rows = []
    for i, (category, name, case, expected) in enumerate(cases):
        try:
            result: Result | BaseException = run_one(i, case)
        except Exception as e:  # a bug: reported as a traceback, never raised
            result = e
        rows.append((category, name, outcome(result, expected)))
    return rows


def print_cases(run_cases: Callable[[Path], list[tuple[str, str, str]]]) -> None:
    """Run every case in a temporary directory and print one row each."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for row in run_cases(Path(tmp)):
            print(" | ".join(row))


def run_cases(workdir: Path) -> list[tuple[str, str, str]]:
    """(category, case, outcome) for every case, each in its own directory under `workdir`."""
    fx = Fixture(Path(workdir))
    return tally(CASES, lambda i, case: case(fx, fx.case_dir(f"{i:02d}")))


if __name__ == "__main__":
    print_cases(run_cases)
