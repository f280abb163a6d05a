"""Backends run one shard method on many shards; this module has their base and the in-process one.

A backend's `run(method, args)` calls `ShardSearcher.<method>(*args[i])` on
each shard i and returns {shard number: result}. A shard that cannot answer
is an error naming it (`ShardUnavailable`, an InputError), unless the backend
was made with `allow_partial=True`: then the shard is left out from then on
and recorded in `missing` (name -> reason), and the stages mark their Runs.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from retrieval.errors import InputError
from retrieval.shards.shard import ShardSearcher

if TYPE_CHECKING:
    from retrieval.shards.layout import ShardedIndex


class ShardUnavailable(InputError):
    """A shard could not answer (missing, corrupt, or its worker kept dying)."""

    def __init__(self, shard: str, reason: str):
        self.shard = shard
        super().__init__(f"shard {shard} is unavailable: {reason} (use --allow-partial to search"
                         " the other shards)")


class ShardBackend:
    """What every backend shares: the shards, and what to do when one is unavailable."""

    def __init__(self, index: ShardedIndex, allow_partial: bool = False):
        self.index = index
        self.allow_partial = allow_partial
        self.missing: dict[str, str] = {}

    @property
    def available(self) -> list[int]:
        """Shard numbers not (yet) declared missing."""
        return [s.number for s in self.index.shards if s.name not in self.missing]

    def unavailable(self, number: int, reason: str) -> None:
        """Record a shard that cannot answer, or raise if partial results were not asked for."""
        name = self.index.shards[number].name
        if not self.allow_partial:
            raise ShardUnavailable(name, reason)
        if name not in self.missing:
            print(f"retrieval: warning: shard {name} is unavailable ({reason}); results leave it out",
                  file=sys.stderr)
        self.missing[name] = reason
        if not self.available:
            raise InputError("every shard is unavailable; nothing to search", self.index.path)

    def broadcast(self, method: str, *args: Any) -> dict[int, Any]:
        """The same call on every available shard."""
        return self.run(method, {i: args for i in self.available})

    def run(self, method: str, args: dict[int, tuple]) -> dict[int, Any]:
        raise NotImplementedError

    def close(self) -> None:
        """Release the shards (workers, memory maps)."""


class LocalBackend(ShardBackend):
    """Searches the shards one after another in this process (no Ray needed)."""

    def __init__(self, index: ShardedIndex, allow_partial: bool = False):
        super().__init__(index, allow_partial)
        self._searchers: dict[int, ShardSearcher] = {}

    def searcher(self, number: int) -> ShardSearcher:
        """Shard `number`'s searcher, opened on first use (InputError if it cannot be)."""
        if number not in self._searchers:
            s = self.index.shards[number]
            self._searchers[number] = ShardSearcher(s.path, s.name, s.manifest_sha256, s.generation)
        return self._searchers[number]

    def run(self, method: str, args: dict[int, tuple]) -> dict[int, Any]:
        results = {}
        for number, call_args in tqdm(args.items(), desc=f"shards ({method})", unit=" shards",
                                      disable=None, leave=False):
            try:
                searcher = self.searcher(number)
            except InputError as e:
                self.unavailable(number, str(e))
                continue
            results[number] = getattr(searcher, method)(*call_args)
        return results

    def close(self) -> None:
        self._searchers.clear()
