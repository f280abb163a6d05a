"""ColBERT-style late interaction: token encoder, MaxSim, token store, reranker, training.

    from retrieval.late import LateReranker, rerank
    LateReranker(index, interpolate=0.3)(queries, bm25(queries))   # rerank any Run
    rerank("query", ["text", ...])                                   # Results: id, score, rank, text

Modules: `encoder` (token states with markers / [MASK] augmentation, punctuation
dropped), `model` (projection + L2 norm, MaxSim, safetensors checkpoints),
`store` (the index's `late/` part: fp16 or int8, memory-mapped), `reranker`
(the stage and `rerank`), `cache` (frozen encoder outputs for training),
`train` (contrastive training with in-batch + BM25 hard negatives, anchored to
zero-shot), `pairs` (unsupervised Inverse Cloze Task pairs from a corpus).
"""

from retrieval.late.model import DEFAULT_CHECKPOINT, ZERO_SHOT, LateModel, maxsim
from retrieval.late.reranker import LateReranker, rerank
from retrieval.late.store import COMPRESSIONS, LateStore, build_late, convert_late
from retrieval.pipeline.fusion import interpolate_ranking

__all__ = ["COMPRESSIONS", "DEFAULT_CHECKPOINT", "ZERO_SHOT", "LateModel", "LateReranker", "LateStore",
           "build_late", "convert_late", "interpolate_ranking", "maxsim", "rerank"]
