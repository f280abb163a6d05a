"""Check: the build's compiled path beyond ASCII finds `words`' tokens on every text of a corpus.

    python eval/check_unicode_tokens.py --corpus /work/data/wiki/corpus.jsonl [--out FILE]

Reads a BEIR JSONL corpus, takes each document's text as the index does (title
and text), keeps those beyond ASCII, and runs each through
retrieval.index.ascii_tokens.UnicodeTokenTable (the term of a token being the
token itself, so the ids name the tokens) and through
retrieval.word_breaks.words. Counts the texts the compiled path takes, those it
leaves to `words` (a character needing the full grammar, a long token), and the
texts whose tokens differ (the check: 0). Writes eval/results/unicode_tokens.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main() -> None:
    from benchlib import corpus_check_args, publish

    a = corpus_check_args(__doc__, "unicode_tokens.md")

    from retrieval.formats import read_documents
    from retrieval.index.ascii_tokens import UnicodeTokenTable
    from retrieval.word_breaks import words

    vocabulary: dict[str, int] = {}
    names: list[str] = []  # term id -> token

    def number(token: str) -> str:
        if token not in vocabulary:
            vocabulary[token] = len(names)
            names.append(token)
        return token

    table = UnicodeTokenTable(number, vocabulary)
    documents = beyond = compiled = tokens = 0
    differ: list[str] = []
    for doc in read_documents(a.corpus):  # title and text, as the index reads them
        documents += 1
        text = doc.contents
        if text.isascii():
            continue
        beyond += 1
        ids = table.term_ids(text)
        if ids is None:
            continue
        compiled += 1
        got = [names[i] for i in np.frombuffer(ids, np.int32).tolist()]
        expected = words(text)
        tokens += len(expected)
        if got != expected:
            differ.append(doc.id)
    lines = [
        "# Tokens beyond ASCII: the build's compiled path against word_breaks.words",
        f"{documents:,} documents of `{a.corpus.name}` (title and text, as the index reads them);"
        f" {beyond:,} texts beyond ASCII.",
        "",
        "| texts beyond ASCII | taken by UnicodeTokenTable | their tokens | left to `words` |"
        " texts whose tokens differ |",
        "|---:|---:|---:|---:|---:|",
        f"| {beyond:,} | {compiled:,} | {tokens:,} | {beyond - compiled:,} | {len(differ):,} |",
    ]
    if differ:
        lines += ["", "First differing documents: " + ", ".join(differ[:20])]
    publish(a.out, "\n".join(lines) + "\n")
    if differ:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
