"""Dense bi-encoder retrieval: a local HF encoder, FAISS indexes, a retriever stage."""

from retrieval.dense.encoder import DEFAULT_PRECISION, PRECISIONS, Encoder
from retrieval.dense.faiss_index import INDEX_TYPES, add_dense, build_dense_part, load_dense_part
from retrieval.dense.retriever import DenseRetriever
from retrieval.runtime.local_models import DEFAULT_MODEL

__all__ = ["DEFAULT_MODEL", "DEFAULT_PRECISION", "INDEX_TYPES", "PRECISIONS", "DenseRetriever",
           "Encoder", "add_dense", "build_dense_part", "load_dense_part"]
