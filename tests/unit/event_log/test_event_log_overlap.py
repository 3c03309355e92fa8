"""The snapshot worker's overlapped I/O, without a cloud: the read ahead of pages and chunks, two
calls at once, and the cutting of merged cells into chunks (the same cut as one loop would make)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from runtime.event_log.cells import cell_name, order_key
from runtime.event_log.logic import MergedCell, encode_cell
from runtime.event_log.models import BuildState, CellValue
from runtime.event_log.snapshots import ChunkFiller, both
from runtime.shared.concurrency import ReadAhead


class Pages:
    """Pages of numbers; records when each read starts and ends, and how many run at once."""

    def __init__(self, pages: list[list[int]], *, seconds: float = 0.0, failing: int | None = None) -> None:
        self.pages = pages
        self.seconds = seconds
        self.failing = failing
        self.started: list[int] = []
        self.finished: list[int] = []
        self.in_flight = 0
        self.peak = 0
        self._lock = threading.Lock()

    def fetch(self, index: int) -> tuple[list[int], int | None]:
        with self._lock:
            self.started.append(index)
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            time.sleep(self.seconds)
            if index == self.failing:
                raise ConnectionError(f"page {index} could not be read")
            return self.pages[index], (index + 1 if index + 1 < len(self.pages) else None)
        finally:
            with self._lock:
                self.in_flight -= 1
                self.finished.append(index)


def test_read_ahead_yields_every_page_in_order_one_read_in_flight_at_most() -> None:
    # Given four pages, the last one empty (as a Query's last page can be)
    pages = Pages([[1, 2], [3], [4, 5, 6], []], seconds=0.01)
    # When they are read ahead and consumed
    items = list(ReadAhead(pages.fetch, 0, name="test"))
    # Then every item comes once, in order, each page was read once, one read at a time
    assert items == [1, 2, 3, 4, 5, 6]
    assert pages.started == [0, 1, 2, 3]
    assert pages.peak == 1


def wait_until(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_read_ahead_requests_the_first_page_at_once_and_each_next_while_the_one_before_is_consumed() -> None:
    # Given pages that take 20 ms each to read
    pages = Pages([[1, 2], [3, 4], [5, 6]], seconds=0.02)
    # When the read ahead is created
    reads = ReadAhead(pages.fetch, 0, name="test")
    # Then the first page is read before anyone asks for an item
    assert wait_until(lambda: pages.finished == [0])
    # and once the reader starts on it, the second page is read while the first is consumed
    assert next(reads) == 1
    assert wait_until(lambda: pages.finished == [0, 1])
    # but the third only once the reader reaches the second (two pages held at most)
    assert next(reads) == 2
    time.sleep(0.05)
    assert pages.started == [0, 1]
    assert next(reads) == 3
    assert wait_until(lambda: pages.started == [0, 1, 2])
    assert list(reads) == [4, 5, 6]


def test_closing_a_read_ahead_waits_for_the_read_in_flight_and_reads_no_further() -> None:
    # Given a read ahead whose reader stops after the first item
    pages = Pages([[1, 2], [3, 4], [5, 6]], seconds=0.05)
    reads = ReadAhead(pages.fetch, 0, name="test")
    assert next(reads) == 1
    # When it is closed while page 1 is being read
    reads.close()
    # Then that read has finished (nothing outlives the reader), and no page after it was requested
    assert pages.in_flight == 0
    assert pages.started == [0, 1]
    assert list(reads) == []


def test_a_read_error_reaches_the_reader_at_the_page_that_failed() -> None:
    # Given three pages, the second of which cannot be read
    pages = Pages([[1, 2], [3], [4]], failing=1)
    reads = ReadAhead(pages.fetch, 0, name="test")
    # When the reader consumes them
    # Then it gets the first page's items, then the error, and no later page was requested
    assert [next(reads), next(reads)] == [1, 2]
    with pytest.raises(ConnectionError, match="page 1"):
        next(reads)
    reads.close()
    assert pages.started == [0, 1]


def test_both_runs_two_calls_at_once_and_waits_for_both() -> None:
    # Given two calls that each wait until the other has started
    started = {name: threading.Event() for name in ("first", "second")}
    finished: list[str] = []

    def call(name: str, other: str) -> str:
        started[name].set()
        assert started[other].wait(5), f"{other} never ran while {name} waited"
        finished.append(name)
        return name

    # When both run
    first, second = both(lambda: call("first", "second"), lambda: call("second", "first"))
    # Then they ran at the same time, both finished, and their results come in order
    assert (first, second) == ("first", "second")
    assert sorted(finished) == ["first", "second"]


def test_both_raises_the_first_error_after_the_other_call_finished() -> None:
    # Given a call that fails at once and another that takes 100 ms
    finished: list[str] = []

    def fails() -> None:
        raise ValueError("the first call failed")

    def slow() -> str:
        time.sleep(0.1)
        finished.append("slow")
        return "slow"

    # When both run
    with pytest.raises(ValueError, match="the first call failed"):
        both(fails, slow)
    # Then the error came only once the other call had finished
    assert finished == ["slow"]


def merged_cells(count: int) -> list[MergedCell]:
    """`count` merged cells, every fifth one cleared (no value), some from the previous snapshot."""
    cells = []
    for index in range(count):
        name = cell_name(index // 7 + 1, index % 7 + 1)
        value = None if index % 5 == 4 else CellValue(order_key(name), name, f"v{index:04d}" * (1 + index % 3))
        cells.append(MergedCell(order_key(name), value, events=index % 3, previous_chunk=index // 10 if index % 2 else None))
    return cells


def one_loop(cells: list[MergedCell], state: BuildState, chunk_bytes: int) -> list[tuple[Any, ...]]:
    """The cut as the worker made it in one loop before the overlap: flush once the buffer reaches the size."""
    chunks = []
    buffer = bytearray()
    cursor, consumed, count, previous_chunk = state.cursor, state.consumed, state.cells, state.previous_chunk
    for merged in cells:
        cursor = merged.order
        consumed += merged.events
        if merged.previous_chunk is not None:
            previous_chunk = merged.previous_chunk
        if merged.value is not None:
            buffer += encode_cell(merged.value)
            count += 1
        if len(buffer) >= chunk_bytes:
            chunks.append((bytes(buffer), cursor, consumed, count, previous_chunk))
            buffer.clear()
    chunks.append((bytes(buffer), cursor, consumed, count, previous_chunk))
    return chunks


@pytest.mark.parametrize("chunk_bytes", [1, 60, 256, 10_000])
def test_the_chunk_filler_cuts_exactly_where_one_loop_would(chunk_bytes: int) -> None:
    # Given merged cells, and a build resumed from a checkpoint
    cells = merged_cells(120)
    state = BuildState(chunks=3, cursor="0000000:00000", previous_chunk=2, consumed=40, cells=30, digest="d")
    # When the filler cuts them into chunks
    filler = ChunkFiller(iter(cells), state, chunk_bytes)
    fills = [filler.fill()]
    while fills[-1].full:
        fills.append(filler.fill())
    # Then every chunk and every counter is what one loop gives, and only the last is not full
    assert [(f.body, f.cursor, f.consumed, f.cells, f.previous_chunk) for f in fills] == one_loop(cells, state, chunk_bytes)
    assert [f.full for f in fills] == [True] * (len(fills) - 1) + [False]
    # and a fill after the end is empty, with the counters where they were
    after = filler.fill()
    assert (after.body, after.full, after.consumed) == (b"", False, fills[-1].consumed)
