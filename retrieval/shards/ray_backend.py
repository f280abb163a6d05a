"""Searching shards on a Ray cluster: one actor per shard, batch fan-out, restarts on failure.

Each actor opens its shard (memory-mapped, so actors on one machine share the
page cache) and serves `ShardSearcher` calls. A call is sent to every shard at
once; results are collected shard by shard. When an actor dies (its process
or node is lost, or `ray.kill`), a fresh actor is started for that shard and
the shard's part of the batch is sent again, up to `retries` times; a shard
that still cannot answer is an error naming it, unless `allow_partial`.

Shard directories must be readable at the same path on every node (a shared
file system), since actors open them where Ray places them.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

import ray
from tqdm import tqdm

from retrieval.errors import InputError
from retrieval.shards.layout import ShardedIndex
from retrieval.shards.local import ShardBackend
from retrieval.shards.shard import ShardSearcher

ACTOR_FAILURES = tuple(getattr(ray.exceptions, name) for name in
                       ("RayActorError", "WorkerCrashedError", "ObjectLostError", "OwnerDiedError")
                       if hasattr(ray.exceptions, name))


def connect(address: str = "local", num_cpus: int | None = None) -> bool:
    """Join a Ray cluster (`address`) or start a local one ("local"); True if this call started it."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        return False
    quiet = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                 configure_logging=True)
    try:
        if address == "local":
            ray.init(num_cpus=num_cpus or len(os.sched_getaffinity(0)), **quiet)
        else:
            ray.init(address=address, **quiet)
    except (ConnectionError, ValueError, RuntimeError) as e:
        raise InputError(f"cannot connect to the Ray cluster at {address!r}: {str(e).splitlines()[0]}") \
            from None
    return True


@ray.remote
class ShardActor:
    """Holds one shard's searcher; `exit_on_call` (tests only) makes it die in that call."""

    def __init__(self, path: str, name: str, expected_sha256: str, exit_on_call: int | None = None,
                 generation: str | None = None):
        self.calls, self.exit_on_call = 0, exit_on_call
        self.searcher: ShardSearcher | None = None
        self.error = ""
        try:
            self.searcher = ShardSearcher(path, name, expected_sha256, generation)
        except (InputError, OSError) as e:
            self.error = str(e)

    def call(self, method: str, args: tuple) -> tuple[str, Any]:
        """("ok", result of ShardSearcher.<method>(*args)) or ("unavailable", why)."""
        self.calls += 1
        if self.calls == self.exit_on_call:
            os._exit(1)  # simulate a crash in the middle of a batch
        if self.searcher is None:
            return "unavailable", self.error
        try:
            return "ok", getattr(self.searcher, method)(*args)
        except InputError as e:
            return "unavailable", str(e)


class RayBackend(ShardBackend):
    """Runs shard calls on Ray actors, one per shard, restarting actors that die.

    `address`: a running cluster's address, or "local" to start a local one
    (only if Ray is not initialised yet). Actors reserve `cpus_per_actor`
    CPUs (default 0: they idle between calls, and a replacement actor must
    never wait for CPUs) and are spread over the nodes. `faults` (tests
    only): {shard number: n}, that shard's first actor exits in its n-th call.
    """

    def __init__(self, index: ShardedIndex, address: str = "local", allow_partial: bool = False,
                 retries: int = 2, faults: dict[int, int] | None = None, cpus_per_actor: float = 0.0):
        super().__init__(index, allow_partial)
        self.started_ray = connect(address)
        self.retries = retries
        self.restarts: dict[int, int] = {}
        self.cpus_per_actor = cpus_per_actor
        faults = faults or {}
        self.actors = {s.number: self._start(s.number, faults.get(s.number)) for s in index.shards}

    def _start(self, number: int, exit_on_call: int | None = None) -> Any:
        shard = self.index.shards[number]
        return ShardActor.options(num_cpus=self.cpus_per_actor, scheduling_strategy="SPREAD").remote(
            str(shard.path.resolve()), shard.name, shard.manifest_sha256, exit_on_call,
            str(shard.generation.resolve()) if shard.generation else None)

    def restart(self, number: int) -> None:
        """Replace a shard's actor with a fresh one (the old one is killed if still alive)."""
        with contextlib.suppress(Exception):
            ray.kill(self.actors[number], no_restart=True)
        self.actors[number] = self._start(number)
        self.restarts[number] = self.restarts.get(number, 0) + 1

    def submit(self, method: str, args: dict[int, tuple]) -> dict[int, Any]:
        """Send the call to every shard at once; {shard number: object ref}."""
        return {i: self.actors[i].call.remote(method, a) for i, a in args.items()}

    def collect(self, method: str, args: dict[int, tuple], refs: dict[int, Any]) -> dict[int, Any]:
        """Wait for each shard's answer, re-sending a shard's part after restarting its actor."""
        results = {}
        for number, ref in tqdm(refs.items(), desc=f"shards ({method})", unit=" shards", disable=None,
                                leave=False):
            for attempt in range(self.retries + 1):
                status, value = self._get(ref)
                if status == "ok":
                    results[number] = value
                    break
                if attempt < self.retries:
                    self.restart(number)
                    ref = self.actors[number].call.remote(method, args[number])
            else:
                self.unavailable(number, f"{value} (after {self.retries} restarts)")
        return results

    @staticmethod
    def _get(ref: Any) -> tuple[str, Any]:
        try:
            return ray.get(ref)
        except ACTOR_FAILURES as e:
            return "died", f"its worker died: {type(e).__name__}"

    def run(self, method: str, args: dict[int, tuple]) -> dict[int, Any]:
        return self.collect(method, args, self.submit(method, args))

    def close(self) -> None:
        """Kill the actors; shut Ray down if this backend started it."""
        for actor in self.actors.values():
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        self.actors = {}
        if self.started_ray:
            ray.shutdown()
