"""Every command and code block of the README and the tutorials runs (issue 54).

The fenced ```bash and ```python blocks of each file run in order, in a fresh working directory per
file (with `configs/` of this checkout linked into it), with the `retrieval` command and the package
of this checkout and RETRIEVAL_DATA set; a block fails the test on a non-zero exit (bash runs with
-e and pipefail) or an exception (the Python blocks of a file share one interpreter, as in a
notebook). A block that cannot run here is marked in the Markdown, on the line before it:

    <!-- not-run: why -->                      skipped; the reason is listed
    <!-- background: URL -->                   started in the background; the next blocks run once
                                              URL answers; at the end of the file it gets SIGTERM
                                              and must exit with status 143, as the README says

The test prints which blocks ran and which were skipped, with their reasons (also written to
build/docs-blocks.md).
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
import time
import traceback
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from retrieval import collections

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = ["README.md", "docs/getting-started.md",
             *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "tutorials").glob("*.md"))]
LANGUAGES = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python", "py": "python"}
MARKER = re.compile(r"<!--\s*(not-run|background):\s*(.*?)\s*-->")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
BLOCK_TIMEOUT = 900  # seconds: the slowest block (a dense index of a few passages) takes well under
LISTING = ROOT / "build" / "docs-blocks.md"


@dataclass
class Block:
    """One fenced code block: where it is, its language, its text and its marker, if any."""

    path: str
    line: int
    language: str  # the fence's info string as written
    code: str
    marker: str | None = None  # "not-run", "background"
    argument: str = ""  # the reason, or the URL to wait for

    @property
    def runs(self) -> str | None:
        """bash or python for an executable block, None for output, config and other text."""
        return LANGUAGES.get(self.language)


def code_blocks(path: Path, name: str) -> list[Block]:
    """The fenced blocks of a Markdown file, each with the marker on the line before it."""
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, language = opening.groups()
        end = next((j for j in range(i + 1, len(lines))
                    if lines[j].strip().startswith(fence) and not lines[j].strip()[len(fence):].strip()),
                   len(lines))
        code = textwrap.dedent("\n".join(line[len(indent):] if line.startswith(indent) else line
                                         for line in lines[i + 1:end]))
        previous = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.search(previous)
        blocks.append(Block(name, i + 1, language, code + "\n", *(marker.groups() if marker else ())))
        i = end + 1
    return blocks


def test_markers_are_understood(tmp_path):
    """The parser itself: fences, languages, markers and their reasons (a marker two lines up with
    text between does not count)."""
    text = ("Intro\n\n```bash\necho one\n```\n\n<!-- not-run: blocks forever -->\n```bash\nsleep inf\n```\n"
            "<!-- background: http://127.0.0.1:1/ -->\n\n```bash\nserve\n```\n"
            "<!-- not-run: x -->\nprose\n```python\nprint(2)\n```\n```text\noutput\n```\n")
    path = tmp_path / "check.md"
    path.write_text(text)
    blocks = code_blocks(path, "check.md")
    assert [(b.line, b.runs, b.marker, b.argument, b.code) for b in blocks] == [
        (3, "bash", None, "", "echo one\n"), (8, "bash", "not-run", "blocks forever", "sleep inf\n"),
        (13, "bash", "background", "http://127.0.0.1:1/", "serve\n"), (18, "python", None, "", "print(2)\n"),
        (21, None, None, "", "output\n")]


def _python_worker(connection, cwd: str, root: str, env: dict[str, str]) -> None:
    """Runs a file's Python blocks one by one in one namespace, in the file's working directory."""
    os.chdir(cwd)
    os.environ.update(env)
    sys.path.insert(0, root)
    namespace: dict[str, object] = {"__name__": "__main__"}
    while (message := connection.recv()) is not None:
        name, code = message
        try:
            exec(compile(code, name, "exec"), namespace)
            connection.send(None)
        except BaseException:  # reported to the test, which fails
            connection.send(traceback.format_exc())
        sys.stdout.flush()
        sys.stderr.flush()


class Runner:
    """Runs one file's blocks in its own working directory."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        bin_dir = workdir.parent / f"{workdir.name}-bin"
        bin_dir.mkdir()
        command = bin_dir / "retrieval"  # `retrieval` as installed, but this checkout's
        command.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m retrieval.cli "$@"\n')
        command.chmod(command.stat().st_mode | stat.S_IXUSR)
        (workdir / "configs").symlink_to(ROOT / "configs")
        self.env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                    "RETRIEVAL_DATA": str(collections.data_dir().resolve()),
                    "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                    "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
        self.python = None
        self.background: list[tuple[Block, subprocess.Popen]] = []

    def run(self, block: Block) -> None:
        if block.marker == "background":
            self._start(block)
        elif block.runs == "bash":
            proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.code], cwd=self.workdir,
                                  env={**os.environ, **self.env}, timeout=BLOCK_TIMEOUT,
                                  capture_output=True, text=True)
            assert proc.returncode == 0, _failure(block, f"exit status {proc.returncode}",
                                                  proc.stdout + proc.stderr)
        else:
            self._python(block)

    def _python(self, block: Block) -> None:
        if self.python is None:
            context = multiprocessing.get_context("spawn")
            ours, theirs = context.Pipe()
            process = context.Process(target=_python_worker,
                                      args=(theirs, str(self.workdir), str(ROOT), self.env))
            process.start()
            self.python = (process, ours)
        process, connection = self.python
        connection.send((f"{block.path}:{block.line}", block.code))
        assert connection.poll(BLOCK_TIMEOUT), _failure(block, "timed out", "")
        error = connection.recv()
        assert error is None, _failure(block, "raised", error)

    def _start(self, block: Block) -> None:
        try:  # something else answering there would pass for the command: say so instead
            with urllib.request.urlopen(block.argument, timeout=5):
                pytest.fail(f"{block.path}:{block.line}: {block.argument} answers before the block "
                            "started: another process holds the port")
        except OSError:
            pass
        proc = subprocess.Popen(["bash", "-c", f"exec {block.code.strip()}"], cwd=self.workdir,
                                env={**os.environ, **self.env}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        self.background.append((block, proc))
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(block.argument, timeout=5):
                    return
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    output = proc.communicate()[0] if proc.poll() is not None else ""
                    raise AssertionError(_failure(block, f"did not answer at {block.argument}",
                                                  output)) from None
                time.sleep(0.3)

    def close(self) -> None:
        """Stop the background commands (each must exit 143 on SIGTERM) and the Python interpreter."""
        if self.python is not None:
            process, connection = self.python
            connection.send(None)
            process.join(30)
        for block, proc in self.background:
            proc.send_signal(signal.SIGTERM)
            output = proc.communicate(timeout=60)[0]
            assert proc.returncode == 128 + signal.SIGTERM, _failure(
                block, f"exit status {proc.returncode} on SIGTERM, not 143", output)


def _failure(block: Block, what: str, output: str) -> str:
    return f"{block.path}:{block.line}: the {block.language} block {what}:\n{block.code}\n{output[-4000:]}"


RESULTS: dict[str, list[str]] = {}


def _listing() -> str:
    rows = ["| file | line | block | status |", "|---|---|---|---|"]
    for name in DOC_FILES:
        rows += RESULTS.get(name, [])
    return "\n".join(rows) + "\n"


@pytest.mark.slow  # models and whole collections: minutes in all
@pytest.mark.parametrize("name", DOC_FILES)
def test_code_blocks_run(name, tmp_path):
    path = ROOT / name
    if not path.exists():
        pytest.skip(f"{name} is not in this checkout")
    blocks = [b for b in code_blocks(path, name) if b.runs or b.marker]
    assert blocks, f"{name} has no code block to run"
    workdir = tmp_path / "work"
    workdir.mkdir()
    runner = Runner(workdir)
    rows = RESULTS.setdefault(name, [])
    rows.clear()
    try:
        for block in blocks:
            first = block.code.strip().splitlines()[0] if block.code.strip() else ""
            shown = first[:70].replace("`", "'")
            what = f"{block.language}: `{shown}`".replace("|", "\\|")
            if block.marker == "not-run":
                rows.append(f"| {name} | {block.line} | {what} | skipped: {block.argument} |")
                continue
            start = time.monotonic()
            runner.run(block)
            how = "ran in the background, SIGTERM -> 143" if block.marker == "background" else "ran"
            rows.append(f"| {name} | {block.line} | {what} | {how} ({time.monotonic() - start:.0f} s) |")
    finally:
        runner.close()
        LISTING.parent.mkdir(exist_ok=True)
        LISTING.write_text(_listing())
        print(f"\n{name}:\n" + "\n".join(rows))
    unmarked = [b for b in blocks if b.marker == "not-run" and not b.argument]
    assert not unmarked, f"a not-run marker needs a reason: {name}:{unmarked[0].line}"


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(path: Path) -> set[str]:
    """The heading anchors of a Markdown file, as MkDocs makes them (lower case, words joined by -)."""
    headings = re.findall(r"^#+\s+(.*)$", path.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", h).strip().lower()) for h in headings}


def test_readme_links_resolve():
    """Every link of the README to a file of this checkout names one that exists, and an anchor one
    of its headings; the site's own links are checked by mkdocs build --strict."""
    name = "README.md"
    path = ROOT / name
    broken = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # http:, mailto:
        file, _, anchor = target.partition("#")
        where = ROOT / file if file else path
        if not where.exists() or (anchor and anchor not in _anchors(where)):
            broken.append(target)
    assert not broken, f"{name}: links to nothing: {broken}"


def test_cli_reference_names_every_command_and_flag():
    """The generated CLI reference (docs/hooks/generated_pages.py, run by mkdocs at build time)
    has a section for every subcommand, nested ones included, and every flag of each."""
    import importlib.util

    from retrieval.cli import parser

    spec = importlib.util.spec_from_file_location("generated_pages", ROOT / "docs/hooks/generated_pages.py")
    hook = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = hook  # its dataclass looks its module up there
    spec.loader.exec_module(hook)
    page = hook.cli_reference()
    subcommands = hook._subcommands(parser())
    assert {"index", "search", "eval", "serve", "train late", "qa-eval"} <= {n for n, _ in subcommands}
    for name, sub in subcommands:
        section = page.split(f"## retrieval {name}\n", 1)[1].split("\n## ", 1)[0]
        flags = [flag for action in sub._actions for flag in action.option_strings]
        assert "--data-dir" in flags and all(flag in section for flag in flags), name
