"""Sparse retrieval: inverted index, Lucene-compatible BM25 / query likelihood, RM3.

Rankers live in `retrieval.sparse.rankers` (also exported by `retrieval`).
"""
