"""Bounded concurrent I/O inside one invocation.

A Lambda handler spends nearly all its time waiting for DynamoDB, S3 or SQS; independent calls
(different runs, different rows, different objects) need not wait for each other. `map_bounded`
runs them on at most `limit` threads and returns the results in the items' order. Every item has
finished (or failed) before it returns or raises, so nothing keeps running after the invocation
answers. The first failing item's exception is raised, in the items' order; callers that must
report failures per item catch inside `function`.

Tracing: in Lambda, the X-Ray SDK gives each new thread a facade segment from the invocation's
trace header, so the SDK calls of a worker thread appear in the invocation's trace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def map_bounded(function: Callable[[Item], Result], items: Sequence[Item], limit: int) -> list[Result]:
    """[function(item) for item in items], with at most `limit` running at once."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    if limit == 1 or len(items) <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(limit, len(items)), thread_name_prefix="onceflow-io") as pool:
        futures = [pool.submit(function, item) for item in items]
        # Leaving the block waits for every future, so a failure below still lets the others finish.
        return [future.result() for future in futures]
