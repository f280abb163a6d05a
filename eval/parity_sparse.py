"""Effectiveness of the native sparse rankers on every bundled collection, next to
Anserini's published figures where they exist.

    python eval/parity_sparse.py

Prints one Markdown table and writes it to eval/results/parity_sparse.md.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchlib import publish

from retrieval.collections import COLLECTIONS, load_documents, load_qrels, load_topics
from retrieval.evaluation.measures import evaluate
from retrieval.index.native import Index, build_index
from retrieval.sparse.rankers import BM25, RM3, QueryLikelihood

RESULTS = Path(__file__).parent / "results" / "parity_sparse.md"
ANSERINI = {  # published regression figures (Lucene; k1=0.9 b=0.4, mu=1000, RM3 10/10/0.5)
    ("cacm", "bm25"): {"MAP": 0.3123, "P@30": 0.1942},
    ("cacm", "qld"): {"MAP": 0.3265, "P@30": 0.1942},
    ("cacm", "bm25+rm3"): {"MAP": 0.3648, "P@30": 0.2224},
    ("cacm", "qld+rm3"): {"MAP": 0.3629, "P@30": 0.2250},
    ("scifact", "bm25"): {"nDCG@10": 0.6789, "R@100": 0.9253, "R@1000": 0.9767},
}
MEASURES = {"cacm": ["MAP", "P@30", "nDCG@10"], "scifact": ["nDCG@10", "R@100", "R@1000", "MAP"],
            "vaswani": ["MAP", "nDCG@10"], "cranfield": ["MAP", "nDCG@10"]}


def stages(index: Index) -> dict:
    return {"bm25": BM25(index), "qld": QueryLikelihood(index, mu=1000),
            "bm25+rm3": RM3(BM25(index)), "qld+rm3": RM3(QueryLikelihood(index, mu=1000))}


def rows_for(name: str, workdir: Path) -> list[str]:
    build_index(load_documents(name), workdir / name, progress=False)
    index = Index.open(workdir / name)
    queries, qrels = load_topics(name), load_qrels(name)
    rows = []
    for system, stage in stages(index).items():
        run = stage(queries)
        if COLLECTIONS[name].remove_query_ids:
            run = run.without_query_ids()
        got = evaluate(run, qrels, MEASURES[name])
        ref = ANSERINI.get((name, system), {})
        cells = [f"{m} {got[m]:.4f}" + (f" ({ref[m]:.4f})" if m in ref else "")
                 for m in MEASURES[name]]
        rows.append(f"| {name} | {system} | " + ", ".join(cells) + " |")
    return rows


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # no options; --help
    with tempfile.TemporaryDirectory() as tmp:
        rows = [r for name in MEASURES for r in rows_for(name, Path(tmp))]
    out = ("# Native sparse rankers on the bundled collections\n\n"
           "Anserini's published figure in parentheses where one exists.\n\n"
           "| collection | system | ours (Anserini) |\n"
           "|---|---|---|\n" + "\n".join(rows) + "\n")
    publish(RESULTS, out)


if __name__ == "__main__":
    main()
