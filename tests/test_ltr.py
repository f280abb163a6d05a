"""Learning to rank: features of a first stage's candidates, the LETOR file, learned rankers, the cascade."""

import json

import numpy as np
import pytest

from retrieval import registry
from retrieval.cli import main
from retrieval.collections import load_qrels, load_topics
from retrieval.errors import InputError
from retrieval.experiments.config import build_pipeline, stage_specs
from retrieval.formats.trec import format_run
from retrieval.ltr import FeatureRun, load_model, read_letor, write_letor
from retrieval.ltr.letor import read_labels
from retrieval.ltr.train import fit, split_queries, subset, train
from retrieval.types import Qrels, Queries

SMALL = {"lambdamart": {"objective": ("lambdarank",), "num_leaves": (3,), "min_data_in_leaf": (20,),
                        "normalisation": ("minmax",), "base": (0.0, 1.0)},
         "linear": {"l2": (1.0,), "normalisation": ("minmax", "zscore")}}


@pytest.fixture(scope="module")
def cacm_features(cacm_index):
    """BM25's top 30 of every CACM query with features (no dense or late part: the sparse ones)."""
    topics = load_topics("cacm")
    first = registry.build("bm25", cacm_index, hits=200)
    return (first % 200 >> registry.build("features", cacm_index, depth=30))(topics)


def test_features_are_every_scorer_and_statistic(cacm_features, cacm_index):
    run = cacm_features
    assert isinstance(run, FeatureRun)
    assert run.names == ("first_score", "first_rank", "bm25", "qld", "qljm", "rm3", "doc_length",
                         "query_length", "idf_sum", "idf_max", "idf_mean")
    ids, matrix = run.features["1"]
    assert matrix.shape == (len(ids), len(run.names)) and len(ids) == 30
    # BM25 as first stage and as scorer agree; ranks 1..30
    assert np.array_equal(matrix[:, 0], matrix[:, 2])
    assert sorted(matrix[:, 1].tolist()) == list(range(1, 31))
    from retrieval.types import Run

    qld = registry.build("qld", cacm_index)(Queries({"1": load_topics("cacm")["1"]}), Run({"1": run["1"]}))
    assert dict(zip(ids, matrix[:, 3].tolist())) == dict(qld["1"])


def test_letor_round_trip_and_run_from_it_is_byte_identical(cacm_features, tmp_path):
    qrels = load_qrels("cacm")
    path = tmp_path / "cacm.letor"
    write_letor(cacm_features, path, qrels)
    first = path.read_text().splitlines()[1]
    assert first.split()[1] == "qid:1" and "# docid = CACM-" in first
    back = read_letor(path)
    assert back.names == cacm_features.names and back == cacm_features
    labels = read_labels(path)
    assert labels["1"] == {d: qrels["1"].get(d, 0) for d in cacm_features.features["1"][0]}
    model = fit("linear", {"l2": 1.0, "normalisation": "minmax"}, back.names, [back], [qrels])
    from_memory, from_file = model.rerank(cacm_features), model.rerank(back)
    assert format_run(from_file, "ltr") == format_run(from_memory, "ltr")


def test_lambdamart_and_linear_train_save_load_and_rerank(cacm_features, tmp_path):
    qrels = Qrels({q: j for q, j in load_qrels("cacm").items() if q in cacm_features.features})
    fit_ids, valid_ids = split_queries(cacm_features)
    runs, valid = subset(cacm_features, fit_ids), subset(cacm_features, valid_ids)
    for kind in ("lambdamart", "linear"):
        model = train(kind, cacm_features.names, [runs], [qrels], [valid], [qrels], SMALL[kind])
        assert len(model.info["validation"]["tried"]) == 2
        model.save(tmp_path / kind)
        files = sorted(p.name for p in (tmp_path / kind).iterdir())
        assert files == (["model.json", "model.txt", "training.json"] if kind == "lambdamart"
                         else ["model.json", "training.json"])
        loaded = load_model(tmp_path / kind)
        assert format_run(loaded.rerank(cacm_features), "t") == format_run(model.rerank(cacm_features), "t")
        importances = json.loads((tmp_path / kind / "training.json").read_text())["importances"]
        assert set(importances) == set(cacm_features.names)
        assert abs(sum(importances.values()) - 1) < 1e-9


def test_ltr_in_the_cascade_python_and_config(cacm_index, cacm_features, tmp_path):
    qrels = load_qrels("cacm")
    model = fit("linear", {"l2": 1.0, "normalisation": "minmax"}, cacm_features.names, [cacm_features],
                [qrels])
    model.save(tmp_path / "m")
    topics = Queries(list(load_topics("cacm").items())[:10])
    bm25 = registry.build("bm25", cacm_index, hits=200)
    features = registry.build("features", cacm_index, depth=30)
    ltr = registry.build("ltr", cacm_index, checkpoint=str(tmp_path / "m"))
    python = (bm25 % 200 >> features >> ltr)(topics)
    specs = stage_specs([{"model": "bm25", "cutoff": 200}, {"model": "features", "depth": 30},
                         {"model": "ltr", "checkpoint": str(tmp_path / "m")}])
    config = build_pipeline(specs, cacm_index)(topics)
    assert format_run(python, "t") == format_run(config, "t")
    assert all(len(hits) == 30 for hits in python.values())
    with pytest.raises(InputError, match="features stage"):
        (bm25 % 200 >> ltr)(topics)
    with pytest.raises(InputError, match="ltr needs checkpoint"):
        registry.build("ltr", cacm_index)


def test_features_cache_gives_the_same_features(cacm_index, tmp_path):
    topics = Queries(list(load_topics("cacm").items())[:5])
    first = registry.build("bm25", cacm_index, hits=50)(topics)
    stage = registry.build("features", cacm_index, depth=20, cache=str(tmp_path / "cache"),
                           feature_set="bm25+qld")
    computed = stage(topics, first)
    assert len(list((tmp_path / "cache").iterdir())) == 1
    cached = stage(topics, first)
    assert cached.names == computed.names == ("first_score", "first_rank", "bm25", "qld", "doc_length",
                                              "query_length", "idf_sum", "idf_max", "idf_mean")
    assert all(np.array_equal(cached.features[q][1], computed.features[q][1]) for q in topics)
    with pytest.raises(InputError, match="feature_set"):
        registry.build("features", cacm_index, feature_set="bm25+nope")
    with pytest.raises(InputError, match="dense part"):
        registry.build("features", cacm_index, feature_set="bm25+dense")


def test_features_and_train_ltr_commands(cacm_index, tmp_path, capsys):
    letor, model = tmp_path / "f.letor", tmp_path / "model"
    assert main(["features", "--index", str(cacm_index.path), "--topics", "cacm", "--depth", "20",
                 "--feature-set", "bm25+qld", "--qrels", "cacm", "--output", str(letor)]) in (0, None)
    assert read_letor(letor).names[:4] == ("first_score", "first_rank", "bm25", "qld")
    assert main(["train", "ltr", "--features", str(letor), "--topics", "cacm", "--kind", "linear",
                 "--output", str(model)]) in (0, None)
    out = capsys.readouterr().out
    assert "chosen on validation" in out and "feature importances" in out
    assert load_model(model).kind == "linear"
    assert main(["train", "ltr", "--features", str(letor), "--topics", "cacm", "--kind", "coordascent",
                 "--output", str(tmp_path / "ca")]) in (0, None)
    assert load_model(tmp_path / "ca").kind == "coordascent"
    assert main(["train", "ltr", "--features", str(letor), "--kind", "linear", "--objective",
                 "lambdarank", "--output", str(tmp_path / "m2")]) == 2


def test_boosting_from_the_first_stage_starts_from_its_ranking(cacm_features):
    """With base > 0 and no tree, LambdaMART ranks by the first stage's score."""
    qrels = load_qrels("cacm")
    settings = {"objective": "lambdarank", "num_leaves": 3, "min_data_in_leaf": 20, "normalisation": "minmax",
                "base": 1.0}
    model = fit("lambdamart", settings, cacm_features.names, [cacm_features], [qrels], trees=1)
    x = model.matrix(cacm_features, "1")
    assert np.allclose(model.base_scores(x), x[:, 0])
    assert model.predict(x).shape == (30,)


def test_coordinate_ascent_optimises_the_measure_it_reports(cacm_features, tmp_path):
    """Its training nDCG@10 is trec_eval's on the reranked candidates, at least the first stage's, and
    the same weights come from the same seed; stored as JSON weights of unit L1 norm."""
    from retrieval.evaluation.measures import evaluate
    from retrieval.ltr.coordinate import Lists
    from retrieval.ltr.train import design, judged_grades

    qrels = Qrels({q: j for q, j in load_qrels("cacm").items() if q in cacm_features.features})
    settings = {"measure": "nDCG@10", "normalisation": "zscore", "restarts": 2}
    model = fit("coordascent", settings, cacm_features.names, [cacm_features], [qrels])
    again = fit("coordascent", settings, cacm_features.names, [cacm_features], [qrels])
    assert model.weights == again.weights
    assert abs(sum(abs(w) for w in model.weights) - 1) < 1e-9
    trained = model.info["training"]["nDCG@10"]
    assert abs(evaluate(model.rerank(cacm_features), qrels, "nDCG@10")["nDCG@10"] - trained) < 1e-9
    first = evaluate(cacm_features, qrels, "nDCG@10")["nDCG@10"]
    assert trained >= first
    x, y, groups = design([cacm_features], [qrels], cacm_features.names, "zscore", model.stats)
    lists = Lists.build(x, y, groups, judged_grades([cacm_features], [qrels]))
    assert abs(lists.measure(lists.x @ np.asarray(model.weights), "nDCG@10") - trained) < 1e-12
    assert abs(lists.measure(lists.x @ np.asarray(model.weights), "MAP")
               - evaluate(model.rerank(cacm_features), qrels, "MAP")["MAP"]) < 1e-9
    model.save(tmp_path / "ca")
    assert sorted(p.name for p in (tmp_path / "ca").iterdir()) == ["model.json", "training.json"]
    loaded = load_model(tmp_path / "ca")
    assert loaded.kind == "coordascent"
    assert format_run(loaded.rerank(cacm_features), "t") == format_run(model.rerank(cacm_features), "t")
    query_features = [cacm_features.names.index(n) for n in ("query_length", "idf_sum")]
    assert all(model.weights[j] == 0 for j in query_features)


def test_search_reranks_by_an_ltr_checkpoint(cacm_index, cacm_features, tmp_path):
    """`retrieval search --ltr MODEL` equals the Python cascade bm25 % 200 >> features >> ltr."""
    qrels = load_qrels("cacm")
    fit("linear", {"l2": 1.0, "normalisation": "zscore"}, cacm_features.names, [cacm_features],
        [qrels]).save(tmp_path / "m")
    out = tmp_path / "run.txt"
    assert main(["search", "--index", str(cacm_index.path), "--topics", "cacm", "--hits", "200",
                 "--ltr", str(tmp_path / "m"), "--ltr-depth", "30", "--hits", "200", "--tag", "t",
                 "--output", str(out)]) in (0, None)
    topics = load_topics("cacm")
    cascade = (registry.build("bm25", cacm_index, hits=200) % 200
               >> registry.build("features", cacm_index, depth=30)
               >> registry.build("ltr", cacm_index, checkpoint=str(tmp_path / "m")))(topics)
    assert out.read_text() == format_run(cascade, "t")
    assert sum(line.startswith("1 ") for line in out.read_text().splitlines()) == 30
    assert main(["search", "--index", str(cacm_index.path), "--topics", "cacm", "--late-checkpoint",
                 "zero-shot", "--output", str(tmp_path / "x")]) == 2


def test_search_with_a_fallback_model_keeps_the_first_stage_without_computing_features(
        cacm_index, cacm_features, tmp_path, monkeypatch):
    """`search --ltr` with a fallback model writes the cascade's run (the first stage's ranking of the
    top --ltr-depth) without computing a feature."""
    from retrieval.ltr.features import FeatureStage

    model = fit("linear", {"l2": 1.0, "normalisation": "zscore"}, cacm_features.names, [cacm_features],
                [load_qrels("cacm")])
    model.fallback = True
    model.save(tmp_path / "m")
    topics = load_topics("cacm")
    cascade = (registry.build("bm25", cacm_index, hits=200) % 200
               >> registry.build("features", cacm_index, depth=30)
               >> registry.build("ltr", cacm_index, checkpoint=str(tmp_path / "m")))(topics)

    def computed(*args, **kwargs):
        raise AssertionError("a fallback model needs no feature")

    monkeypatch.setattr(FeatureStage, "compute", computed)
    monkeypatch.setattr(FeatureStage, "__init__", computed)
    out = tmp_path / "run.txt"
    assert main(["search", "--index", str(cacm_index.path), "--topics", "cacm", "--hits", "200",
                 "--ltr", str(tmp_path / "m"), "--ltr-depth", "30", "--tag", "t",
                 "--output", str(out)]) in (0, None)
    assert out.read_text() == format_run(cascade, "t")
    assert sum(line.startswith("1 ") for line in out.read_text().splitlines()) == 30


def test_rank_normalisation_is_the_within_query_rank_with_ties_shared():
    from retrieval.ltr.model import normalise_query, within_query_rank

    assert within_query_rank(np.array([3.0, 1.0, 2.0])).tolist() == [1.0, 0.0, 0.5]
    assert within_query_rank(np.array([5.0, 1.0, 5.0, 0.0])).tolist() == [2.5 / 3, 1 / 3, 2.5 / 3, 0.0]
    assert within_query_rank(np.array([2.0, 2.0])).tolist() == [0.0, 0.0]
    x = normalise_query(np.array([[1.0, 7.0], [9.0, 7.0], [4.0, 7.0]]), ["bm25", "query_length"], "rank",
                        {"query_length": (5.0, 2.0)})
    assert x.tolist() == [[0.0, 1.0], [1.0, 1.0], [0.5, 1.0]]


def test_grid_drops_lambdarank_settings_from_other_objectives():
    from retrieval.ltr.train import settings_grid

    grid = {"objective": ("lambdarank", "rank_xendcg"), "gain": ("exp", "linear"), "truncation": (10, 30),
            "normalisation": ("zscore",)}
    settings = settings_grid("lambdamart", grid)
    assert len(settings) == 4 + 1
    assert {"objective": "rank_xendcg", "normalisation": "zscore"} in settings
    assert all("gain" in s for s in settings if s["objective"] == "lambdarank")


def test_lambdarank_label_gain_and_truncation_reach_lightgbm(cacm_features):
    qrels = load_qrels("cacm")
    settings = {"objective": "lambdarank", "num_leaves": 3, "min_data_in_leaf": 20, "normalisation": "rank",
                "gain": "linear", "truncation": 10}
    text = fit("lambdamart", settings, cacm_features.names, [cacm_features], [qrels],
               trees=2).booster.model_to_string()
    assert "[lambdarank_truncation_level: 10]" in text
    assert "[label_gain: 0,1,2,3," in text
    with pytest.raises(InputError, match="gain"):
        fit("lambdamart", settings | {"gain": "square"}, cacm_features.names, [cacm_features], [qrels],
            trees=1)


def test_top_ten_order_equals_the_stable_sort_with_ties():
    from retrieval.ltr.coordinate import _top_order

    rng = np.random.default_rng(3)
    for _ in range(50):
        scores = rng.integers(0, 4, size=(8, 25)).astype(float)
        scores[rng.random(scores.shape) < 0.3] = -np.inf
        assert np.array_equal(_top_order(scores, 10), np.argsort(-scores, axis=1, kind="stable")[:, :10])


def _synthetic_collection(seed: int, first_is_right: bool) -> tuple[FeatureRun, Qrels]:
    """20 queries of 12 candidates, 2 relevant each; `signal` finds them; the first stage's score
    (its ranking) finds them too when `first_is_right`, else is noise."""
    rng = np.random.default_rng(seed)
    rankings, features, qrels = {}, {}, {}
    for i in range(20):
        ids = [f"d{j}" for j in range(12)]
        relevant = rng.choice(12, size=2, replace=False)
        signal = rng.random(12) + np.isin(np.arange(12), relevant) * 2.0
        first = signal + rng.random(12) * 0.1 if first_is_right else rng.random(12)
        order = np.argsort(-first, kind="stable")
        rankings[f"q{i}"] = [(ids[j], float(first[j])) for j in order]
        features[f"q{i}"] = (ids, np.column_stack([first, signal, rng.random(12)]))
        qrels[f"q{i}"] = {ids[j]: 1 for j in relevant}
    return FeatureRun(rankings, features, ["first_score", "signal", "noise"]), Qrels(qrels)


@pytest.mark.parametrize("first_is_right", [True, False])
def test_transfer_protocol_falls_back_to_the_first_stage_unless_validation_beats_it(first_is_right, tmp_path):
    """bench_ltr's `transfer` protocol: the linear grid reaches 1e5, and a learned ranker not strictly above
    the first stage on nested validation is replaced by it (a perfect first stage cannot be beaten)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "eval"))
    import bench_ltr

    assert bench_ltr.grids_for("transfer")["linear"]["l2"][-2:] == (1e4, 1e5)
    assert bench_ltr.grids_for("nested") == bench_ltr.GRIDS
    names = ["cacm", "cranfield", "vaswani"]
    data = {n: _synthetic_collection(seed, first_is_right) for seed, n in enumerate(names)}
    path = tmp_path / "choices.json"
    choices = bench_ltr.choose(lambda checkpoint: (data, {}), {}, path, names, ["linear"], "transfer")
    for n in names:
        c = choices[f"{n} linear"]
        assert c["fallback"] is first_is_right
        assert (c["validation"] > c["hybrid_validation"]) is not first_is_right
    assert json.loads(path.read_text())["protocol"] == "transfer"
    with pytest.raises(SystemExit, match="another protocol"):
        bench_ltr.choose(lambda checkpoint: (data, {}), {}, path, names, ["linear"], "nested")


def test_monotone_lambdamart_only_rises_with_a_stage_score():
    """`monotone`: a band of middle BM25 values holds the relevant documents; unconstrained trees learn
    the band, constrained ones cannot fall as BM25 rises (and the rank feature only falls)."""
    from retrieval.ltr.train import monotone_constraints

    assert monotone_constraints(["first_score", "first_rank", "bm25_title", "late", "doc_length",
                                 "idf_sum"]) == [1, -1, 1, 1, 0, 0]
    rng = np.random.default_rng(0)
    rankings, features, qrels = {}, {}, {}
    for i in range(40):
        ids = [f"d{j}" for j in range(20)]
        bm25 = rng.random(20)
        features[f"q{i}"] = (ids, np.column_stack([bm25, rng.random(20)]))
        rankings[f"q{i}"] = [(ids[j], float(bm25[j])) for j in np.argsort(-bm25)]
        qrels[f"q{i}"] = {ids[j]: 1 for j in np.nonzero(np.abs(bm25 - 0.5) < 0.15)[0]}
    run = FeatureRun(rankings, features, ["bm25", "doc_length"])
    grid = np.column_stack([np.linspace(0, 1, 21), np.full(21, 0.5)])
    rises = {}
    for monotone in (False, True):
        settings = {"objective": "lambdarank", "num_leaves": 3, "min_data_in_leaf": 20,
                    "normalisation": "none", "base": 0.0, "monotone": monotone}
        predicted = fit("lambdamart", settings, run.names, [run], [Qrels(qrels)], trees=30).predict(grid)
        rises[monotone] = bool(np.all(np.diff(predicted) >= 0))
    assert rises == {False: False, True: True}


@pytest.mark.parametrize("first_is_right", [True, False])
def test_train_ltr_fallback_keeps_the_first_stage_unless_validation_beats_it(first_is_right, tmp_path,
                                                                            capsys):
    """`train ltr --fallback`: the first stage is a candidate; a model not strictly above it on validation
    is stored as a fallback and reranks to the first stage's ranking (after a save and load too)."""
    from retrieval.types import Run

    run, qrels = _synthetic_collection(0, first_is_right)
    valid, valid_qrels = _synthetic_collection(1, first_is_right)
    model = train("linear", run.names, [run], [qrels], [valid], [valid_qrels], SMALL["linear"], fallback=True)
    assert model.fallback is first_is_right
    validation = model.info["validation"]
    assert (validation["nDCG@10"] > validation["first_stage"]) is not first_is_right
    first = Run({q: valid[q] for q in valid.features})
    model.save(tmp_path / "m")
    back = load_model(tmp_path / "m")
    assert back.fallback is first_is_right
    assert (format_run(back.rerank(valid), "x") == format_run(first, "x")) is first_is_right
    letor, check = tmp_path / "train.letor", tmp_path / "valid.letor"
    write_letor(run, letor, qrels)
    write_letor(valid, check, valid_qrels)
    assert main(["train", "ltr", "--features", str(letor), "--validation", str(check), "--kind", "linear",
                 "--fallback", "--output", str(tmp_path / "cli")]) in (0, None)
    assert ("is a fallback" in capsys.readouterr().out) is first_is_right
    assert load_model(tmp_path / "cli").fallback is first_is_right
    unguarded = train("linear", run.names, [run], [qrels], [valid], [valid_qrels], SMALL["linear"])
    assert unguarded.fallback is False


def test_shift_protocol_grid_contains_the_former_lambdamart_grid():
    """bench_ltr's `shift` protocol: LambdaMART's grid adds monotone constraints and 3-leaf trees to the
    former grid, which it contains; the other grids are the `transfer` protocol's."""
    import sys
    from pathlib import Path

    from retrieval.ltr.train import settings_grid

    sys.path.insert(0, str(Path(__file__).parents[1] / "eval"))
    import bench_ltr

    shift, transfer = bench_ltr.grids_for("shift"), bench_ltr.grids_for("transfer")
    assert {k: v for k, v in shift.items() if k != "lambdamart"} == {
        k: v for k, v in transfer.items() if k != "lambdamart"}
    new = settings_grid("lambdamart", shift["lambdamart"])
    assert len(new) == 32 and {s["monotone"] for s in new} == {False, True}
    former = [s | {"monotone": False} for s in settings_grid("lambdamart", transfer["lambdamart"])]
    assert all(s in new for s in former)


def test_shift_squad_protocol_trains_every_inner_fold_on_squad_and_validates_on_its_held_questions(tmp_path):
    """bench_ltr's `shift+squad` protocol: SQuAD questions split by paragraph (no paragraph relevant on
    both sides), added to every inner fold's training, one more inner fold validating on the held-out
    questions, every sampled question in the final model's training; the other protocols unchanged."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "eval"))
    import bench_ltr

    assert bench_ltr.grids_for("shift+squad") == bench_ltr.grids_for("shift")
    qrels = Qrels({f"q{i}": {f"p{i % 12}": 1} for i in range(48)})
    fitting, held = bench_ltr.squad_split(qrels, 0.25, 3)
    assert fitting | held == set(qrels) and not fitting & held
    held_paragraphs = {d for q in held for d in qrels[q]}
    assert len(held_paragraphs) == 3 and not held_paragraphs & {d for q in fitting for d in qrels[q]}
    assert bench_ltr.squad_split(qrels, 0.25, 3) == (fitting, held)

    names = ["cacm", "cranfield", "vaswani"]
    data = {n: _synthetic_collection(seed, False) for seed, n in enumerate(names)}
    run, judged = _synthetic_collection(9, False)
    squad_fit = (bench_ltr.subset(run, {f"q{i}" for i in range(15)}), judged)
    squad_held = (bench_ltr.subset(run, {f"q{i}" for i in range(15, 20)}), judged)
    plain = list(bench_ltr.inner_folds(data, names[:2]))
    assert [h for h, _, _ in plain] == names[:2]
    data[bench_ltr.SQUAD] = (squad_fit, squad_held)
    folds = list(bench_ltr.inner_folds(data, names[:2]))
    assert [h for h, _, _ in folds] == [*names[:2], f"{bench_ltr.SQUAD} (held-out questions)"]
    assert all(training[-1] is squad_fit for _, training, _ in folds)
    assert folds[-1][1][:2] == [data["cacm"], data["cranfield"]] and folds[-1][2] == [squad_held]
    assert bench_ltr.training_sets(data, names[:2])[2:] == [squad_fit, squad_held]

    path = tmp_path / "choices.json"
    choices = bench_ltr.choose(lambda checkpoint: (data, {}), {}, path, names, ["linear"], "shift+squad")
    c = choices["vaswani linear"]
    assert set(c["per_held_out"]) == set(c["hybrid_per_held_out"]) == {
        "cacm", "cranfield", f"{bench_ltr.SQUAD} (held-out questions)"}
    stored = json.loads(path.read_text())
    assert stored["protocol"] == "shift+squad" and stored["squad"]["seed"] == bench_ltr.SQUAD_SEED
    with pytest.raises(SystemExit, match="another protocol"):
        bench_ltr.choose(lambda checkpoint: (data, {}), {}, path, names, ["linear"], "shift")
