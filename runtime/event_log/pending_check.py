"""Which pending snapshots are being built and which are stuck, from the pending rows alone. Pure.

A pending row exists from a snapshot's first claim until its build finishes. Its `Active`
attribute names the holder of the claim and `Modified` is renewed at every claim, checkpoint,
deferral and hand-off; a deferral or hand-off also records `Due`, when its message comes back.
So, at `now`:
- building: a live lease (Active set, Modified within the lease): a worker is on it;
- waiting: no live lease, but quiet (since Modified, or since Due when that is later) for no
  longer than `stuck_after_seconds`: its message is between deliveries (deferred with backoff,
  handed off, or its holder died and the message has not come back after the visibility timeout);
- stuck: no live lease and quiet for longer than `stuck_after_seconds`. Nothing is working on it,
  and its message is overdue by more than a visibility timeout plus a lease: it is gone (a
  duplicate's delete removed the only message of a worker that died; the message went to the DLQ).

A holder whose lease expired is dead (the lease is longer than the worker's timeout). Every stuck
row gets the router's build message again (same deterministic request id), see
`recovery_messages`; the operator's tools are `python -m ops.event_log_pending` and
`python -m ops.event_log_reprocess`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum

from runtime.event_log.messages import SideEffect, SideEffectMessage, side_effect_request_id
from runtime.event_log.models import PendingSnapshot


class PendingStatus(StrEnum):
    BUILDING = "building"
    WAITING = "waiting"
    STUCK = "stuck"


@dataclass(frozen=True, slots=True)
class StuckRules:
    lease_seconds: float
    stuck_after_seconds: float

    def __post_init__(self) -> None:
        if self.lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        if self.stuck_after_seconds < self.lease_seconds:
            raise ValueError("stuck_after_seconds must be at least lease_seconds (a claim cannot be taken over earlier)")


@dataclass(frozen=True, slots=True)
class PendingView:
    """One pending row as the check sees it at `now`."""

    pending: PendingSnapshot
    status: PendingStatus
    age_seconds: float  # since the first claim (Created)
    idle_seconds: float  # since the last claim, checkpoint, deferral or hand-off (Modified), or since Due when later
    lease_expired: bool  # claimed, and the holder's lease ran out: the holder is dead

    @property
    def log_id(self) -> str:
        return self.pending.log_id

    @property
    def seq(self) -> Decimal:
        return self.pending.seq

    @property
    def holder(self) -> str | None:
        return self.pending.active

    @property
    def cut(self) -> int:
        """The last event the snapshot covers (its Snapshot entry sits at cut + 0.5)."""
        return int(self.pending.seq)

    @property
    def dead_holder(self) -> bool:
        return self.pending.active is not None and self.lease_expired


@dataclass(frozen=True, slots=True)
class PendingReport:
    views: tuple[PendingView, ...]  # oldest first

    @property
    def stuck(self) -> tuple[PendingView, ...]:
        return tuple(view for view in self.views if view.status == PendingStatus.STUCK)

    @property
    def oldest_age_seconds(self) -> float:
        """Age of the oldest pending snapshot; 0 when nothing is pending (so the metric is always there)."""
        return max((view.age_seconds for view in self.views), default=0.0)

    @property
    def oldest(self) -> PendingView | None:
        return self.views[0] if self.views else None

    def count(self, status: PendingStatus) -> int:
        return sum(1 for view in self.views if view.status == status)


def classify(pending: PendingSnapshot, now: float, rules: StuckRules) -> PendingView:
    idle = max(0.0, now - max(pending.modified, pending.due or 0.0))
    # The claim's own condition: a lease is expired when Modified < now - lease.
    expired = pending.active is not None and pending.modified < now - rules.lease_seconds
    if pending.active is not None and not expired:
        status = PendingStatus.BUILDING
    elif idle > rules.stuck_after_seconds:
        status = PendingStatus.STUCK
    else:
        status = PendingStatus.WAITING
    return PendingView(pending, status, max(0.0, now - pending.created), idle, expired)


def check(rows: Iterable[PendingSnapshot], now: float, rules: StuckRules) -> PendingReport:
    views = sorted((classify(row, now, rules) for row in rows), key=lambda view: (-view.age_seconds, view.log_id, view.seq))
    return PendingReport(tuple(views))


def recovery_messages(report: PendingReport, max_claims: int) -> list[SideEffectMessage]:
    """The router's build message again, for every stuck row: its holder died with no message
    left, or it has no holder and its message is overdue (lost, or in the DLQ). Safe and
    idempotent: the request id is the router's own, and every path of the worker drops or
    finishes repeats (a live claim makes it a duplicate, a root makes it "already built",
    otherwise the claim takes over and resumes from the checkpoint; claims stay conditional).
    Once a worker claims it, the row is no longer stuck, so a later check does not send again.
    A build that keeps failing is re-sent only while it has been claimed fewer than `max_claims`
    times (configured: two queues' worth of receives); after that it is a poison build, and
    re-sending it forever would bypass the DLQ: it stays stuck, for the operator."""
    effect = SideEffect.BUILD_SNAPSHOT
    return [
        SideEffectMessage(effect, view.log_id, view.seq, side_effect_request_id(effect, view.log_id, view.seq))
        for view in report.stuck
        if view.pending.increment < max_claims
    ]


def format_duration(seconds: float) -> str:
    """Compact, for logs and the operator tool: 42s, 7m05s, 3h02m, 2d04h."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86_400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86_400}d{whole % 86_400 // 3600:02d}h"
