"""Every figure file under eval/results/ (benchmarks) and eval/studies/results/ (one-off studies) is made of
sections, each the whole output of one command named in it, on the machine it names."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

EVAL = Path(__file__).parents[1] / "eval"
sys.path.insert(0, str(EVAL))
from benchlib import PREAMBLE, SECTION, read_sections  # noqa: E402

SCRIPT = re.compile(r"^(?:RETRIEVAL_\w+=\S+ )*python (eval/(?:studies/)?\w+\.py)\b")
RESULTS = sorted([*(EVAL / "results").glob("*.md"), *(EVAL / "studies" / "results").glob("*.md")])


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_results_file_sections_name_the_command_that_wrote_them(path):
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# ") and lines[1] == "" and lines[2] == PREAMBLE, \
        f"{path.name}: expected a title, a blank line, then the preamble"
    title, sections = read_sections(path)
    assert sections, f"{path.name}: no '## Run of DATE on MACHINE' section"
    assert len(sections) == sum(bool(SECTION.match(line)) for line in lines)
    keys = [(s.command, s.machine) for s in sections]
    assert len(set(keys)) == len(keys), f"{path.name}: two sections of one command on one machine"
    assert [s.date for s in sections] == sorted((s.date for s in sections), reverse=True), "newest first"
    for section in sections:
        match = SCRIPT.match(section.command)
        assert match, f"{path.name}: section of {section.date} names no eval/ script: {section.command!r}"
        script = EVAL.parent / match.group(1)
        assert script.is_file(), f"{path.name} names {match.group(1)}, which does not exist"
        assert path.name in script.read_text(), f"{script.name} does not write {path.name}"


def test_the_studies_say_what_they_concluded():
    """Each study script is listed in eval/studies/README.md with its command and its conclusion."""
    readme = (EVAL / "studies" / "README.md").read_text()
    for script in sorted((EVAL / "studies").glob("*.py")):
        assert f"eval/studies/{script.name}" in readme, f"{script.name} is not in studies/README.md"
