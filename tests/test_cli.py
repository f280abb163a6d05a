import contextlib
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from retrieval.cli import main
from retrieval.index.native import Index


def run_cli(*args):
    """Run the real console entry point in a subprocess: (exit code, stdout, stderr)."""
    proc = subprocess.run([sys.executable, "-m", "retrieval.cli", *map(str, args)],
                          capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def test_index_search_eval_end_to_end(tiny_docs, tmp_path):
    idx, run = tmp_path / "idx", tmp_path / "runs" / "r.txt"
    assert main(["index", "--collection", str(tiny_docs), "--index", str(idx)]) == 0
    topics = tmp_path / "topics.tsv"
    topics.write_text("1\tcats in gardens\n2\tretrieval ranking\n")
    qrels = tmp_path / "qrels"
    qrels.write_text("1 0 d1 1\n2 0 d4 1\n2 0 d3 1\n")
    assert main(["search", "--index", str(idx), "--topics", str(topics), "--model", "qld",
                 "--mu", "100", "--output", str(run)]) == 0
    lines = run.read_text().splitlines()
    assert lines[0].split()[:4] == ["1", "Q0", "d1", "1"] and lines[0].endswith(" qld")
    code, out, err = run_cli("eval", "--qrels", qrels, run, "--measures", "MAP nDCG@10", "--json")
    assert code == 0, err
    assert json.loads(out) == {"MAP": 1.0, "nDCG@10": 1.0}
    code, out, _ = run_cli("eval", "--qrels", qrels, run, "--per-query")
    assert code == 0 and "MAP" in out and "\n2 " in out


def test_eval_compares_runs_with_the_baseline_by_paired_tests(tmp_path, capsys):
    """Several runs: marks and Holm-adjusted p-values against the baseline, the same as scipy's
    paired tests on trec_eval's per-query values (a query a run misses scores 0)."""
    from scipy import stats

    qrels = tmp_path / "qrels"
    qrels.write_text("".join(f"{q} 0 rel{q} 1\n" for q in range(1, 13)))
    good, poor = tmp_path / "good.txt", tmp_path / "poor.txt"
    good.write_text("".join(f"{q} Q0 rel{q} 1 2.0 g\n{q} Q0 x{q} 2 1.0 g\n" for q in range(1, 13)))
    poor.write_text("".join(f"{q} Q0 x{q} 1 2.0 p\n" + (f"{q} Q0 rel{q} 2 1.0 p\n" if q % 3 else "")
                            for q in range(1, 12)))  # query 12 unanswered: 0
    assert main(["eval", "--qrels", str(qrels), str(poor), str(good), "--measures", "MAP"]) == 0
    out = capsys.readouterr().out
    ap_poor = [0.5 if q % 3 else 0.0 for q in range(1, 12)] + [0.0]
    p_t = stats.ttest_rel([1.0] * 12, ap_poor).pvalue
    p_w = stats.wilcoxon([1.0] * 12, ap_poor).pvalue
    assert f"{poor} (baseline)" in out and f"{sum(ap_poor) / 12:.4f}" in out  # over all 12 queries
    row = [line for line in out.splitlines() if line.startswith(str(good))][-1]  # the p-value row
    assert row.split()[-3:] == [f"{p_t:.4f}" if p_t >= 1e-4 else f"{p_t:.0e}", "/",
                                f"{p_w:.4f}" if p_w >= 1e-4 else f"{p_w:.0e}"]
    means = next(line for line in out.splitlines() if line.startswith(f"{good} "))
    assert means.split()[1:] == ["1.0000", "tw"]
    assert main(["eval", "--qrels", str(qrels), str(poor), str(good), "--measures", "MAP", "--json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert as_json["baseline"] == str(poor) and as_json["runs"][str(good)] == {"MAP": 1.0}
    compared = as_json["comparisons"][str(good)]["MAP"]
    assert compared["queries"] == 12 and compared["p"]["t"] == pytest.approx(p_t)
    assert compared["p_holm"]["wilcoxon"] == pytest.approx(p_w)  # one run compared: Holm changes nothing
    assert main(["eval", "--qrels", str(qrels), str(poor), "--measures", "MAP", "--json", "--per-query"]) == 0
    as_json = json.loads(capsys.readouterr().out)  # --per-query is not dropped by --json
    assert as_json["runs"] == {str(poor): {"MAP": pytest.approx(sum(ap_poor) / 12)}}
    assert [v["MAP"] for v in as_json["per_query"][str(poor)].values()] == pytest.approx(ap_poor)
    assert main(["eval", "--qrels", str(qrels), str(poor), str(good), "--baseline", str(good / "r")]) == 2
    assert "--baseline must be one of the run files given" in capsys.readouterr().err
    # run files may follow options, as anywhere else on a command line; a stray option may not
    assert main(["eval", "--qrels", str(qrels), str(poor), "--baseline", str(good), str(good), "--json",
                 "--measures", "MAP"]) == 0
    assert json.loads(capsys.readouterr().out)["baseline"] == str(good)
    with pytest.raises(SystemExit) as stray:
        main(["eval", "--qrels", str(qrels), str(poor), "--bogus", str(good)])
    assert stray.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_search_output_is_byte_identical(tiny_docs, tmp_path):
    main(["index", "--collection", str(tiny_docs), "--index", str(tmp_path / "idx")])
    topics = tmp_path / "t.tsv"
    topics.write_text("1\tcats\n2\tdocuments retrieval\n")
    outs = []
    for i, threads in enumerate((1, 2)):
        out = tmp_path / f"r{i}"
        main(["search", "--index", str(tmp_path / "idx"), "--topics", str(topics), "--rm3",
              "--threads", str(threads), "--output", str(out)])
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] and outs[0]


@pytest.mark.parametrize("args, message", [
    (["search", "--index", "{tmp}/none", "--topics", "cacm"], "no index here"),
    (["eval", "--qrels", "{tmp}/q", "{tmp}/q"], "q:1: expected 6 fields"),
    (["eval", "--qrels", "cacm", "{tmp}/r", "--measures", "bogus"], "unknown measure 'bogus'"),
    (["index", "--collection", "{tmp}/q", "--index", "{tmp}/i"], "unknown collection format"),
    (["search", "--index", "{tmp}/i", "--topics", "cacm:dev"], ""),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    (tmp_path / "q").write_text("1 0 d1 1\n")
    (tmp_path / "r").write_text("1 Q0 d1 1 1.0 t\n")
    code, out, err = run_cli(*[a.format(tmp=tmp_path) for a in args])
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("retrieval: error: ")
    assert message in err and "Traceback" not in err


def test_help_on_every_command():
    for command in ("index", "search", "eval", "info"):
        code, out, _ = run_cli(command, "--help")
        assert code == 0 and "usage: retrieval " + command in out


def test_lucene_backend_through_the_cli(tiny_docs, tmp_path):
    if importlib.util.find_spec("jnius") is None and not os.environ.get("CI"):
        pytest.skip("the Lucene backend is not installed (pip install -e '.[lucene]')")
    idx, out = tmp_path / "lucene", tmp_path / "run.txt"
    code, _, err = run_cli("index", "--backend", "lucene", "--collection", tiny_docs, "--index", idx)
    assert code == 0, err
    assert json.loads((idx / "manifest.json").read_text())["backend"] == "lucene"
    topics = tmp_path / "t.tsv"
    topics.write_text("1\tcats garden\n")
    code, _, err = run_cli("search", "--index", idx, "--topics", topics, "--output", out)
    assert code == 0, err
    assert [line.split()[2] for line in out.read_text().splitlines()] == ["d2", "d1", "d5"]
    code, _, err = run_cli("search", "--index", idx, "--topics", topics, "--model", "qljm")
    assert code == 2 and "qljm does not run on a lucene index" in err
    before = (idx / "manifest.json").read_bytes()
    code, _, err = run_cli("index", "--index", idx, "--dense")  # a part no search could use
    assert code == 2 and "this is a lucene index; a dense or late part is added only to a single index" in err
    assert (idx / "manifest.json").read_bytes() == before


def test_dense_and_hybrid_through_the_cli(tiny_docs, tmp_path):
    idx = tmp_path / "idx"
    assert main(["index", "--collection", str(tiny_docs), "--index", str(idx)]) == 0
    code, _, err = run_cli("index", "--index", idx, "--dense")  # add the part to the index
    assert code == 0, err
    assert json.loads((idx / "manifest.json").read_text())["parts"].keys() >= {"inverted", "dense"}
    topics = tmp_path / "t.tsv"
    topics.write_text("1\tcanine pursues kitten\n")  # no word in common with any document
    for model in ("dense", "hybrid"):
        out = tmp_path / f"{model}.txt"
        code, _, err = run_cli("search", "--index", idx, "--topics", topics, "--model", model,
                               "--output", out)
        assert code == 0, err
        assert out.read_text().split()[2] == "d2"  # "Dogs chase cats": found by meaning alone
    code, _, err = run_cli("index", "--index", tmp_path / "none", "--dense")
    assert code == 2 and "no index here" in err
    before = (idx / "manifest.json").read_bytes()
    for bad in (["--encoder", str(tmp_path / "nope")], ["--dense-index", "hnsw", "--dense-param", "m=0"],
                ["--late", "--late-model", str(tmp_path / "nope.safetensors")]):  # a rebuild that must fail
        assert main(["index", "--collection", str(tiny_docs), "--index", str(idx), "--dense", *bad]) == 2
        assert (idx / "manifest.json").read_bytes() == before  # before anything was replaced


def test_hostile_input_gets_one_line_and_exit_2(tiny_docs, tmp_path, capsys):
    """Input the audit found slipping through: each is refused in one line naming what is wrong."""
    idx = tmp_path / "idx"
    assert main(["index", "--collection", str(tiny_docs), "--index", str(idx)]) == 0
    capsys.readouterr()
    topics, empty, qrels = tmp_path / "t.tsv", tmp_path / "empty.run", tmp_path / "qrels"
    topics.write_text("1\tcats\n")
    empty.write_text("")
    qrels.write_text("1 0 d1 1\n1 0 d1 1\n1 0 d1 0\n")  # a repeat is fine, a second grade is not
    (tmp_path / "surrogate.jsonl").write_text('{"_id": "x", "text": "a \\ud800 b"}\n')
    (tmp_path / "dup.json").write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{
        "context": "abc", "qas": [{"id": "1", "question": "a?", "answers": []},
                                  {"id": "1", "question": "b?", "answers": []}]}]}]}))
    cases = [
        (["index", "--collection", str(tmp_path / "surrogate.jsonl"), "--index", str(tmp_path / "s")],
         "surrogate.jsonl:1: field 'text' holds a lone surrogate"),
        (["rerank", "--index", str(idx), "--topics", str(topics), "--run", str(empty)], "the run is empty"),
        (["eval", "--qrels", str(qrels), str(empty)], "qrels:3: query '1' judges document 'd1' twice"),
        (["qa-eval", "--data", str(tmp_path / "dup.json"), "--predictions", str(empty)],
         "unique question ids ('1' appears twice)"),
        (["index", "--collection", str(tiny_docs), "--index", str(idx), "--threads", "0"],
         "argument --threads: must be >= 1, got 0"),
        (["search", "--index", str(idx), "--topics", "q\udce9"], "is not valid UTF-8"),
        (["search", "--index", str(idx), "--topics", str(topics), "--output", "/dev/full"],
         "No space left on device"),
        (["search", "--index", str(idx), "--topics", str(topics), "--output", str(idx / "manifest.json")],
         "is inside the index"),
        (["search", "--index", str(idx), "--topics", str(topics), "--output", str(tmp_path / "new") + "/"],
         "names a directory"),
        (["search", "--index", str(idx), "--topics", str(topics), "--output", str(topics)],
         "is also an input (the topics)"),
        (["rerank", "--index", str(idx), "--topics", str(topics), "--run", str(qrels), "--output",
          str(qrels)], "is also an input (the run file)"),
        (["search", "--index", str(idx), "--topics", str(topics), "--tag", ""],
         "argument --tag: run tag '' must be a non-empty word"),
        (["ask", "--index", str(idx), "why?", "--output", str(tmp_path / "p.json")],
         "--output and --details are for --questions"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) if "argument --" in message else contextlib.nullcontext() as exit_:
            code = main(argv)
        code = exit_.value.code if exit_ is not None else code
        err = capsys.readouterr().err.strip()
        assert code == 2 and message in err and err.count("\n") == 0, (argv, err)
    assert Index.open(idx).num_docs == 5 and not (tmp_path / "new").exists()
    assert topics.read_text() == "1\tcats\n" and not (tmp_path / "p.json").exists()


def test_second_audit_hostile_input_gets_one_line_and_exit_2(tiny_docs, tmp_path, capsys):
    """What a second audit found: each is refused in one line naming the file, and nothing is lost."""
    idx, src = tmp_path / "idx", tmp_path / "src"
    assert main(["index", "--collection", str(tiny_docs), "--index", str(idx)]) == 0
    capsys.readouterr()
    src.mkdir()
    (src / "docs.jsonl").write_bytes(tiny_docs.read_bytes())
    (tmp_path / "both.jsonl").write_text('{"id": "d1", "contents": "x", "_id": "d9"}\n')
    (tmp_path / "two.trec").write_text("<DOC>\n<DOCNO>a</DOCNO><DOCNO>b</DOCNO>\ntext\n</DOC>\n")
    (tmp_path / "html").mkdir()
    (tmp_path / "html" / "has space.html").write_text("<html><body>apple</body></html>")
    (tmp_path / "all.txt").write_text("\n".join(f"d{i}" for i in range(1, 6)) + "\n")
    (tmp_path / "empty.run").write_text("")
    (tmp_path / "bad.run").write_text("1 Q0 nope 1 1.0 t\n")
    (tmp_path / "t.tsv").write_text("1\tcats\n")
    (tmp_path / "dangling").symlink_to(tmp_path / "no" / "such" / "dir" / "run.txt")
    live = tmp_path / "live"
    (tmp_path / "more.jsonl").write_text('{"_id": "d9", "text": "more cats"}\n')
    assert main(["index", "--collection", str(tiny_docs), "--index", str(live)]) == 0
    assert main(["add", "--index", str(live), str(tmp_path / "more.jsonl")]) == 0
    capsys.readouterr()
    cases = [
        (["index", "--collection", str(src / "docs.jsonl"), "--index", str(src), "--force"],
         f"{src}: holds {src / 'docs.jsonl'}, which this command reads"),
        (["index", "--collection", str(tmp_path / "both.jsonl"), "--index", str(tmp_path / "x")],
         "both.jsonl:1: expected a \"text\" string beside \"_id\""),
        (["index", "--collection", str(tmp_path / "two.trec"), "--index", str(tmp_path / "x")],
         "two.trec:1: document with two <DOCNO> tags"),
        (["index", "--collection", str(tmp_path / "html"), "--index", str(tmp_path / "x")],
         f"{tmp_path / 'html' / 'has space.html'}: id 'has space' is not a valid id"),
        (["delete", "--index", str(idx), "--ids", str(tmp_path / "all.txt")],
         "these are all the index's documents"),
        (["eval", "--qrels", str(tmp_path / "t.tsv"), str(tmp_path / "empty.run")], "expected 4 fields"),
        (["eval", "--qrels", "cacm", str(tmp_path / "empty.run")],
         f"{tmp_path / 'empty.run'}: the run and the qrels share no query ids"),
        (["eval", "--qrels", "cacm", str(tmp_path / "bad.run"), str(tmp_path / "bad.run")],
         "run file given twice"),
        (["search", "--index", str(idx), "--topics", str(tmp_path / "t.tsv"), "--model", "qld",
          "--candidates", str(tmp_path / "bad.run")],
         f"{tmp_path / 'bad.run'}: names document 'nope', which is not in the index {idx}"),
        (["search", "--index", str(idx), "--topics", str(tmp_path / "t.tsv"), "--output",
          str(tmp_path / "dangling")], "whose directory does not exist"),
        (["info", "--index", str(tmp_path / "t.tsv")], "is a file, not an index directory"),
        # a flag that cannot apply is refused, not silently ignored
        (["search", "--index", str(idx), "--topics", str(tmp_path / "t.tsv"), "--topic-field", "desc"],
         "t.tsv: topic field 'desc' applies only to TREC <top> topics, which have fields; qid<TAB>text"),
        (["search", "--index", str(idx), "--topics", "cacm", "--topic-field", "desc"],
         "cacm: topic field 'desc' applies only to TREC <top> topics"),
        (["search", "--index", str(idx), "--topics", str(tmp_path / "t.tsv"), "--rm3", "--candidates",
          str(tmp_path / "bad.run")], "--rm3 searches the whole index again, so it cannot rescore"),
        (["index", "--collection", str(tiny_docs), "--index", str(tmp_path / "x"), "--dense-index", "hnsw"],
         "--dense-index applies only with --dense"),
        (["index", "--collection", str(tiny_docs), "--index", str(tmp_path / "x"), "--encoder", "/no/such"],
         "--encoder applies only with --dense"),
        (["index", "--collection", str(tiny_docs), "--index", str(tmp_path / "x"), "--dense",
          "--late-compression", "int8"], "--late-compression applies only with --late"),
        (["index", "--collection", str(tiny_docs), "--index", str(tmp_path / "x"), "--precision", "int8"],
         "--precision applies only with --dense or --late"),
        (["index", "--index", str(live), "--dense"],
         "documents were added to or deleted from this index (`retrieval add`/`delete`); a dense or"),
        (["search", "--index", str(live), "--topics", str(tmp_path / "t.tsv"), "--model", "dense"],
         "this index has no dense part; build it with one"),
        (["search", "--index", str(idx), "--topics", str(tmp_path / "t.tsv"), "--allow-partial"],
         "--allow-partial applies only to a sharded index"),
        (["search", "--index", str(idx), "--topics", str(tmp_path / "t.tsv"), "--shard-retries", "3"],
         "--shard-retries applies only with --ray"),
    ]
    for argv, message in cases:
        code = main(argv)
        err = capsys.readouterr().err.strip()
        assert code == 2 and message in err and err.count("\n") == 0, (argv, err)
    assert (src / "docs.jsonl").read_bytes() == tiny_docs.read_bytes()
    assert Index.open(idx).num_docs == 5 and not (tmp_path / "no").exists() and not (tmp_path / "x").exists()


def test_train_refuses_bad_outputs_and_settings_before_any_training(tiny_docs, tmp_path, capsys):
    """A third audit, of the train commands: an output that would replace an input or land inside an
    index, and settings the models cannot run, are refused in one line before any work."""
    idx, model = tmp_path / "idx", tmp_path / "model"
    assert main(["index", "--collection", str(tiny_docs), "--index", str(idx)]) == 0
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("d1 0 d1 1\nd2 0 d2 1\n")
    capsys.readouterr()
    late = ["train", "late", "--index", str(idx), "--topics", str(tiny_docs)]
    cases = [
        ([*late, "--output", str(idx / "manifest.json")], "is inside the index"),
        ([*late, "--output", str(tmp_path / "other")], "is a directory; expected a file name"),
        ([*late, "--qrels", str(qrels), "--output", str(tmp_path / "ck.safetensors"), "--title-pairs-from",
          str(tiny_docs)], "no title pairs could be made from"),  # its bodies are too short
        (["train", "realm", "--index", str(idx), "--reader", str(model), "--output", str(model)],
         "is also an input (the reader)"),
        (["train", "reader", "--output", str(tmp_path / "other")],
         "is not what this tool writes here; refusing to replace it (remove it or choose another path)"),
        (["train", "reader", "--output", str(tmp_path / "r"), "--max-length", "128"],
         "--stride 128 must be at most half of --max-length 128"),
    ]
    for argv, message in cases:
        code = main(argv)
        err = capsys.readouterr().err.strip()
        assert code == 2 and message in err and err.count("\n") == 0, (argv, err)
    for argv in ([*late, "--output", "x", "--doc-length", "1000"], [*late, "--output", "x", "--dim", "1000"],
                 ["train", "reader", "--output", "r", "--max-length", "1000"]):
        with pytest.raises(SystemExit):  # argparse's own one-line range error
            main(argv)
        assert "must be in [" in capsys.readouterr().err
    assert (idx / "manifest.json").read_text().startswith("{")
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine" and not (tmp_path / "r").exists()


def test_a_collection_file_name_that_is_not_utf8_is_indexed(tiny_docs, tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / os.fsdecode(b"a\xff.jsonl")).write_bytes(tiny_docs.read_bytes())
    assert main(["index", "--collection", str(folder), "--index", str(tmp_path / "i")]) == 0
    assert Index.open(tmp_path / "i").num_docs == 5


def test_more_processes_than_cpus_are_not_started(monkeypatch):
    """`--threads 10000` once started 10,000 processes for a 7-document collection."""
    from retrieval import analysis

    monkeypatch.setattr(analysis, "available_cpus", lambda: 1)
    monkeypatch.setattr(analysis, "worker_context", lambda: pytest.fail("started worker processes"))
    analyzed = list(analysis.analyse_all(["a cat", "dogs"], str, analysis.Analyzer(), workers=10_000))
    assert [terms for _, terms in analyzed] == [["cat"], ["dog"]]


def test_sigterm_during_a_build_cleans_up_as_ctrl_c_does(tmp_path):
    """`kill`, `timeout` and service managers send SIGTERM: the old index stays, nothing is left behind."""
    import signal
    import time

    target = tmp_path / "idx"
    proc = subprocess.Popen([sys.executable, "-m", "retrieval.cli", "index", "--collection", "cacm",
                             "--index", str(target)], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".idx.tmp-*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the build ended before it could be interrupted"
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 128 + signal.SIGTERM and err.strip().endswith("retrieval: terminated")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
