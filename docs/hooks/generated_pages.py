"""MkDocs hook: the pages made from the code and the results at build time, so they cannot go stale.

- reference/cli.md: its `<!-- cli-reference -->` marker becomes the `--help` of `retrieval` and of
  every subcommand (nested ones such as `train late` included), read from the argparse parsers
  that retrieval/cli.py and retrieval/commands/*.py register.
- results/<name>.md and results/studies/<name>.md: one page per file of eval/results/ and
  eval/studies/results/ (the file itself, with the command that regenerates it first), added to
  the Results section of the nav; results/index.md's `<!-- results-table -->` marker becomes the
  table of them.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
CLI_MARKER = "<!-- cli-reference -->"
RESULTS_MARKER = "<!-- results-table -->"
COMMAND = re.compile(r"Regenerate with `([^`]+)`")


@dataclass(frozen=True)
class ResultsPage:
    """One results file and the page made of it."""

    source: Path  # eval/results/NAME.md
    uri: str  # results/NAME.md
    title: str
    commands: tuple[str, ...]


def _results_pages() -> list[ResultsPage]:
    pages = []
    for folder, prefix in (("eval/results", "results"), ("eval/studies/results", "results/studies")):
        for source in sorted((ROOT / folder).glob("*.md")):
            text = source.read_text(encoding="utf-8")
            title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")),
                         source.stem)
            commands = tuple(dict.fromkeys(COMMAND.findall(text)))
            pages.append(ResultsPage(source.relative_to(ROOT), f"{prefix}/{source.stem}.md", title,
                                     commands))
    return pages


def _results_page_markdown(page: ResultsPage) -> str:
    text = page.source.read_text(encoding="utf-8")
    lines = text.splitlines()
    head = next((i for i, line in enumerate(lines) if line.startswith("# ")), -1)
    commands = "\n".join(f"    {c}" for c in page.commands) or "    (no command recorded)"
    note = (f'!!! note "Generated from `{page.source}`"\n    Regenerate with:\n\n'
            f"{_indent(commands)}\n")
    return "\n".join([*lines[:head + 1], "", note, *lines[head + 1:]]) + "\n"


def _indent(block: str) -> str:
    return "\n".join(f"    {line}" for line in block.splitlines())


def _results_table(pages: list[ResultsPage], folder: str) -> str:
    """The table of the results pages under `folder` (results/ or results/studies/), linked from a
    page in that folder."""
    rows = ["| results | regenerate with | file |", "|---|---|---|"]
    for page in pages:
        if page.uri.rpartition("/")[0] != folder.rstrip("/"):
            continue
        link = page.uri.removeprefix(folder)
        commands = "<br>".join(f"`{c}`".replace("|", "\\|") for c in page.commands) or "–"
        rows.append(f"| [{page.title}]({link}) | {commands} | `{page.source}` |")
    return "\n".join(rows)


def _subcommands(p: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """(name, parser) of every subcommand below `p`, depth first, in registration order."""
    out = []
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                out.append((name, child))
                out.extend((f"{name} {sub}", grandchild) for sub, grandchild in _subcommands(child))
    return out


def cli_reference() -> str:
    """Markdown: the help of `retrieval` and each subcommand, as the terminal shows it (80 columns)."""
    sys.path.insert(0, str(ROOT))  # this checkout's package, not whichever one is installed
    os.environ["COLUMNS"] = "80"  # argparse wraps to the terminal width: fixed, the same page anywhere
    try:
        from retrieval.cli import parser
    finally:
        sys.path.remove(str(ROOT))
    top = parser()
    subcommands = _subcommands(top)
    parts = ["Commands: " + ", ".join(f"[`{name}`](#{_anchor(name)})" for name, _ in subcommands), "",
             "## retrieval", "", "```text", top.format_help().rstrip(), "```", ""]
    for name, sub in subcommands:
        parts += [f"## retrieval {name}", "", "```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(parts)


def _anchor(name: str) -> str:
    return "retrieval-" + name.replace(" ", "-")


def on_config(config, **kwargs):
    """Add one nav entry per results file to the Results section (and Studies beneath it)."""
    pages = _results_pages()
    results = next(s["Results"] for s in config["nav"] if isinstance(s, dict) and "Results" in s)
    studies = next(s["Studies"] for s in results if isinstance(s, dict) and "Studies" in s)
    benchmarks = [{p.title: p.uri} for p in pages if not p.uri.startswith("results/studies/")]
    at = next(i for i, s in enumerate(results) if isinstance(s, dict) and "Studies" in s)
    results[at:at] = benchmarks
    studies.extend({p.title: p.uri} for p in pages if p.uri.startswith("results/studies/"))
    return config


def on_files(files, config, **kwargs):
    for page in _results_pages():
        files.append(File.generated(config, page.uri, content=_results_page_markdown(page)))
    return files


def on_page_markdown(markdown: str, page, config, files, **kwargs):
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if RESULTS_MARKER in markdown:
        folder = page.file.src_uri.rpartition("/")[0] + "/"
        markdown = markdown.replace(RESULTS_MARKER, _results_table(_results_pages(), folder))
    return markdown
