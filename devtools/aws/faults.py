"""Fault injection for the embedded cloud.

- `WriteBoundaryCrasher`: the 'process' dies before or after a chosen write. A crash is a
  BaseException, so no `except Exception` in the code under test can swallow it, just as
  nothing survives a Lambda runtime that dies.
- `LostResponse`: a write is applied, its response is lost, and botocore's own retry sends it
  again (what a timeout, a connection reset or a 5xx after the write landed looks like to the SDK).
- `ThrottledWrites`: a write fails with a throttling error, before or after it landed.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

DYNAMODB_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"})
# Writes of the other services a handler may call: objects in S3, messages in SQS.
S3_WRITES = frozenset({"PutObject", "DeleteObject", "DeleteObjects", "PutObjectTagging", "DeleteObjectTagging"})
WRITE_OPERATIONS = (
    DYNAMODB_WRITES
    | S3_WRITES
    | {
        "SendMessage",
        "SendMessageBatch",
        "ChangeMessageVisibility",
        "DeleteMessage",
        "StartExecution",  # the taxi API's one write: it starts (or names) the transaction
    }
)


class SimulatedCrash(BaseException):
    """The process died here."""


@dataclass
class WriteBoundaryCrasher:
    """Counts writes on the clients it is attached to (DynamoDB, S3, SQS); crashes before or
    after write number `at` (1-based).

    `at=None` only counts. Boundaries of a run with W writes: ("before", 1..W), ("after", 1..W).
    Safe on a handler's pool of threads: each write takes its number when it starts, and its
    "after" boundary is that write's, whatever other threads started meanwhile.
    """

    at: int | None = None
    when: str = "before"
    writes: int = 0
    crashed: bool = False
    operations: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def attach(self, *clients: Any) -> WriteBoundaryCrasher:
        for client in clients:
            service = _service(client)
            client.meta.events.register(f"before-call.{service}.*", self._before)
            client.meta.events.register(f"after-call.{service}.*", self._after)
        return self

    def detach(self, *clients: Any) -> None:
        for client in clients:
            service = _service(client)
            client.meta.events.unregister(f"before-call.{service}.*", self._before)
            client.meta.events.unregister(f"after-call.{service}.*", self._after)

    def _before(self, model: Any, params: dict[str, Any], context: dict[str, Any] | None = None, **_: Any) -> None:
        if model.name not in WRITE_OPERATIONS:
            return
        with self._lock:
            self.writes += 1
            number = self.writes
            self.operations.append(f"{model.name}:{_target(model.name, params)}")
            crash = self.at == number and self.when == "before" and not self.crashed
            self.crashed = self.crashed or crash
        if context is not None:
            context["onceflow_write_number"] = number
        if crash:
            raise SimulatedCrash(f"crash before write {number} ({model.name})")

    def _after(self, model: Any, context: dict[str, Any] | None = None, **_: Any) -> None:
        if model.name not in WRITE_OPERATIONS:
            return
        number = (context or {}).get("onceflow_write_number", self.writes)
        with self._lock:
            crash = self.at == number and self.when == "after" and not self.crashed
            self.crashed = self.crashed or crash
        if crash:
            raise SimulatedCrash(f"crash after write {number} ({model.name})")


@dataclass
class LostResponse:
    """Write number `at` (1-based, counted like WriteBoundaryCrasher) is applied, its response is
    lost, and botocore retries it: the same serialized request goes out a second time through the
    client's own retry loop, and the caller gets only the second answer.

    The fault is a `needs-retry` handler that asks for one retry after the real call answered 2xx,
    so the retry is botocore's (same request, same idempotency token where the API has one).
    `at=None` only counts. `second_answer` is what the retry got: "ok" or the error code, e.g.
    ConditionalCheckFailedException when the write's condition meets its own first success.
    """

    at: int | None = None
    writes: int = 0
    retried: bool = False
    second_answer: str | None = None
    operations: list[str] = field(default_factory=list)

    def attach(self, *clients: Any) -> LostResponse:
        for client in clients:
            service = _service(client)
            client.meta.events.register(f"before-call.{service}.*", self._count)
            # First, so that botocore's own retry handler (which answers None for a 2xx) does not decide.
            client.meta.events.register_first(f"needs-retry.{service}.*", self._lose_response)
            client.meta.events.register(f"after-call.{service}.*", self._answered)
        return self

    def detach(self, *clients: Any) -> None:
        for client in clients:
            service = _service(client)
            client.meta.events.unregister(f"before-call.{service}.*", self._count)
            client.meta.events.unregister(f"needs-retry.{service}.*", self._lose_response)
            client.meta.events.unregister(f"after-call.{service}.*", self._answered)

    @property
    def chosen(self) -> str:
        """The operation that lost its response, as 'Operation:target'."""
        return self.operations[self.at - 1] if self.at and len(self.operations) >= self.at else ""

    def _count(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        if model.name in WRITE_OPERATIONS:
            self.writes += 1
            self.operations.append(f"{model.name}:{_target(model.name, params)}")

    def _lose_response(self, response: Any, operation: Any, attempts: int, **_: Any) -> int | None:
        if operation.name not in WRITE_OPERATIONS or self.retried or self.at != self.writes or attempts != 1 or response is None:
            return None
        http_response = response[0]
        if not 200 <= http_response.status_code < 300:
            return None  # the write was refused: there is no success to lose
        self.retried = True
        return 0  # retry at once

    def _answered(self, model: Any, parsed: dict[str, Any], **_: Any) -> None:
        if self.retried and self.second_answer is None and model.name in WRITE_OPERATIONS and self.at == self.writes:
            self.second_answer = str(parsed.get("Error", {}).get("Code", "")) or "ok"


def _service(client: Any) -> str:
    return str(client.meta.service_model.service_id.hyphenize())


def _target(operation: str, request: dict[str, Any]) -> str:
    """What a serialized request writes to: tables, a bucket path or a queue."""
    if operation in S3_WRITES:
        return str(request.get("url_path", ""))  # /bucket/key
    try:
        params = json.loads(request["body"])  # DynamoDB and SQS speak JSON
    except (ValueError, TypeError, KeyError):
        return ""
    if not isinstance(params, dict):
        return ""
    if "QueueUrl" in params:
        return str(params["QueueUrl"]).rsplit("/", 1)[-1]
    if operation == "TransactWriteItems":
        tables = [next(iter(item.values()))["TableName"] for item in params.get("TransactItems", [])]
        return "+".join(tables)
    if operation == "BatchWriteItem":
        return "+".join(params.get("RequestItems", {}))
    return str(params.get("TableName", ""))


@dataclass
class ThrottledWrites:
    """Fails chosen DynamoDB writes (1-based numbers) with a throttling ClientError, which the
    handler survives and reports as batch item failures.

    when="before": the write never happens. when="after": the write landed but its caller is
    told it failed (a lost response), so a retry meets its own earlier write.
    """

    failing: frozenset[int]
    when: str = "before"
    writes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def attach(self, client: Any) -> ThrottledWrites:
        client.meta.events.register("before-call.dynamodb.*", self._before)
        client.meta.events.register("after-call.dynamodb.*", self._after)
        return self

    def _before(self, model: Any, context: dict[str, Any] | None = None, **_: Any) -> None:
        if model.name not in WRITE_OPERATIONS:
            return
        with self._lock:  # numbered as they start, also on a pool of threads
            self.writes += 1
            number = self.writes
        if context is not None:
            context["onceflow_write_number"] = number
        if self.when == "before" and number in self.failing:
            _throttle(model.name)

    def _after(self, model: Any, context: dict[str, Any] | None = None, **_: Any) -> None:
        number = (context or {}).get("onceflow_write_number", self.writes)
        if model.name in WRITE_OPERATIONS and self.when == "after" and number in self.failing:
            _throttle(model.name)


def _throttle(operation: str) -> None:
    from botocore.exceptions import ClientError

    error = {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "injected throttle"}}
    raise ClientError(error, operation)  # type: ignore[arg-type]
