"""A stand-in for the Lambda context object, for running handlers in-process."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field


@dataclass
class FakeLambdaContext:
    function_name: str = "onceflow-local"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:onceflow-local"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    remaining_ms: int = 60_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms
