"""A seeded, realistic workload of running-device messages as Kinesis would deliver them.

Each device sends one message every ``interval_ms`` while a run lasts; ``distance_meters`` is the
delta since that device's previous message. Deliveries model what a Kinesis consumer sees:

* ``original``: the message, arriving at its own timestamp;
* ``late``: a ``late_rate`` fraction of messages that arrive *only* 60-300 s after their timestamp
  (the original delivery never happens);
* ``resend``: independently, a ``resend_rate`` fraction of messages arrive once more, byte-identical,
  0-120 s after their timestamp;
* ``malformed``: ``malformed`` extra bad payloads spread uniformly over the stream;
* ``wrong_sequence``: ``wrong_sequences`` extra records that copy a real message but carry a
  ``sequence_id`` far beyond its run (900,000 + n), arriving right after that message: a device
  bug the pipeline must hold as a suspect jump without losing the rest of the run;
* ``bad_clock``: ``bad_clocks`` extra records that copy a real message but are stamped in the year
  3000, arriving right after it: rejected by the timestamp window around their arrival.

Each delivery carries its arrival time in the stream (``arrival_ms``), which is what Kinesis reports
as ``approximateArrivalTimestamp``: device timestamps are never after it, and at most 300 s before.

Nothing is arranged to flatter batching: users start at staggered times, so one batch mixes many
users, and resends and late copies land wherever their arrival time puts them.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from runtime.runner_stats.contract import KEY_RUN_ID, KEY_USER_ID

if TYPE_CHECKING:
    from devtools.aws.esm import ShardRecord

__all__ = [
    "BASE_EPOCH_MS",
    "Delivery",
    "DeliveryKind",
    "DeviceMessage",
    "Workload",
    "batches",
    "generate",
    "kinesis_events",
    "shard_records",
]

DeliveryKind = Literal["original", "resend", "late", "malformed", "wrong_sequence", "bad_clock"]

# 2017-11-01T13:20:00Z, the era of the sample message in the brief; any fixed instant would do.
BASE_EPOCH_MS = 1_509_542_400_000

_FIRST_USER_ID = 3000
_FIRST_RUN_ID = 3_091_000
_START_SPREAD_MS = 30 * 60_000
_REST_MIN_MS, _REST_MAX_MS = 5 * 60_000, 30 * 60_000
_MAX_JITTER_MS = 2_000
_LATE_MIN_MS, _LATE_MAX_MS = 60_000, 300_000
_RESEND_MAX_MS = 120_000
_DISTANCE_MIN, _DISTANCE_MAX = 60, 130
_MALFORMED_SHAPES = 7
_WRONG_SEQUENCE_BASE = 900_000
_YEAR_3000_MS = 32_503_680_000_000


@dataclass(frozen=True)
class DeviceMessage:
    """One message as a device sends it."""

    user_id: int
    run_id: int
    sequence_id: int
    timestamp_utc: int
    distance_meters: int

    def to_dict(self) -> dict[str, int]:
        # Key order of the device wire format, so payload bytes look like the real thing.
        return {
            KEY_USER_ID: self.user_id,
            "distance_meters": self.distance_meters,
            "timestamp_utc": self.timestamp_utc,
            "sequence_id": self.sequence_id,
            KEY_RUN_ID: self.run_id,
        }

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), separators=(",", ":")).encode()


@dataclass(frozen=True)
class Delivery:
    """One record as the Kinesis consumer receives it."""

    arrival_ms: int
    partition_key: str
    data: bytes
    kind: DeliveryKind


@dataclass(frozen=True)
class Workload:
    """The distinct messages sent, and every delivery in stream (arrival) order."""

    unique: tuple[DeviceMessage, ...]
    deliveries: tuple[Delivery, ...]


def generate(
    *,
    seed: int = 7,
    users: int = 200,
    runs_per_user: int = 3,
    messages_per_run: int = 60,
    resend_rate: float = 0.20,
    late_rate: float = 0.05,
    malformed: int = 0,
    interval_ms: int = 30_000,
    wrong_sequences: int = 0,
    bad_clocks: int = 0,
    base_epoch_ms: int = BASE_EPOCH_MS,
    start_spread_ms: int = _START_SPREAD_MS,
) -> Workload:
    """Build a deterministic workload for ``seed``.

    Defaults give 200 x 3 x 60 = 36,000 unique messages and 43,200 deliveries. ``base_epoch_ms``
    moves the whole workload in time (a replay into a stream that stamps arrivals with the clock).
    ``start_spread_ms`` is the window the users' first runs start in: 30 minutes by default; one
    interval puts every device on the air at once, evenly staggered (a full shard's steady state).
    """
    if min(users, runs_per_user, messages_per_run, malformed, wrong_sequences, bad_clocks) < 0:
        raise ValueError("counts must be >= 0")
    if not (0.0 <= resend_rate <= 1.0 and 0.0 <= late_rate <= 1.0):
        raise ValueError("rates must be within [0, 1]")
    if interval_ms < 2:
        raise ValueError("interval_ms must be >= 2")

    rng = random.Random(seed)
    # Jitter stays below the interval so timestamps strictly increase within a run.
    max_jitter = min(_MAX_JITTER_MS, interval_ms - 1)
    unique: list[DeviceMessage] = []
    run_id = _FIRST_RUN_ID
    for user_index in range(users):
        user_id = _FIRST_USER_ID + user_index
        start = base_epoch_ms + rng.randrange(start_spread_ms)
        for _ in range(runs_per_user):
            last_ts = start
            for seq in range(1, messages_per_run + 1):
                last_ts = start + (seq - 1) * interval_ms + rng.randint(0, max_jitter)
                distance = rng.randint(_DISTANCE_MIN, _DISTANCE_MAX)
                unique.append(DeviceMessage(user_id, run_id, seq, last_ts, distance))
            run_id += 1
            start = last_ts + rng.randint(_REST_MIN_MS, _REST_MAX_MS)

    count = len(unique)
    # Exact fractions (not per-message coin flips) keep delivery counts predictable per seed.
    late = set(rng.sample(range(count), round(late_rate * count)))
    resent = set(rng.sample(range(count), round(resend_rate * count)))

    # (arrival, creation order, delivery): creation order breaks arrival ties deterministically.
    staged: list[tuple[int, int, Delivery]] = []
    for index, message in enumerate(unique):
        data = message.to_json()
        key = str(message.user_id)
        if index in late:
            arrival = message.timestamp_utc + rng.randint(_LATE_MIN_MS, _LATE_MAX_MS)
            staged.append((arrival, len(staged), Delivery(arrival, key, data, "late")))
        else:
            arrival = message.timestamp_utc
            staged.append((arrival, len(staged), Delivery(arrival, key, data, "original")))
        if index in resent:
            arrival = message.timestamp_utc + rng.randint(0, _RESEND_MAX_MS)
            staged.append((arrival, len(staged), Delivery(arrival, key, data, "resend")))

    if malformed:
        low = min((s[0] for s in staged), default=base_epoch_ms)
        high = max((s[0] for s in staged), default=base_epoch_ms)
        for number in range(malformed):
            template = rng.choice(unique) if unique else DeviceMessage(_FIRST_USER_ID, _FIRST_RUN_ID, 1, base_epoch_ms, 100)
            arrival = rng.randint(low, high)
            data = _malformed_payload(number, template)
            staged.append((arrival, len(staged), Delivery(arrival, f"malformed-{number}", data, "malformed")))

    # Wrong copies of real messages, each right behind the message it copies (after its
    # earliest delivery), so that valid messages of the same run follow it.
    for number in range(wrong_sequences + bad_clocks):
        if not unique:
            break
        template = rng.choice(unique)
        if number < wrong_sequences:
            wrong = DeviceMessage(
                template.user_id, template.run_id, _WRONG_SEQUENCE_BASE + number, template.timestamp_utc, template.distance_meters
            )
            kind: DeliveryKind = "wrong_sequence"
        else:
            wrong = DeviceMessage(template.user_id, template.run_id, template.sequence_id, _YEAR_3000_MS, template.distance_meters)
            kind = "bad_clock"
        arrival = template.timestamp_utc + 1
        staged.append((arrival, len(staged), Delivery(arrival, str(template.user_id), wrong.to_json(), kind)))

    staged.sort(key=lambda s: (s[0], s[1]))
    return Workload(unique=tuple(unique), deliveries=tuple(s[2] for s in staged))


def _malformed_payload(number: int, template: DeviceMessage) -> bytes:
    """The ``number``-th bad payload, cycling through the shapes a consumer must reject."""
    shape = number % _MALFORMED_SHAPES
    body: Any
    if shape == 0:
        return f"not json, garbage #{number}".encode()
    fields: dict[str, Any] = dict(template.to_dict())
    if shape == 1:
        body = list(fields.values())
    elif shape == 2:
        del fields["distance_meters"]
        body = fields
    elif shape == 3:
        fields[KEY_USER_ID] = str(template.user_id)
        body = fields
    elif shape == 4:
        fields["distance_meters"] = -template.distance_meters
        body = fields
    elif shape == 5:
        fields["sequence_id"] = 0
        body = fields
    else:
        fields["sequence_id"] = template.sequence_id + 0.5
        body = fields
    return json.dumps(body, separators=(",", ":")).encode()


def batches(deliveries: Sequence[Delivery], size: int) -> Iterator[list[Delivery]]:
    """Consecutive chunks of ``size`` deliveries in stream order (the last may be shorter)."""
    if size < 1:
        raise ValueError("size must be >= 1")
    for start in range(0, len(deliveries), size):
        yield list(deliveries[start : start + size])


def shard_records(deliveries: Sequence[Delivery], first_sequence: int = 1) -> list[ShardRecord]:
    """The deliveries as shard records: increasing sequence numbers, and each delivery's arrival
    time as the record's arrival in the stream (Lambda's ``approximateArrivalTimestamp``)."""
    from devtools.aws.esm import ShardRecord

    return [
        ShardRecord(f"{first_sequence + index:056d}", d.partition_key, d.data, arrival_ms=d.arrival_ms)
        for index, d in enumerate(deliveries)
    ]


def kinesis_events(deliveries: Sequence[Delivery], size: int) -> Iterator[dict[str, Any]]:
    """One Kinesis Lambda event per consecutive batch of ``size`` deliveries, built by the same
    code the event source mapping replay uses (sequence numbers increase across batches)."""
    from devtools.aws.esm import lambda_event

    records = shard_records(deliveries)
    for start in range(0, len(records), size):
        yield lambda_event(records[start : start + size])
