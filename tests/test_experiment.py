"""Experiments: pipelines, significance tests, configs, caching, the report in a real browser."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from retrieval.cli import main as cli_main
from retrieval.errors import InputError
from retrieval.evaluation.significance import compare, holm
from retrieval.experiments import report
from retrieval.experiments import runner as experiment
from retrieval.experiments.runner import load_config, run_experiment
from retrieval.pipeline.stage import Cut, Pipeline, pipe
from retrieval.registry import build
from retrieval.types import Queries, Run

CONFIGS = Path(__file__).resolve().parent.parent / "configs"

# ---------------------------------------------------------------- pipelines


class Fixed:
    """A first stage returning a fixed run."""

    name = "fixed"

    def __init__(self, run: Run):
        self.run = run

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        return self.run


class Reverse:
    """A reranker that reverses each ranking (scores become 1/rank)."""

    name = "reverse"

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        return Run({q: [(d, 1.0 / i) for i, (d, _) in enumerate(reversed(r), 1)]
                    for q, r in run.items()})


def test_pipeline_operators_compose_and_cut():
    first = Fixed(Run({"q": [(f"d{i}", 10.0 - i) for i in range(5)]}))
    p = pipe(first) % 3 >> Reverse()
    assert isinstance(p, Pipeline) and len(p.stages) == 3 and isinstance(p.stages[1], Cut)
    assert [d for d, _ in p(Queries(q="x"))["q"]] == ["d2", "d1", "d0"]
    assert [d for d, _ in (p % 1)(Queries(q="x"))["q"]] == ["d2"]
    assert repr(p) == "fixed % 3 >> reverse"
    nested = Pipeline(p, Reverse())  # pipelines are stages and flatten
    assert len(nested.stages) == 4


def test_pipeline_rejects_bad_cutoffs():
    with pytest.raises(InputError):
        pipe(Reverse()) % 0
    with pytest.raises(InputError, match="needs a run"):
        Cut(5)(Queries(q="x"))


def test_a_stage_that_returns_no_run_is_named():
    """A plain function is a stage; one that returns something else fails at that stage, by name."""
    def rankings(queries, run=None):
        return {q: [] for q in queries}

    first = Fixed(Run({"q": [("d1", 1.0)]}))
    with pytest.raises(InputError, match="pipeline stage rankings returned dict, not a Run"):
        (pipe(first) >> rankings >> Reverse())(Queries(q="x"))
    with pytest.raises(InputError, match="returned NoneType"):
        pipe(lambda queries, run=None: None)(Queries(q="x"))


def test_cascade_matches_rescoring_the_cut_first_stage(cacm_index):
    from retrieval.collections import load_topics

    queries = Queries(list(load_topics("cacm").items())[:8])
    bm25, qld = build("bm25", cacm_index), build("qld", cacm_index)
    composed = (pipe(bm25) % 50 >> qld)(queries)
    assert composed == qld(queries, bm25(queries).cut(50))
    assert (bm25 % 50 >> qld)(queries) == composed  # the operators are on every stage
    assert all(len(r) <= 50 for r in composed.values())


# ---------------------------------------------------------------- significance


def _per_query(rng: np.random.Generator, n: int, shift: float) -> dict[str, dict[str, float]]:
    return {str(q): {"AP": float(v)} for q, v in enumerate(np.clip(rng.random(n) + shift, 0, 1))}


def test_significance_agrees_with_scipy_on_per_query_values():
    rng = np.random.default_rng(7)
    systems = {"base": _per_query(rng, 40, 0.0), "a": _per_query(rng, 40, 0.2),
               "b": _per_query(rng, 40, 0.01), "c": _per_query(rng, 40, -0.1)}
    result = compare(systems, "base", ["AP"])
    qids = sorted(systems["base"])
    base = [systems["base"][q]["AP"] for q in qids]
    raw = {}
    for s in "abc":
        x = [systems[s][q]["AP"] for q in qids]
        raw[s] = (stats.ttest_rel(x, base).pvalue, stats.wilcoxon(x, base).pvalue)
        assert result[s, "AP"].p["t"] == pytest.approx(raw[s][0], rel=1e-12)
        assert result[s, "AP"].p["wilcoxon"] == pytest.approx(raw[s][1], rel=1e-12)
    for i, test in enumerate(("t", "wilcoxon")):
        expected = holm([raw[s][i] for s in "abc"])
        assert [result[s, "AP"].p_holm[test] for s in "abc"] == pytest.approx(expected)


def test_holm_by_hand():
    # sorted 0.01, 0.02, 0.04 -> 3*0.01=0.03, 2*0.02=0.04, max(0.04, 1*0.04)=0.04
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])


def test_identical_systems_are_not_significant():
    same = {str(q): {"AP": q / 10} for q in range(10)}
    result = compare({"base": same, "copy": same}, "base", ["AP"])
    assert result["copy", "AP"].p == {"t": 1.0, "wilcoxon": 1.0}


# ---------------------------------------------------------------- configs


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


GOOD = """collection: cacm
measures: [MAP]
baseline: bm25
pipelines:
  bm25: {model: bm25}
  qld: qld
"""


@pytest.mark.parametrize("text, line, message", [
    (GOOD + "bogus: 1\n", 7, "unknown key 'bogus'"),
    (GOOD.replace("qld: qld", "qld: {model: nope}"), 6, "unknown or missing model"),
    (GOOD.replace("{model: bm25}", "\n    model: bm25\n    k_1: 1.2"), 7, "unknown parameter"),
    (GOOD.replace("{model: bm25}", "{model: bm25, k1: fast}"), 5, "must be float"),
    (GOOD.replace("baseline: bm25", "baseline: bm99"), 3, "baseline 'bm99'"),
    (GOOD.replace("measures: [MAP]", "measures: [MAPP]"), 2, "unknown measure"),
    (GOOD.replace("qld: qld", "qld: [{model: qld, cutoff: -1}]"), 6, "cutoff"),
    (GOOD + "  bm25: bm25\n", 7, "duplicate key"),
    (GOOD + "pipelines: [\n", 8, "invalid YAML"),
    (GOOD + "sweeps:\n  s:\n    pipeline: bm25\n    grid: {mu: [1, 2]}\n", 10,
     "unknown parameter 'mu'"),
    (GOOD + "alpha: 7\n", 7, "alpha .* must be in"),
    (GOOD + "threads: 0\n", 7, "threads must be"),
    (GOOD + "topic_field: bogus\n", 7, "unknown topic field"),
    (GOOD + "index:\n  dense: {type: bogus}\n", 8, "unknown dense index type"),
    (GOOD + "index:\n  dense: {type: hnsw, params: {m: 0}}\n", 8, "m=0 is out of range"),
    (GOOD + "index:\n  late: {compression: zip}\n", 8, "compression must be"),
    (GOOD + "index:\n  dense: {encoder: 5}\n", 8, "'encoder' must be a model directory"),
    (GOOD + "index:\n  late: {model: [a]}\n", 8, "'model' must be a checkpoint path"),
    (GOOD + "index: {path: ''}\n", 7, "path must name the index directory"),
    (GOOD + "sweeps:\n  ../../escaped: {pipeline: bm25, grid: {k1: [1.0]}}\n", 8, "sweep name"),
    (GOOD + "sweeps:\n  s:\n    pipeline: bm25\n    grid: {fb_docs: [5, 10]}\n", 10,
     "fb_docs applies only with rm3"),
    (GOOD.replace("qld: qld", "late: late"), 6, "starts with late, a reranker"),
    (GOOD.replace("qld: qld", "prf: [{model: bm25, cutoff: 5},\n        {model: bm25, rm3: true}]"), 7,
     "rm3 searches the whole index again, so it cannot be used after the first stage"),
    (GOOD.replace("qld: qld", "two: [bm25, qld]") + "sweeps:\n  s:\n    pipeline: two\n    stage: 1\n"
     "    grid: {rm3: [false, true]}\n", 11, "rm3 searches the whole index again"),
    (GOOD.replace("qld: qld", "h: {model: hybrid, fusion: rrf, weight: 0.3}"), 6,
     "weight applies only with fusion interpolate"),
    ("collection: cacm\nqa:\n", 2, "'qa' must be a mapping"),
    ("collection: cacm\nbaseline: bm25\nqa: {}\n", 2, "'baseline' applies to pipelines"),
    ("collection: cacm\nqa: {select_on: squad2-dev:validation}\n", 2, "select_on is for choosing"),
    ("collection: cacm\nqa: {temperature: [0.1, 0.2], select_on: x, select_passages: [5, 20]}\n",
     2, "'select_passages' must be int"),
])
def test_config_errors_name_file_and_line(tmp_path, text, line, message):
    path = _config(tmp_path, text)
    with pytest.raises(InputError, match=message) as e:
        load_config(path)
    assert (e.value.path, e.value.line) == (str(path), line)
    assert str(e.value).startswith(f"{path}:{line}: ")


def test_an_index_path_holding_an_anserini_index_is_refused_not_replaced(tmp_path, capsys, monkeypatch):
    """A Lucene directory Anserini wrote (no manifest of ours) is neither read as ours nor replaced."""
    monkeypatch.chdir(tmp_path)  # the config's relative paths
    (tmp_path / "idx").mkdir()
    (tmp_path / "idx" / "segments_1").write_bytes(b"lucene")
    path = _config(tmp_path, GOOD + "index: {path: idx}\n")
    assert cli_main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "refusing to replace it" in err[0]
    assert (tmp_path / "idx" / "segments_1").read_bytes() == b"lucene"


@pytest.mark.parametrize("text, line, message", [
    (GOOD.replace("collection: cacm", "collection: cacmm"), 1, "collection: cacmm: not found"),
    (GOOD + "topics: no-such-topics.txt\n", 7, "topics: no-such-topics.txt: "),
    (GOOD + "qrels: cacm:train\n", 7, "qrels: collection 'cacm' has no split 'train'"),
    ("collection: cacm\nqa: {questions: xquad-en:nosplit}\n", 2, "qa.questions: unknown QA set"),
    ("collection: cacm\nqa: {reader: no-such-reader}\n", 2, "qa.reader: no-such-reader: not a reader"),
])
def test_inputs_are_read_before_any_index_work_and_blamed_on_their_key(tmp_path, capsys, monkeypatch,
                                                                       text, line, message):
    """A mistyped name fails first, at its config line, and no index is built for it."""
    monkeypatch.chdir(tmp_path)
    path = _config(tmp_path, text + "index: {path: idx}\n" if "index:" not in text else text)
    assert cli_main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]] and err[0].startswith(f"retrieval: error: {path}:{line}: {message}"), err
    assert not (tmp_path / "idx").exists()


def test_a_pipeline_needing_a_part_the_index_lacks_is_refused_before_any_search(
        tmp_path, capsys, cacm_index):
    path = _config(tmp_path, GOOD.replace("qld: qld", "dn: dense") + f"index: {{path: {cacm_index.path}}}\n")
    assert cli_main(["run", str(path), "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"retrieval: error: {path}:6: dense needs the index's dense part; add `dense: true`"
                   " under index:"]
    assert not list((tmp_path / "out").rglob("*.run"))  # bm25, listed first, was not searched


def test_cli_reports_config_errors_in_one_line(tmp_path, capsys):
    path = _config(tmp_path, GOOD.replace("qld: qld", "qld: {model: qld, muu: 3}"))
    assert cli_main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"retrieval: error: {path}:6: unknown parameter 'muu' for qld")


@pytest.mark.parametrize("path", sorted(set(CONFIGS.glob("*.yaml")) - {CONFIGS / "xquad.yaml"}),
                         ids=lambda p: p.name)
def test_shipped_configs_are_valid_and_use_every_ranker(path):
    cfg = load_config(path)
    used = {(s.model, bool(s.params.get("rm3"))) for stages in cfg.pipelines.values()
            for s in stages}
    assert {("bm25", False), ("qld", False), ("qljm", False), ("bm25", True),
            ("qld", True)} <= used
    assert any(len(stages) > 1 for stages in cfg.pipelines.values())  # a cascade
    assert cfg.baseline == "bm25" and cfg.sweeps
    for sweep in cfg.sweeps:  # selection never on test
        assert sweep.select_on in (None, "folds") or sweep.select_on.endswith(":train")


def test_scifact_config_selects_on_train():
    cfg = load_config(CONFIGS / "scifact.yaml")
    assert cfg.measures == ["nDCG@10", "R@100", "MAP"] and cfg.remove_query_ids
    assert [s.select_on for s in cfg.sweeps] == ["scifact:train", "scifact:train"]
    assert cfg.parts == {"dense": {}, "late": {}}
    assert {"dense", "hybrid", "bm25>>late", "hybrid>>late"} <= set(cfg.pipelines)


def test_select_on_is_not_hidden_by_an_index_directory_of_the_same_name(tmp_path, monkeypatch):
    """An index built as `--index scifact` in the working directory does not make `scifact:train`
    unknown: select_on names topics, which are never directories."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "scifact").mkdir()
    cfg = load_config(CONFIGS / "scifact.yaml")
    assert [s.select_on for s in cfg.sweeps] == ["scifact:train", "scifact:train"]


# ---------------------------------------------------------------- running experiments

SMALL = """name: small
collection: cacm
index: {{path: {index}}}
measures: [MAP, P@10]
baseline: bm25
pipelines:
  bm25: bm25
  qld: {{model: qld, mu: 1000}}
  bm25+rm3: {{model: bm25, rm3: true}}
  bm25>>qld: [{{model: bm25, cutoff: 100}}, qld]
sweeps:
  bm25-cv:
    pipeline: bm25
    grid: {{k1: [0.9, 1.2], b: [0.4, 0.75]}}
    select_on: folds
  rm3:
    pipeline: bm25+rm3
    grid: {{fb_terms: [5, 10]}}
"""


@pytest.fixture(scope="session")
def small_experiment(cacm_index, tmp_path_factory):
    root = tmp_path_factory.mktemp("experiment")
    config = root / "small.yaml"
    config.write_text(SMALL.format(index=cacm_index.path))
    outcome = run_experiment(config, root / "out", progress=False)
    report.write_report(outcome)
    return config, outcome


def test_experiment_runs_every_pipeline_and_compares(small_experiment):
    _, outcome = small_experiment
    assert list(outcome.means) == ["bm25", "qld", "bm25+rm3", "bm25>>qld", "bm25-cv"]
    assert outcome.means["bm25"]["MAP"] == pytest.approx(0.3123, abs=0.001)
    assert outcome.computed == 5 and outcome.reused == 0
    assert {s for s, _ in outcome.comparisons} == {"qld", "bm25+rm3", "bm25>>qld", "bm25-cv"}
    for name, path in outcome.run_files.items():
        assert path.is_file() and path.read_text().split("\n", 1)[0].endswith(
            experiment.slug(name))
    cv, rm3 = outcome.sweeps
    assert len(cv.chosen) == 2 and len(cv.means) == 4
    assert rm3.chosen == [] and "no setting was selected" in rm3.note
    table = report.text_table(outcome)
    assert "bm25 (baseline)" in table and "Holm-adjusted" in table


def test_significance_in_table_matches_scipy_on_run_values(small_experiment):
    _, outcome = small_experiment
    base, rm3 = outcome.per_query["bm25"], outcome.per_query["bm25+rm3"]
    qids = sorted(set(base) & set(rm3))
    x, y = [rm3[q]["MAP"] for q in qids], [base[q]["MAP"] for q in qids]
    c = outcome.comparisons["bm25+rm3", "MAP"]
    assert c.p["t"] == pytest.approx(stats.ttest_rel(x, y).pvalue, rel=1e-12)
    assert c.p["wilcoxon"] == pytest.approx(stats.wilcoxon(x, y).pvalue, rel=1e-12)


def test_rerun_reuses_runs_and_recomputes_only_what_changed(small_experiment, tmp_path):
    config, first = small_experiment
    files = {n: p.read_bytes() for n, p in first.run_files.items()}
    again = run_experiment(config, first.output_dir, progress=False)
    assert (again.computed, again.reused) == (0, 5)
    assert again.means == first.means
    assert {n: p.read_bytes() for n, p in again.run_files.items()} == files
    changed = tmp_path / "changed.yaml"
    changed.write_text(config.read_text().replace("mu: 1000", "mu: 500"))
    shutil.copytree(first.output_dir, tmp_path / "out")
    third = run_experiment(changed, tmp_path / "out", progress=False)
    assert (third.computed, third.reused) == (1, 4)


def test_stale_index_is_rebuilt(tmp_path, tiny_docs):
    queries = tmp_path / "topics.tsv"
    queries.write_text("1\tcat garden\n2\tretrieval\n")
    (tmp_path / "qrels.txt").write_text("1 0 d2 1\n2 0 d3 1\n2 0 d4 1\n")
    text = (f"collection: {tiny_docs}\ntopics: {queries}\nqrels: {tmp_path / 'qrels.txt'}\n"
            f"index: {{path: {tmp_path / 'idx'}, stopwords: true}}\nbaseline: bm25\n"
            "measures: [MAP]\npipelines: {bm25: bm25, qld: qld}\n")
    path = _config(tmp_path, text)
    run_experiment(path, tmp_path / "out", progress=False)
    built = (tmp_path / "idx" / "manifest.json").stat().st_mtime_ns
    run_experiment(path, tmp_path / "out", progress=False)
    assert (tmp_path / "idx" / "manifest.json").stat().st_mtime_ns == built  # not rebuilt
    path.write_text(text.replace("stopwords: true", "stopwords: false"))
    again = run_experiment(path, tmp_path / "out", progress=False)
    cfg = experiment.ensure_index(load_config(path))
    assert cfg.manifest["analyzer"]["stopwords"] is None
    assert again.computed == 2  # a rebuilt index invalidates cached runs
    before = (tmp_path / "idx" / "manifest.json").read_bytes()  # a rebuild whose dense model is missing
    missing = f"stopwords: true, dense: {{encoder: {tmp_path / 'no'}}}"
    path.write_text(text.replace("stopwords: true", missing))
    with pytest.raises(InputError):  # fails before the index it would replace is touched
        run_experiment(path, tmp_path / "out", progress=False)
    assert (tmp_path / "idx" / "manifest.json").read_bytes() == before
    path.write_text(text.replace("stopwords: true", "stopwords: false, late: {model: no.safetensors}"))
    with pytest.raises(InputError, match="index.late: no.safetensors: late-interaction checkpoint"
                       " not found") as e:  # a part that cannot be added is not a reason to rebuild
        run_experiment(path, tmp_path / "out", progress=False)
    assert (e.value.path, e.value.line) == (str(path), 4)
    assert (tmp_path / "idx" / "manifest.json").read_bytes() == before


def test_train_selection_must_not_overlap_test(tmp_path, cacm_index):
    text = SMALL.format(index=cacm_index.path).replace("select_on: folds", "select_on: cacm")
    with pytest.raises(InputError, match="never on test") as e:
        run_experiment(_config(tmp_path, text), tmp_path / "o", progress=False)
    assert e.value.line == 15  # the select_on line


# ---------------------------------------------------------------- the report in a browser


def test_report_files(small_experiment):
    _, outcome = small_experiment
    page = (outcome.output_dir / "report.html").read_text()
    md = (outcome.output_dir / "report.md").read_text()
    assert '<table id="results"' in page and page.count("<tr>") >= 6
    images = re.findall(r'<img alt="[^"]*" data-plot="([^"]+)" src="data:image/png;base64,'
                        r'([^"]+)"', page)
    assert {name for name, _ in images} == {"measures.png", "precision-recall.png",
                                            "differences.png", "sweep-bm25-cv.png",
                                            "sweep-rm3.png"}
    for _, data in images:
        assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "src=\"http" not in page and "<script" not in page  # self-contained, static
    assert "| bm25 (baseline)" in md and "![" in md


def test_a_report_that_fails_to_write_leaves_the_previous_set(small_experiment, tmp_path, monkeypatch):
    """A failure while writing the report (a full disk at report.html) replaces none of its files:
    report.md, report.html, results.json and the plots stay the previous run's, and no
    temporary file is left."""
    import errno

    from retrieval import storage

    _, outcome = small_experiment
    shutil.copytree(outcome.output_dir, tmp_path / "out")
    old = {p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    (tmp_path / "out" / "report.key").write_text("stale")  # so the report is written again
    old[Path("out/report.key")] = b"stale"
    staged_copy = storage._staged_copy

    def full_at_html(path, data):
        if path.name == "report.html":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return staged_copy(path, data)

    monkeypatch.setattr(storage, "_staged_copy", full_at_html)
    with pytest.raises(OSError):
        report.write_report(dataclasses.replace(outcome, output_dir=tmp_path / "out"))
    now = {p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    assert now == old


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _browser(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars",
         *args], capture_output=True, text=True, timeout=120, check=True)


def test_report_renders_in_headless_chromium(small_experiment, tmp_path):
    if _chromium() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is required in CI (apt-get install -y chromium)")
        pytest.skip("chromium not installed")
    import matplotlib.image

    _, outcome = small_experiment
    url = (outcome.output_dir / "report.html").resolve().as_uri()
    shot = tmp_path / "shot.png"
    _browser(tmp_path, "--window-size=1200,2400", f"--screenshot={shot}", url)
    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (2400, 1200)
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 100  # not blank
    saturated = (pixels.max(axis=2) - pixels.min(axis=2)) > 0.3  # plot colours, not text
    assert saturated.mean() > 0.005
    header = np.all(np.abs(pixels - np.array([0xE8, 0xEE, 0xF7]) / 255) < 0.02, axis=2)
    assert header.sum() > 500  # the results table's header row is on screen
    dom = _browser(tmp_path, "--dump-dom", url).stdout
    assert dom.count("<table") == 3 and 'id="results"' in dom
    assert dom.count('<img alt=') == 5


def test_unanswered_judged_queries_score_zero_unless_only_answered(tmp_path, capsys):
    from retrieval.evaluation.measures import evaluate, per_query

    qrels = {"1": {"a": 1}, "2": {"b": 1}, "3": {"c": 1}}
    run = Run({"1": [("a", 1.0)], "2": [("x", 1.0)]})
    assert evaluate(run, qrels, ["MAP", "P@1"]) == {"MAP": 1 / 3, "P@1": 1 / 3}
    assert evaluate(run, qrels, ["MAP"], only_answered=True) == {"MAP": 0.5}
    assert per_query(run, qrels, ["MAP"])["3"] == {"MAP": 0.0}
    assert "3" not in per_query(run, qrels, ["MAP"], only_answered=True)
    (tmp_path / "q").write_text("1 0 a 1\n2 0 b 1\n3 0 c 1\n")
    (tmp_path / "r").write_text("1 Q0 a 1 1.0 t\n2 Q0 x 1 1.0 t\n")
    for flags, value in (([], 1 / 3), (["--only-answered"], 0.5)):
        assert cli_main(["eval", "--qrels", str(tmp_path / "q"), str(tmp_path / "r"), "--measures", "MAP",
                         "--json", *flags]) == 0
        assert json.loads(capsys.readouterr().out) == {"MAP": pytest.approx(value)}


@pytest.mark.slow
def test_config_runs_late_reranking_on_a_sharded_index(tmp_path, tiny_docs):
    """`shards: 2` and a `late` step: the sharded experiment's runs equal the single index's."""
    (tmp_path / "t.tsv").write_text("1\tcats in gardens\n2\tretrieval ranking\n")
    (tmp_path / "q").write_text("1 0 d1 1\n2 0 d4 1\n2 0 d3 1\n")
    texts = {}
    for layout in ("", ", shards: 2"):
        name = "sharded" if layout else "single"
        path = _config(tmp_path, f"name: {name}\ncollection: {tiny_docs}\ntopics: {tmp_path / 't.tsv'}\n"
                       f"qrels: {tmp_path / 'q'}\nindex: {{path: {tmp_path / name}, late: true{layout}}}\n"
                       "measures: [MAP]\nbaseline: bm25\npipelines:\n  bm25: bm25\n"
                       "  bm25>>late: [{model: bm25, cutoff: 3}, {model: late, checkpoint: zero-shot}]\n")
        outcome = experiment.run_experiment(path, tmp_path / f"out-{name}", progress=False)
        texts[name] = {s: p.read_text().replace(name, "") for s, p in outcome.run_files.items()}
        assert set(outcome.means) == {"bm25", "bm25>>late"}
    assert texts["sharded"] == texts["single"]
    from retrieval.index.kinds import open_index

    assert open_index(tmp_path / "sharded").kind == "sharded" and open_index(tmp_path / "sharded").has("late")


def test_shipped_qa_config_chooses_settings_on_validation_only():
    from retrieval.collections import load_examples

    cfg = load_config(CONFIGS / "xquad.yaml")
    qa = cfg.qa
    assert qa.passages == (1, 5, 20) and not cfg.pipelines and qa.select_on == "squad2-dev:validation"
    assert len(qa.temperature) > 1 and len(qa.systems["hybrid"]["bm25_weight"]) > 1
    evaluated = {ex.title for ex in load_examples(qa.questions)}
    validation = {ex.title for ex in load_examples(qa.select_on)}
    assert evaluated and validation and not evaluated & validation  # no article shared


def _squad(path: Path, title: str, paragraphs: list[tuple[str, list[tuple[str, str]]]]) -> Path:
    data = {"data": [{"title": title, "paragraphs": [
        {"context": context, "qas": [{"id": f"{title}-{i}-{j}", "question": q, "answers": [
            {"text": a, "answer_start": context.index(a)}]} for j, (q, a) in enumerate(qas)]}
        for i, (context, qas) in enumerate(paragraphs)]}]}
    path.write_text(json.dumps(data))
    return path


@pytest.mark.slow
def test_qa_config_selects_on_validation_and_reports_every_passage_count(tmp_path):
    from retrieval.formats.squad import passage_id

    test = _squad(tmp_path / "test.json", "Rivers", [
        ("The Nile is the longest river in Africa and flows into the Mediterranean Sea.",
         [("Where does the Nile flow into?", "the Mediterranean Sea")]),
        ("The Amazon carries more water than any other river on Earth.",
         [("Which river carries the most water?", "The Amazon")])])
    validation = _squad(tmp_path / "val.json", "Mountains", [
        ("Mount Everest is the highest mountain above sea level, in the Himalayas.",
         [("Which mountain is the highest?", "Mount Everest")]),
        ("K2 is the second-highest mountain on Earth, on the China-Pakistan border.",
         [("What is the second-highest mountain?", "K2")])])
    corpus = tmp_path / "passages.jsonl"
    contexts = [p["context"] for f in (test, validation)
                for p in json.loads(f.read_text())["data"][0]["paragraphs"]]
    corpus.write_text("".join(json.dumps({"_id": passage_id(c), "title": "", "text": c}) + "\n"
                              for c in contexts))
    path = _config(tmp_path, f"name: qa\ncollection: {corpus}\n"
                   f"index: {{path: {tmp_path / 'idx'}, dense: true}}\n"
                   f"qa:\n  questions: {test}\n  passages: [1, 2]\n  temperature: [0.05, 0.5]\n"
                   f"  select_on: {validation}\n  select_passages: 2\n"
                   "  systems: {dense: {}, hybrid: {bm25_weight: [0.05, 0.2]}}\n")
    outcome = experiment.run_experiment(path, tmp_path / "out", progress=False)
    assert [(r["system"], r["passages"]) for r in outcome.qa] == [
        ("dense", 1), ("dense", 2), ("hybrid", 1), ("hybrid", 2)]
    assert all(r["questions"] == 2 and 0 <= r["exact"] <= 100 for r in outcome.qa)
    assert all(r["recall"] == 1.0 for r in outcome.qa if r["passages"] == 2)  # both passages read
    assert any("chosen on" in note and str(validation) in note for note in outcome.qa_notes)
    text = report.text_table(outcome)
    assert "answer-recall@k" in text and "| hybrid" in text
    md, page = report.write_report(outcome)
    assert "Question answering" in md.read_text() and "Question answering" in page.read_text()
    again = experiment.run_experiment(path, tmp_path / "out", progress=False)
    assert again.qa == outcome.qa  # cached in qa.json


def test_runs_and_qrels_from_user_data_are_checked_not_coerced():
    """A Run or qrels built by hand: a bad id, score or grade is an InputError, never silently
    converted (None is not the id 'None') nor a TypeError deep inside pytrec_eval."""
    from retrieval.evaluation.measures import evaluate

    for bad in ({"q": [(None, 1.0)]}, {"q": [(b"d1", 1.0)]}, {"q": [("a b", 1.0)]}, {"q": [("a", "1.5")]},
                {"q": [("a", True)]}, {1: [("a", 1.0)]}, [("q", [("a", 1.0)])], {"q": [1]}):
        with pytest.raises(InputError):
            Run(bad)
    run = Run({"q": [("a", 1.0), ("b", np.float32(0.5))]})
    assert run["q"] == [("a", 1.0), ("b", 0.5)]
    for qrels in ({"q": {"a": "1"}}, {"q": {"a": 0.5}}, {"q": {2: 1}}):
        with pytest.raises(InputError, match="expected a doc id string and an int grade"):
            evaluate(run, qrels, ["MAP"])
    with pytest.raises(InputError, match="measures must be names"):
        evaluate(run, {"q": {"a": 1}}, 5)
    assert evaluate(run, {"q": {"a": 1}}, ["MAP"]) == {"MAP": 1.0}
    for k in (0, -1, "2", True):  # a slice would take -1 as "all but the last"
        with pytest.raises(InputError, match="a cut keeps k >= 1 hits"):
            run.cut(k)
    assert run.cut(1)["q"] == [("a", 1.0)]
