"""Precision is this machine's, at run time: never stored, every path runs on every CPU."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from retrieval.errors import InputError
from retrieval.runtime import precision

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["The cat sat on the mat.", "Dogs chase cats in the garden.",
         "Information retrieval systems rank documents by relevance."]


def test_the_switch_hides_bf16_and_auto_falls_back(monkeypatch):
    monkeypatch.setenv(precision.NO_BF16_ENV, "1")
    assert not precision.cpu_has_bf16()
    assert precision.resolve(None) == precision.resolve("auto") == "int8"  # x86 CI machines
    assert precision.resolve("auto", precision.TRAIN_PRECISIONS) == "fp32"
    assert "switched off" in precision.instruction_sets()
    with pytest.raises(InputError, match="bf16 needs a CPU with bf16 instructions"):
        precision.resolve("bf16")
    monkeypatch.setenv(precision.NO_BF16_ENV, "0")
    assert precision.cpu_has_bf16() == bool({"avx512_bf16", "amx_bf16"} & precision.cpu_flags())


def test_a_limit_binds_in_both_directions():
    """A path standing in for fp32 must keep its ranking: a gain beyond the limit is a change too."""
    assert precision.within_limit(-0.002, 0.003) and precision.within_limit(0.003, 0.003)
    assert not precision.within_limit(0.0078, 0.003) and not precision.within_limit(-0.0052, 0.005)


def test_auto_takes_int8_only_when_validation_shows_it_within_the_limit():
    """A mean change inside the limit is not enough when the per-query changes scatter: the 90% interval
    (two one-sided t-tests at 5%) must lie inside, so few or noisy validation queries mean fp32."""
    from scipy import stats

    from retrieval.evaluation.significance import difference_interval

    rng = np.random.default_rng(0)
    fp32 = rng.random(121)
    shifted = fp32 + 0.0026  # every query moves by the same +0.0026: shown, however few
    assert difference_interval(shifted, fp32) == pytest.approx((0.0026, 0.0026))
    assert precision.shown_within_limit(shifted, fp32, 0.003)
    changes = rng.normal(0, 0.03, 121)
    changes += 0.0026 - changes.mean()  # the same mean change, now scattered
    assert precision.within_limit(0.0026, 0.003)
    assert not precision.shown_within_limit(fp32 + changes, fp32, 0.003)
    low, high = difference_interval(fp32 + changes, fp32)
    assert (low, high) == pytest.approx(stats.t.interval(0.9, 120, 0.0026, stats.sem(changes)))
    many = rng.normal(0, 0.03, 20000)
    many += 0.0026 - many.mean()
    assert precision.shown_within_limit(many, np.zeros_like(many), 0.003)  # enough queries show it
    assert not precision.shown_within_limit(many, np.zeros_like(many), 0.002)
    assert not precision.shown_within_limit([0.5], [0.5], 0.003)  # one query shows nothing


def test_int8_is_chosen_per_kind_of_int8_kernel(monkeypatch):
    """The same model may meet its limit with one CPU's int8 kernels and not another's; a kind nobody
    measured runs fp32."""
    monkeypatch.setenv(precision.NO_BF16_ENV, "1")
    kernel = precision.int8_kernel()
    assert kernel in ("avx512-vnni", "avx2")  # x86 CI machines
    assert precision.resolve(None, int8_within_limit={kernel: True}) == "int8"
    assert precision.resolve(None, int8_within_limit={kernel: False}) == "fp32"
    assert precision.resolve(None, int8_within_limit={"some-other-kernel": True}) == "fp32"
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    assert precision.int8_kernel() == "avx2"
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_vnni"}))
    assert precision.int8_kernel() == "avx512-vnni"


def test_cached_results_are_keyed_by_what_auto_decides_on(monkeypatch):
    """Auto gives int8 to one model and fp32 to another depending on the int8 kernel kind, so two
    CPUs without bf16 but with different int8 kernels must not share an experiment's cached runs."""
    monkeypatch.setenv(precision.NO_BF16_ENV, "1")
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    avx2 = precision.cache_signature("auto")
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_vnni"}))
    vnni = precision.cache_signature(None)
    assert avx2 != vnni and "int8=avx2" in avx2 and "int8=avx512-vnni" in vnni
    assert precision.cache_signature("fp32") == "fp32"
    assert precision.cache_signature("int8") == "int8=avx512-vnni"  # explicit int8 rounds by kernel too
    with pytest.raises(InputError, match="bf16 needs a CPU"):
        precision.cache_signature("bf16")


def test_unknown_precision_is_an_input_error():
    with pytest.raises(InputError, match="unknown precision 'fp8'"):
        precision.resolve("fp8")
    with pytest.raises(InputError, match="unknown precision 'int8'"):
        precision.resolve("int8", precision.TRAIN_PRECISIONS)
    assert precision.torch_path("onnx") == "fp32" and precision.torch_path("onnx-int8") == "int8"


def test_committed_models_record_no_precision_and_no_machine_path():
    from safetensors import safe_open

    with safe_open(str(ROOT / "retrieval" / "models" / "late" / "late.safetensors"), framework="numpy") as f:
        meta = f.metadata()
    settings = json.loads(meta["settings"])
    assert "precision" not in settings and settings["model"] == "all-MiniLM-L6-v2"
    for path in [ROOT / "retrieval" / "models" / "reader" / n for n in ("training.json", "config.json")]:
        values = [str(v) for v in json.loads(path.read_text()).values()]
        assert not any(v.startswith("/") or ":\\" in v for v in values), path


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_auto_follows_each_models_choice_made_on_validation(monkeypatch):
    """Without bf16, `auto` runs int8 exactly for the models whose int8 met their limit on validation
    with this CPU's kind of int8 kernels (INT8_WITHIN_LIMIT, set from eval/bench_dense.py and
    eval/bench_precision.py)."""
    from retrieval.dense import encoder as dense
    from retrieval.late import encoder as late
    from retrieval.qa import reader

    monkeypatch.setenv(precision.NO_BF16_ENV, "1")
    for module, make in ((dense, lambda: dense.Encoder(progress=False)),
                         (late, lambda: late.TokenEncoder(None)), (reader, lambda: reader.SpanReader())):
        want = "int8" if precision.int8_allowed(module.INT8_WITHIN_LIMIT) else "fp32"
        assert make().precision == want, module.__name__


def test_outlier_split_computes_the_same_layer_and_leaves_its_channels_to_fp32():
    import torch

    from retrieval.runtime.int8_outliers import OutlierSplit

    torch.manual_seed(0)
    linear = torch.nn.Linear(12, 4)
    x = torch.randn(3, 5, 12)
    split = OutlierSplit(linear, [2, 7])
    assert torch.allclose(split(x.clone()), linear(x), atol=1e-6)  # unquantised: the same layer
    bigger = x.clone()
    bigger[..., 7] *= 1000  # what an outlier channel does to int8's shared scale
    quantised = precision.prepare(torch.nn.Sequential(OutlierSplit(linear, [7])), "int8")
    plain = precision.prepare(torch.nn.Sequential(torch.nn.Linear(12, 4)), "int8")
    assert isinstance(quantised[0].int8_part, torch.ao.nn.quantized.dynamic.Linear)  # runs int8
    assert isinstance(plain[0], torch.nn.Linear)  # without outlier channels it stays fp32
    error = (quantised(bigger.clone()) - linear(bigger)).abs().max()
    assert error < 0.1  # measured 0.014; 2.9 with channel 7 in int8 too (outputs up to 346)


def test_calibration_finds_a_channel_that_runs_far_beyond_the_others():
    import torch

    from retrieval.runtime.int8_outliers import channel_peaks, largest_channels

    x = torch.randn(4, 6, 32)
    x[1, 2, 5] = 40.0
    model = torch.nn.Sequential(torch.nn.Identity(), torch.nn.Linear(32, 8), torch.nn.Linear(8, 16))
    assert largest_channels(channel_peaks(model, [{"input": x}]), 1) == {"1": [5]}  # only narrowing layers


@pytest.mark.slow
def test_stored_outlier_channels_are_the_default_models_own():
    """eval/studies/calibrate_int8.py's channels stand out so far that any few documents find them again."""
    import itertools
    import sys

    from transformers import AutoModel

    from retrieval.collections import load_documents
    from retrieval.dense.encoder import Encoder
    from retrieval.runtime.int8_outliers import channel_peaks, largest_channels, stored_channels

    sys.path[:0] = [str(ROOT / "eval" / "studies"), str(ROOT / "eval")]
    from calibrate_int8 import COLLECTIONS, calibration_batches

    encoder = Encoder(precision="fp32", progress=False)
    texts = [d.contents for name in COLLECTIONS for d in itertools.islice(load_documents(name), 8)]
    model = AutoModel.from_pretrained(encoder.model_dir, local_files_only=True).eval()
    stored = stored_channels(encoder.checksum)
    batches = calibration_batches(encoder.tokenize, encoder.tokenizer.pad_token_id or 0, texts)
    found = largest_channels(channel_peaks(model, batches), 1)
    assert len(stored) == 6 and found == stored


def test_dense_int8_embeddings_stay_close_to_fp32():
    from retrieval.dense import Encoder

    fp32 = Encoder(precision="fp32", progress=False).encode(TEXTS)
    int8 = Encoder(precision="int8", progress=False).encode(TEXTS)
    assert _cosines(fp32, int8).min() > 0.98  # measured 0.983; 0.976 quantising outlier channels too
    assert not np.array_equal(fp32, int8)  # int8 really ran


def test_dense_int8_embedding_of_a_text_does_not_depend_on_its_batch_mates():
    """int8 activations share one scale a batch; int8 encodes one text a batch, so a query's result
    does not change with the other queries of a run."""
    from retrieval.dense import Encoder

    int8 = Encoder(precision="int8", progress=False, batch_size=16)
    together = int8.encode(TEXTS + ["a much longer text " * 30])[:len(TEXTS)]
    assert together.tobytes() == np.vstack([int8.encode([text]) for text in TEXTS]).tobytes()


def test_bf16_casts_the_whole_model_unless_norms_stay_fp32():
    """The dense encoder's bf16 casts everything (as sentence-transformers does); the late encoder
    and the reader cast their Linear weights and run LayerNorm/softmax in fp32 under autocast."""
    import torch

    def make():
        return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))

    whole = precision.prepare(make(), "bf16")
    assert {p.dtype for p in whole.parameters()} == {torch.bfloat16}
    mixed = precision.prepare(make(), "bf16", fp32_norms=True)
    assert mixed[0].weight.dtype == torch.bfloat16 and mixed[1].weight.dtype == torch.float32
    for norms, enabled in ((True, True), (False, False)):
        with precision.autocast("bf16", fp32_norms=norms):
            assert torch.is_autocast_enabled("cpu") == enabled
    with precision.autocast("fp32", fp32_norms=True):
        assert not torch.is_autocast_enabled("cpu")


def test_late_and_reader_int8_results_do_not_depend_on_batch_mates():
    """As the dense encoder's: the late encoder (which splits off the same outlier channels) and the
    reader run int8 one text or window a batch."""
    from retrieval.late.encoder import TokenEncoder
    from retrieval.qa.reader import SpanReader
    from retrieval.runtime.int8_outliers import OutlierSplit

    late = TokenEncoder(precision="int8", progress=False, batch_size=16)
    assert any(isinstance(m, OutlierSplit) for m in late.model.modules())
    together = late.encode(TEXTS + ["a much longer text " * 30], False)[:len(TEXTS)]
    alone = [late.encode([text], False)[0] for text in TEXTS]
    assert [a.tobytes() for a in together] == [a.tobytes() for a in alone]
    reader = SpanReader(precision="int8", threads=1, batch_size=32)
    questions, contexts = ["Where did the cat sit?"] * 3, ["The cat sat on the mat.", "Dogs chase cats.",
                                                           "A long passage about nothing. " * 20]
    alone = [reader.read([q], [c])[0].spans for q, c in zip(questions, contexts)]
    assert [r.spans for r in reader.read(questions, contexts)] == alone


def test_late_checkpoint_with_a_stored_bf16_runs_anywhere(tmp_path, monkeypatch):
    """An old checkpoint that recorded `precision: bf16` loads and runs on a CPU without bf16."""
    from retrieval.late.model import LateModel, load_checkpoint, save_checkpoint

    projection, settings = load_checkpoint(ROOT / "retrieval" / "models" / "late" / "late.safetensors")
    old = tmp_path / "old.safetensors"
    save_checkpoint(old, projection, {**settings, "precision": "bf16",
                                      "model": "/root/somewhere/else/model"}, {})
    monkeypatch.setenv(precision.NO_BF16_ENV, "1")
    assert LateModel(old).encoder.precision in ("int8", "fp32")  # auto: never the stored bf16
    int8 = LateModel(old, precision="int8")
    fp32 = LateModel(old, precision="fp32")
    a, b = int8.documents(TEXTS), fp32.documents(TEXTS)
    assert [len(x) for x in a] == [len(x) for x in b]
    assert _cosines(np.concatenate(a), np.concatenate(b)).min() > 0.95
    assert "precision" not in fp32.describe() and not fp32.describe()["base_model"].startswith("/")


def test_reader_runs_in_int8_and_fp32_and_auto_picks_fp32_without_bf16(monkeypatch):
    from retrieval.qa.reader import SpanReader

    monkeypatch.setenv(precision.NO_BF16_ENV, "1")
    assert SpanReader().precision == "fp32"  # int8 costs EM/F1 for little speed
    questions = ["Where did the cat sit?", "What do dogs chase?", "Who wrote Hamlet?"]
    contexts = ["The cat sat on the mat while the dog slept.", "Dogs chase cats in the garden.",
                "Hamlet is a tragedy written by William Shakespeare around 1600."]
    readings = {p: SpanReader(precision=p, threads=2, batch_size=1).read(questions, contexts)
                for p in ("int8", "fp32")}  # batches of one window, side by side
    for p, expected in enumerate(("mat", "cats", "William Shakespeare")):
        assert all(readings[k][p].spans[0].text == expected for k in readings)


def test_cli_precision_flag_everywhere_that_encodes():
    from retrieval.cli import parser
    from retrieval.pipeline.params import PARAMS

    sub = parser()._subparsers._group_actions[0].choices
    for argv in (["index", "--index", "x"], ["search", "--index", "x", "--topics", "t"],
                 ["rerank", "--index", "x", "--topics", "t", "--run", "r"], ["ask", "--index", "x", "q"],
                 ["train", "late", "--index", "x", "--output", "o"], ["train", "reader", "--output", "o"],
                 ["train", "realm", "--index", "x", "--output", "o"], ["run", "configs/cacm.yaml"]):
        args = parser().parse_args(argv)
        # search's ranker flags default to None: the ranker's declared default (params.PARAMS) applies
        assert (args.precision or PARAMS["precision"].default) == "auto", argv
    assert "rerank" in sub
