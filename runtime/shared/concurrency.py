"""Bounded concurrent I/O inside one invocation.

A Lambda handler spends nearly all its time waiting for DynamoDB, S3 or SQS; independent calls
(different runs, different rows, different objects) need not wait for each other, and a paged
read need not wait for the reader (`ReadAhead`). `map_bounded`
runs them on at most `limit` threads and returns the results in the items' order. Every item has
finished (or failed) before it returns or raises, so nothing keeps running after the invocation
answers. The first failing item's exception is raised, in the items' order; callers that must
report failures per item catch inside `function`.

Tracing: in Lambda, the X-Ray SDK gives each new thread a facade segment from the invocation's
trace header, so the SDK calls of a worker thread appear in the invocation's trace. Each task runs
in a copy of the caller's context variables, so what the invocation set in them (the embedded
cloud's record of which function is calling, say) holds on its worker threads too.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def map_bounded(function: Callable[[Item], Result], items: Sequence[Item], limit: int) -> list[Result]:
    """[function(item) for item in items], with at most `limit` running at once."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    if limit == 1 or len(items) <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(limit, len(items)), thread_name_prefix="onceflow-io") as pool:
        futures = [pool.submit(contextvars.copy_context().run, function, item) for item in items]
        # Leaving the block waits for every future, so a failure below still lets the others finish.
        return [future.result() for future in futures]


class ReadAhead(Generic[Item]):
    """The items of successive pages, each page read while the one before it is consumed.

    `fetch(token)` answers a page and the token of the next (None: it was the last). The first
    page is requested at once, and each next page when the reader starts on the one before it,
    on one background thread: the reader waits for a page only when it consumes a page faster
    than the next is read. At most two pages are held (the one being consumed, the next).
    `close()` (also when the last page is consumed) waits for a read in flight, so none outlives
    its reader; a read's error is raised to the reader, at the item where its page would start.
    """

    def __init__(self, fetch: Callable[[Any], tuple[Sequence[Item], Any]], first: Any, *, name: str) -> None:
        self._fetch = fetch
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"onceflow-{name}")
        self._next: Future[tuple[Sequence[Item], Any]] | None = self._pool.submit(contextvars.copy_context().run, fetch, first)
        self._page: Iterator[Item] = iter(())

    def __iter__(self) -> ReadAhead[Item]:
        return self

    def __next__(self) -> Item:
        while True:
            for item in self._page:
                return item
            if self._next is None:
                self.close()
                raise StopIteration
            page, token = self._next.result()
            self._next = self._pool.submit(contextvars.copy_context().run, self._fetch, token) if token is not None else None
            self._page = iter(page)

    def close(self) -> None:
        self._next = None
        self._page = iter(())
        self._pool.shutdown(wait=True)
