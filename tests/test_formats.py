import gzip
import json

import pytest

from retrieval.errors import InputError
from retrieval.formats import read_documents, read_qrels, read_run, read_topics, write_run
from retrieval.formats.html import html_to_document
from retrieval.formats.smart import cranfield_gain, read_cranfield_qrels, read_smart_queries
from retrieval.formats.trec import format_run
from retrieval.types import Run


def write(tmp_path, name, text, mode="w"):
    path = tmp_path / name
    (path.write_bytes if mode == "wb" else path.write_text)(text)
    return path


def test_trec_documents_and_missing_docno(tmp_path):
    path = write(tmp_path, "docs.trec", "<DOC>\n<DOCNO>a</DOCNO>\nhello <b>world</b>\n</DOC>\n"
                 "<DOC>\n<DOCNO>b</DOCNO>\nbye\n</DOC>\n")
    docs = list(read_documents(path))
    assert [(d.id, d.text) for d in docs] == [("a", "hello world"), ("b", "bye")]
    bad = write(tmp_path, "bad.trec", "<DOC>\n<DOCNO>a</DOCNO>\nx\n</DOC>\n<DOC>\nno id\n</DOC>\n")
    with pytest.raises(InputError, match=r"bad.trec:5: document without <DOCNO>"):
        list(read_documents(bad))
    unclosed = write(tmp_path, "open.trec", "<DOC>\n<DOCNO>a</DOCNO>\n")
    with pytest.raises(InputError, match=r"open.trec:1: <DOC> is never closed"):
        list(read_documents(unclosed))


def test_trec_topics_both_forms(tmp_path):
    top = write(tmp_path, "t1", "<top>\n<num> Number: 301\n<title> Foreign minorities\n"
                "<desc> Description:\nWhich minorities?\n</top>\n")
    assert read_topics(top) == {"301": "Foreign minorities"}
    assert read_topics(top, "title+desc") == {"301": "Foreign minorities Which minorities?"}
    doc = write(tmp_path, "t2", "<DOC>\n<DOCNO> 1 </DOCNO>\n What about TSS?\n</DOC>\n")
    assert read_topics(doc) == {"1": "What about TSS?"}
    tsv = write(tmp_path, "t.tsv", "1\tTSS\n")
    beir = write(tmp_path, "q.jsonl", '{"_id": "1", "text": "TSS"}\n')
    for one_text in (doc, tsv, beir):
        assert len(read_topics(one_text, "title")) == 1  # the default means "the query"
        with pytest.raises(InputError, match="topic field 'desc' applies only to TREC <top> topics"):
            read_topics(one_text, "desc")  # not silently the whole text


def test_topics_errors(tmp_path):
    with pytest.raises(InputError, match="unknown topic format"):
        read_topics(write(tmp_path, "t", "just some words\n"))
    with pytest.raises(InputError, match=r":1: query '7' is empty"):
        read_topics(write(tmp_path, "e", "<top><num>7</num><title> </title></top>"))
    with pytest.raises(InputError, match=r"q.tsv:2: expected 'qid<TAB>text'"):
        read_topics(write(tmp_path, "q.tsv", "1\tfine\n2\tbad\textra\n"))


def test_qrels_trec_and_beir(tmp_path):
    trec = write(tmp_path, "q", "1 0 d1 1\n1 0 d2 0\n2 Q0 d3 2\n")
    assert read_qrels(trec) == {"1": {"d1": 1, "d2": 0}, "2": {"d3": 2}}
    beir = write(tmp_path, "q.tsv", "query-id\tcorpus-id\tscore\n1\td1\t1\n")
    assert read_qrels(beir) == {"1": {"d1": 1}}
    with pytest.raises(InputError, match=r"bad:2: expected 4 fields"):
        read_qrels(write(tmp_path, "bad", "1 0 d1 1\n1 0 d2\n"))
    with pytest.raises(InputError, match=r"bad2:1: relevance 'x' is not an integer"):
        read_qrels(write(tmp_path, "bad2", "1 0 d1 x\n"))


def test_beir_corpus_gz_and_errors(tmp_path):
    path = tmp_path / "c.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"_id": "1", "title": "T", "text": "body"}\n'))
    (doc,) = read_documents(path)
    assert doc.contents == "T body"
    bad = write(tmp_path, "c.jsonl", '{"_id": "1", "text": "ok"}\n{"_id": 2, "text": \n')
    with pytest.raises(InputError, match=r"c.jsonl:2: invalid JSON"):
        list(read_documents(bad))


def test_anserini_json_collection_file_and_pyserini_directory(tmp_path):
    """Anserini's JsonCollection records ({"id", "contents"}, other fields not indexed) read as
    documents; a directory of such files (pyserini's --input) is read in sorted path order,
    gzipped and nested files included, hidden files skipped."""
    (tmp_path / "c" / "sub").mkdir(parents=True)
    write(tmp_path, "c/b.jsonl", '{"id": "d2", "contents": " second ", "url": "x"}\n'
                                 '{"id": 3, "contents": "third"}\n')
    (tmp_path / "c" / "sub" / "a.jsonl.gz").write_bytes(gzip.compress(b'{"id": "d1", "contents": "first"}\n'))
    write(tmp_path, "c/.hidden.jsonl", "not json")
    write(tmp_path, "c/README", "ignored")
    docs = list(read_documents(tmp_path / "c"))
    assert [(d.id, d.contents) for d in docs] == [("d2", "second"), ("3", "third"), ("d1", "first")]
    (doc,) = read_documents(write(tmp_path, "one.json", '{"id": "x", "contents": "y"}\n'))
    assert (doc.id, doc.title, doc.contents) == ("x", "", "y")


@pytest.mark.parametrize(("text", "expected"), [
    ('[\n{"id": "x", "contents": "y"},\n{"id": "z"}\n]\n', r"docs.json:3: expected a \"contents\" string"),
    ('[{"id": "x", "contents": "y"}\n', r"docs.json:1: the JSON array is not closed; expected '\]'"),
    ('[{"id": "x", "contents": "y"},\n\n{"id": "z" "contents"}]', r"docs.json:3: invalid JSON \(Expecting"),
    ('[{"id": "x", "contents": "y"} {"id": "z"}]', r"docs.json:1: expected ',' or '\]' after an element"),
    ('[{"id": "x", "contents": "y"}] []', r"docs.json:1: text after the JSON array"),
    ('[' * 5000, r"docs.json:1: invalid JSON \(nested too deeply\)"),
    ('{"id": "x", "text": "no contents"}\n', r"docs.json:1: expected a \"contents\" string beside \"id\""),
    ('{"id": "x", "contents": 5}\n', r"docs.json:1: field 'contents' must be a string"),
    ('{"name": "x"}\n', r"docs.json:1: expected a JSON object with an \"_id\" \(BEIR\) or \"id\" and"),
])
def test_json_lines_errors_name_the_line(tmp_path, text, expected):
    with pytest.raises(InputError, match=expected):
        list(read_documents(write(tmp_path, "docs.json", text)))


def test_a_duplicate_id_is_named_at_its_line_with_the_first(tmp_path):
    """In every collection format: JSON Lines files, TREC and SMART at the record's line, HTML pages
    (one document a file) by file."""
    from retrieval.collections import load_documents

    (tmp_path / "c").mkdir()
    write(tmp_path, "c/a.jsonl", '{"id": "x", "contents": "one"}\n\n{"id": "y", "contents": "two"}\n')
    write(tmp_path, "c/b.jsonl", '{"_id": "z", "text": "three"}\n{"_id": "y", "text": "again"}\n')
    expected = r"c/b.jsonl:2: duplicate document id 'y' \(first at .*c/a.jsonl:3\)"
    with pytest.raises(InputError, match=expected):
        list(load_documents(tmp_path / "c"))
    write(tmp_path, "t.trec", "<DOC>\n<DOCNO>a</DOCNO>\nx\n</DOC>\n\n<DOC>\n<DOCNO>a</DOCNO>\ny\n</DOC>\n")
    with pytest.raises(InputError, match=r"t.trec:6: duplicate document id 'a' \(first at .*t.trec:1\)"):
        list(load_documents(tmp_path / "t.trec"))
    write(tmp_path, "s.all", ".I 1\n.W\none\n.I 2\n.W\ntwo\n.I 1\n.W\nagain\n")
    with pytest.raises(InputError, match=r"s.all:7: duplicate document id '1' \(first at .*s.all:1\)"):
        list(load_documents(tmp_path / "s.all"))
    for sub in ("h/a", "h/b"):
        (tmp_path / sub).mkdir(parents=True)
    write(tmp_path, "h/a/p.html", "<p>one</p>")
    write(tmp_path, "h/b/p.htm", "<p>two</p>")
    with pytest.raises(InputError, match=r"h/b/p.htm: duplicate document id 'p' \(first at .*h/a/p.html\)"):
        list(load_documents(tmp_path / "h"))


def test_a_json_array_of_records_is_read_as_anserini_reads_it(tmp_path):
    """A file holding one JSON array of records (Anserini's JsonCollection reads these too); errors
    name the line where the element starts."""
    text = '\ufeff [\n {"id": "a", "contents": "one"},\n {"_id": "b", "title": "T", "text": "two"}\n]\n'
    docs = list(read_documents(write(tmp_path, "docs.json", text)))
    assert [(d.id, d.contents) for d in docs] == [("a", "one"), ("b", "T two")]
    assert list(read_documents(write(tmp_path, "empty.json", "[ ]"))) == []


def test_collection_directory_must_hold_one_kind(tmp_path):
    write(tmp_path, "a.html", "<html><body>x</body></html>")
    write(tmp_path, "b.jsonl", '{"id": "b", "contents": "y"}\n')
    with pytest.raises(InputError, match="both .html and JSON Lines files"):
        read_documents(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no .html or .jsonl/.json files"):
        read_documents(tmp_path / "empty")


def test_beir_queries_refuse_anserini_records(tmp_path):
    expected = r"q.jsonl:1: expected a JSON object with an \"_id\" \(BEIR queries\)"
    with pytest.raises(InputError, match=expected):
        read_topics(write(tmp_path, "q.jsonl", '{"id": "1", "contents": "a query"}\n'))


def test_invalid_utf8_and_nul_are_reported_with_line(tmp_path):
    with pytest.raises(InputError, match=r"u.jsonl:2: invalid UTF-8"):
        list(read_documents(write(tmp_path, "u.jsonl", b'{"_id":"1","text":""}\n{"_id":"\xff"}\n', "wb")))
    with pytest.raises(InputError, match=r"n:1: NUL byte"):
        read_qrels(write(tmp_path, "n", b"1 0 d\x00 1\n", "wb"))


def test_smart_queries_renumbered_and_cranfield_gains(tmp_path):
    qry = write(tmp_path, "cran.qry", ".I 001\n.W\nfirst query\n.I 004\n.W\nsecond\nline\n")
    assert read_smart_queries(qry) == {"1": "first query", "2": "second line"}
    assert read_smart_queries(qry, renumber=False) == {"1": "first query", "4": "second line"}
    assert [cranfield_gain(c) for c in (1, 2, 3, 4, -1)] == [4, 3, 2, 1, 0]
    rel = write(tmp_path, "cranqrel", "1 184 2 \n1 29 -1\n")
    assert read_cranfield_qrels(rel) == {"1": {"184": 3, "29": 0}}
    with pytest.raises(InputError, match=r"cranqrel2:1: relevance code 9"):
        read_cranfield_qrels(write(tmp_path, "cranqrel2", "1 2 9\n"))


def test_an_html_file_is_one_document_and_a_directory_all_of_them(tmp_path):
    for name in ("CACM-2.html", "CACM-1.htm"):
        write(tmp_path, name, f"<html><title>{name}</title><pre>text</pre></html>")
    assert [d.id for d in read_documents(tmp_path / "CACM-2.html")] == ["CACM-2"]
    assert [d.id for d in read_documents(tmp_path)] == ["CACM-1", "CACM-2"]


def test_html_text_extraction():
    doc = html_to_document("CACM-1", "<html><head><title>T</title></head><pre>A &amp; B\n"
                                      "<script>x()</script>c</pre></html>")
    assert doc[:3] == ("CACM-1", "T", "A & B c") and doc.fields is None


def test_run_round_trip_is_lossless_and_deterministic(tmp_path):
    run = Run({"q1": [("b", 1.5), ("a", 1.5), ("c", 0.1 + 0.2)], "q2": [("z", -3.25)]})
    assert run["q1"] == [("a", 1.5), ("b", 1.5), ("c", 0.30000000000000004)]
    run["q1"].append(("x", 9.0))  # a copy: the Run stays as built
    assert len(run["q1"]) == 3
    write_run(run, tmp_path / "r.txt", "t")
    assert read_run(tmp_path / "r.txt") == run
    assert (tmp_path / "r.txt").read_text() == format_run(run, "t")
    write_run(read_run(tmp_path / "r.txt"), tmp_path / "r2.txt", "t")
    assert (tmp_path / "r.txt").read_bytes() == (tmp_path / "r2.txt").read_bytes()
    with pytest.raises(InputError, match="run tag must be a string, got int 5"):
        write_run(run, tmp_path / "r3.txt", 5)
    assert not (tmp_path / "r3.txt").exists()


def test_run_errors(tmp_path):
    with pytest.raises(InputError, match=r"r:1: score 'x' is not a number"):
        read_run(write(tmp_path, "r", "1 Q0 d 1 x t\n"))
    with pytest.raises(InputError, match=r"r2:2: document 'd' appears twice"):
        read_run(write(tmp_path, "r2", "1 Q0 d 1 2 t\n1 Q0 d 2 1 t\n"))


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_beir_corpus_streams_and_names_the_bad_line(tmp_path, suffix):
    """Documents before a bad line are read before the error (the corpus is never held whole), and
    the error names the line; a BOM on the first line is dropped."""
    good = b"\xef\xbb\xbf" + b'{"_id": "a", "text": "x"}\n\n{"_id": "b", "text": "y"}\r\n'
    for bad, expected in ((b'{"_id": "c", "text": "\xff"}\n', "invalid UTF-8"),
                          (b'{"_id": "c", "text": "\x00"}\n', "NUL byte")):
        data = good + bad + b'{"_id": "d", "text": "z"}\n'
        path = tmp_path / f"corpus.jsonl{suffix}"
        path.write_bytes(gzip.compress(data) if suffix else data)
        docs = read_documents(path)
        assert [next(docs).id, next(docs).id] == ["a", "b"]
        with pytest.raises(InputError, match=rf"corpus.jsonl{suffix}:4: {expected}"):
            next(docs)


def test_an_index_directory_named_like_a_collection_does_not_hide_its_topics(tmp_path, monkeypatch):
    """`retrieval index --index cacm` then `--topics cacm` in the same directory: topics and qrels are
    never directories, so the name still means the collection; a file of that name still wins."""
    from retrieval.collections import load_qrels, load_topics

    monkeypatch.chdir(tmp_path)
    (tmp_path / "cacm").mkdir()
    assert len(load_topics("cacm")) == 64 and len(load_qrels("cacm")) == 52
    (tmp_path / "cacm:train").write_text("q1\tmy own topic\n")
    assert dict(load_topics("cacm:train").items()) == {"q1": "my own topic"}


def test_an_id_longer_than_the_limit_is_refused(tmp_path):
    """Ids live in fixed-width arrays: one 100,000-character id once widened every result array."""
    from retrieval.formats.textfile import MAX_ID_CHARS

    long_id = "W" * (MAX_ID_CHARS + 1)
    path = write(tmp_path, "c.jsonl", json.dumps({"_id": long_id, "text": "x"}) + "\n")
    with pytest.raises(InputError, match=r"c.jsonl:1: document _id 'W+'... has 1,001 characters"):
        list(read_documents(path))
    ok = write(tmp_path, "d.jsonl", json.dumps({"_id": "W" * MAX_ID_CHARS, "text": "x"}) + "\n")
    assert [d.id for d in read_documents(ok)] == ["W" * MAX_ID_CHARS]


def test_jsonl_records_read_as_json_reads_them(tmp_path):
    """JSON Lines are parsed by orjson where it reads a record as json does, else by json: a BOM,
    huge integers (orjson would make them floats), NaN and extra keys come out as json gives them."""
    lines = [
        "\ufeff" + json.dumps({"_id": "a", "title": " T ", "text": " x "}),
        json.dumps({"_id": 12345678901234567890123, "text": "y"}),
        json.dumps({"_id": "c", "text": "z", "year": 12345678901234567890123, "lang": "en"}),
        '{"id": "d", "contents": "w\\u00e9"}',
    ]
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    docs = list(read_documents(path))
    assert [d.id for d in docs] == ["a", "12345678901234567890123", "c", "d"]
    assert (docs[0].title, docs[0].text, docs[0].metadata) == ("T", "x", None)
    assert docs[2].metadata == {"year": 12345678901234567890123, "lang": "en"}
    assert type(docs[2].metadata["year"]) is int
    assert docs[3].text == "wé"
    path.write_text(json.dumps({"_id": "a", "text": "x"}) + '\n{"_id": "b", "text": "x", "n": NaN}\n')
    with pytest.raises(InputError, match=r"c\.jsonl:2: metadata 'n' must be a finite number"):
        list(read_documents(path))
