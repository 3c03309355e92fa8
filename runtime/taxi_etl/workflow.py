"""Starting the saga: a port, and its Step Functions adapter (injected client, built lazily).

A Standard state machine refuses a second execution with the same name: while the first runs,
StartExecution with the same input answers with the same execution; once it has ended, with
ExecutionAlreadyExists. The adapter turns the latter into DUPLICATE when the input is the same,
and into RequestConflict when the name was reused for a different request.

A start that was applied but lost its response is sent again by botocore; if the execution ended
in between, that retry meets ExecutionAlreadyExists against the call's own start. An execution
that started after this call was made is this call's: STARTED, not DUPLICATE. The service's
startDate is compared with the call's own clock at the service's millisecond resolution; a clock
ahead of the service's by more than the call's latency only labels our own start a duplicate
(same execution, same answer otherwise).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from runtime.shared.aws import error_code
from runtime.shared.refusals import Unprocessable

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient


class RequestConflict(Unprocessable):
    """The id (from the Idempotency-Key) was already used for a different request (HTTP 422)."""


def utc_now() -> datetime:
    return datetime.now(UTC)


class StartOutcome(StrEnum):
    STARTED = "started"  # a new execution, or the same request while its execution still runs
    DUPLICATE = "duplicate"  # the same request, whose execution has ended


@dataclass(frozen=True, slots=True)
class Start:
    outcome: StartOutcome
    execution_arn: str


class StepFunctionsWorkflow:
    def __init__(self, state_machine_arn: str, *, deduplicates: bool, client: SFNClient, clock: Callable[[], datetime] = utc_now) -> None:
        self._arn = state_machine_arn
        self._deduplicates = deduplicates
        self._client = client
        self._clock = clock

    @property
    def deduplicates(self) -> bool:
        return self._deduplicates

    @property
    def client(self) -> SFNClient:
        return self._client

    def execution_arn(self, name: str) -> str:
        return f"{self._arn.replace(':stateMachine:', ':execution:', 1)}:{name}"

    def start(self, name: str, execution_input: str) -> Start:
        asked_at = self._clock()
        try:
            response = self.client.start_execution(stateMachineArn=self._arn, name=name, input=execution_input)
        except ClientError as err:
            if error_code(err) != "ExecutionAlreadyExists" or not self._deduplicates:
                raise
            arn = self.execution_arn(name)
            first = self.client.describe_execution(executionArn=arn)
            if json.loads(first.get("input") or "null") != json.loads(execution_input):
                raise RequestConflict(f"{name} was already used for a different request; use a new Idempotency-Key") from err
            if first["startDate"] >= asked_at.replace(microsecond=asked_at.microsecond // 1000 * 1000):
                return Start(StartOutcome.STARTED, arn)  # our own start, whose response was lost
            return Start(StartOutcome.DUPLICATE, arn)
        return Start(StartOutcome.STARTED, response["executionArn"])
