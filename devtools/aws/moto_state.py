"""The embedded cloud's DynamoDB, SQS and S3 state at one moment, to start many runs from it.

A fault sweep runs one scenario once per write boundary, each from the same starting point (tables
filled, messages queued). Building that point through the API costs most of a run; deep-copying
moto's backends costs a few milliseconds. `MotoState.capture()` copies them; `restore()` puts a
fresh copy of that state back into the same backend objects (so every client and every reference
to a backend still sees it). Stream records, shard sequence numbers, queue messages with their
ids, receipt handles, receive counts and visibility times come back exactly as captured.

moto's SQS queues hold a Condition, which cannot be copied: every copy gets a new one. Any other
lock in these backends makes `capture` fail loudly (copy.deepcopy cannot copy a lock).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from devtools.aws.moto_fit import InstanceAttribute, Reach, reaches_into_moto


@reaches_into_moto(
    Reach("moto.dynamodb.models", "dynamodb_backends"),
    Reach("moto.sqs.models", "sqs_backends"),
    Reach("moto.s3.models", "s3_backends"),
    Reach("moto.core.base_backend", "BaseBackend.reset", ("self",)),
)
def _backends() -> Iterator[tuple[tuple[str, str, str], Any]]:
    """Every backend of the three services that moto has created, by (service, account, region)."""
    from moto.dynamodb.models import dynamodb_backends
    from moto.s3.models import s3_backends
    from moto.sqs.models import sqs_backends

    services: tuple[tuple[str, Any], ...] = (("dynamodb", dynamodb_backends), ("sqs", sqs_backends), ("s3", s3_backends))
    for service, backend_dict in services:
        for account, regions in list(backend_dict.items()):
            for region, backend in list(regions.items()):
                yield (service, account, region), backend


@reaches_into_moto(
    InstanceAttribute("moto.sqs.models", "SQSBackend", attribute="queues"),
    InstanceAttribute("moto.sqs.models", "Queue", attribute="_messages_lock"),
)
def _copied(state: dict[str, Any], backend: Any) -> dict[str, Any]:
    """A deep copy of a backend's attributes; references back to `backend` stay on it, and each
    SQS queue gets a new Condition of its own."""
    memo: dict[int, Any] = {id(backend): backend}
    for queue in state.get("queues", {}).values():
        memo[id(queue._messages_lock)] = threading.Condition()
    return copy.deepcopy(state, memo)


@dataclass(frozen=True)
class MotoState:
    """DynamoDB, SQS and S3 as they were when captured (inside one `embedded_aws`)."""

    _saved: dict[tuple[str, str, str], tuple[Any, dict[str, Any]]]

    @classmethod
    def capture(cls) -> MotoState:
        from devtools.aws.moto_patches import MOTO_DYNAMODB_LOCK

        with MOTO_DYNAMODB_LOCK:
            return cls({key: (backend, _copied(vars(backend), backend)) for key, backend in _backends()})

    def restore(self) -> None:
        """Every backend back to the captured state (a fresh copy of it: runs never share state);
        a backend created since the capture is reset to empty."""
        from devtools.aws.moto_patches import MOTO_DYNAMODB_LOCK

        with MOTO_DYNAMODB_LOCK:
            for key, backend in _backends():
                saved = self._saved.get(key)
                if saved is None or saved[0] is not backend:
                    backend.reset()
                    continue
                state = _copied(saved[1], backend)
                backend.__dict__.clear()
                backend.__dict__.update(state)
