"""The deepest Python stack a block reaches, on its thread and on every thread it starts: how much of the
recursion limit a handler path spends. A JSON document at the depth limit (runtime/shared/json_depth.py)
parses on every interpreter; comparing the stack it costs with a shallow one's shows whether anything
after the parser walks it level by level, which is what would reach the limit on some interpreter."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


class StackProbe:
    """Counts Python frames entered and left (the profiler's call and return events) per thread."""

    def __init__(self) -> None:
        self.deepest = 0
        self._depth = threading.local()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            depth = getattr(self._depth, "value", 0) + 1
            self._depth.value = depth
            self.deepest = max(self.deepest, depth)
        elif event == "return":
            self._depth.value = getattr(self._depth, "value", 0) - 1


@contextmanager
def deepest_stack() -> Iterator[StackProbe]:
    """A probe whose `deepest` is, after the block, the most frames the block stacked above where it began."""
    probe = StackProbe()
    threading.setprofile(probe)
    sys.setprofile(probe)
    try:
        yield probe
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]  # typeshed: None is what unsets it
