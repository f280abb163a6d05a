"""The crash driver and file damage the reliability tests and eval/reliability.py share.

`drive(kind, root, points)` runs a driver process (`python -c DRIVER kind`) that
imports the package once, then for each kill point forks a child that runs the
write (index build, dense part, late part, run file, JSON), SIGKILLs it after a
delay spread over the measured duration of a complete write, and reports what
is on disk. `damage` truncates or flips a bit of a stored file; `loaders` are
what must refuse it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from retrieval.index.native import Index

ROOT = Path(__file__).resolve().parents[1]
KILL_POINTS = int(os.environ.get("RELIABILITY_KILL_POINTS", "20"))

DRIVER = r'''
import json, os, random, shutil, signal, sys, time
from pathlib import Path

kind, root, points = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
from retrieval import storage
from retrieval.errors import InputError
from retrieval.index.native import Index, build_index
from retrieval.types import Document, Run


def corpus(n, seed):
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(3000)] + "cat dog garden retrieval".split()
    return [Document(f"d{seed}-{i:05d}", "", " ".join(rng.choice(words) for _ in range(60)))
            for i in range(n)]


def run_child(work):
    """Fork a child running work(); returns its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            work()
            os._exit(0)
        except BaseException as e:  # report, never continue the parent's loop in the child
            print("child failed:", repr(e), file=sys.stderr)
            os._exit(3)
    return pid


def timed(work):
    start = time.perf_counter()
    pid = run_child(work)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, "a complete write failed"
    return time.perf_counter() - start


def killed(work, delay):
    """Run work() in a child and SIGKILL it after delay seconds; whether it finished first."""
    pid = run_child(work)
    time.sleep(delay)
    done, status = os.waitpid(pid, os.WNOHANG)
    os.kill(pid, signal.SIGKILL) if not done else None
    if not done:
        _, status = os.waitpid(pid, 0)
    return bool(done) and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def open_index(path, expect_parts=()):
    """'docs=N' after a full open + verify + load of every part, or 'InputError: ...'."""
    try:
        index = Index.open(path)
        n = index.num_docs
        assert len(index.docstore) == n
        index.inverted  # loads the postings
        parts = sorted(index.parts)
        if "dense" in index.parts:
            from retrieval.dense.faiss_index import load_dense_part
            faiss_index, ids, _ = load_dense_part(path)
            assert faiss_index.ntotal == len(ids) == n
        if "late" in index.parts:
            from retrieval.late import LateStore
            LateStore(index)
        kind = f" dense={index.parts['dense'].get('index_type')}" if "dense" in parts else ""
        return f"docs={n} parts={','.join(parts)}{kind} created={index.manifest['created']}"
    except InputError as e:
        return f"InputError: {e}"


results = []
if kind in ("inverted", "inverted-fresh"):
    old, new = corpus(300, 1), corpus(4000, 2)
    target, pristine = root / "idx", root / "pristine"
    build_index(old, pristine, progress=False)
    work = lambda: build_index(new, target, progress=False)
    duration = min(timed(work), timed(work))  # the faster of two: one slowed by other work beside it
    # would spread the kills past the end of the later builds (the test wants most to land mid-build)
    shutil.rmtree(target)
    for i in range(points):
        delay = duration * 1.1 * (i + 0.5) / points
        if kind == "inverted":
            shutil.copytree(pristine, target)
        finished = killed(work, delay)
        results.append({"delay": delay, "finished": finished, "state": open_index(target)})
        shutil.rmtree(target, ignore_errors=True)
    results.append({"old": open_index(pristine)})
elif kind in ("dense", "late", "dense-replace", "parts-replace"):
    docs = [Document(f"d{i:02d}", "", f"short document number {i} about cats and gardens")
            for i in range(20)]
    base = root / "base"
    build_index(docs, base, progress=False)
    if kind.startswith("dense") or kind == "parts-replace":
        from retrieval.dense.encoder import Encoder
        from retrieval.dense.faiss_index import add_dense
        model = Encoder()
        work = lambda: add_dense(base.parent / "idx", encoder=model)
        if kind != "dense":  # the previous index already has a dense part (built in a child)
            timed(lambda: add_dense(base, encoder=model, index_type="hnsw"))
        if kind == "parts-replace":  # what `retrieval index --index I --dense` runs
            from types import SimpleNamespace
            from retrieval.building import replace_parts
            part = SimpleNamespace(encoder=model, index_type="flat", params=None)
            work = lambda: replace_parts(base.parent / "idx", dense=part)
    else:
        from retrieval.late import LateModel, build_late
        model = LateModel()
        work = lambda: build_late(base.parent / "idx", model=model, progress=False)
    target = root / "idx"
    shutil.copytree(base, target)
    duration = timed(work)
    complete = open_index(target)
    shutil.rmtree(target)
    for i in range(points):
        delay = duration * 1.1 * (i + 0.5) / points
        shutil.copytree(base, target)
        finished = killed(work, delay)
        results.append({"delay": delay, "finished": finished, "state": open_index(target)})
        shutil.rmtree(target, ignore_errors=True)
    results.append({"complete": complete, "base": open_index(base)})
elif kind in ("run", "json"):
    from retrieval.formats import read_run, write_run
    rng = random.Random(0)
    big = Run({str(q): [(f"doc{rng.randrange(10**6)}-{r}", rng.random() * 10) for r in range(1000)]
               for q in range(300)})
    small = Run({"1": [("a", 1.0)]})
    target = root / ("run.txt" if kind == "run" else "results.json")
    if kind == "run":
        write_run(small, target)
        old = target.read_bytes()
        work = lambda: write_run(big, target)
    else:
        storage.write_json_atomic(target, {"old": True})
        old = target.read_bytes()
        payload = {q: dict(r) for q, r in list(big.items())[:60]}
        work = lambda: storage.write_json_atomic(target, payload)
    duration = timed(work)
    new = target.read_bytes()
    for i in range(points):
        delay = duration * 1.1 * (i + 0.5) / points
        target.write_bytes(old)
        finished = killed(work, delay)
        data = target.read_bytes() if target.exists() else None
        state = "old" if data == old else "new" if data == new else "absent" if data is None else "partial"
        results.append({"delay": delay, "finished": finished, "state": state})
    results.append({"new_bytes": len(new)})
results.append({"duration": duration, "leftovers": sorted(p.name for p in root.iterdir())})
print(json.dumps(results))
'''


def drive(kind: str, root: Path, points: int = KILL_POINTS, timeout: float = 300) -> tuple[list, dict]:
    """Run the driver; (per kill point results, summary entries)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run([sys.executable, "-c", DRIVER, kind, str(root), str(points)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"crash driver {kind} failed:\n{proc.stderr[-3000:]}")
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    summary: dict = {}
    for entry in results[points:]:
        summary.update(entry)
    return results[:points], summary


def damage(path: Path, how: str) -> None:
    """Cut `path` to half its length, or flip one bit in its middle."""
    data = bytearray(path.read_bytes())
    if how == "truncate":
        path.write_bytes(bytes(data[: len(data) // 2]))
    else:
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))


def loaders(path: Path, rel: str):
    """What must refuse a damaged file: Index.open, plus the part's own loader."""
    yield lambda: Index.open(path)
    if rel.startswith("dense/"):
        from retrieval.dense.faiss_index import load_dense_part

        yield lambda: load_dense_part(path)
