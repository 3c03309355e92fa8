"""Write faults for the taxi saga chosen by what a write is, not by when it comes.

The saga's phases write their rows on a pool of threads, so the n-th write of a run is whichever
thread got there n-th: a fault placed by number would hit a different row from run to run. Here a
write is named by its kind (`begin`: a phase's status row; `flag`: the flag step's update; `put`:
the trips item), the table's role (validation, transformation, store, trips), the row's
StoreRequestId and which time that same write is made (1 in a clean pass), e.g.
`begin:validation:c-1f..#1`. The name is taken from the call's own parameters on the thread that
makes it and carried in botocore's request context, so the before-call, needs-retry and
after-call hooks of that one call agree on it, whatever the other threads do meanwhile.

- `WriteTap` records every write's name, in the order the writes started, and each one's answer.
- `CrashAt` kills the 'process' just before or just after one named write (once). It may hold
  the other rows' same write back and wait until they land, so the crash happens while they commit.
- `LoseResponse` applies one named write, loses its response and lets botocore send it again,
  possibly once other rows' writes have started around it.
- `Throttle` fails named writes with a throttling error (before they land, or after), holding
  them until all are in flight at once.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from devtools.aws.faults import SimulatedCrash
from devtools.taxi_world import FLAG_HANDLER, TaxiWorld, embedded_saga_cloud
from runtime.taxi_etl import contract

ROLES = {
    contract.ENV_VALIDATION_STATUS_TABLE: "validation",
    contract.ENV_TRANSFORMATION_STATUS_TABLE: "transformation",
    contract.ENV_STORE_STATUS_TABLE: "store",
    contract.ENV_FINAL_TABLE: "trips",
}
_CONTEXT_KEY = "taxi_write"


@contextmanager
def pooled_saga(template: Any) -> Iterator[TaxiWorld]:
    """The dev saga on moto (as tests/conftest.py's `saga`), with moto's DynamoDB calls atomic across
    threads, as DynamoDB's are: the phases write their rows on a pool."""
    with embedded_saga_cloud() as waits:
        world = TaxiWorld.create(template)
        world.retry_waits = waits
        with world.serving_api():
            yield world


@dataclass(frozen=True, order=True)
class Write:
    kind: str  # begin | flag | put
    table: str  # validation | transformation | store | trips
    row: str  # StoreRequestId
    time: int = 1  # the how-manieth time this same write is made

    def __str__(self) -> str:
        return f"{self.kind}:{self.table}:{self.row}#{self.time}"


def table_roles(world: TaxiWorld) -> dict[str, str]:
    environment = world.environment(FLAG_HANDLER)
    return {environment[variable]: role for variable, role in ROLES.items()}


class WriteTap:
    """Names every DynamoDB write on the clients it is attached to; subclasses act on named writes."""

    def __init__(self) -> None:
        self.started: list[Write] = []  # in the order the calls started, across threads
        self.answers: list[tuple[Write, str]] = []  # each call's final answer ("ok" or the error code), in the order they came
        self._times: Counter[tuple[str, str, str]] = Counter()
        self._roles: dict[str, str] = {}
        self.lock = threading.RLock()

    def attach(self, world: TaxiWorld) -> WriteTap:
        self._roles = table_roles(world)
        events = world.dynamodb.meta.events
        events.register("before-parameter-build.dynamodb.*", self._name)
        events.register("before-call.dynamodb.*", self._before_call)
        events.register_first("needs-retry.dynamodb.*", self._needs_retry)
        events.register("after-call.dynamodb.*", self._after_call)
        return self

    # --- naming -----------------------------------------------------------------------------------

    def _name(self, params: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        if model.name == "UpdateItem":
            kind = "begin" if ":ok" in params.get("ExpressionAttributeValues", {}) else "flag"
            row = params["Key"][contract.KEY_STORE_REQUEST_ID]["S"]
        elif model.name == "PutItem":
            kind, row = "put", params["Item"][contract.KEY_STORE_REQUEST_ID]["S"]
        else:
            return
        table = self._roles.get(str(params.get("TableName")), str(params.get("TableName")))
        with self.lock:
            self._times[(kind, table, row)] += 1
            write = Write(kind, table, row, self._times[(kind, table, row)])
            self.started.append(write)
        context[_CONTEXT_KEY] = write
        self.named(write)

    def _before_call(self, context: Mapping[str, Any], **_: Any) -> None:
        write = context.get(_CONTEXT_KEY)
        if write is not None:
            self.before(write)

    def _needs_retry(self, response: Any, attempts: int, request_dict: Mapping[str, Any], **_: Any) -> int | None:
        write = request_dict.get("context", {}).get(_CONTEXT_KEY)
        if write is None or response is None:
            return None
        return self.answered(write, attempts, int(response[0].status_code))

    def _after_call(self, parsed: Mapping[str, Any], context: Mapping[str, Any], **_: Any) -> None:
        write = context.get(_CONTEXT_KEY)
        if write is None:
            return
        answer = str(parsed.get("Error", {}).get("Code", "")) or "ok"
        with self.lock:
            self.answers.append((write, answer))
        self.after(write, answer)

    # --- what a fault does (nothing here) -----------------------------------------------------------

    def named(self, write: Write) -> None:
        """The call was named (on its own thread, before it is sent)."""

    def before(self, write: Write) -> None:
        """Just before the write is sent."""

    def answered(self, write: Write, attempts: int, status: int) -> int | None:
        """An attempt was answered with HTTP `status`; a number asks botocore to retry after that many seconds."""
        return None

    def after(self, write: Write, answer: str) -> None:
        """The caller is about to get the answer (after botocore's retries)."""

    def count(self) -> Counter[Write]:
        with self.lock:
            return Counter(self.started)

    def applied_puts(self) -> Counter[str]:
        """Trips puts that wrote their item (answered "ok"), by row: a row stored once has 1."""
        with self.lock:
            return Counter(write.row for write, answer in self.answers if write.kind == "put" and answer == "ok")


class CrashAt(WriteTap):
    """The process dies just `when` ('before' or 'after') the write named `target`, the first time.

    With `after_others=n`, the crash happens while other rows' writes commit: the same write of
    the other rows (same kind and table) is held back until the target is reached ('before') or
    has landed ('after'); then the dying thread waits (up to 20 s) until n writes of other rows
    have landed, and dies.
    """

    def __init__(self, target: Write, when: str, *, after_others: int = 0) -> None:
        super().__init__()
        self.target, self.when, self.after_others = target, when, after_others
        self.crashed = False
        self.landed_meanwhile: list[Write] = []  # other rows' writes that landed while the dying thread waited
        self._changed = threading.Condition(self.lock)
        self._released = after_others == 0
        self._waiting = False

    def _held(self, write: Write) -> bool:
        target = self.target
        return write.kind == target.kind and write.table == target.table and write.row != target.row and write.time == 1

    def before(self, write: Write) -> None:
        if self.after_others and self._held(write):
            with self._changed:
                self._changed.wait_for(lambda: self._released, timeout=20)
        if self.when == "before":
            self._maybe_crash(write)

    def after(self, write: Write, answer: str) -> None:
        with self._changed:
            if self._waiting and write.row != self.target.row:
                self.landed_meanwhile.append(write)
                self._changed.notify_all()
        if self.when == "after":
            self._maybe_crash(write)

    def _maybe_crash(self, write: Write) -> None:
        with self._changed:
            if write != self.target or self.crashed:
                return
            self.crashed = True
            self._released = self._waiting = True
            self._changed.notify_all()
            self._changed.wait_for(lambda: len(self.landed_meanwhile) >= self.after_others, timeout=20)
            self._waiting = False
        raise SimulatedCrash(f"crash {self.when} {write}")


class LoseResponse(WriteTap):
    """The write named `target` is applied, its response lost, and botocore sends it again (once).

    With `with_others=n`, the lost answer is held (up to 20 s) until n writes of other rows have
    started since the target did, so the second sending races with them; `started_meanwhile` lists
    the other rows' writes that started between the target's start and its second sending."""

    def __init__(self, target: Write, *, with_others: int = 0) -> None:
        super().__init__()
        self.target, self.with_others = target, with_others
        self.retried = False
        self.second_answer: str | None = None
        self.started_meanwhile: list[Write] = []
        self._changed = threading.Condition(self.lock)
        self._target_started = False

    def named(self, write: Write) -> None:
        with self._changed:
            if write == self.target:
                self._target_started = True
            elif self._target_started and not self.retried and write.row != self.target.row:
                self.started_meanwhile.append(write)
                self._changed.notify_all()

    def answered(self, write: Write, attempts: int, status: int) -> int | None:
        with self._changed:
            if write != self.target or self.retried or attempts != 1 or not 200 <= status < 300:
                return None
            self._changed.wait_for(lambda: len(self.started_meanwhile) >= self.with_others, timeout=20)
            self.retried = True
        return 0  # retry at once

    def after(self, write: Write, answer: str) -> None:
        with self.lock:
            if write == self.target and self.retried and self.second_answer is None:
                self.second_answer = answer


class Throttle(WriteTap):
    """Each write in `rows` of `kind` on `table` fails with `code` the first `times` times it is made,
    `when` 'before' it lands (DynamoDB refused it) or 'after' (it landed, the caller is told it failed).
    The first attempt of every one of them waits for the others, so they are all in flight at once."""

    def __init__(self, kind: str, table: str, rows: set[str], *, code: str, when: str = "before", times: int = 1) -> None:
        super().__init__()
        self.kind, self.table, self.rows, self.code, self.when, self.times = kind, table, rows, code, when, times
        self.throttled: Counter[str] = Counter()
        self.together = threading.Barrier(len(rows), timeout=20)

    def _chosen(self, write: Write) -> bool:
        return write.kind == self.kind and write.table == self.table and write.row in self.rows and write.time <= self.times

    def before(self, write: Write) -> None:
        if self._chosen(write) and self.when == "before":
            self._throttle(write)

    def after(self, write: Write, answer: str) -> None:
        if self._chosen(write) and self.when == "after":
            self._throttle(write)

    def _throttle(self, write: Write) -> None:
        if write.time == 1:
            self.together.wait()  # every chosen row's first attempt is in flight now
        with self.lock:
            self.throttled[write.row] += 1
        error = {"Error": {"Code": self.code, "Message": f"injected {self.code}"}}
        raise ClientError(error, "PutItem" if write.kind == "put" else "UpdateItem")  # type: ignore[arg-type]
