"""Learning to rank in the cascade: features of a first stage's candidates (features.py), the LETOR
file format (letor.py), learned rankers stored without pickle and their stage (model.py), training
with settings chosen on validation (train.py). `bm25 % 1000 >> features >> ltr`."""

from retrieval.ltr.features import FeatureStage
from retrieval.ltr.letor import read_letor, write_letor
from retrieval.ltr.model import LTRModel, LTRStage, load_model
from retrieval.ltr.run import FeatureRun

__all__ = ["FeatureRun", "FeatureStage", "LTRModel", "LTRStage", "load_model", "read_letor", "write_letor"]
