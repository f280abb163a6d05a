"""retrieval.dense.train: one contrastive step on a few in-test pairs changes the weights, and the
output directory is a loadable safetensors encoder."""

from __future__ import annotations

import json

import numpy as np
import pytest

from retrieval.dense.encoder import Encoder
from retrieval.dense.train import FinetuneConfig, batch_loss, finetune
from retrieval.errors import InputError
from retrieval.runtime.local_models import model_checksum

TRIPLES = [
    ("boundary layer flow over a wing", "The boundary layer on a swept wing was measured in flow.",
     "A recipe for bread with yeast and flour."),
    ("heat transfer in supersonic flow", "Heat transfer rates at supersonic speeds are reported.", None),
    ("compiler register allocation", "Register allocation by graph colouring in an optimising compiler.",
     "Birds migrate south for the winter."),
]


def test_one_step_changes_weights_and_output_loads(tmp_path):
    cfg = FinetuneConfig(batch_size=3, lr=1e-3)
    info = finetune(TRIPLES, tmp_path / "ft", cfg=cfg, threads=1, extra_info={"note": "test"})
    out = tmp_path / "ft"
    assert info["steps"] == 1 and info["pairs"] == 3 and info["hard_negatives"] == 2
    assert (out / "model.safetensors").is_file() and not list(out.glob("*.bin"))
    assert json.loads((out / "training.json").read_text())["note"] == "test"
    assert model_checksum(out) != model_checksum(None)
    texts = [p for _, p, _ in TRIPLES]
    tuned = Encoder(out, precision="fp32", threads=1, progress=False).encode(texts)
    base = Encoder(None, precision="fp32", threads=1, progress=False).encode(texts)
    assert tuned.shape == base.shape == (3, 384)
    assert np.allclose(np.linalg.norm(tuned, axis=1), 1.0, atol=1e-5)  # pooling files copied: normalised
    assert not np.allclose(tuned, base, atol=1e-4)


def test_loss_is_cross_entropy_over_the_batch():
    import torch
    from transformers import AutoModel, AutoTokenizer

    from retrieval.runtime.local_models import resolve_model_dir

    path = resolve_model_dir(None)
    model, tok = AutoModel.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
    with torch.no_grad():
        loss = float(batch_loss(model, tok, TRIPLES, FinetuneConfig()))
    # matched pairs score highest: far below chance (log of 5 candidates) but positive
    assert 0.0 < loss < np.log(5)


def test_no_pairs_is_refused(tmp_path):
    with pytest.raises(InputError):
        finetune([], tmp_path / "x")
