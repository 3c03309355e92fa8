"""Value types of the runner-stats pipeline. Pure data, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum

SeqRange = tuple[int, int]  # inclusive [low, high]


@dataclass(frozen=True, slots=True, order=True)
class RunKey:
    user_id: int
    run_id: int

    @property
    def archive_key(self) -> str:
        return f"{self.user_id}#{self.run_id}"


@dataclass(frozen=True, slots=True)
class DeviceMessage:
    user_id: int
    run_id: int
    sequence_id: int
    timestamp_utc: int  # epoch milliseconds
    distance_meters: Decimal  # distance since the device's previous message (a delta)

    @property
    def key(self) -> RunKey:
        return RunKey(self.user_id, self.run_id)


@dataclass(frozen=True, slots=True)
class StreamPosition:
    """Where a record sits in the stream; `record_id` is Lambda's eventID (shard:sequence)."""

    record_id: str
    sequence_number: str
    partition_key: str


@dataclass(frozen=True, slots=True)
class PositionedMessage:
    position: StreamPosition
    message: DeviceMessage
    payload: bytes = b""  # the record as received, kept if the message is rejected later


class RejectReason(StrEnum):
    NOT_BASE64 = "not_base64"
    TOO_LARGE = "too_large"
    NOT_UTF8 = "not_utf8"
    NOT_JSON = "not_json"
    TOO_DEEP = "too_deep"  # JSON whose arrays and objects nest deeper than runtime/shared/json_depth.py allows
    NOT_OBJECT = "not_object"
    MISSING_FIELD = "missing_field"
    WRONG_TYPE = "wrong_type"
    OUT_OF_RANGE = "out_of_range"
    BAD_TIMESTAMP = "bad_timestamp"  # timestamp_utc outside the window around the record's arrival
    TOO_LATE = "too_late"  # valid, but its sequence gap was already closed
    SUSPECT_JUMP = "suspect_jump"  # jumps the run's high water beyond the gap bounds; held, not applied


@dataclass(frozen=True, slots=True)
class TimestampWindow:
    """How far a message's `timestamp_utc` may lie before and after its arrival in the stream."""

    max_age_ms: int = 24 * 3600 * 1000
    max_ahead_ms: int = 5 * 60 * 1000

    def problem(self, timestamp_ms: int, arrival_ms: int) -> str | None:
        if timestamp_ms < arrival_ms - self.max_age_ms:
            return (
                f"timestamp_utc {timestamp_ms} is {(arrival_ms - timestamp_ms) // 1000} s before the record's arrival"
                f" at {arrival_ms}; at most {self.max_age_ms // 1000} s are allowed"
            )
        if timestamp_ms > arrival_ms + self.max_ahead_ms:
            return (
                f"timestamp_utc {timestamp_ms} is {(timestamp_ms - arrival_ms) // 1000} s after the record's arrival"
                f" at {arrival_ms}; at most {self.max_ahead_ms // 1000} s are allowed"
            )
        return None


@dataclass(frozen=True, slots=True)
class Rejection:
    position: StreamPosition
    reason: RejectReason
    detail: str
    payload: bytes  # raw record bytes (decoded from base64 when that worked)
    key: RunKey | None = None


class Outcome(StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    TOO_LATE = "too_late"
    SUSPECT = "suspect"  # held in the run item (and kept in rejects) until corroborated or caught up


@dataclass(frozen=True, slots=True)
class ArchivedMessage:
    sequence_id: int
    timestamp_utc: int
    distance_meters: Decimal


@dataclass(frozen=True, slots=True)
class ArchiveChunk:
    """A flushed, immutable slice of a run's message archive."""

    key: RunKey
    index: int
    messages: tuple[ArchivedMessage, ...]


@dataclass(frozen=True, slots=True)
class RunContext:
    """The combined item: user-facing run stats plus the dedup record that makes them exact.

    `version` is 0 for a run that has no stored item yet. `gaps` are the sequence numbers
    below `high_water` that have not arrived; `closed` are gaps given up on (the newest ranges,
    a bounded list); `forgotten` is the highest sequence of the closed ranges no longer listed
    (0: none), below which only the archive tells an applied sequence from a closed one.
    `held` are suspect jumps: messages too far above `high_water` to apply yet (bounded).
    `pending` is the archive tail not yet flushed into a chunk.
    """

    key: RunKey
    version: int = 0
    high_water: int = 0
    gaps: tuple[SeqRange, ...] = ()
    closed: tuple[SeqRange, ...] = ()
    forgotten: int = 0
    held: tuple[ArchivedMessage, ...] = ()
    gaps_closed: int = 0
    total_meters: Decimal = Decimal(0)
    first_ts: int | None = None
    last_ts: int | None = None
    message_count: int = 0
    pending: tuple[ArchivedMessage, ...] = ()
    archive_chunks: int = 0
    tendency: str | None = None  # the label last pushed to the user's tendency record

    @property
    def total_seconds(self) -> Decimal:
        if self.first_ts is None or self.last_ts is None:
            return Decimal(0)
        return Decimal(self.last_ts - self.first_ts) / 1000


@dataclass(frozen=True, slots=True)
class TendencySlot:
    run_id: int
    started_at: int  # first timestamp of the run when pushed; orders runs, not compared
    label: str


@dataclass(frozen=True, slots=True)
class UserTendency:
    """Per-user record: the latest run's tendency and the one of the run before it."""

    user_id: int
    version: int = 0
    current: TendencySlot | None = None
    previous: TendencySlot | None = None


@dataclass(frozen=True, slots=True)
class FoldPolicy:
    """How long the dedup record remembers open gaps (by sequence lag and by count), and how far
    one message may move the high water on its own (`jump_limit`)."""

    gap_max_lag: int = 40
    gap_max_open: int = 64
    closed_ranges_kept: int = 16
    archive_chunk_size: int = 20
    held_kept: int = 2

    @property
    def jump_limit(self) -> int:
        """The largest step above the high water that opens no gap the bounds would close at once."""
        return min(self.gap_max_lag, self.gap_max_open) + 1


@dataclass(frozen=True, slots=True)
class FoldResult:
    context: RunContext
    outcomes: tuple[tuple[PositionedMessage, Outcome], ...]
    chunk: ArchiveChunk | None
    gaps_closed: int = 0
    changed: bool = False
    released: int = 0  # held messages applied in this fold (corroborated, or the run caught up)

    @property
    def too_late(self) -> tuple[PositionedMessage, ...]:
        return tuple(p for p, outcome in self.outcomes if outcome is Outcome.TOO_LATE)

    @property
    def suspect(self) -> tuple[PositionedMessage, ...]:
        return tuple(p for p, outcome in self.outcomes if outcome is Outcome.SUSPECT)
