"""Races inside one invocation: the handler processes users on a pool of threads.

One batch holds many users, so one invocation runs their writes at once. Faults hit chosen
users' writes while the other users' writes are in flight: a crash in one worker (the process
dies; Lambda redelivers the batch), throttling in several workers at the same moment, and lost
responses on several at once. Each case must end equal to a clean pass with users one at a time,
and to the independent recomputation.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest

from devtools import reference
from devtools.aws.clients import new_client
from devtools.aws.esm import EventSourceMapping, ListShard, PollStats
from devtools.aws.faults import WRITE_OPERATIONS, SimulatedCrash
from devtools.aws.moto_patches import embedded_aws
from devtools.runner_world import RunnerStatsWorld
from devtools.state import PipelineView
from devtools.workload import Workload, generate
from devtools.workload import shard_records as workload_records
from tests.conftest import templates_for

USERS = 12
POOL = "8"
# Every user's messages fit one batch, so one invocation processes all users at once.
BATCH_SIZE = 1000


@functools.cache
def workload() -> Workload:
    return generate(seed=23, users=USERS, runs_per_user=2, messages_per_run=15, resend_rate=0.3, late_rate=0.15, malformed=3)


def deliver(io_concurrency: str, hook: Callable[[Any], None] | None = None) -> tuple[PipelineView, PollStats]:
    """All records through a replayed event source mapping (bisect on error, as deployed); the view and the mapping's counts."""
    with embedded_aws():
        world = RunnerStatsWorld.create(
            templates_for("dev")["Onceflow-dev-RunnerStats"], settings_overrides={"IO_CONCURRENCY": io_concurrency}
        )
        client = new_client()
        if hook is not None:
            hook(client)
        esm = EventSourceMapping(lambda event: world.invoke(event, client), batch_size=BATCH_SIZE)
        esm.drain(ListShard(workload_records(list(workload().deliveries))))
        assert esm.stats.sent_to_on_failure == 0
        return world.view(), esm.stats


@functools.cache
def clean_view() -> PipelineView:
    view, _ = deliver("1")
    return view


def assert_matches_reference(view: PipelineView) -> None:
    totals = reference.clean_pass(workload().unique)
    assert set(view.runs) == set(totals)
    for key, expected in totals.items():
        assert view.runs[key].total_meters == Decimal(expected.total_meters)
        assert view.runs[key].message_count == expected.message_count


def user_of(request: dict[str, Any]) -> int | None:
    """The user a run-stats or tendency write belongs to (None for rejects and archive chunks), from
    the serialized request the before-call event carries."""
    try:
        item = json.loads(request["body"]).get("Item") or {}
    except (KeyError, TypeError, ValueError):
        return None
    return int(item["user_id"]["N"]) if "user_id" in item else None


@dataclass
class WriteLog:
    """Every write's user, in the order the writes started, from all worker threads."""

    order: list[int | None] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, user: int | None) -> int:
        with self.lock:
            self.order.append(user)
            return len(self.order)


def test_the_pool_gives_the_same_result_as_users_one_at_a_time() -> None:
    # Given the batch processed with 8 users at once, and with one at a time
    pooled, stats = deliver(POOL)
    # Then both end in the same state, which is the recomputation, in one invocation each
    assert pooled == clean_view()
    assert_matches_reference(pooled)
    assert stats.invocations == 1


class Gate:
    """Holds the first run or tendency write of the first `parties` users to get there, until all of
    them are in flight at once; then lets them go together. Returns each held user's place (1..parties)."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.held: list[int] = []
        self._barrier = threading.Barrier(parties, timeout=20)
        self._lock = threading.Lock()

    def hold(self, model: Any, params: dict[str, Any]) -> int | None:
        user = user_of(params)
        if model.name != "PutItem" or user is None:
            return None
        with self._lock:
            if user in self.held or len(self.held) == self.parties:
                return None
            self.held.append(user)
            place = len(self.held)
        self._barrier.wait()
        return place


@pytest.mark.parametrize("victim", [1, 2, 3])
def test_a_crash_in_one_worker_while_the_others_commit(victim: int) -> None:
    # Given three users' first writes in flight at once, and the process dying at one of them while
    # the other two go on (a crash may find the other threads anywhere; here they finish)
    log = WriteLog()
    gate = Gate(3)
    crashed = threading.Event()

    def hook(client: Any) -> None:
        def before(model: Any, params: dict[str, Any], **_: Any) -> None:
            if model.name not in WRITE_OPERATIONS:
                return
            log.note(user_of(params))
            if not crashed.is_set() and gate.hold(model, params) == victim:
                crashed.set()
                raise SimulatedCrash(f"crash at user {user_of(params)}'s write")

        client.meta.events.register("before-call.dynamodb.*", before)

    # When Lambda redelivers the whole batch
    view, stats = deliver(POOL, hook)
    # Then the crash happened while two other users wrote, failed one invocation (Lambda then
    # retries the batch's halves), and the result is one clean pass
    assert crashed.is_set()
    dead = gate.held[victim - 1]
    others = set(gate.held) - {dead}
    crash_at = log.order.index(dead)
    assert others <= set(log.order[crash_at - 2 :]), "the other two users wrote around the crash"
    assert stats.function_errors == 1
    assert view == clean_view()
    assert_matches_reference(view)


@pytest.mark.parametrize("when", ["before", "after"])
def test_throttling_in_several_workers_at_once(when: str) -> None:
    # Given four users whose first run writes are throttled at the same moment (before they land,
    # or after: a lost response that the handler hears as a failure)
    gate = Gate(4)

    def throttle(operation: str) -> None:
        from botocore.exceptions import ClientError

        raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "injected"}}, operation)  # type: ignore[arg-type]

    def hook(client: Any) -> None:
        def before(model: Any, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
            if gate.hold(model, params) is None:
                return
            if when == "before":
                throttle(model.name)
            context["onceflow_throttle_after"] = True

        def after(model: Any, context: dict[str, Any], **_: Any) -> None:
            if context.pop("onceflow_throttle_after", False):
                throttle(model.name)

        client.meta.events.register("before-call.dynamodb.*", before)
        client.meta.events.register("after-call.dynamodb.*", after)

    # When the failed keys are reported and Lambda re-reads from the lowest of them
    view, stats = deliver(POOL, hook)
    # Then four users were throttled together and reported (no function error), and nothing is lost or double counted
    assert len(gate.held) == 4
    assert (stats.function_errors, stats.partial_failures) == (0, 1)
    assert view == clean_view()
    assert_matches_reference(view)
