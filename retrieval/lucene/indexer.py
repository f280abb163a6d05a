"""Build an Anserini (Lucene) index from any collection the project reads.

Documents are written as Anserini JsonCollection JSONL (`{"id", "contents"}`,
contents = `Document.contents`) into a scratch directory, then Anserini's
`IndexCollection` indexes them in-process through pyjnius with positions,
document vectors and raw text stored and the default Lucene English analyzer
(Porter stemming, Lucene's English stopwords), exactly as Anserini's own
regressions do. The result is built in a temporary directory and renamed into
place, so an interrupted build never leaves an index that loads:

    <target>/manifest.json   backend "lucene", analyzer, versions, stats, checksums
    <target>/docs.sqlite     doc store, docids.npy: doc ids (as the native index has)
    <target>/lucene/         the Lucene index (openable by pyserini/Anserini as is)

So `retrieval.index.native.Index` opens it too (doc store for rerankers); it simply
has a "lucene" part instead of an "inverted" one.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from retrieval import storage
from retrieval.analysis import Analyzer
from retrieval.errors import InputError
from retrieval.index.docstore import FILENAME as DOCSTORE_FILE
from retrieval.index.docstore import write_docstore
from retrieval.lucene import jvm
from retrieval.ownership import check_not_inside_index, is_index_dir
from retrieval.types import Document

BACKEND = "lucene"
LUCENE_DIR = "lucene"
DOCIDS_FILE = "docids.npy"


def _write_jsonl(documents: Iterable[Document], folder: Path, shards: int) -> list[str]:
    """Write documents round-robin into `shards` JSONL files; return their ids in order."""
    ids: list[str] = []
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(open(folder / f"docs{i:02d}.jsonl", "w", encoding="utf-8"))
                 for i in range(shards)]
        for doc in documents:
            line = json.dumps({"id": doc.id, "contents": doc.contents}, ensure_ascii=False)
            files[len(ids) % shards].write(line + "\n")
            ids.append(doc.id)
    if not ids:
        raise InputError("the collection has no documents; nothing to index")
    return ids


def _index_collection(input_dir: Path, index_dir: Path, threads: int) -> dict[str, int]:
    """Run Anserini's IndexCollection in this process; return its counters."""
    args_class = jvm.autoclass("io.anserini.index.IndexCollection$Args")
    parser_class = jvm.autoclass("org.kohsuke.args4j.CmdLineParser")
    indexer_class = jvm.autoclass("io.anserini.index.IndexCollection")
    argv = ["-collection", "JsonCollection", "-input", str(input_dir), "-index", str(index_dir),
            "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads),
            "-storePositions", "-storeDocvectors", "-storeRaw", "-optimize", "-quiet"]
    args, jargv = args_class(), jvm.autoclass("java.util.ArrayList")()
    for arg in argv:
        jargv.add(arg)
    try:
        parser_class(args).parseArgument(jargv)
        indexer = indexer_class(args)
        indexer.run()
    except Exception as e:  # a jnius.JavaException carrying the Java exception
        raise RuntimeError(f"Anserini IndexCollection failed: {jvm.java_error(e)}") from e
    counters = indexer.getCounters()
    return {name: int(getattr(counters, name).get())
            for name in ("indexed", "empty", "unindexable", "skipped", "errors")}


def index_stats(lucene_dir: str | Path) -> dict[str, int]:
    """Collection statistics of a Lucene index (documents, unique and total terms)."""
    utils = jvm.autoclass("io.anserini.index.IndexReaderUtils")
    reader = utils.getReader(str(lucene_dir))
    try:
        stats = utils.getIndexStats(reader)
        return {str(k): int(stats.get(k)) for k in stats.keySet().toArray()}
    finally:
        reader.close()


def _versions() -> dict[str, str]:
    system = jvm.autoclass("java.lang.System")
    lucene = jvm.autoclass("org.apache.lucene.util.Version")
    return {"anserini_jar": jvm.anserini_jar().name, "lucene": str(lucene.LATEST.toString()),
            "java": str(system.getProperty("java.version"))}


def build_lucene_index(documents: str | Path | Iterable[Document], target: str | Path, *,
                       threads: int = 1, source: str | None = None, force: bool = False) -> dict[str, Any]:
    """Build an Anserini index of `documents` (a collection name/path or Documents) at `target`.

    Returns the manifest written to `target/manifest.json`.
    """
    if not isinstance(threads, int) or threads < 1:
        raise InputError(f"threads must be a positive integer, got {threads!r}")
    if isinstance(documents, (str, Path)):
        from retrieval.collections import describe, load_documents

        source = source or describe(documents)
        documents = load_documents(documents)
    target = Path(target)
    check_not_inside_index(target)
    jvm.start()
    began = time.perf_counter()
    with storage.atomic_directory(target, is_index_dir, force) as tmp, \
            tempfile.TemporaryDirectory(prefix=".lucene-input-", dir=tmp.parent) as scratch:
        ids = _write_jsonl(write_docstore(tmp / DOCSTORE_FILE, documents), Path(scratch), threads)
        storage.save_array(tmp / DOCIDS_FILE, np.array(sorted(ids), dtype=str))  # as index/native.py
        count = len(ids)
        written = time.perf_counter()
        counters = _index_collection(Path(scratch), tmp / LUCENE_DIR, threads)
        indexed = time.perf_counter()
        if counters["indexed"] + counters["empty"] != count or counters["errors"]:
            raise RuntimeError(f"Anserini indexed {counters['indexed']} of {count} documents "
                               f"(counters {counters})")
        manifest = {
            "format_version": storage.FORMAT_VERSION,
            "backend": BACKEND,
            "created": storage.now(),
            "source": source or "",
            "analyzer": Analyzer().settings,  # what Anserini's default English analyzer does
            "versions": _versions(),
            "stats": index_stats(tmp / LUCENE_DIR),
            "build": {"documents": count, "counters": counters, "threads": threads,
                      "write_seconds": round(written - began, 3),
                      "index_seconds": round(indexed - written, 3),
                      "docs_per_second": round(count / max(indexed - written, 1e-9), 1)},
            "files": {name: storage.checksum_file(tmp / name)
                      for name in (DOCSTORE_FILE, DOCIDS_FILE)},
            "parts": {LUCENE_DIR: {
                "built": storage.now(),
                "analyzer": "Anserini DefaultEnglishAnalyzer (Porter, Lucene English stopwords)",
                "options": ["storePositions", "storeDocvectors", "storeRaw"],
                "files": storage.checksum_tree(tmp / LUCENE_DIR, f"{LUCENE_DIR}/")}},
        }
        storage.write_json_atomic(tmp / storage.MANIFEST, manifest)
    return manifest
