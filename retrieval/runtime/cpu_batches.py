"""How the neural stages run on CPU threads: length-sorted padded batches, side by side."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch


def padded_batches(ids: Sequence[Sequence[int]], batch_size: int,
                   pad: int) -> Iterator[tuple[list[int], np.ndarray, np.ndarray]]:
    """(row numbers, padded token ids, attention mask) per batch, longest texts first, so
    texts of similar length share a batch and little compute goes to padding."""
    order = sorted(range(len(ids)), key=lambda i: (-len(ids[i]), i))
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        width = max(len(ids[i]) for i in rows)
        batch = np.full((len(rows), width), pad, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for j, i in enumerate(rows):
            batch[j, :len(ids[i])] = ids[i]
            mask[j, :len(ids[i])] = 1
        yield rows, batch, mask


def run_bounded(fn: Callable[[Any], None], items: Iterable[Any], threads: int) -> None:
    """fn(item) for every item in `threads` threads, holding few items at a time."""
    with ThreadPoolExecutor(max(1, threads)) as pool:
        pending: deque[Future] = deque()
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) > 2 * threads:
                pending.popleft().result()
        for future in pending:
            future.result()


def run_side_by_side(fn: Callable[[Any], None], batches: Iterable[Any], side_by_side: int,
                     threads: int) -> None:
    """fn(batch) for every batch, `side_by_side` batches at once with torch's threads split among them.

    Batches side by side, one thread each, are faster on CPU than splitting every
    (small) matrix product over threads. Each worker sets its own thread count
    (torch's OpenMP setting is per thread), so a batch's arithmetic, and hence
    its result to the last bit, does not depend on what else runs at the time.
    """
    per_batch = max(1, threads // max(1, side_by_side))

    def with_threads(batch: Any) -> None:
        torch.set_num_threads(per_batch)
        fn(batch)

    previous = torch.get_num_threads()
    try:
        run_bounded(with_threads, batches, side_by_side)
    finally:
        torch.set_num_threads(previous)
