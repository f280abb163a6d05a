"""The Python API in one script, on CACM (docs/design/python-api.md; tests/test_examples.py runs it).

    RETRIEVAL_DATA=../shared/data python examples/python_api.py [WORKDIR]

It runs an experiment config as `retrieval run` does (which builds the index), searches one query,
reranks a run file and raw strings with the late-interaction checkpoint shipped in the package, turns
runs into PyTerrier's DataFrames and back, runs a PyTerrier pipeline mixing both libraries' stages
(PyTerrier 1.x needs no Java for this), and a Python Experiment whose table is the config's.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

import pyterrier as pt

from retrieval import (
    BM25,
    Experiment,
    LateReranker,
    Queries,
    QueryLikelihood,
    Run,
    open_index,
    read_run,
    rerank,
    write_run,
)
from retrieval.cli import main
from retrieval.collections import load_qrels, load_topics
from retrieval.pipeline.pyterrier import from_pyterrier, to_pyterrier

CONFIG = """name: cacm-api
collection: cacm
index: {{path: {index}}}
measures: [MAP, P@30, ndcg_cut_10]
baseline: bm25
pipelines:
  bm25: {{model: bm25, k1: 0.9, b: 0.4}}
  qld: {{model: qld, mu: 1000}}
  bm25>>qld:
    - {{model: bm25, cutoff: 100}}
    - qld
"""

work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="retrieval-api-"))
work.mkdir(parents=True, exist_ok=True)

# 1. `retrieval run` on a config: builds the index, runs and compares three systems.
config = work / "cacm-api.yaml"
config.write_text(CONFIG.format(index=work / "cacm"))
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    assert main(["run", str(config), "--output-dir", str(work / "run")]) == 0
print(printed.getvalue())

# 2. One query; a whole topic set to a run file.
index = open_index(work / "cacm")
topics, qrels = load_topics("cacm"), load_qrels("cacm")
bm25, qld = BM25(index, k1=0.9, b=0.4), QueryLikelihood(index, mu=1000)
print(bm25.search("parallel algorithms for sorting", 3))
write_run(bm25(topics), work / "bm25.run")

# 3. Rerank a run file (five queries' top 20, to be quick) and raw strings with the shipped checkpoint.
five = Queries(list(topics.items())[:5])
bm25_run = read_run(work / "bm25.run")
late = LateReranker(index, depth=20)
reranked = late(five, Run({q: bm25_run[q] for q in five}))
print(repr(bm25 % 20 >> late), "->", reranked)
print(rerank("sorting in parallel", ["Compilers for ALGOL 60", "A parallel sorting network of comparators",
                                     "Sorting on a multiprocessor"]))

# 4. DataFrames in and out, with PyTerrier's columns (rank counted from 0, as PyTerrier does).
frame = reranked.to_df(five)
print(frame[frame["rank"] < 2])
assert Run.from_df(frame) == reranked and Queries.from_df(frame) == five

# 5. PyTerrier pipelines with our stages, and PyTerrier transformers in ours.
lowercase = pt.apply.query(lambda row: row["query"].lower())  # a PyTerrier query rewriter
length_prior = pt.apply.doc_score(  # a toy PyTerrier rescorer: BM25 minus a small document-length penalty
    lambda row: row["score"] - 0.01 * len(index.text(row["docno"]).split()))
theirs = lowercase >> to_pyterrier(bm25) % 100 >> length_prior >> to_pyterrier(qld)
ours = bm25 % 100 >> from_pyterrier(length_prior) >> qld
assert Run.from_df(theirs.transform(topics.to_df())) == ours(topics)  # same stages, either library driving
print(pt.Experiment([to_pyterrier(bm25), theirs], topics.to_df(), qrels.to_df(), ["map", "ndcg_cut_10"],
                    names=["bm25", "pyterrier pipeline"]))

# 6. The Python Experiment: the same systems as the config give `retrieval run`'s table and figures.
table = Experiment({"bm25": bm25, "qld": qld, "bm25>>qld": bm25 % 100 >> qld}, topics, qrels,
                   ["MAP", "P@30", "ndcg_cut_10"], baseline="bm25")
print(table.attrs["table"], table.attrs["legend"], sep="\n\n")
assert table.attrs["table"] in printed.getvalue()
figures = json.loads((work / "run" / "results.json").read_text())
for _, row in table.iterrows():
    assert {m: row[m] for m in ("MAP", "P@30", "ndcg_cut_10")} == figures["means"][row["name"]]
print("the Experiment's figures equal retrieval run's")
