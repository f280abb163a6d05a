"""Paths that are not the tool's, and crafted indexes (issue 49): what a command may replace, update,
clean up or trust.

Each case runs `retrieval` in this process (or in a child, where it could hang) on the tiny
collection of eval/hostile_fs.py and is classified as there: "error" (exit 2, one
`retrieval: error:` line naming what is wrong, nothing harmed), "fine" (exit 0 and the right
result, nothing of anyone else's touched), or a bug: "traceback", "crash", "silent" (exit 0, or a
clean error, with something deleted, replaced or wrong), "hang" (no end within a minute).
Crafted indexes have their checksums recomputed, as an attacker who knows the format would:
what is refused is refused by the checks of its content, not by a checksum.
eval/reliability.py tallies them; tests/test_reliability_hostile_paths.py asserts every case
gets what it expects.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "eval"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from hostile_fs import Fixture, dead_pid, print_cases, run_cli, tally  # noqa: E402

from retrieval import storage  # noqa: E402
from retrieval.index.native import Index  # noqa: E402

Result = tuple[int, str, bool]
NEW_DOCS = ("<DOC>\n<DOCNO>n1</DOCNO>\nbirds in gardens\n</DOC>\n"
            "<DOC>\n<DOCNO>n2</DOCNO>\nbirds sing\n</DOC>\n")


def digest(path: Path) -> str:
    """What is at `path`, to the byte (kind, link target, contents, listing), to tell it unchanged."""
    import hashlib

    if path.is_symlink():
        return "link:" + os.readlink(path)
    if path.is_file():
        return "file:" + hashlib.sha256(path.read_bytes()).hexdigest()
    if path.is_dir():
        return "dir:" + ",".join(sorted(f"{p.name}={digest(p)}" for p in path.iterdir()))
    return "absent"


def live_index(fx: Fixture, d: Path, deleted: bool = False) -> Path:
    """A live index of the tiny collection plus one added segment (`deleted`: d0 marked deleted)."""
    index = fx.index_copy(d / "live")
    (d / "new.trec").write_text(NEW_DOCS)
    code, err = run_cli("add", "--index", index, d / "new.trec")
    assert code == 0, err
    if deleted:
        (d / "ids.txt").write_text("d0\n")
        code, err = run_cli("delete", "--index", index, "--ids", d / "ids.txt")
        assert code == 0, err
    return index


def reseal(index: Path) -> None:
    """Recompute every checksum the manifests of `index` record (shards' first), so a crafted file
    passes the checksum check and must be refused for what it holds."""
    path = index / storage.MANIFEST
    manifest = json.loads(path.read_text())
    for shard in manifest.get("shards", []):
        if (index / shard["name"] / storage.MANIFEST).is_file():
            reseal(index / shard["name"])
            shard["manifest_sha256"] = storage.sha256_file(index / shard["name"] / storage.MANIFEST)
    lists = [manifest.get("files", {})] + [p.get("files", {}) for p in manifest.get("parts", {}).values()]
    for files in lists:
        for rel in files:
            if (index / rel).is_file():
                files[rel] = storage.checksum_file(index / rel)
    path.write_text(json.dumps(manifest))


def edit_manifest(index: Path, edit: Callable[[dict], object]) -> None:
    manifest = json.loads((index / storage.MANIFEST).read_text())
    edit(manifest)
    (index / storage.MANIFEST).write_text(json.dumps(manifest))


def searched(fx: Fixture, index: Path, d: Path, *flags: object) -> Result:
    """`search` over a crafted index: refused, no run written."""
    code, err = run_cli("search", "--index", index, "--topics", fx.topics, "--output", d / "run.txt", *flags)
    return code, err, not (d / "run.txt").exists()


def child_search(fx: Fixture, index: Path, d: Path, *flags: object) -> Result:
    """`search` in a child process given a minute and 8 GiB of address space (a hang is reported as
    one; running out of memory is a traceback, not the machine's memory gone)."""
    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))

    proc = subprocess.run([sys.executable, "-m", "retrieval.cli", "search", "--index", str(index), "--topics",
                           str(fx.topics), "--output", str(d / "run.txt"), *map(str, flags)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, preexec_fn=limit,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return proc.returncode, proc.stderr, not (d / "run.txt").exists()


# ---------------------------------------------------------------- 6. a directory that is not the tool's

def version_only_manifest(fx: Fixture, d: Path, command: str = "index") -> Result:
    """A user directory that happens to hold `manifest.json` {"format_version": 1}."""
    victim = d / "mine"
    victim.mkdir()
    (victim / storage.MANIFEST).write_text('{"format_version": 1}')
    (victim / "precious.txt").write_text("keep")
    before = digest(victim)
    if command == "index":
        code, err = run_cli("index", "--collection", fx.docs, "--index", victim)
    else:
        code, err = run_cli("run", fx.config(d, index=victim), "--output-dir", d / "out")
    return code, err, digest(victim) == before


def index_with_a_user_file(fx: Fixture, d: Path) -> Result:
    """An index someone has put a file of their own in: not replaced without --force."""
    victim = fx.index_copy(d / "idx")
    (victim / "notes.txt").write_text("keep")
    before = digest(victim)
    code, err = run_cli("index", "--collection", fx.docs, "--index", victim)
    return code, err, digest(victim) == before


def schema_only_manifest(fx: Fixture, d: Path) -> Result:
    """A directory holding only a manifest with the version but none of an index's entries."""
    victim = d / "idx"
    victim.mkdir()
    (victim / storage.MANIFEST).write_text('{"format_version": 1, "files": {}, "parts": {}}')
    before = digest(victim)
    code, err = run_cli("index", "--collection", fx.docs, "--index", victim)
    return code, err, digest(victim) == before


def own_index_with_leftover(fx: Fixture, d: Path) -> Result:
    """An index of ours with a killed write's temporary container inside is still ours: replaced."""
    index = fx.index_copy(d / "idx")
    storage.temporary_container(index / "dense", "tmp", pid=dead_pid())
    code, err = run_cli("index", "--collection", fx.docs, "--no-stem", "--index", index)
    return code, err, Index.open(index).manifest["analyzer"]["stemmer"] is None


# ---------------------------------------------------------------- 7. inside an index

def inside(command: str, target: Callable[[Path], Path], live: bool = True
           ) -> Callable[[Fixture, Path], Result]:
    """`command` aimed at a path inside an index: refused, the parent index byte for byte as before."""
    def case(fx: Fixture, d: Path) -> Result:
        parent = live_index(fx, d) if live else fx.index_copy(d / "idx")
        path = target(parent)
        (d / "ids.txt").write_text("d1\n")
        (d / "more.trec").write_text("<DOC>\n<DOCNO>m1</DOCNO>\nmice\n</DOC>\n")
        before = digest(parent)
        args = {"index": ["index", "--collection", fx.docs, "--index", path],
                "add": ["add", "--index", path, d / "more.trec"],
                "delete": ["delete", "--index", path, "--ids", d / "ids.txt"],
                "optimize": ["optimize", "--index", path]}.get(command)
        if args is None:  # run: the config's index.path
            args = ["run", fx.config(d, index=path), "--output-dir", d / "out"]
        code, err = run_cli(*args)
        return code, err, digest(parent) == before
    return case


def nested_sharded(fx: Fixture, d: Path) -> Result:
    """A shard of an index built with --shards, named as an index of its own."""
    parent = d / "sharded"
    code, err = run_cli("index", "--collection", fx.docs, "--index", parent, "--shards", "2")
    assert code == 0, err
    before = digest(parent)
    code, err = run_cli("index", "--collection", fx.docs, "--index", parent / "shard-001")
    return code, err, digest(parent) == before


# ---------------------------------------------------------------- 8. clean-up of what is not ours

def others_leftover(name: str, command: str = "search") -> Callable[[Fixture, Path], Result]:
    """Something of someone else's named like a temporary of ours, beside the output: kept."""
    def case(fx: Fixture, d: Path) -> Result:
        out = d / "o"
        out.mkdir()
        theirs = out / name.replace("DEAD", str(dead_pid()))
        if "/" in name:
            theirs.parent.mkdir(parents=True)
        theirs.write_text("someone else's")
        top = out / Path(theirs.relative_to(out)).parts[0]  # the entry beside the output
        before = digest(top)
        if command == "search":
            code, err = fx.search(fx.index, out / "out1.txt")
            done = (out / "out1.txt").is_file()
        else:
            code, err = run_cli("index", "--collection", fx.docs, "--index", out / "idx")
            done = Index.open(out / "idx").num_docs == 6
        return code, err, done and digest(top) == before
    return case


def killed_writers_leftovers(fx: Fixture, d: Path) -> Result:
    """The containers a killed write of ours left (its marked temporaries) still go at the next write."""
    dead = dead_pid()
    ours = [storage.temporary_container(d / "run.txt", "tmp", pid=dead),
            storage.temporary_container(d / "idx", "tmp", pid=dead),
            storage.temporary_container(d / "idx", "old", pid=dead)]
    code, err = fx.search(fx.index, d / "run.txt")
    code2, err2 = run_cli("index", "--collection", fx.docs, "--index", d / "idx")
    return code or code2, err + err2, not any(p.exists() for p in ours)


# ---------------------------------------------------------------- 9. crafted indexes

def crafted_array(rel: str, change: Callable[[np.ndarray], np.ndarray], *flags: object,
                  child: bool = False) -> Callable[[Fixture, Path], Result]:
    """An array of a native index replaced (checksums recomputed): the search is refused."""
    def case(fx: Fixture, d: Path) -> Result:
        index = fx.index_copy(d / "idx")
        array = np.load(index / rel, allow_pickle=False)
        storage.save_array(index / rel, change(array.copy()))
        reseal(index)
        return (child_search if child else searched)(fx, index, d, *flags)
    return case


def crafted_file(rel: str, data: bytes | Callable[[Path], None], *flags: object
                 ) -> Callable[[Fixture, Path], Result]:
    """A file of a native index replaced (checksums recomputed): the search is refused."""
    def case(fx: Fixture, d: Path) -> Result:
        index = fx.index_copy(d / "idx")
        if callable(data):
            data(index / rel)
        else:
            (index / rel).write_bytes(data)
        if rel != storage.MANIFEST:
            reseal(index)
        return searched(fx, index, d, *flags)
    return case


def crafted_manifest(edit: Callable[[dict], object], live: bool = False) -> Callable[[Fixture, Path], Result]:
    """A manifest edited (native or live index): the search is refused."""
    def case(fx: Fixture, d: Path) -> Result:
        index = live_index(fx, d) if live else fx.index_copy(d / "idx")
        edit_manifest(index, edit)
        return searched(fx, index, d)
    return case


def next_segment(value: object) -> Callable[[Fixture, Path], Result]:
    """live.next_segment crafted: an add is refused before it writes (no segment built over another)."""
    def case(fx: Fixture, d: Path) -> Result:
        index = live_index(fx, d)
        edit_manifest(index, lambda m: m["live"].__setitem__("next_segment", value))
        before = digest(index)
        (d / "more.trec").write_text("<DOC>\n<DOCNO>m1</DOCNO>\nmice\n</DOC>\n")
        code, err = run_cli("add", "--index", index, d / "more.trec")
        return code, err, digest(index) == before
    return case


def crafted_generation(rel: str, data: Callable[[Path], None]) -> Callable[[Fixture, Path], Result]:
    """A file of a live index's current generation replaced (checksums recomputed): refused."""
    def case(fx: Fixture, d: Path) -> Result:
        index = live_index(fx, d, deleted=True)
        generation = json.loads((index / storage.MANIFEST).read_text())["live"]["generation"]
        data(index / f"gen-{generation:06d}" / rel)
        reseal(index)
        return searched(fx, index, d)
    return case


def symlinked_manifest(fx: Fixture, d: Path) -> Result:
    index = fx.index_copy(d / "idx")
    os.rename(index / storage.MANIFEST, d / "elsewhere.json")
    (index / storage.MANIFEST).symlink_to(d / "elsewhere.json")
    return searched(fx, index, d)


def symlinked_segment(fx: Fixture, d: Path) -> Result:
    index = live_index(fx, d)
    shutil.move(index / "shard-001", d / "outside-segment")
    (index / "shard-001").symlink_to(d / "outside-segment")
    return searched(fx, index, d)


def naming(case: Callable[[Fixture, Path], Result], name: str) -> Callable[[Fixture, Path], Result]:
    """`case`, whose error must also name the file at fault (`name`)."""
    def named(fx: Fixture, d: Path) -> Result:
        code, err, ok = case(fx, d)
        return code, err, ok and (code != 2 or name in err)
    return named


def _save(array: object) -> Callable[[Path], None]:
    return lambda path: storage.save_array(path, np.asarray(array))


def _unsorted_terms(index: Path) -> None:
    """The vocabulary written in reverse order (a valid blob and offsets, terms not sorted)."""
    from retrieval.index.postings import InvertedIndex, write_terms

    terms = InvertedIndex(index / "inverted").terms
    write_terms(index / "inverted", terms[::-1])


def _empty_docstore(path: Path) -> None:
    path.unlink()
    sqlite3.connect(path).close()


def _deep(manifest: Path) -> None:
    manifest.write_text('{"format_version": 1, "x": ' + "[" * 200_000 + "]" * 200_000 + "}")


def _last_docno_moved(a: np.ndarray) -> np.ndarray:
    a[0] += 1  # the first block's recorded last docno is not the one its gaps decode to
    return a


def _words_garbled(a: np.ndarray) -> np.ndarray:
    a[:8] = 0xFFFFFFFF  # the first postings' gaps and frequencies made the largest their widths hold
    return a


def _first(value: int) -> Callable[[np.ndarray], np.ndarray]:
    """An array's first element set to `value` (its type kept)."""
    return lambda a: np.where(np.arange(len(a)) == 0, value, a).astype(a.dtype)


def _nan_table(a: np.ndarray) -> np.ndarray:
    a[0] = np.nan
    return a


def _set_stemmer(m: dict) -> None:
    m["analyzer"]["stemmer"] = "snowball"


def _listed_twice(m: dict) -> None:
    m["shards"].append(dict(m["shards"][0]))


E, F = "error", "fine"
CASES: list[tuple[str, str, Callable[[Fixture, Path], Result], str]] = [
    ("not the tool's", "index over {format_version: 1} + precious.txt", version_only_manifest, E),
    ("not the tool's", "run with index.path such a directory",
     lambda fx, d: version_only_manifest(fx, d, "run"), E),
    ("not the tool's", "an index holding a user's file", index_with_a_user_file, E),
    ("not the tool's", "a manifest failing the schema", schema_only_manifest, E),
    ("not the tool's", "our index with a killed write's temporary (replaced)", own_index_with_leftover, F),
    ("inside an index", "index --index live/shard-000", inside("index", lambda p: p / "shard-000"), E),
    ("inside an index", "add --index live/shard-000", inside("add", lambda p: p / "shard-000"), E),
    ("inside an index", "delete --index live/shard-000", inside("delete", lambda p: p / "shard-000"), E),
    ("inside an index", "optimize --index live/shard-000", inside("optimize", lambda p: p / "shard-000"), E),
    ("inside an index", "run index.path live/shard-001", inside("run", lambda p: p / "shard-001"), E),
    ("inside an index", "index --index idx/sub (new, in a native index)",
     inside("index", lambda p: p / "sub", live=False), E),
    ("inside an index", "index --index sharded/shard-001", nested_sharded, E),
    ("clean-up", "search --output o/out1.txt beside o/.out1.txt.tmp-4000000-keep",
     others_leftover(".out1.txt.tmp-4000000-keep"), F),
    ("clean-up", "search --output o/out1.txt beside o/.out1.txt.old-DEAD-y/keepme/data",
     others_leftover(".out1.txt.old-DEAD-y/keepme/data"), F),
    ("clean-up", "index --index o/idx beside o/.idx.tmp-DEAD-x/keep",
     others_leftover(".idx.tmp-DEAD-x/keep", "index"), F),
    ("clean-up", "index --index o/idx beside o/.idx.old-DEAD-x/previous/f",
     others_leftover(".idx.old-DEAD-x/previous/f", "index"), F),
    ("clean-up", "a killed write's own temporaries (removed)", killed_writers_leftovers, F),
    ("crafted index", "live.next_segment 0 (add)", next_segment(0), E),
    ("crafted index", "live.next_segment -1 (add)", next_segment(-1), E),
    ("crafted index", "live.next_segment '2' (add)", next_segment("2"), E),
    ("crafted index", "live.next_segment 1.5 (add)", next_segment(1.5), E),
    ("crafted index", "manifest.json a symlink out of the index", symlinked_manifest, E),
    ("crafted index", "segment directory a symlink out of the index", symlinked_segment, E),
    ("crafted index", "NaN impact", crafted_array("inverted/impact_table.npy", _nan_table), E),
    ("crafted index", "negative impacts", crafted_array("inverted/impact_table.npy", lambda a: -a), E),
    ("crafted index", "unsorted vocabulary", crafted_file("inverted/terms_utf8.npy",
                                                          lambda p: _unsorted_terms(p.parents[1])), E),
    ("crafted index", "a block whose last docno is not its own",
     crafted_array("inverted/block_lasts.npy", _last_docno_moved), E),
    ("crafted index", "garbled postings words (docnos past the count, tfs above lengths)",
     crafted_array("inverted/block_words.npy", _words_garbled), E),
    ("crafted index", "segment listed twice",
     naming(crafted_manifest(_listed_twice, live=True), "manifest.json"), E),
    ("crafted index", "duplicate deleted.npy", crafted_generation("shard-000/deleted.npy", _save([0, 0])), E),
    ("crafted index", "float deleted.npy", crafted_generation("shard-000/deleted.npy", _save([0.0])), E),
    ("crafted index", "impacts.json naming k1 1.5 (search --k1 1.5)",
     crafted_file("inverted/impacts.json", b'{"b": 0.4, "k1": 1.5, "model": "BM25Model"}\n', "--k1", "1.5"),
     E),
    ("crafted index", "doc_lengths[0] = 2**31-1 (qld, no hang)",
     crafted_array("inverted/doc_lengths.npy", _first(2**31 - 1), "--model", "qld", child=True), E),
    ("crafted index", "non-UTF-8 terms_utf8", crafted_array("inverted/terms_utf8.npy", _first(0xFF)), E),
    ("crafted index", "manifest nested 200,000 deep", crafted_file("manifest.json", _deep), E),
    ("crafted index", "unknown stemmer", crafted_manifest(_set_stemmer), E),
    ("crafted index", '{"documents": -5} as a generation\'s stats',
     crafted_generation("shard-000/stats.json", lambda p: p.write_text('{"documents": -5}')), E),
    ("crafted index", "a doc store without its table", crafted_file("docs.sqlite", _empty_docstore), E),
]


def run_cases(workdir: Path) -> list[tuple[str, str, str]]:
    """(category, case, outcome) for every case, each in its own directory under `workdir`."""
    fx = Fixture(Path(workdir))
    return tally(CASES, lambda i, case: case(fx, fx.case_dir(f"p{i:02d}")))


if __name__ == "__main__":
    print_cases(run_cases)
