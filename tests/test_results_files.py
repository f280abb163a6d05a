"""Every figure file under eval/results/ is the whole output of one command named at its top."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

EVAL = Path(__file__).parents[1] / "eval"
COMMAND = re.compile(r"^Regenerate with `(?:RETRIEVAL_\w+=\S+ )*python eval/(\w+\.py)[^`]*` "
                     r"\(this whole file is its output\)\.$")


@pytest.mark.parametrize("path", sorted((EVAL / "results").glob("*.md")), ids=lambda p: p.name)
def test_results_file_names_the_command_that_wrote_it(path):
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# ") and lines[1] == "", f"{path.name}: expected a title, then a blank line"
    match = COMMAND.match(lines[2])
    assert match, f"{path.name}: line 3 must be 'Regenerate with `python eval/SCRIPT.py ...` (...)'"
    script = EVAL / match.group(1)
    assert script.is_file(), f"{path.name} names {script.name}, which does not exist"
    assert path.name in script.read_text(), f"{script.name} does not write {path.name}"
    assert sum("Regenerate with" in line for line in lines) == 1, "one command per file"
