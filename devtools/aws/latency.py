"""Network latency for the embedded cloud: every AWS call waits a fixed time, as a real call would.

moto answers in microseconds, so on it a handler's wall time hides how many of its calls happen
one after another. `Latency(delay_ms)` hooks botocore's public events of every call (registered on
every session, as moto registers its own router), so the code under test cannot tell: each call
sleeps `delay_ms` in its own thread before it is sent, then runs.
Concurrent calls overlap their sleeps, as concurrent requests overlap on the network.

Measured at delay 0 and delay L, the extra wall time divided by L is the serial depth: the
number of calls on the longest chain that one waits for the other. `peak_in_flight` is the most
calls that were waiting at once. When calls overlap, moto's own CPU per call (shared by the
threads) would hide the waits at small L, so the depth is taken between two larger delays
(`measure` does both; LatencyRun.method says which).
"""

from __future__ import annotations

import gc
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Latency:
    """Counts every botocore API call made while installed, delaying each by `delay_ms`."""

    delay_ms: float = 0.0
    calls: Counter[str] = field(default_factory=Counter)
    peak_in_flight: int = 0  # the most calls waiting out their delay at once (each waits on its own thread)
    call_cpu_s: float = 0.0  # CPU spent inside the calls: botocore and the embedded cloud, not the code under test
    emulator_cpu_s: float = 0.0  # CPU spent by the embedded cloud answering them (moto's request handler)
    _in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.peak_in_flight = 0

    @contextmanager
    def installed(self) -> Iterator[Latency]:
        """This meter counts and delays every call while open (one meter at a time)."""
        global _meter
        _register_event_handlers()
        with _meter_lock:
            if _meter is not None:
                raise RuntimeError("another latency meter is installed")
            _meter = self
        try:
            yield self
        finally:
            with _meter_lock:
                _meter = None

    def _call_started(self, operation: str) -> None:
        with self._lock:
            self.calls[operation] += 1
            self._in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        try:
            if self.delay_ms:
                time.sleep(self.delay_ms / 1000)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _add(self, name: str, started: float | None) -> None:
        if started is None:
            return
        spent = time.thread_time() - started
        with self._lock:
            setattr(self, name, getattr(self, name) + spent)


# --- botocore's events ------------------------------------------------------------------------
#
# A call's CPU runs from provide-client-params (the first event of a call, before botocore builds,
# validates and signs the request) to after-call or after-call-error; its delay is taken at
# before-parameter-build, before the request is built (a botocore Stubber answers at before-call,
# registered first, so a later event would not see stubbed calls); the embedded cloud's CPU runs
# from before-send (registered first, so it starts before moto's own before-send handler answers)
# to before-parse.

_meter: Latency | None = None
_meter_lock = threading.Lock()
_registered = False
_CPU_STARTED = "onceflow_latency_cpu_started"
_emulator = threading.local()


# botocore's generate_presigned_url and generate_presigned_post build their request through the same
# events, with this key in the context: no call is made, so none is counted or delayed.
_PRESIGNING = "is_presign_request"


def _call_cpu_starts(context: dict[str, Any], **_: Any) -> None:
    if _meter is not None and not context.get(_PRESIGNING):
        context[_CPU_STARTED] = time.thread_time()


def _call_waits(model: Any, context: dict[str, Any], **_: Any) -> None:
    meter = _meter
    if meter is not None and not context.get(_PRESIGNING):
        meter._call_started(model.name)


def _call_cpu_ends(context: dict[str, Any], **_: Any) -> None:
    meter = _meter
    if meter is not None:
        meter._add("call_cpu_s", context.pop(_CPU_STARTED, None))


def _emulator_starts(**_: Any) -> None:
    _emulator.started = time.thread_time() if _meter is not None else None


def _emulator_ends(**_: Any) -> None:
    meter = _meter
    if meter is not None:
        meter._add("emulator_cpu_s", getattr(_emulator, "started", None))
    _emulator.started = None


def _register_event_handlers() -> None:
    """On every botocore session made from now on (and boto3's default one, if it exists), once."""
    global _registered
    with _meter_lock:
        if _registered:
            return
        import boto3
        from botocore import handlers

        specs: list[tuple[str, Callable[..., None], object]] = [
            ("provide-client-params", _call_cpu_starts, None),
            ("before-parameter-build", _call_waits, None),
            ("after-call", _call_cpu_ends, None),
            ("after-call-error", _call_cpu_ends, None),
            ("before-send", _emulator_starts, handlers.REGISTER_FIRST),
            ("before-parse", _emulator_ends, None),
        ]
        for event, handler, first in specs:
            handlers.BUILTIN_HANDLERS.append((event, handler, first) if first else (event, handler))
            if boto3.DEFAULT_SESSION is not None:
                events = boto3.DEFAULT_SESSION.events
                (events.register_first if first else events.register)(event, handler)
        _registered = True


# Registered when the meter's module is imported, before the code under test builds its clients.
_register_event_handlers()


@dataclass(frozen=True)
class LatencyRun:
    """One piece of work measured at delay 0, at delay L, and (when its calls overlapped) at two
    larger delays; every run starts from the same fresh state."""

    delay_ms: float
    calls: int
    calls_by_operation: dict[str, int]
    peak_in_flight: int
    wall_at_zero_s: float
    wall_at_delay_s: float
    cpu_s: float  # the process's CPU at delay 0, less what the calls themselves spent (SDK and moto)
    # The process's CPU at delay 0 less the embedded cloud's: the handler's own work and botocore's
    # client side (building, signing, sending and parsing each request), what Lambda bills.
    client_cpu_s: float = 0.0
    # (delay ms, wall s) at two delays long enough that the waits, not moto's CPU, set the wall time.
    io_bound: tuple[tuple[float, float], tuple[float, float]] | None = None

    @property
    def serial_depth(self) -> float:
        """Calls on the longest chain that wait for each other.

        Calls one after another: the extra wall time at L over L. Overlapping calls: moto spends a
        millisecond or more of CPU per call, and threads share that CPU, so at small L the wall
        time is moto's CPU, not the waits; between two delays where every thread mostly waits, the
        extra wall time over the extra delay is the chain."""
        if self.io_bound is not None:
            (low_ms, low_wall), (high_ms, high_wall) = self.io_bound
            return max(0.0, high_wall - low_wall) / ((high_ms - low_ms) / 1000)
        return max(0.0, self.wall_at_delay_s - self.wall_at_zero_s) / (self.delay_ms / 1000)

    @property
    def method(self) -> str:
        if self.io_bound is None:
            return f"(wall at {self.delay_ms:.0f} ms - wall at 0) / {self.delay_ms:.0f} ms"
        (low_ms, _), (high_ms, _) = self.io_bound
        return f"(wall at {high_ms:.0f} ms - wall at {low_ms:.0f} ms) / {high_ms - low_ms:.0f} ms"

    def ceiling_per_second(self, work: int, call_ms: float = 5.0) -> float:
        """Units of work per second if each call took `call_ms` and only the serial chain waited for them."""
        return work / (self.serial_depth * call_ms / 1000) if self.serial_depth else float("inf")

    def duration_ms(self, call_ms: float = 5.0) -> float:
        """A Lambda duration estimate: the serial chain at `call_ms` per call, plus the CPU measured at delay 0."""
        return self.serial_depth * call_ms + self.cpu_s * 1000


@dataclass(frozen=True)
class Timed:
    wall_s: float
    cpu_s: float  # less the calls (SDK and moto)
    client_cpu_s: float  # less the embedded cloud only
    meter: Latency


def _timed(run: Callable[[], Any], prepare: Callable[[], Any], delay_ms: float) -> Timed:
    prepare()
    # The embedded cloud's objects (hundreds of thousands after a history is applied) live in this
    # process, not in Lambda's; frozen, the garbage collections the run triggers do not walk them.
    gc.collect()
    gc.freeze()
    meter = Latency(delay_ms)
    try:
        with meter.installed():
            cpu_started, started = time.process_time(), time.perf_counter()
            run()
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    finally:
        gc.unfreeze()
    return Timed(wall, max(0.0, cpu - meter.call_cpu_s), max(0.0, cpu - meter.emulator_cpu_s), meter)


def client_cpu(run: Callable[[], Any], prepare: Callable[[], Any], repeats: int) -> float:
    """The median over `repeats` fresh runs of the process's CPU less the embedded cloud's (no delay)."""
    return statistics.median(_timed(run, prepare, 0.0).client_cpu_s for _ in range(repeats))


def measure(
    run: Callable[[], Any],
    prepare: Callable[[], Any],
    delay_ms: float,
    *,
    io_bound_delays_ms: tuple[float, float] | None = (200.0, 400.0),
) -> LatencyRun:
    """`prepare()` builds a fresh starting state; `run()` does the work, once per delay.

    At 0 (calls and CPU) and at `delay_ms`; when calls overlapped there, also at the two
    `io_bound_delays_ms`, from which the depth is taken (see LatencyRun.serial_depth). None skips
    them, for work whose chain is so long that moto's CPU is lost in its waits at `delay_ms`."""
    zero = _timed(run, prepare, 0.0)
    delayed = _timed(run, prepare, delay_ms)
    io_bound = None
    if delayed.meter.peak_in_flight > 1 and io_bound_delays_ms is not None:
        low_ms, high_ms = io_bound_delays_ms
        low = _timed(run, prepare, low_ms)
        high = _timed(run, prepare, high_ms)
        io_bound = ((low_ms, low.wall_s), (high_ms, high.wall_s))
    return LatencyRun(
        delay_ms=delay_ms,
        calls=delayed.meter.total_calls,
        calls_by_operation=dict(delayed.meter.calls),
        peak_in_flight=delayed.meter.peak_in_flight,
        wall_at_zero_s=zero.wall_s,
        wall_at_delay_s=delayed.wall_s,
        cpu_s=zero.cpu_s,
        client_cpu_s=zero.client_cpu_s,
        io_bound=io_bound,
    )
