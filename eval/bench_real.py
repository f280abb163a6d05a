"""Benchmark: BM25 on real text (Wikipedia passages) against bm25s, tantivy and PISA, one thread (or two).

    python eval/bench_real.py --wiki /work/data/wiki [--passages 200000] [--scratch DIR] [--repeats 5]
                              [--rebuild] [--engines ours bm25s tantivy pisa bm25s-ours bm25s-nostem]
                              [--threads 1] [--queries benchmark] [--out FILE]

The corpus and its two query sets come from ../shared/tools/wiki_passages.py
(its docstring says how to build them; 1,370,691 passages): --wiki is its
output directory. --passages N takes the first N passages (the whole corpus
when N is 0 or larger); the slice and every index go under --scratch
(default WIKI/bench-N), never into the repository; builds are reused with
their recorded time and memory unless --rebuild.

Every build runs in a fresh child process on one thread, so its peak RSS
(getrusage of the child) is its own; each child also records its CPU seconds (every
thread of the child's, `time.process_time`, and of its own children)
and the machine's load (1-minute average, `os.getloadavg`, what `uptime`
shows) before and after, printed beside the wall times, since the machine may
be shared:
- ours: `build_index(workers=1)`, this project's Lucene-compatible analysis, one
  analysis thread, the token tables' thread (the compiled tokenizing and
  lookup) and the doc-store thread (titles and texts compressed, zstd with a
  dictionary, in SQLite), as tantivy's writer has a doc-store compressor
  thread beside its indexing thread; an untimed build of the first 1,000
  passages first, so that numba's compiled kernels are in its cache (as an
  installed tantivy or PISA is compiled), not compiled inside the timing;
- bm25s 0.3 (numba backend at search time): its own tokenizer, English
  stopwords, PyStemmer's English (Snowball) stemmer as its README builds
  with (every engine here stems), method "lucene"; engine bm25s-nostem, the
  same without a stemmer (how this benchmark ran bm25s until 2026-12-08):
  it searches other words ("names" does not match "name") in shorter lists,
  so it is timed and labelled but left out of the fastest peer, as the
  Terrier rows below are, and the table gives its ratio on a line of its own;
- tantivy (python package): a text field with its "en_stem" analyzer,
  frequencies and no positions, writer on 1 thread, merged; it stores only
  the id (the text is not stored, so its doc store holds far less than ours);
- PISA through pyterrier-pisa: its porter2 stemmer, 1 thread; the build
  includes the compressed BM25 index (block_simdbp) that its first search
  would otherwise make.
Stopwords: every engine searches the same words of a query. Ours drops
Lucene's English stop set (33 words, as Anserini), bm25s's "en" list is the
same 33 words, and PISA (its stoplist setting "lucene") and tantivy (the words
left out of the query text) drop them from the query; their indexes keep every
word. PISA's default stoplist, Terrier's 733 words, also drops "what",
"which", "when", "did" and the like, so a SQuAD question has fewer words and
PISA less work: that setting is timed too (PISA maxscore, labelled), and
ours with Terrier's words dropped from the query text beside it, both left
out of the fastest peer (a search of other words); the table gives their
ratio on a line of its own.
Postings bytes: ours, the packed blocks and impact codebook (inverted/ minus
vocabulary and lengths); bm25s, its sparse score matrix; tantivy, its .idx
(doc ids and frequencies) files; PISA, the compressed index and its block-max
data. "On disk" is the whole index directory (ours: with the doc store).

Search, end to end (query text in, per query the engine's hits out), BM25 k1 0.9
b 0.4 (tantivy: its fixed k1 1.2 b 0.75), one thread, top 10 and top 1000 on
both query sets, round-robin: each engine searches in a child process of its
own (loaded once, kept for the run), the parent asks each in turn for one
pass over a query set (a warm-up pass each, then --repeats rounds), timed in
the child around the search alone; the table
gives the median queries/s with the range, and the ratio of ours to the
fastest peer taken within each round. Each timed search returns the engine's
own hits, and mapping them to doc ids is left out of its timing, the same work
on every side: ours returns docnos and scores (an array lookup maps them),
bm25s corpus positions, tantivy scores and addresses (a stored-field read per
hit); PISA's API returns doc ids itself, so its timing includes them. tantivy
searches with count=False: counting every match, its Python binding's
default, keeps it from skipping. PISA is
timed with several query algorithms and
the best is shown. Top-10 overlap with ours (analyzers differ, so overlap, not
identity) is the mean share of ours' top 10 each engine also returns.
Engine bm25s-ours (one of the defaults): bm25s also built from our analysis (this
project's analyzer's terms as its tokens) and searched once for its top-10
overlap with ours (same terms and BM25; document lengths differ: ours
Lucene's one-byte norms, bm25s exact), not timed.
--threads 2 builds and searches on two threads where an engine can (ours:
two build processes, one of them tokenizing and analysing, and two search
threads; tantivy: a two-thread writer, its
search one query at a time on one; PISA: two threads both ways; bm25s: its
build has no thread setting, its search two), with indexes of their own
(ENGINE-2t under the scratch directory) and a section of its own.
--queries validation times the validation query sets of
eval/validation_queries.py instead (the next 1,000 SQuAD questions and 1,000
titles, none a benchmark query): search settings are chosen on these, and the
table goes to WIKI/bench-N/real-validation.md, not into eval/results/.
Writes eval/results/real.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

THREADS = int(os.environ.get("BENCH_REAL_THREADS", "1"))  # --threads (set by main for its children)
QUERIES = os.environ.get("BENCH_REAL_QUERIES", "benchmark")  # --queries (set by main for its children)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", str(THREADS))

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "real.md"
KS = (10, 1000)
QUERY_SETS = ("squad", "titles")
ENGINES = ("ours", "bm25s", "tantivy", "pisa", "bm25s-ours", "bm25s-nostem")
AGREEMENT = "bm25s fed our analysis"  # searched for top-10 agreement with ours only, not timed
WARM_PASSAGES = 1_000  # built untimed before ours is timed (its compiled kernels cached)
PISA_ALGORITHMS = ("maxscore", "block_max_maxscore", "block_max_wand")
# Lucene's English stop set: ours drops it (Anserini's analysis), bm25s's "en" list is the same 33
# words, PISA and tantivy drop it from the query here (their indexes keep every word), so every engine
# searches the same words of a query. PISA's own default, Terrier's 733 words, also drops "what",
# "which", "when", "did" and the like: a shorter query, less work. PISA with it, and ours with its words
# dropped from the query text, are timed too, under this suffix, and left out of the fastest peer.
OWN_STOPLIST = ", Terrier stoplist"  # PISA's default; ours with it too (its words dropped from the query)
# bm25s stems with PyStemmer's English stemmer, as every other engine here stems (ours Porter, PISA and
# tantivy Snowball English); without a stemmer (how this benchmark ran it until 2026-12-08) it searches
# other words ("names" does not match "name"), shorter lists: timed too, under this suffix, and left out
# of the fastest peer, as the Terrier rows are.
NO_STEMMER = ", no stemmer"


def peak_rss_gb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 2**20


def dir_bytes(path: Path, pattern: str = "*") -> int:
    return sum(f.stat().st_size for f in Path(path).rglob(pattern) if f.is_file())


def query_file(name: str) -> str:
    """The file of query set `name` (squad, titles): the benchmark's, or its validation set (--queries)."""
    return f"queries-{name}.jsonl" if QUERIES == "benchmark" else f"queries-{name}-validation.jsonl"


def read_queries(corpus: Path, name: str) -> dict[str, str]:
    with open(corpus / query_file(name), encoding="utf-8") as f:
        return {q["_id"]: q["text"] for q in map(json.loads, f)}


def passages(corpus: Path):
    with open(corpus / "corpus.jsonl", encoding="utf-8") as f:
        yield from map(json.loads, f)


# ---- builds (child processes) -------------------------------------------------------------------


def build_ours(corpus: Path, out: Path) -> dict:
    from retrieval.collections import load_documents
    from retrieval.index.native import build_index

    warm = out.with_name(out.name + ".warm")  # numba compiles and caches the build's kernels once
    build_index(itertools.islice(load_documents(corpus / "corpus.jsonl"), WARM_PASSAGES), warm,
                progress=False, workers=THREADS, force=True)
    shutil.rmtree(warm)
    start = time.perf_counter()
    build_index(load_documents(corpus / "corpus.jsonl"), out, progress=False, workers=THREADS,
                force=True)
    seconds = time.perf_counter() - start
    inverted = out / "inverted"
    side = sum(
        (inverted / n).stat().st_size for n in ("terms_utf8.npy", "terms_offsets.npy", "doc_lengths.npy")
    )
    return {
        "seconds": seconds,
        "rss": peak_rss_gb(),
        "postings": dir_bytes(inverted) - side,
        "bytes": dir_bytes(out),
    }


def bm25s_stemmer(stem: bool):
    """PyStemmer's English (Snowball) stemmer, as bm25s's README builds with it, or None (no stemming)."""
    if not stem:
        return None
    import Stemmer

    return Stemmer.Stemmer("english")


def bm25s_tokenizer(stem: bool):
    """bm25s's own tokenizer for query texts as its index was built: English stopwords (Lucene's 33),
    stemmed or not."""
    import bm25s

    stemmer = bm25s_stemmer(stem)
    return lambda texts: bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False,
                                        return_ids=False)


def build_bm25s(corpus: Path, out: Path, stem: bool = True) -> dict:
    import bm25s

    start = time.perf_counter()
    texts = [(d["title"] + " " + d["text"]).strip() for d in passages(corpus)]
    tokens = bm25s.tokenize(texts, stopwords="en", stemmer=bm25s_stemmer(stem), show_progress=False)
    del texts
    model = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    model.index(tokens, show_progress=False)
    model.save(str(out))
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "rss": peak_rss_gb(),
        "postings": dir_bytes(out, "*.npy"),
        "bytes": dir_bytes(out),
    }


def build_bm25s_ours(corpus: Path, out: Path) -> dict:
    """bm25s fed this project's analysis (Analyzer(), as our index analyses `contents`), for top-10
    agreement with ours: the same terms and BM25; document lengths differ (ours Lucene's one-byte
    norms, bm25s exact), and bm25s scores in float32."""
    import bm25s
    import numpy as np

    from retrieval.analysis import Analyzer
    from retrieval.collections import load_documents

    start = time.perf_counter()
    analyzer, vocab = Analyzer(), {}
    ids = [np.array([vocab.setdefault(t, len(vocab)) for t in analyzer(d.contents)], dtype=np.int32)
           for d in load_documents(corpus / "corpus.jsonl")]
    model = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    model.index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocab), show_progress=False)
    model.save(str(out))
    return {"seconds": time.perf_counter() - start, "rss": peak_rss_gb(),
            "postings": dir_bytes(out, "*.npy"), "bytes": dir_bytes(out)}


def build_tantivy(corpus: Path, out: Path) -> dict:
    import tantivy

    shutil.rmtree(out, ignore_errors=True)  # a new index, not documents added to an earlier one
    out.mkdir(parents=True)
    start = time.perf_counter()
    schema = tantivy.SchemaBuilder()
    schema.add_text_field("id", stored=True, tokenizer_name="raw")
    schema.add_text_field("body", stored=False, tokenizer_name="en_stem", index_option="freq")
    index = tantivy.Index(schema.build(), path=str(out))
    writer = index.writer(heap_size=500_000_000, num_threads=THREADS)
    for d in passages(corpus):
        writer.add_document(tantivy.Document(id=d["_id"], body=(d["title"] + " " + d["text"]).strip()))
    writer.commit()
    writer.wait_merging_threads()
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "rss": peak_rss_gb(),
        "postings": dir_bytes(out, "*.idx"),
        "bytes": dir_bytes(out),
    }


def build_pisa(corpus: Path, out: Path) -> dict:
    import pandas as pd
    from pyterrier_pisa import PisaIndex

    start = time.perf_counter()
    index = PisaIndex(str(out), stemmer="porter2", threads=THREADS, overwrite=True)
    index.index({"docno": d["_id"], "text": (d["title"] + " " + d["text"]).strip()} for d in passages(corpus))
    index.bm25(k1=0.9, b=0.4, num_results=10, threads=THREADS)(pd.DataFrame([{"qid": "0", "query": "warm"}]))
    seconds = time.perf_counter() - start
    compressed = [f for f in out.iterdir() if f.name.startswith("bm25.")]
    return {
        "seconds": seconds,
        "rss": peak_rss_gb(),
        "postings": sum(f.stat().st_size for f in compressed),
        "bytes": dir_bytes(out),
    }


def load() -> float:
    """The machine's load, 1-minute average (what `uptime` shows first): other work beside a run."""
    return round(os.getloadavg()[0], 2)


def measured(fn, *args) -> dict:
    """fn(*args) with the machine load before and after it and the CPU seconds it took (its process and
    children, all threads), so that a wall time taken beside other work can be read."""
    def cpu() -> float:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.process_time() + children.ru_utime + children.ru_stime

    before, start = load(), cpu()
    result = fn(*args)
    return result | {"load": [before, load()], "cpu": cpu() - start}


def index_dir(engine: str) -> str:
    """An engine's index directory under the scratch directory (its own for --threads 2)."""
    return engine if THREADS == 1 else f"{engine}-{THREADS}t"


BUILDS = {"ours": build_ours, "bm25s": build_bm25s, "tantivy": build_tantivy, "pisa": build_pisa,
          "bm25s-ours": build_bm25s_ours, "bm25s-nostem": lambda corpus, out: build_bm25s(corpus, out, False)}


# ---- search (a child process per engine, round-robin) -----------------------------------------


def terrier_stopwords() -> frozenset[str]:
    """Terrier's stoplist as PISA applies it (pyterrier-pisa's copy; empty when it is not installed)."""
    try:
        from pyterrier_pisa import _STOPWORDS
    except ImportError:
        return frozenset()
    return frozenset(_STOPWORDS["terrier"])


def searchers(scratch: Path, corpus: Path, engines: list[str]) -> dict:
    """name -> (function(texts, k) -> per query the engine's own hits (timed), function: hits -> doc ids)."""
    out = {}
    if "ours" in engines:
        from retrieval.index.native import Index
        from retrieval.sparse.rankers import BM25

        ours_index = Index.open(scratch / index_dir("ours"), verify=False)
        rankers = {k: BM25(ours_index, k1=0.9, b=0.4, hits=k, threads=THREADS) for k in KS}

        def ours(texts: dict[str, str], k: int, method: str = "auto") -> list:
            ranker = rankers[k]
            weighted = [ranker.weighted(ranker.analyse(t)) for t in texts.values()]
            return ranker.searcher.search_many(weighted, k, THREADS, method=method)  # (docnos, scores)

        ids = lambda results: [list(ours_index.doc_id_objects[d]) for d, _ in results]  # noqa: E731
        out["ours"] = (ours, ids)
        terrier = terrier_stopwords()
        if terrier:

            def ours_terrier(texts: dict[str, str], k: int) -> list:
                kept = {q: " ".join(w for w in re.findall(r"\w+", t) if w.lower() not in terrier)
                        for q, t in texts.items()}
                return ours(kept, k)

            out[f"ours{OWN_STOPLIST}"] = (ours_terrier, ids)
        out["ours, packed blocks (block-max)"] = (lambda t, k: ours(t, k, "blockmax"), ids)
    if {"bm25s", "bm25s-ours", "bm25s-nostem"} & set(engines):
        from bench_scale import bm25s_searcher, load_bm25s

        corpus_ids = [d["_id"] for d in passages(corpus)]  # bm25s numbers documents in corpus order

        def bm25s_ids(results: list) -> list:
            return [[corpus_ids[int(d[1:])] for d in docs] for docs, _ in results]

        def bm25s(engine: str, tokenize):
            search = bm25s_searcher(load_bm25s(scratch / index_dir(engine), "numba"), tokenize)
            return (lambda t, k: search(list(t.values()), k, THREADS)), bm25s_ids

        if "bm25s" in engines:
            out["bm25s numba"] = bm25s("bm25s", bm25s_tokenizer(stem=True))
        if "bm25s-nostem" in engines:
            out[f"bm25s numba{NO_STEMMER}"] = bm25s("bm25s-nostem", bm25s_tokenizer(stem=False))
        if "bm25s-ours" in engines:
            from retrieval.analysis import Analyzer

            analyzer = Analyzer()
            out[AGREEMENT] = bm25s("bm25s-ours", lambda texts: list(map(analyzer, texts)))
    if "tantivy" in engines:
        import tantivy

        from retrieval.analysis import LUCENE_ENGLISH_STOPWORDS

        tantivy_index = tantivy.Index.open(str(scratch / index_dir("tantivy")))
        searcher = tantivy_index.searcher()
        cleaned_cache: dict[str, object] = {}

        def query_of(text: str):
            if text not in cleaned_cache:
                words = [w for w in re.sub(r"[^\w\s]", " ", text).lower().split()
                         if w not in LUCENE_ENGLISH_STOPWORDS]
                cleaned_cache[text] = tantivy_index.parse_query(" ".join(words), ["body"]) if words else None
            return cleaned_cache[text]

        def tantivy_search(texts: dict[str, str], k: int) -> list:
            return [
                searcher.search(q, k, count=False).hits if (q := query_of(t)) is not None else []
                for t in texts.values()
            ]

        def tantivy_ids(results: list) -> list:
            return [[searcher.doc(addr)["id"][0] for _, addr in hits] for hits in results]

        out["tantivy"] = (tantivy_search, tantivy_ids)
    if "pisa" in engines:
        import pandas as pd
        from pyterrier_pisa import PisaIndex

        def pisa_index(stops: str) -> PisaIndex:
            path = str(scratch / index_dir("pisa"))
            return PisaIndex(path, stemmer="porter2", threads=THREADS, stops=stops)

        variants = [(algorithm, "lucene", f"PISA {algorithm}") for algorithm in PISA_ALGORITHMS]
        variants.append(("maxscore", "terrier", f"PISA maxscore{OWN_STOPLIST}"))
        for algorithm, stops, name in variants:
            retrievers = {
                k: pisa_index(stops).bm25(k1=0.9, b=0.4, num_results=k, threads=THREADS,
                                          query_algorithm=algorithm)
                for k in KS
            }

            def pisa(texts: dict[str, str], k: int, retrievers=retrievers) -> list:
                frame = pd.DataFrame({"qid": list(texts), "query": list(texts.values())})
                result = retrievers[k](frame)
                grouped = result.groupby("qid", sort=False)["docno"].apply(list).to_dict()
                return [grouped.get(q, []) for q in texts]

            out[name] = (pisa, lambda r: r)
    return out


def serve(scratch: Path, corpus: Path, engine: str) -> None:
    """A search child for one engine: loads its searchers, then answers one JSON command a line on stdin
    ("time": seconds of one pass over a query set; "ids": each query's top 10 doc ids) until stdin closes.
    Each engine searches in a process of its own, so no engine's memory, caches or thread pools sit beside
    another's (with all in one process ours ran at about half its speed alone: docs/results/figures.md)."""
    found = searchers(scratch, corpus, [engine])
    texts = {name: read_queries(corpus, name) for name in QUERY_SETS}
    print(json.dumps({"systems": list(found), "queries": {n: len(t) for n, t in texts.items()}}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        search, ids = found[command["system"]]
        queries = texts[command["set"]]
        if command["do"] == "time":
            start = time.perf_counter()
            search(queries, command["k"])
            print(json.dumps(time.perf_counter() - start), flush=True)
        else:
            print(json.dumps([[str(d) for d in top[:10]] for top in ids(search(queries, 10))]), flush=True)


class SearchChild:
    """The parent's handle on one engine's search child (`serve`)."""

    def __init__(self, scratch: Path, corpus: Path, engine: str):
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--child", "serve", str(scratch), str(corpus), engine],
            env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        hello = self.answer()
        self.systems, self.queries = hello["systems"], hello["queries"]

    def answer(self):
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"search child {self.proc.args[-1]} ended (exit status {self.proc.wait()})")
        return json.loads(line)

    def ask(self, **command):
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self.answer()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def search_round_robin(scratch: Path, corpus: Path, engines: list[str], repeats: int) -> dict:
    """Every system timed round-robin (a warm-up pass each, then `repeats` rounds), each engine in its own
    child, the time taken in the child around the search alone; and top-10 overlap with ours."""
    before = load()
    children = [SearchChild(scratch, corpus, engine) for engine in engines]
    try:
        systems = {s: child for child in children for s in child.systems}
        result: dict = {f"{n}/queries": children[0].queries[n] for n in QUERY_SETS}
        for name in QUERY_SETS:
            for k in KS:
                times: dict[str, list[float]] = {s: [] for s in systems if s != AGREEMENT}
                for rnd in range(repeats + 1):  # round 0 is the warm-up
                    for s in times:
                        seconds = systems[s].ask(do="time", system=s, set=name, k=k)
                        if rnd:
                            times[s].append(seconds)
                result[f"{name}/{k}"] = times
            top = {s: child.ask(do="ids", system=s, set=name) for s, child in systems.items()}
            result[f"{name}/overlap"] = {s: overlap(top["ours"], theirs) for s, theirs in top.items()}
    finally:
        for child in children:
            child.close()
    return result | {"load": [before, load()]}


def overlap(ours: list[list[str]], theirs: list[list[str]]) -> float:
    """The mean share of ours' top 10 that the other also returns (queries where ours found something)."""
    return statistics.mean(len(set(a) & set(b)) / len(a) for a, b in zip(ours, theirs) if a)


def child_env() -> dict:
    return os.environ | {"TQDM_DISABLE": "1", "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)])}


def in_child(kind: str, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", kind, *args], env=child_env(), capture_output=True, text=True
    )
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["killed"])[-1][:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- the table ----------------------------------------------------------------------------------


def fmt_rate(times: list[float], n: int) -> str:
    rates = sorted(n / t for t in times)
    return f"{statistics.median(rates):,.0f} ({rates[0]:,.0f}–{rates[-1]:,.0f})"


def like_peers(systems: list[str]) -> list[str]:
    """The peers that search the same words of a query as ours (the fastest of them sets the ratio)."""
    return [s for s in systems if not s.startswith("ours") and not s.endswith((OWN_STOPLIST, NO_STEMMER))]


def fastest_seconds(times: dict[str, list[float]], peers: list[str]) -> list[float]:
    """The fastest peer's seconds in each round of one cell (none without peers)."""
    return [min(times[p][r] for p in peers) for r in range(len(times["ours"]))] if peers else []


def ratio_cell(their_seconds: list[float], our_seconds: list[float]) -> str:
    """How many times as fast ours was, round by round: the median (lowest–highest) of their time over
    ours in each round."""
    ratios = [theirs / ours for theirs, ours in zip(their_seconds, our_seconds)]
    return f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f})" if ratios else ""


def table(builds: dict, search: dict, passages_count: int, whole: bool) -> str:
    cells = [f"{name}/{k}" for name in QUERY_SETS for k in KS]
    engines = list(search[cells[0]])
    head = "| engine | " + " | ".join(f"{c.split('/')[0]}, top-{c.split('/')[1]}, q/s" for c in cells)
    lines = [head + " | top-10 overlap with ours (squad / titles) |", "|---|" + "---:|" * (len(cells) + 1)]
    for engine in engines:
        rates = [fmt_rate(search[c][engine], search[f"{c.split('/')[0]}/queries"]) for c in cells]
        overlap = " / ".join(f"{search[f'{q}/overlap'][engine]:.2f}" for q in QUERY_SETS)
        lines.append(f"| {engine} | " + " | ".join(rates) + f" | {overlap} |")
    peers = like_peers(engines)
    ratio_cells = [ratio_cell(fastest_seconds(search[c], peers), search[c]["ours"]) for c in cells]
    lines.append("| ours / fastest peer, within each round | " + " | ".join(ratio_cells) + " | |")
    both = (f"ours{OWN_STOPLIST}", f"PISA maxscore{OWN_STOPLIST}")
    if all(b in engines for b in both):
        lines.append("| ours / PISA maxscore, both with Terrier's stoplist (not a target) | "
                     + " | ".join(ratio_cell(search[c][both[1]], search[c][both[0]]) for c in cells) + " | |")
    unstemmed = f"bm25s numba{NO_STEMMER}"
    if unstemmed in engines:
        cells_unstemmed = [ratio_cell(search[c][unstemmed], search[c]["ours"]) for c in cells]
        lines.append("| ours / bm25s without a stemmer (other words; not a target) | "
                     + " | ".join(cells_unstemmed) + " | |")
    lines += [
        "",
        f"| engine | build wall s ({THREADS} thread{'s' if THREADS > 1 else ''}) | build CPU s"
        " | machine load before → after | build peak RSS GB"
        " | postings MB | on disk MB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for engine, b in builds.items():
        if "error" in b:
            lines.append(f"| {engine} | did not build: {b['error']} | | | | | |")
            continue
        cpu = f"{b['cpu']:,.1f}" if "cpu" in b else "not recorded"
        machine = " → ".join(f"{x:.2f}" for x in b["load"]) if "load" in b else "not recorded"
        lines.append(
            f"| {engine} | {b['seconds']:,.1f} | {cpu} | {machine} | {b['rss']:.2f} | "
            f"{b['postings'] / 1e6:,.1f} | {b['bytes'] / 1e6:,.1f} |"
        )
    reused = [engine for engine, b in builds.items() if b.get("reused")]
    if reused:
        lines += ["", f"Build rows of {', '.join(reused)}: recorded when an earlier run built them (kept"
                  " in the scratch directory; --rebuild remeasures every build)."]
    if THREADS == 1:
        lines += ["", "A build on one thread is one indexing thread, with helper threads beside it: ours, its"
                  " token tables' thread and its doc-store thread (titles and texts compressed and stored);"
                  " tantivy, its doc-store compressor and merge threads (it stores only the ids). The CPU"
                  " column counts them all."]
    if AGREEMENT in search["squad/overlap"]:
        agreement = " / ".join(f"{search[f'{q}/overlap'][AGREEMENT]:.3f}" for q in QUERY_SETS)
        lines += ["", "Top-10 overlap of bm25s fed our analysis with ours (squad / titles; not timed):"
                  f" {agreement}. Same terms, k1 and b; ours keeps document lengths as Lucene's one-byte"
                  " norms (for Anserini parity), bm25s exact lengths, so scores differ slightly, and so do"
                  " some top-10s."]
    if "load" in search:
        start, end = search["load"]
        lines += ["", "Machine load (1-minute average, as `uptime` shows) when the search children started"
                  f" and ended: {start:.2f} → {end:.2f} ({os.cpu_count()} cores; above 1, other work shared"
                  " the machine)."]
    which = "the whole corpus" if whole else "the first of the corpus"
    sets = "" if QUERIES == "benchmark" else " (the validation sets, eval/validation_queries.py)"
    return (
        f"{passages_count:,} passages ({which}), {search['squad/queries']:,} SQuAD questions"
        f" and {search['titles/queries']:,} titles{sets};"
        f" {THREADS} thread{'s' if THREADS > 1 else ''} per engine"
        " (--threads: what each engine does with them is in the script's docstring).\n\n" + "\n".join(lines)
    )


def targets(builds: dict, search: dict) -> str:
    """The issue's targets, met or not, from the figures above."""
    ours = builds.get("ours", {})
    out = []
    if "seconds" in builds.get("tantivy", {}) and "seconds" in ours:
        t = builds["tantivy"]["seconds"]
        out.append(
            f"- build wall ≤ tantivy's: {'met' if ours['seconds'] <= t else 'not met'} "
            f"({ours['seconds']:,.1f} s against {t:,.1f} s)"
        )
    if "postings" in builds.get("pisa", {}) and "postings" in ours:
        p = builds["pisa"]["postings"]
        out.append(
            f"- postings ≤ 1.5× PISA's: {'met' if ours['postings'] <= 1.5 * p else 'not met'} "
            f"({ours['postings'] / p:.2f}×)"
        )
    if "rss" in ours:
        out.append(
            f"- build peak RSS ≤ 2 GB: {'met' if ours['rss'] <= 2 else 'not met'} ({ours['rss']:.2f} GB)"
        )
    cells = [f"{name}/{k}" for name in QUERY_SETS for k in KS]
    peers = like_peers(list(search[cells[0]]))
    if peers:
        speedups = [
            statistics.median(t / o for t, o in zip(fastest_seconds(search[c], peers), search[c]["ours"]))
            for c in cells
        ]
        met = all(s >= 2 for s in speedups)
        out.append(
            f"- q/s ≥ 2× the fastest peer in every cell: {'met' if met else 'not met'} "
            f"({', '.join(f'{s:.2f}×' for s in speedups)})"
        )
    return "\n".join(out)


def slice_corpus(wiki: Path, scratch: Path, count: int) -> tuple[Path, int]:
    """The corpus of the first `count` passages (all when 0), with both query sets."""
    with open(wiki / "corpus.jsonl", "rb") as f:
        total = sum(1 for _ in f)
    if count <= 0 or count >= total:
        return wiki, total
    corpus = scratch / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    if not (corpus / "corpus.jsonl").is_file():
        with open(wiki / "corpus.jsonl", "rb") as src, open(corpus / "corpus.jsonl.tmp", "wb") as dst:
            for i, line in enumerate(src):
                if i == count:
                    break
                dst.write(line)
        (corpus / "corpus.jsonl.tmp").rename(corpus / "corpus.jsonl")
    for name in QUERY_SETS:
        (corpus / query_file(name)).write_bytes((wiki / query_file(name)).read_bytes())
    return corpus, count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wiki", type=Path, help="the output directory of wiki_passages.py")
    ap.add_argument("--passages", type=int, default=200_000, help="first N passages (0: all)")
    ap.add_argument("--scratch", type=Path, help="where the slice and indexes go (default WIKI/bench-N)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--threads", type=int, default=1, choices=(1, 2), help="threads per engine (default 1)")
    ap.add_argument("--queries", choices=("benchmark", "validation"), default="benchmark",
                    help="the benchmark's query sets, or eval/validation_queries.py's (default benchmark)")
    ap.add_argument("--out", type=Path, help="the results file (default eval/results/real.md; with"
                    " --queries validation, real-validation.md in the scratch directory)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        kind, *args = a.child
        if kind == "serve":
            serve(Path(args[0]), Path(args[1]), args[2])
        else:
            print(json.dumps(measured(BUILDS[kind], Path(args[0]), Path(args[1]))))
        return
    if a.wiki is None or not (a.wiki / "corpus.jsonl").is_file():
        raise SystemExit("--wiki: the output directory of ../shared/tools/wiki_passages.py (corpus.jsonl)")
    global THREADS, QUERIES
    THREADS, QUERIES = a.threads, a.queries
    missing = [f for f in map(query_file, QUERY_SETS) if not (a.wiki / f).is_file()]
    if missing:
        maker = "../shared/tools/wiki_passages.py" if QUERIES == "benchmark" else "eval/validation_queries.py"
        raise SystemExit(f"--wiki: no {', '.join(missing)} (written by {maker})")
    os.environ["BENCH_REAL_QUERIES"] = a.queries  # the children's QUERIES
    os.environ["BENCH_REAL_THREADS"] = str(a.threads)  # the children's THREADS
    os.environ["NUMBA_NUM_THREADS"] = str(a.threads)  # numba's pool (bm25s, ours) is sized when imported
    if "ours" not in a.engines:
        raise SystemExit("--engines must include ours")
    scratch = a.scratch or a.wiki / f"bench-{a.passages or 'all'}"
    corpus, count = slice_corpus(a.wiki, scratch, a.passages)
    builds = {}
    for engine in a.engines:
        record = scratch / f"{index_dir(engine)}.build.json"
        rebuilt = a.rebuild or not record.is_file()
        if rebuilt:
            result = in_child(engine, str(corpus), str(scratch / index_dir(engine)))
            record.write_text(json.dumps(result))
            print(engine, result, file=sys.stderr, flush=True)
        builds[engine] = json.loads(record.read_text()) | {"reused": not rebuilt}
    usable = [e for e in a.engines if "error" not in builds[e]]
    search = search_round_robin(scratch, corpus, usable, a.repeats)
    record = f"search{index_dir('')}{'' if QUERIES == 'benchmark' else '-validation'}.json"
    (scratch / record).write_text(json.dumps(search))
    from benchlib import publish

    text = (
        f"# BM25 on real text: Wikipedia passages\n{table(builds, search, count, corpus == a.wiki)}\n\n"
        f"Targets of issue 55 on this run:\n\n{targets(builds, search)}\n"
    )
    publish(a.out or (RESULTS if QUERIES == "benchmark" else scratch / "real-validation.md"), text)


if __name__ == "__main__":
    main()
