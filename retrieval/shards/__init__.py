"""Scale-out: an index split by document into shards, searched in-process or on Ray.

    build_sharded_index(load_documents("cacm"), "indexes/cacm-4", shards=4)
    index = ShardedIndex.open("indexes/cacm-4")
    run = ShardedSparse(index, "bm25")(queries)                        # in-process
    backend = RayBackend(index, "local")                               # retrieval.shards.ray_backend
    run = build("qld", index.use_backend(backend), rm3=True)(queries)  # retrieval.registry.build
    run.missing_shards                                                 # () unless allow_partial

Modules: layout.py (on-disk layout, ShardedIndex), build.py (partition, parallel
build), stats.py (collection-wide statistics per shard), shard.py (one shard's
search service), local.py (backends: base + in-process), ray_backend.py (Ray
actors, restarts), merge.py (top-k merge), rankers.py (the stages), dense.py
(dense parts and the query encoder). retrieval.registry builds their stages.
Runs equal the single index's byte for byte (tests/test_shards.py).
"""

from retrieval.shards.build import build_sharded_index
from retrieval.shards.layout import ShardedIndex
from retrieval.shards.local import LocalBackend, ShardUnavailable
from retrieval.shards.rankers import (
    ShardedDense,
    ShardedRM3,
    ShardedRun,
    ShardedSparse,
)

__all__ = ["build_sharded_index", "ShardedIndex", "LocalBackend", "ShardUnavailable",
           "ShardedDense", "ShardedRM3", "ShardedRun", "ShardedSparse"]
