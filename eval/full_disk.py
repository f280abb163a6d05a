"""Writes on a full disk: each command that writes, run with less free space than it needs.

`drive(case, root, points)` starts a driver process in a private mount namespace
(`unshare -rm`: no root needed where unprivileged user namespaces are allowed)
that imports the package once, mounts a tmpfs, puts the case's inputs on it,
and then, for each of `points` amounts of free space from 0 bytes up to a little
more than the command needs, fills the rest of the tmpfs with a filler file and
runs the command (`retrieval ...`, in-process) in a forked child. Outcomes:

- fine: exit 0 and the output complete (the index opens and verifies, the run
  file reads);
- error: exit 2 with one line, `retrieval: error: <file>: No space left on
  device`, and the disk exactly as before the command (inputs byte-identical,
  no temporary file or directory left; the empty lock file an update keeps
  beside the index aside);
- bugs: traceback (any other exit), crash (killed by a signal, such as SIGBUS
  in a memory-mapped write), unclear (exit 2, but not that one line),
  leftover (the disk not as before).

eval/reliability.py tallies them into eval/results/reliability.md;
tests/test_reliability_full_disk.py asserts that every attempt is fine or error.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (name, what it runs): each builds its inputs with plenty of space, then sweeps the free space
CASES = {
    "index": "index --collection DOCS --index idx (no index there yet)",
    "index over an index": "index --collection DOCS --index idx over an existing index of other documents",
    "index --dense --late": "index --collection DOCS --index idx --dense --late (no index there yet)",
    "index --index --dense --late": "index --index idx --dense --late: parts added to an existing index",
    "add": "add --index idx NEW: a new segment of a live index (one add done) with dense and late parts",
    "first add": "add --index idx NEW: the first update of a native index (with dense and late parts)",
    "search --output": "search --index idx --topics TOPICS --hits 1000 --output run.txt",
}

DRIVER = r'''
import json, os, re, random, shutil, signal, subprocess, sys
from pathlib import Path

case, root, points = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
from retrieval.cli import main as cli
from retrieval.formats import read_documents, read_run
from retrieval.index.kinds import open_index
from retrieval.storage import sha256_file

words = [f"w{i}" for i in range(2000)] + "cat dog garden retrieval neural ranking".split()


def trec(path, n, seed, length):
    rng = random.Random(seed)
    path.write_text("".join(f"<DOC>\n<DOCNO>d{seed}-{i:04d}</DOCNO>\n"
                            + " ".join(rng.choice(words) for _ in range(length)) + "\n</DOC>\n"
                            for i in range(n)))
    return path


inputs = root / "inputs"
inputs.mkdir()
neural = case in ("index --dense --late", "index --index --dense --late", "add", "first add")
import nltk  # noqa: F401  (imported once here, not in every forked child: seconds each)
if neural:
    import faiss, torch, transformers  # noqa: F401
    import transformers.models.bert.modeling_bert  # noqa: F401
    import retrieval.dense, retrieval.late  # noqa: F401
docs = trec(inputs / "docs.trec", 12 if neural else 400, 1, 30 if neural else 80)
other = trec(inputs / "other.trec", 3 if neural else 300, 2, 60)
new = trec(inputs / "new.trec", 6, 3, 30)
topics = inputs / "topics.tsv"
topics.write_text("".join(f"{q}\t{words[q]} {words[q + 1]} cat\n" for q in range(40)))
disk = root / "disk"
disk.mkdir()
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(disk)], check=True)
idx = disk / "idx"
argv = {
    "index": ["index", "--collection", docs, "--index", idx],
    "index over an index": ["index", "--collection", docs, "--index", idx],
    "index --dense --late": ["index", "--collection", docs, "--index", idx, "--dense", "--late"],
    "index --index --dense --late": ["index", "--index", idx, "--dense", "--late"],
    "add": ["add", "--index", idx, new],
    "first add": ["add", "--index", idx, new],
    "search --output": ["search", "--index", idx, "--topics", topics, "--hits", "1000",
                        "--output", disk / "run.txt"],
}[case]
argv = [str(a) for a in argv]


def quiet_cli(args):
    """Run the CLI in this process, stdout and stderr to files; (exit code)."""
    with open(root / "out.txt", "w") as out, open(root / "err.txt", "w") as err:
        os.dup2(out.fileno(), 1)  # sys.stdout and sys.stderr write to these descriptors
        os.dup2(err.fileno(), 2)
        code = cli(args)
        sys.stdout.flush()
        sys.stderr.flush()
        return code


def in_child(args):
    """(exit code or -signal, stderr) of the CLI run in a forked child."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(quiet_cli(args))
        except BaseException:
            os._exit(99)
    _, status = os.waitpid(pid, 0)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
    return code, (root / "err.txt").read_text(errors="replace")


if case == "index over an index":
    assert in_child(["index", "--collection", str(other), "--index", str(idx)])[0] == 0
elif case == "add":  # a live index already: the first add turns a native one into it, in place
    assert in_child(["index", "--collection", str(docs), "--index", str(idx), "--dense", "--late"])[0] == 0
    assert in_child(["add", "--index", str(idx), str(other)])[0] == 0
elif case == "first add":
    assert in_child(["index", "--collection", str(docs), "--index", str(idx), "--dense", "--late"])[0] == 0
elif case in ("search --output", "index --index --dense --late"):
    assert in_child(["index", "--collection", str(docs), "--index", str(idx)])[0] == 0
prepared = disk.parent / "prepared"
shutil.copytree(disk, prepared, symlinks=True)


def snapshot():
    """Every file and directory on the disk with its digest; not the filler, nor the empty lock file
    an update creates beside the index and keeps (live.update_lock: removing it could race)."""
    return {str(p.relative_to(disk)): (sha256_file(p) if p.is_file() else "dir") for p in disk.rglob("*")
            if p.name not in ("filler", ".idx.update-lock")}


def reset():
    for p in disk.iterdir():
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    for p in prepared.iterdir():
        (shutil.copytree(p, disk / p.name, symlinks=True) if p.is_dir() else shutil.copy2(p, disk / p.name))


def free():
    st = os.statvfs(disk)
    return st.f_bavail * st.f_frsize


def complete():
    """Whether the command's output is whole: the index opens and verifies, the run file reads."""
    if case == "search --output":
        return len(read_run(disk / "run.txt")) == 40
    index = open_index(idx)
    wanted = {"dense", "late"} if neural else set()
    documents = {"add": 12 + 3 + 6, "first add": 12 + 6}.get(case, len(list(read_documents(docs))))
    return wanted <= set(index.parts) and index.statistics["documents"] == documents


prepared_files = snapshot()
code, err = in_child(argv)
assert code == 0, err
written = sum((disk / rel).stat().st_size for rel, digest in snapshot().items()
              if digest != "dir" and prepared_files.get(rel) != digest)
results = []
top = 2 * written + 65536  # a replace holds the old output and the new at once
for i in range(points):
    reset()  # the disk as prepared_files says
    room = top * i // max(points - 1, 1)
    filler = disk / "filler"
    size = (free() - room) // 4096 * 4096
    if size > 0:
        fd = os.open(filler, os.O_CREAT | os.O_WRONLY)
        os.posix_fallocate(fd, 0, size)
        os.close(fd)
    room = free()
    code, err = in_child(argv)
    if filler.exists():
        filler.unlink()
    lines = [line for line in err.splitlines() if line.strip()]
    if code == 0:
        try:
            outcome = "fine" if complete() else "leftover"
        except Exception as e:
            outcome, lines = "leftover", [repr(e)]
    elif code < 0:
        outcome = "crash"
        lines = [f"killed by {signal.Signals(-code).name}"]
    elif code != 2 or "Traceback" in err:
        outcome = "traceback"
        lines = lines[-1:]
    elif len(lines) != 1 or not re.fullmatch(f"retrieval: error: {re.escape(str(disk))}/.*: No space left"
                                             " on device", lines[0]):
        outcome = "unclear"  # not one line naming the file on this disk
        lines = [" | ".join(lines)]
    else:
        changed = sorted(set(snapshot().items()) ^ set(prepared_files.items()))
        outcome = "leftover" if changed else "error"
        if changed:
            lines.append("changed: " + ", ".join(rel for rel, _ in changed[:3]))
    results.append({"free": room, "outcome": outcome, "message": lines[-1] if lines else ""})
print(json.dumps({"written": written, "results": results}))
'''


def available() -> str | None:
    """Why the driver cannot run here (no unshare, or no user namespaces), or None."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unshare -rm fails here: {probe.stderr.strip()}"
    return None


def drive(case: str, root: Path, points: int, timeout: float = 900) -> dict:
    """Run the driver for one case; {"written": bytes a complete run writes, "results": [{"free",
    "outcome", "message"}]}."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(["unshare", "-rm", sys.executable, "-c", DRIVER, case, str(root), str(points)],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"full-disk driver {case!r} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    import tempfile

    why = available()
    if why:
        sys.exit(f"full_disk: {why}")
    for name in sys.argv[1:] or CASES:
        with tempfile.TemporaryDirectory(prefix="full-disk-") as tmp:
            report = drive(name, Path(tmp), int(os.environ.get("POINTS", "12")))
        print(name, report["written"])
        for r in report["results"]:
            print(f"  {r['free']:>9} {r['outcome']:9} {r['message'][:150]}")
