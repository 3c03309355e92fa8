"""A progress bar on stderr for long scans (no dependency; quiet when stderr is not a terminal)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, label: str, *, stream: TextIO | None = None, force: bool = False, width: int = 30) -> None:
        self.total = max(total, 1)
        self.label = label
        self.done = 0
        self._stream = stream or sys.stderr  # looked up now, so a redirected stderr is honoured
        self._show = force or self._stream.isatty()
        self._width = width
        self._last = 0.0

    def advance(self, count: int = 1) -> None:
        self.done += count
        now = time.monotonic()
        if self._show and (now - self._last > 0.2 or self.done >= self.total):
            self._last = now
            self._draw()

    def _draw(self) -> None:
        filled = min(self._width, self._width * self.done // self.total)
        bar = "#" * filled + "." * (self._width - filled)
        self._stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total}")
        self._stream.flush()

    def close(self) -> None:
        if self._show:
            self._draw()
            self._stream.write("\n")
            self._stream.flush()
