import json
import shutil

import numpy as np
import pytest

from retrieval import storage
from retrieval.errors import InputError
from retrieval.formats import read_documents
from retrieval.index.native import Index, build_index, native_index
from retrieval.types import Document


def test_build_and_open(tiny_docs, tmp_path):
    manifest = build_index(read_documents(tiny_docs), tmp_path / "idx", progress=False)
    assert manifest["stats"]["documents"] == 5
    index = Index.open(tmp_path / "idx")
    assert index.doc_ids.tolist() == ["d1", "d2", "d3", "d4", "d5"]
    assert index.docstore.get("d2").text == "Dogs chase cats in the garden."
    inverted = index.inverted
    cat = inverted.term_ids["cat"]
    docs, tfs = inverted.postings(cat)
    assert docs.tolist() == [0, 1] and tfs.tolist() == [3, 1]  # Cats, cat, Cats / cats
    assert not inverted.blocks.words.flags.owndata  # memory-mapped, not loaded
    assert "docnos" not in inverted.__dict__  # one term's blocks decoded, not every posting
    assert inverted.docnos.tolist() == [d for t in range(inverted.num_terms) for d in inverted.postings(t)[0]]
    assert index.has("inverted") and not index.has("dense")
    with pytest.raises(InputError, match="has no 'dense' part"):
        index.require("dense")


def test_failed_build_keeps_previous_index(tiny_docs, tmp_path):
    build_index(read_documents(tiny_docs), tmp_path / "idx", progress=False)

    def broken():
        yield Document("x1", "", "fine")
        raise RuntimeError("crash in the middle of a build")

    with pytest.raises(RuntimeError):
        build_index(broken(), tmp_path / "idx", progress=False)
    assert Index.open(tmp_path / "idx").num_docs == 5
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left


def test_failed_part_keeps_previous_index_whole(tiny_docs, tmp_path):
    """`index --dense --late` is one atomic build: a part that fails leaves the old index as it was."""
    from retrieval.building import build_with_parts

    build_index(read_documents(tiny_docs), tmp_path / "idx", progress=False)
    before = {p.name: p.read_bytes() for p in (tmp_path / "idx").iterdir() if p.is_file()}

    class FailingDense:  # fails once the new inverted index is complete, as a full disk would
        @property
        def encoder(self):
            raise RuntimeError("the dense part failed")

    with pytest.raises(RuntimeError, match="dense part failed"):
        build_with_parts([Document("n1", "", "new text")], tmp_path / "idx", source="x",
                         analyzer=Index.open(tmp_path / "idx").analyzer, dense=FailingDense())
    assert {p.name: p.read_bytes() for p in (tmp_path / "idx").iterdir() if p.is_file()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left


def test_replacing_parts_of_an_index_is_atomic_as_a_whole(tiny_docs, tmp_path, monkeypatch):
    """`index --index I --dense --late`: the parts are built into a copy of hard links that replaces
    the index only when all are done, so a late part that fails after the dense part was written
    leaves every file as it was; done, the index verifies and names no temporary path."""
    from types import SimpleNamespace

    from retrieval.building import replace_parts

    path = tmp_path / "idx"
    build_index(read_documents(tiny_docs), path, progress=False)
    files = lambda: {p.relative_to(path): p.read_bytes() for p in path.rglob("*") if p.is_file()}  # noqa: E731
    before = files()

    def dense_part(index, *args, in_place=False):  # written into the index as add_dense writes its part
        root = native_index(index).path  # an Index or its path, as add_dense takes
        with storage.atomic_directory(root / "dense") as tmp:
            (tmp / "vectors.bin").write_bytes(b"vectors")
        storage.add_part(root, "dense", {"count": 5}, root / "dense")
        return {"count": 5}

    class FailingLate:
        @property
        def model(self):
            raise RuntimeError("the late part failed")

    monkeypatch.setattr("retrieval.dense.add_dense", dense_part)
    dense = SimpleNamespace(encoder=None, index_type="flat", params=None)
    with pytest.raises(RuntimeError, match="late part failed"):
        replace_parts(path, dense, FailingLate())
    assert files() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left
    replace_parts(path, dense)
    assert Index.open(path).parts["dense"]["count"] == 5 and (path / "dense" / "vectors.bin").is_file()
    assert ".tmp-" not in (path / "manifest.json").read_text()
    assert {k: v for k, v in files().items() if k.parts[0] != "dense" and k.name != "manifest.json"} == {
        k: v for k, v in before.items() if k.name != "manifest.json"}


def test_a_full_disk_is_an_oserror_naming_the_file(tmp_path, monkeypatch):
    """Space is claimed before writing (no SIGBUS in a mapped write, no numpy "N requested and M
    written"); SQLite's "database or disk is full" becomes the same OSError."""
    import errno
    import sqlite3

    from retrieval.index.docstore import write_docstore

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(storage.os, "posix_fallocate", full)
        for write in (lambda p: storage.save_array(p, np.arange(10)),
                      lambda p: storage.new_array(p, np.int32, (10,))):
            with pytest.raises(OSError) as caught:
                write(tmp_path / "a.npy")
            assert (caught.value.errno, caught.value.filename) == (errno.ENOSPC, str(tmp_path / "a.npy"))
    connect = sqlite3.connect

    def small_disk(*args, **kwargs):
        con = connect(*args, **kwargs)
        con.execute("PRAGMA max_page_count = 2")  # SQLite's own "database or disk is full"
        return con

    monkeypatch.setattr(sqlite3, "connect", small_disk)
    with pytest.raises(OSError) as caught:
        list(write_docstore(tmp_path / "docs.sqlite", (Document(f"d{i}", "", "x" * 500) for i in range(50))))
    assert (caught.value.errno, caught.value.filename) == (errno.ENOSPC, str(tmp_path / "docs.sqlite"))


def test_arrays_are_written_where_space_cannot_be_claimed(tmp_path, monkeypatch):
    """Without posix_fallocate (macOS), save_array and new_array still create their files."""
    monkeypatch.delattr(storage.os, "posix_fallocate")
    storage.save_array(tmp_path / "a.npy", np.arange(5))
    mapped = storage.new_array(tmp_path / "b.npy", np.int32, (3,))
    mapped[:] = 7
    mapped.flush()
    assert np.load(tmp_path / "a.npy").tolist() == [0, 1, 2, 3, 4]
    assert np.load(tmp_path / "b.npy").tolist() == [7, 7, 7]


def test_naming_turns_a_library_write_failure_into_an_oserror(tmp_path):
    import errno

    with pytest.raises(OSError) as caught, storage.naming(tmp_path / "f"):
        raise RuntimeError("Error: 'ret == (size * 4)' failed: write error in f: 1 != 4 (No space left on"
                           " device)")  # what faiss.write_index raises
    assert (caught.value.errno, caught.value.filename) == (errno.ENOSPC, str(tmp_path / "f"))
    with pytest.raises(RuntimeError), storage.naming(tmp_path / "f"):
        raise RuntimeError("a bug, not the system refusing a write")
    with pytest.raises(OSError) as caught, storage.naming(tmp_path / "f"), open(tmp_path / "g", "w"):
        raise OSError(errno.ENOSPC, "No space left on device")  # Python's writes name no file
    assert caught.value.filename == str(tmp_path / "f")


def test_duplicate_doc_ids_rejected(tmp_path):
    docs = [Document("a", "", "x"), Document("a", "", "y")]
    with pytest.raises(InputError, match="duplicate document id 'a'"):
        build_index(docs, tmp_path / "idx", progress=False)
    assert not (tmp_path / "idx").exists()


def test_missing_wrong_version_and_altered_index(tiny_docs, tmp_path):
    with pytest.raises(InputError, match="no index here"):
        Index.open(tmp_path / "nothing")
    build_index(read_documents(tiny_docs), tmp_path / "idx", progress=False)
    manifest_path = tmp_path / "idx" / storage.MANIFEST
    manifest = json.loads(manifest_path.read_text())
    (tmp_path / "idx" / "inverted" / "block_words.npy").write_bytes(b"garbage")
    with pytest.raises(InputError, match=r"block_words.npy: index file is truncated or altered"):
        Index.open(tmp_path / "idx")
    manifest["format_version"] = 999
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="format version 999 is not supported.*written by a newer version"
                       " of this package: upgrade the package"):
        Index.open(tmp_path / "idx")


def test_packed_index_refused_by_a_reader_of_the_flat_format(tiny_docs, tmp_path, monkeypatch):
    """An index with packed postings is format version 2: a package that reads version 1 only (the flat
    arrays) refuses it with a version message rather than failing on missing files."""
    manifest = build_index(read_documents(tiny_docs), tmp_path / "idx", progress=False)
    assert manifest["format_version"] == 2 and (tmp_path / "idx" / "inverted" / "block_words.npy").is_file()
    monkeypatch.setattr(storage, "FORMAT_VERSION", 1)
    monkeypatch.setattr(storage, "READABLE_VERSIONS", (1,))
    with pytest.raises(InputError, match=r"index format version 2 is not supported \(this version reads 1\)"):
        Index.open(tmp_path / "idx")


def test_pages_dropped_without_writing_back_still_read(tmp_path):
    """release_pages(write_back=False) on a scratch array: what was written is what a reader of the
    file then finds (the page cache keeps it), and the mapping can be written again after."""
    array = storage.new_array(tmp_path / "a.npy", np.int32, (1 << 20,))
    array[:] = np.arange(1 << 20, dtype=np.int32)
    storage.release_pages(array, write_back=False)
    assert np.array_equal(np.load(tmp_path / "a.npy"), np.arange(1 << 20))
    array[::2] = -1
    storage.release_pages(array[5:], write_back=False)  # a view of the mapping
    assert np.load(tmp_path / "a.npy")[:4].tolist() == [-1, 1, -1, 3]
    del array


def test_arrays_never_unpickle(tmp_path):
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match="cannot read array"):
        storage.load_array(tmp_path / "obj.npy", mmap=False)


def test_docnos_follow_doc_id_order_and_parallel_build_is_identical(tmp_path):
    docs = [Document(i, "", f"text {i} shared words") for i in ("b", "c", "a", "10", "9")]
    one = build_index(docs, tmp_path / "one", progress=False, workers=1)
    two = build_index(docs, tmp_path / "two", progress=False, workers=2)
    assert one["parts"]["inverted"]["files"] == two["parts"]["inverted"]["files"]
    index = Index.open(tmp_path / "one")
    assert index.doc_ids.tolist() == ["10", "9", "a", "b", "c"]
    assert [d.id for d in index.docstore] == ["b", "c", "a", "10", "9"]  # collection order
    assert index.inverted.doc_lengths.tolist() == [4, 4, 3, 4, 4]  # "a" is a stopword
    docs_of_b, _ = index.inverted.postings(index.inverted.term_ids["b"])
    assert docs_of_b.tolist() == [3]


def test_workers_build_the_one_process_index_over_many_batches(tmp_path, monkeypatch):
    """With workers, each process numbers terms its own way and meets new tokens in later batches
    (ASCII, beyond ASCII, the full grammar, a stopword-only and an empty text, a token too long for
    the tables): the index is still byte for byte the one process's."""
    import random

    from retrieval.index import native

    monkeypatch.setattr(native, "TEXT_BATCH", 7)  # many batches, so both workers get several
    monkeypatch.setattr(native, "available_cpus", lambda: 3)  # two worker processes even on one CPU
    rng = random.Random(5)
    words = ["cats", "The", "running", "naïve", "Straße", "日本語", "l'été", "3.14", "x" * 300, "of",
             "JOHN's"]
    texts = [" ".join(rng.choice(words) + rng.choice(["", str(rng.randrange(i + 1))])  # new tokens later on
                      for _ in range(rng.randrange(12))) for i in range(150)] + ["the of and", ""]
    docs = [Document(f"d{rng.randrange(10**6)}-{i}", "", text) for i, text in enumerate(texts)]
    one = build_index(docs, tmp_path / "one", progress=False, workers=1)
    three = build_index(docs, tmp_path / "three", progress=False, workers=3)
    assert one["parts"]["inverted"]["files"] == three["parts"]["inverted"]["files"]
    assert one["stats"] == three["stats"] and one["stats"]["unique_terms"] > 100


def test_manifest_names_no_path_of_the_building_machine(tiny_docs, tmp_path):
    """A collection file is named by its file name and content checksum, never by an absolute path."""
    from retrieval.cli import main as cli

    assert cli(["index", "--collection", str(tiny_docs), "--index", str(tmp_path / "idx")]) == 0
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["source"].startswith("file:corpus.jsonl#sha256:")

    def strings(obj):
        if isinstance(obj, dict):
            return [s for v in obj.values() for s in strings(v)]
        if isinstance(obj, list):
            return [s for v in obj for s in strings(v)]
        return [obj] if isinstance(obj, str) else []
    assert not [s for s in strings(manifest) if s.startswith("/") or str(tmp_path) in s]
    tiny_docs.write_text(tiny_docs.read_text().replace("mat", "rug"))
    from retrieval.collections import describe
    assert describe(tiny_docs) != manifest["source"]  # an edited collection is another source


def test_spilled_runs_merge_to_one_global_sort(tmp_path):
    """A build that spills many small runs of postings writes the arrays of one sort by (term, docno)."""
    from collections import Counter

    from retrieval import collections
    from retrieval.analysis import Analyzer
    from retrieval.index.postings import InvertedIndexBuilder

    analyzer = Analyzer()
    docs = [analyzer(d.contents) for d in collections.load_documents("cacm")]
    docno_of = np.random.default_rng(0).permutation(len(docs))
    vocab = sorted({t for terms in docs for t in terms})
    ids = {t: i for i, t in enumerate(vocab)}
    rows = [(ids[t], docno_of[n], tf) for n, terms in enumerate(docs) for t, tf in Counter(terms).items()]
    rows.sort()
    expected = {"docnos": [d for _, d, _ in rows], "tfs": [f for _, _, f in rows],
                "indptr": np.concatenate([[0], np.cumsum(np.bincount([t for t, _, _ in rows]))]).tolist()}
    for name, builder in (("memory", InvertedIndexBuilder()),
                          ("spilled", InvertedIndexBuilder(tmp_path / "spill", run_postings=5000))):
        for terms in docs:
            builder.add(terms)
        assert (name == "memory") == (not builder.runs)
        stats = builder.write(tmp_path / name, docno_of, chunk_postings=7000)
        assert stats["postings"] == len(rows) and stats["unique_terms"] == len(vocab)
        for array, values in expected.items():
            assert np.load(tmp_path / name / f"{array}.npy").tolist() == values, (name, array)
        lengths = np.load(tmp_path / name / "doc_lengths.npy")
        assert lengths[docno_of].tolist() == [len(terms) for terms in docs]
    assert not list((tmp_path / "spill").iterdir())  # runs deleted once merged


def test_blocks_round_trip_any_postings():
    """Packing is lossless for any rising docnos and tfs >= 1, whatever the block boundaries and
    widths (0 to 32 bits), and packing term range by term range writes the same words."""
    from retrieval.index.blocks import BLOCK, pack_codes, pack_postings, unpack_codes, unpack_postings

    rng = np.random.default_rng(7)
    dfs = np.array([0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK, 5, 0, 2 * BLOCK + 7])
    indptr = np.concatenate([[0], np.cumsum(dfs)])
    docnos = np.concatenate([np.sort(rng.choice(10**6, d, replace=False)) for d in dfs]).astype(np.int32)
    docnos[indptr[5]:indptr[6]] = np.arange(dfs[5])  # gaps of 0: width 0
    tfs = rng.integers(1, 4, size=len(docnos)).astype(np.int32)
    tfs[-1] = 2**31 - 1
    codes = rng.integers(0, 2**32, size=len(docnos), dtype=np.uint64).astype(np.uint32)
    blocks = pack_postings(indptr, docnos, tfs)
    assert [a.tolist() for a in unpack_postings(blocks)] == [docnos.tolist(), tfs.tolist()]
    assert pack_postings(indptr, docnos, tfs, [(0, 4), (4, 9)]).words.tolist() == blocks.words.tolist()
    assert unpack_codes(indptr, pack_codes(indptr, codes)).tolist() == codes.tolist()


def test_an_index_with_flat_postings_still_opens_with_the_same_results(tiny_docs, tmp_path):
    """Indexes built before the packed layout hold docnos.npy and tfs.npy (and one impact code per
    posting): they open, and search gives the same run."""
    from retrieval.index.blocks import CODE_FILES, POSTING_FILES
    from retrieval.index.impacts import CODES_FILE
    from retrieval.sparse.rankers import BM25
    from retrieval.types import Queries

    build_index(read_documents(tiny_docs), tmp_path / "new", progress=False)
    new = Index.open(tmp_path / "new")
    queries = Queries({"q1": "cat garden", "q2": "dogs chase"})
    expected = BM25(new)(queries)
    shutil.copytree(tmp_path / "new", tmp_path / "old")
    inverted = tmp_path / "old" / "inverted"
    storage.save_array(inverted / "docnos.npy", new.inverted.docnos)
    storage.save_array(inverted / "tfs.npy", new.inverted.tfs)
    storage.save_array(inverted / CODES_FILE, BM25(new).searcher.impacts.codes.astype(np.uint16))
    for name in POSTING_FILES + CODE_FILES:
        (inverted / name).unlink()
    manifest = json.loads((tmp_path / "old" / storage.MANIFEST).read_text())
    manifest["parts"]["inverted"]["files"] = storage.checksum_tree(inverted, "inverted/")
    (tmp_path / "old" / storage.MANIFEST).write_text(json.dumps(manifest))
    old = Index.open(tmp_path / "old")
    assert not old.inverted.packed
    assert BM25(old)(queries) == expected
    searcher = BM25(old).searcher
    runs = [[(d.tolist(), s.tolist()) for d, s in searcher.search_many([[(0, 1.0), (3, 0.5)]], 3, method=m)]
            for m in ("blockmax", "blocks", "exhaustive", "maxscore")]
    assert runs[0] == runs[1] == runs[2] == runs[3]


def test_doc_store_is_compressed_and_older_plain_ones_still_read(tmp_path):
    """Titles and texts are stored as zstd frames with a dictionary trained on the first documents;
    a doc store written before compression (plain title and text columns) reads the same."""
    import sqlite3

    from retrieval.index.docstore import DocStore, write_docstore

    rng = np.random.default_rng(3)
    words = [f"word{i}" for i in range(300)]
    docs = [Document(f"d{i:04d}", f"Title {i % 40}", " ".join(rng.choice(words, 80))) for i in range(600)]
    assert [d.id for d in write_docstore(tmp_path / "new.sqlite", iter(docs))] == [d.id for d in docs]
    con = sqlite3.connect(tmp_path / "old.sqlite")
    con.execute("CREATE TABLE docs (docno INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, title TEXT,"
                " text TEXT)")
    con.executemany("INSERT INTO docs VALUES (?, ?, ?, ?)",
                    [(i, d.id, d.title, d.text) for i, d in enumerate(docs)])
    con.commit()
    con.close()
    assert (tmp_path / "new.sqlite").stat().st_size < 0.75 * (tmp_path / "old.sqlite").stat().st_size
    for name in ("new.sqlite", "old.sqlite"):
        store = DocStore(tmp_path / name)
        store.check()
        assert list(store) == docs and store.get("d0007") == docs[7] and len(store) == len(docs)
        with pytest.raises(InputError, match="unknown document id"):
            store.get("nope")


def test_the_doc_store_thread_writes_the_one_thread_store(tmp_path):
    """The doc-store thread inserts the rows in the order one thread inserting each BATCH of rows
    once full, and each document's extra row right after it, does: the file is byte for byte the
    same. A duplicate id is an InputError raised in the caller's thread."""
    import sqlite3

    from retrieval.index import docstore
    from retrieval.index.docstore import DocStore

    docs = [Document(f"d{i:05d}", f"Title {i % 7}", f"text {i} and more " * (i % 13),
                     {"tag": f"v{i}"} if i % 5 == 0 else None, {"n": i} if i % 11 == 0 else None)
            for i in range(2600)]  # 1023 (the last of the first batch) has metadata
    assert [d.id for d in docstore.write_docstore(tmp_path / "thread.sqlite", docs)] == [d.id for d in docs]
    con = sqlite3.connect(tmp_path / "one.sqlite")
    con.execute(docstore._SCHEMA)
    con.execute(docstore._META)
    dictionary = docstore._dictionary(docs[:docstore.SAMPLE_DOCS])
    con.executemany("INSERT INTO meta VALUES (?, ?)", [("compression", docstore.COMPRESSION),
                                                        ("dictionary", dictionary)])
    compress, rows, extra = docstore._compressor(dictionary).compress, [], False
    for docno, doc in enumerate(docs):
        rows.append((docno, doc.id, compress(docstore._pack(doc))))
        if len(rows) == docstore.BATCH:
            con.executemany("INSERT INTO docs VALUES (?, ?, ?)", rows)
            rows.clear()
        if doc.fields or doc.metadata:
            if not extra:
                con.execute(docstore._EXTRA_SCHEMA)
                extra = True
            con.execute("INSERT INTO extra VALUES (?, ?, ?)",
                        (docno, docstore._json(doc.fields), docstore._json(doc.metadata)))
    con.executemany("INSERT INTO docs VALUES (?, ?, ?)", rows)
    con.commit()
    con.close()
    assert (tmp_path / "thread.sqlite").read_bytes() == (tmp_path / "one.sqlite").read_bytes()
    assert list(DocStore(tmp_path / "thread.sqlite")) == docs
    repeated = docs[:1500] + [docs[3]] + docs[1500:]
    with pytest.raises(InputError, match=r"duplicate document id 'd00003' \(document 1501 "):
        list(docstore.write_docstore(tmp_path / "repeated.sqlite", repeated))


def test_the_token_tables_thread_builds_the_one_thread_index(tmp_path, monkeypatch):
    """The tables' pass over each batch in a thread of its own, batches ahead of the analysis
    (native._add_here), gives the index add_texts gives in one thread; an error while reading
    stops that thread."""
    import random
    import threading

    from retrieval.index import native

    rng = random.Random(7)
    pool = ["alpha", "Beta", "gamma's", "café", "Ωmega", "漢字", "1,000", "the", "x_y", "DELTA", "naïve"]
    def word() -> str:  # often a new one: 50,000 distinct tokens outgrow the tables' first arrays
        return rng.choice(pool) if rng.random() < 0.3 else f"{rng.choice('tTé')}{rng.randrange(10**6)}"

    docs = [Document(f"d{i:04d}", "", " ".join(word() for _ in range(rng.randint(0, 150))))
            for i in range(900)]
    monkeypatch.setattr(native, "FOUND_BATCH", 7)  # many batches: the tables grow while the thread runs
    monkeypatch.setattr(native, "FOUND_AHEAD", 3)
    build_index(docs, tmp_path / "threads", progress=False)

    def one_thread(builder, batches, analyzer):
        for batch in batches:
            builder.add_texts([doc.contents for doc in batch], analyzer.tokens)
            yield batch

    monkeypatch.setattr(native, "_add_here", one_thread)
    build_index(docs, tmp_path / "one", progress=False)
    names = sorted(p.name for p in (tmp_path / "one" / "inverted").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "threads" / "inverted").iterdir())
    for name in names:
        assert ((tmp_path / "one" / "inverted" / name).read_bytes()
                == (tmp_path / "threads" / "inverted" / name).read_bytes()), name
    monkeypatch.undo()
    monkeypatch.setattr(native, "FOUND_BATCH", 7)

    def broken():
        yield from docs[:100]
        raise RuntimeError("crash in the middle of a build")

    with pytest.raises(RuntimeError, match="crash in the middle"):
        build_index(broken(), tmp_path / "broken", progress=False)
    assert not any(t.name.startswith("token tables") for t in threading.enumerate())
