"""Check: retrieval/porter.py gives NLTK's Porter stems (MARTIN_EXTENSIONS) on a corpus's whole vocabulary.

    python eval/check_porter.py --corpus /work/data/wiki/corpus.jsonl [--out FILE]

Reads a BEIR JSONL corpus (title and text, as the index reads them), tokenizes
every document as the analyzer does, and keeps each distinct token the stemmer
would see (possessive dropped, lower case, ending in a-z); stems each with
NLTK's PorterStemmer(mode=MARTIN_EXTENSIONS) and with retrieval.porter.stem,
and with retrieval.porter_compiled.stems (the build's: the whole list in one
compiled pass), counts the words whose stems differ (the check: 0), and times
each over the whole vocabulary, one thread (median of 3 passes each). Writes
eval/results/porter.md.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def vocabulary(corpus: Path) -> tuple[int, list[str]]:
    """(documents, sorted distinct words the stemmer sees)."""
    from retrieval.analysis import java_lower
    from retrieval.formats import read_documents
    from retrieval.word_breaks import words

    tokens: set[str] = set()
    documents = 0
    for doc in read_documents(corpus):  # title and text, as the index reads them
        tokens.update(words(doc.contents))
        documents += 1
    seen = set()
    for token in tokens:
        if len(token) >= 2 and token[-1] in "sS" and token[-2] in "'\u2019\uff07":
            token = token[:-2]
        token = java_lower(token)
        if token and "a" <= token[-1] <= "z":
            seen.add(token)
    return documents, sorted(seen)


def main() -> None:
    from benchlib import corpus_check_args, publish

    a = corpus_check_args(__doc__, "porter.md")
    from nltk.stem.porter import PorterStemmer

    from retrieval.porter import stem
    from retrieval.porter_compiled import stems

    documents, words = vocabulary(a.corpus)
    nltk = PorterStemmer(mode=PorterStemmer.MARTIN_EXTENSIONS)
    expected = [nltk.stem(w, to_lowercase=False) for w in words]
    compiled = "retrieval.porter_compiled (one call for all)"
    got = {"retrieval.porter": [stem(w) for w in words], compiled: stems(words)}
    differ = {name: [(w, e, g) for w, e, g in zip(words, expected, stemmed) if e != g]
              for name, stemmed in got.items()}
    times = {}
    for name, fn in (("NLTK", lambda ws: [nltk.stem(w, to_lowercase=False) for w in ws]),
                     ("retrieval.porter", lambda ws: [stem(w) for w in ws]), (compiled, stems)):
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            fn(words)
            runs.append(time.perf_counter() - start)
        times[name] = statistics.median(runs)
    lines = [
        "# Porter stems: retrieval.porter against NLTK (MARTIN_EXTENSIONS)",
        f"{documents:,} documents of `{a.corpus.name}`; {len(words):,} distinct words the stemmer sees"
        " (after the possessive filter and lower case, ending in a-z).",
        "",
        "| stemmer | µs a word (median of 3 passes) | words whose stem differs from NLTK's |",
        "|---|---:|---:|",
    ]
    for name, seconds in times.items():
        count = "" if name == "NLTK" else f"{len(differ[name]):,}"
        lines.append(f"| {name} | {seconds / len(words) * 1e6:.2f} | {count} |")
    lines += ["", f"Speed-up: {times['NLTK'] / times['retrieval.porter']:.1f}× (retrieval.porter),"
              f" {times['NLTK'] / times[compiled]:.1f}× (compiled)."]
    for name, wrong in differ.items():
        if wrong:
            lines += ["", f"First words {name} stems differently: "
                      + ", ".join(f"{w} ({e} / {g})" for w, e, g in wrong[:20])]
    publish(a.out, "\n".join(lines) + "\n")
    if any(differ.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
