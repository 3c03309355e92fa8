"""A stand-in for the Lambda context object, for running handlers in-process."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


@dataclass
class FakeLambdaContext:
    function_name: str = "onceflow-local"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:onceflow-local"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    remaining_ms: int = 60_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@dataclass
class ClockedLambdaContext(FakeLambdaContext):
    """Its remaining time runs down with `clock` (a VirtualClock in tests) from `timeout_seconds`."""

    clock: Callable[[], float] = time.time
    timeout_seconds: float = 60.0
    started: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.timeout_seconds - (self.clock() - self.started)) * 1000))


def as_lambda_context(context: FakeLambdaContext) -> LambdaContext:
    """The stand-in, typed as what the handlers take: it has every attribute they read."""
    return cast("LambdaContext", context)
