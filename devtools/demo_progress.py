"""What `make demo` prints while it works: each section's title when it starts and its time (wall
and CPU) when it ends, and a counter for each long phase.

On a terminal a phase is a tqdm bar on stderr. Anywhere else (a CI log, a pipe) it is a plain line
on stderr at most every `every` seconds, and one at the end, so a log shows progress without the
carriage-return redraws of a bar:

    event log: appending 12,000/50,000 events (24 %, 95 s)
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import TextIO

# A CI log gets a line at most this often per phase.
LINE_EVERY_SECONDS = 30.0
# A bar on a terminal redraws at most this often (tqdm's default is 0.1 s).
BAR_MININTERVAL_SECONDS = 0.5


class Progress:
    """A phase's count of `total` steps (0: unknown); `update(n)` as steps are done, `close()` at the end."""

    def __init__(
        self,
        label: str,
        total: int,
        unit: str,
        *,
        stream: TextIO | None = None,
        every: float = LINE_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0
        self._stream = stream or sys.stderr  # looked up now, so a redirected stderr is honoured
        self._every = every
        self._clock = clock
        self._started = self._last = clock()
        self._bar = None
        if self._stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total or None, desc=label, unit=f" {unit}", file=self._stream, mininterval=BAR_MININTERVAL_SECONDS)

    def update(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
            return
        now = self._clock()
        if now - self._last >= self._every:
            self._last = now
            self._line(now)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        else:
            self._line(self._clock())

    def _line(self, now: float) -> None:
        if self.total:
            count = f"{self.done:,}/{self.total:,} {self.unit} ({100 * self.done // self.total} %, "
        else:
            count = f"{self.done:,} {self.unit} ("
        print(f"  {self.label}: {count}{now - self._started:.0f} s)", file=self._stream, flush=True)


@contextlib.contextmanager
def progress(label: str, total: int, unit: str, *, stream: TextIO | None = None, every: float = LINE_EVERY_SECONDS) -> Iterator[Progress]:
    """A Progress closed at the end of the block."""
    counter = Progress(label, total, unit, stream=stream, every=every)
    try:
        yield counter
    finally:
        counter.close()


@contextlib.contextmanager
def section(title: str, *, stream: TextIO | None = None) -> Iterator[None]:
    """Print `title` when the section starts, and its wall and CPU seconds when it ends."""
    out = stream or sys.stdout
    print(f"\n== {title} ...", file=out, flush=True)
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        yield
    finally:
        print(f"== {title}: {time.perf_counter() - wall:.0f} s ({time.process_time() - cpu:.0f} s CPU)", file=out, flush=True)
