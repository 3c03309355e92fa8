"""The stuck-pending check's pure logic (runtime/event_log/pending_check.py): rows and a clock in, verdicts out."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from runtime.event_log.messages import SideEffect, side_effect_request_id
from runtime.event_log.models import BuildState, PendingSnapshot
from runtime.event_log.pending_check import (
    PendingStatus,
    StuckRules,
    check,
    classify,
    format_duration,
    recovery_messages,
)

NOW = 1_800_000_000.0
RULES = StuckRules(lease_seconds=600, stuck_after_seconds=3600)
MAX_CLAIMS_TO_RESEND = 48  # dev and prod: 2 x the snapshot queue's maxReceiveCount of 24


def row(
    *, created_ago: float, modified_ago: float, active: str | None, log_id: str = "sheet-1", seq: str = "20.5", increment: int = 1
) -> PendingSnapshot:
    return PendingSnapshot(
        log_id=log_id,
        seq=Decimal(seq),
        created=NOW - created_ago,
        modified=NOW - modified_ago,
        retries=0,
        increment=increment,
        active=active,
        state=BuildState(chunks=2),
    )


@pytest.mark.parametrize(
    ("modified_ago", "active", "status", "lease_expired"),
    [
        (0, "worker-a", PendingStatus.BUILDING, False),  # just claimed
        (600, "worker-a", PendingStatus.BUILDING, False),  # exactly at the lease: the claim's condition still refuses a takeover
        (601, "worker-a", PendingStatus.WAITING, True),  # holder dead; its message may still come back
        (3600, "worker-a", PendingStatus.WAITING, True),  # at the threshold, not over it
        (3601, "worker-a", PendingStatus.STUCK, True),  # holder dead and nobody took over
        (30, None, PendingStatus.WAITING, False),  # handed off or deferred a moment ago
        (3601, None, PendingStatus.STUCK, False),  # no claim, untouched for over an hour
    ],
    ids=["fresh-claim", "lease-edge", "dead-holder-recent", "threshold-edge", "dead-holder-stuck", "unclaimed-recent", "unclaimed-stuck"],
)
def test_each_row_is_building_waiting_or_stuck(modified_ago: float, active: str | None, status: PendingStatus, lease_expired: bool) -> None:
    # Given a row claimed (or not) and last modified some time ago, first claimed two hours ago
    pending = row(created_ago=7200, modified_ago=modified_ago, active=active)
    # When it is classified now
    view = classify(pending, NOW, RULES)
    # Then the verdict follows the lease and the threshold; age counts from Created, idle from Modified
    assert (view.status, view.lease_expired) == (status, lease_expired)
    assert (view.age_seconds, view.idle_seconds) == (7200, modified_ago)
    assert view.dead_holder == (active is not None and lease_expired)


def test_a_live_lease_is_never_stuck_even_when_the_build_is_old() -> None:
    # Given a build that started a day ago and keeps checkpointing
    pending = row(created_ago=86_400, modified_ago=5, active="worker-a")
    # When it is classified
    view = classify(pending, NOW, RULES)
    # Then it is building (old, but alive)
    assert view.status == PendingStatus.BUILDING and view.age_seconds == 86_400


def test_the_report_lists_oldest_first_and_counts_each_status() -> None:
    # Given three rows of two logs
    rows = [
        row(created_ago=100, modified_ago=5, active="a", log_id="sheet-2", seq="40.5"),
        row(created_ago=9000, modified_ago=8000, active="dead", log_id="sheet-1", seq="20.5"),
        row(created_ago=4000, modified_ago=10, active=None, log_id="sheet-1", seq="40.5"),
    ]
    # When they are checked
    report = check(rows, NOW, RULES)
    # Then the oldest comes first, its age is the oldest age, and the counts add up
    assert [(view.log_id, str(view.seq)) for view in report.views] == [("sheet-1", "20.5"), ("sheet-1", "40.5"), ("sheet-2", "40.5")]
    assert report.oldest_age_seconds == 9000 and report.oldest is report.views[0]
    assert [report.count(status) for status in PendingStatus] == [1, 1, 1]
    assert [view.seq for view in report.stuck] == [Decimal("20.5")]


def test_nothing_pending_gives_an_oldest_age_of_zero() -> None:
    # Given an empty pending table
    # When it is checked
    report = check([], NOW, RULES)
    # Then the oldest age is 0 (so the metric is published every time) and nothing is stuck
    assert report.oldest_age_seconds == 0 and report.stuck == () and report.oldest is None


def test_clock_skew_never_gives_a_negative_age() -> None:
    # Given a row written by a worker whose clock is a little ahead
    view = classify(row(created_ago=-2, modified_ago=-2, active="a"), NOW, RULES)
    # Then its age and idle time are 0, not negative
    assert (view.age_seconds, view.idle_seconds, view.status) == (0, 0, PendingStatus.BUILDING)


def test_every_stuck_row_is_resent_with_the_routers_request_id_while_under_the_claim_cap() -> None:
    # Given a stuck row with a dead holder, a stuck unclaimed row, a dead holder not stuck yet, a live build,
    # and a dead holder that has been claimed too often (a build that keeps dying)
    rows = [
        row(created_ago=9000, modified_ago=8000, active="dead", seq="20.5"),
        row(created_ago=9000, modified_ago=8000, active=None, seq="40.5"),
        row(created_ago=9000, modified_ago=700, active="dead", seq="60.5"),
        row(created_ago=9000, modified_ago=5, active="live", seq="80.5"),
        row(created_ago=9000, modified_ago=8000, active="dead", seq="100.5", increment=MAX_CLAIMS_TO_RESEND),
    ]
    # When the recovery messages are computed
    messages = recovery_messages(check(rows, NOW, RULES), MAX_CLAIMS_TO_RESEND)
    # Then the two stuck rows under the cap are re-sent, as the router's own messages (same deterministic request id)
    assert [(message.effect, message.log_id, message.seq) for message in messages] == [
        (SideEffect.BUILD_SNAPSHOT, "sheet-1", Decimal("20.5")),
        (SideEffect.BUILD_SNAPSHOT, "sheet-1", Decimal("40.5")),
    ]
    assert [message.request_id for message in messages] == [
        side_effect_request_id(SideEffect.BUILD_SNAPSHOT, "sheet-1", Decimal(seq)) for seq in ("20.5", "40.5")
    ]


@pytest.mark.parametrize(
    ("modified_ago", "due_in", "status"),
    [
        (7200, 7000, PendingStatus.WAITING),  # deferred two hours ago for ~4 h: its message is not due yet
        (7200, -3600, PendingStatus.WAITING),  # due an hour ago: late, but within the threshold
        (7200, -3601, PendingStatus.STUCK),  # overdue by more than the threshold: the message is gone
        (100, None, PendingStatus.WAITING),  # claimed since (Due removed), holder gone, recently
    ],
    ids=["not-due", "due-within-threshold", "overdue", "no-due"],
)
def test_a_deferred_row_counts_idle_time_from_when_its_message_is_due(
    modified_ago: float, due_in: float | None, status: PendingStatus
) -> None:
    # Given a row without a holder, deferred (or handed off) with its message due back at `due_in`
    pending = replace(row(created_ago=9000, modified_ago=modified_ago, active=None), due=None if due_in is None else NOW + due_in)
    # When it is classified
    view = classify(pending, NOW, RULES)
    # Then it is stuck only once the message is overdue by more than the threshold
    assert view.status == status
    assert view.idle_seconds == (modified_ago if due_in is None else max(0.0, -due_in))


@pytest.mark.parametrize(
    ("lease", "stuck_after", "message"),
    [(0, 3600, "lease_seconds must be positive"), (600, 599, "stuck_after_seconds must be at least lease_seconds")],
)
def test_rules_refuse_a_threshold_below_the_lease(lease: float, stuck_after: float, message: str) -> None:
    # Given a threshold shorter than the lease (a claim could not even be taken over yet), or no lease
    # When the rules are made
    # Then they are refused
    with pytest.raises(ValueError, match=message):
        StuckRules(lease_seconds=lease, stuck_after_seconds=stuck_after)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59.9, "59s"), (60, "1m00s"), (3599, "59m59s"), (3600, "1h00m"), (7384, "2h03m"), (86_400, "1d00h"), (190_800, "2d05h")],
)
def test_durations_are_compact(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
