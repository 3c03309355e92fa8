"""An independent, in-memory recomputation of what the pipeline should end with.

Deliberately imports nothing from ``runtime/`` (the code under test) so that agreement between the
two means something. Two models live here:

* the *clean* model (:func:`clean_pass`, :func:`clean_tendencies`): exactly-once per
  ``(user_id, run_id, sequence_id)``, late messages counted, tendencies per run in run order;
* the *seed* model (:func:`seed_pass`): what the original seed algorithm ends with, including its
  flaws (late messages are dropped, "previous" tendency is the run context's memory).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from devtools.workload import Delivery, DeviceMessage
from runtime.runner_stats.contract import KEY_RUN_ID, KEY_USER_ID

__all__ = [
    "RunKey",
    "RunTotals",
    "SeedOutcome",
    "UserTendency",
    "clean_pass",
    "clean_tendencies",
    "parse_message",
    "seed_pass",
    "tendency_label",
]

RunKey = tuple[int, int]
"""(user_id, run_id)"""

_FIELDS = (KEY_USER_ID, KEY_RUN_ID, "sequence_id", "timestamp_utc", "distance_meters")


@dataclass(frozen=True)
class RunTotals:
    user_id: int
    run_id: int
    total_meters: int
    total_seconds: float
    first_ts: int
    last_ts: int
    message_count: int


@dataclass(frozen=True)
class UserTendency:
    user_id: int
    current_run_id: int
    current: str
    previous_run_id: int | None
    previous: str | None


@dataclass(frozen=True)
class SeedOutcome:
    """Final state of the seed algorithm.

    ``runs``: per (user, run), totals over the *applied* messages (``last_ts`` = last applied ts).
    ``tendencies``: per user, (current, previous) as last written to the tendency table.
    ``archived``: the (user, run, seq) of every applied message.
    ``lost_meters``: clean total meters minus seed total meters, over all runs.
    """

    runs: dict[RunKey, RunTotals]
    tendencies: dict[int, tuple[str, str | None]]
    archived: frozenset[tuple[int, int, int]]
    lost_meters: int


def parse_message(data: bytes) -> DeviceMessage | None:
    """A valid device message, or None for anything unparseable or invalid.

    Valid: a JSON object with all five fields as integers (bools and floats rejected),
    ``sequence_id >= 1`` and the other fields ``>= 0``. Extra fields are ignored.
    """
    try:
        body: Any = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(body, dict):
        return None
    values: dict[str, int] = {}
    for field in _FIELDS:
        value = body.get(field)
        # bool is an int subclass; a device never sends true for a count.
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return None
        values[field] = value
    if values["sequence_id"] < 1:
        return None
    return DeviceMessage(**values)


def tendency_label(total_meters: int | Decimal) -> str:
    if total_meters < 200:
        return "fine"
    if total_meters < 5000:
        return "good job"
    return "well done"


def clean_pass(unique: Iterable[DeviceMessage]) -> dict[RunKey, RunTotals]:
    """Exactly-once totals per (user, run); the first copy of each (user, run, seq) wins."""
    seen: set[tuple[int, int, int]] = set()
    meters: dict[RunKey, int] = {}
    first: dict[RunKey, int] = {}
    last: dict[RunKey, int] = {}
    count: dict[RunKey, int] = {}
    for message in unique:
        ident = (message.user_id, message.run_id, message.sequence_id)
        if ident in seen:
            continue
        seen.add(ident)
        key = (message.user_id, message.run_id)
        ts = message.timestamp_utc
        meters[key] = meters.get(key, 0) + message.distance_meters
        first[key] = min(first.get(key, ts), ts)
        last[key] = max(last.get(key, ts), ts)
        count[key] = count.get(key, 0) + 1
    return {
        key: RunTotals(
            user_id=key[0],
            run_id=key[1],
            total_meters=meters[key],
            total_seconds=(last[key] - first[key]) / 1000,
            first_ts=first[key],
            last_ts=last[key],
            message_count=count[key],
        )
        for key in meters
    }


def clean_tendencies(totals: dict[RunKey, RunTotals]) -> dict[int, UserTendency]:
    """Per user: label of the latest run (by first_ts, then run_id) and of the run before it."""
    by_user: dict[int, list[RunTotals]] = {}
    for run in totals.values():
        by_user.setdefault(run.user_id, []).append(run)
    result: dict[int, UserTendency] = {}
    for user_id, runs in by_user.items():
        runs.sort(key=lambda r: (r.first_ts, r.run_id))
        current = runs[-1]
        previous = runs[-2] if len(runs) > 1 else None
        result[user_id] = UserTendency(
            user_id=user_id,
            current_run_id=current.run_id,
            current=tendency_label(current.total_meters),
            previous_run_id=previous.run_id if previous else None,
            previous=tendency_label(previous.total_meters) if previous else None,
        )
    return result


@dataclass
class _SeedContext:
    last_seq: int
    total_meters: int
    first_ts: int
    tendency: str
    applied: int


def seed_pass(deliveries: Iterable[Delivery]) -> SeedOutcome:
    """Replay the seed algorithm over ``deliveries`` in order.

    Context is keyed by (user, run) and holds last_seq, total, first applied ts and the run's last
    tendency label. A message with ``sequence_id <= last_seq`` is dropped, so a late message is lost
    once a later one of its run was applied. The tendency row of a user is overwritten by every
    applied message: current = label of the run total after it, previous = that run context's
    label before it (None for the first applied message of a run).
    """
    contexts: dict[RunKey, _SeedContext] = {}
    runs: dict[RunKey, RunTotals] = {}
    tendencies: dict[int, tuple[str, str | None]] = {}
    archived: set[tuple[int, int, int]] = set()
    valid: list[DeviceMessage] = []
    for delivery in deliveries:
        message = parse_message(delivery.data)
        if message is None:
            continue
        valid.append(message)
        key = (message.user_id, message.run_id)
        ctx = contexts.get(key)
        if ctx is not None and message.sequence_id <= ctx.last_seq:
            continue
        total = (ctx.total_meters if ctx else 0) + message.distance_meters
        first_ts = ctx.first_ts if ctx else message.timestamp_utc
        applied = (ctx.applied if ctx else 0) + 1
        current = tendency_label(total)
        previous = ctx.tendency if ctx else None
        runs[key] = RunTotals(
            user_id=message.user_id,
            run_id=message.run_id,
            total_meters=total,
            total_seconds=(message.timestamp_utc - first_ts) / 1000,
            first_ts=first_ts,
            last_ts=message.timestamp_utc,
            message_count=applied,
        )
        tendencies[message.user_id] = (current, previous)
        archived.add((message.user_id, message.run_id, message.sequence_id))
        contexts[key] = _SeedContext(message.sequence_id, total, first_ts, current, applied)
    clean_total = sum(run.total_meters for run in clean_pass(valid).values())
    seed_total = sum(run.total_meters for run in runs.values())
    return SeedOutcome(
        runs=runs,
        tendencies=tendencies,
        archived=frozenset(archived),
        lost_meters=clean_total - seed_total,
    )
