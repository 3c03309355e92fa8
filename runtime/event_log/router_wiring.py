"""The event-log stream router's settings and dependencies (one module per function: see api_wiring)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.event_log.contract import (
    ENV_PAYLOAD_QUEUE_URL,
    ENV_SNAPSHOT_QUEUE_URL,
)
from runtime.event_log.objects import SqsQueue
from runtime.event_log.side_effects import RouterQueues, StreamRouter
from runtime.shared.aws import Clients
from runtime.shared.settings import require_str


@dataclass(frozen=True, slots=True)
class RouterSettings:
    queues: RouterQueues

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RouterSettings:
        return cls(RouterQueues(snapshots=require_str(env, ENV_SNAPSHOT_QUEUE_URL), payloads=require_str(env, ENV_PAYLOAD_QUEUE_URL)))


@dataclass(frozen=True, slots=True)
class RouterDeps:
    router: StreamRouter


def build(settings: RouterSettings, clients: Clients) -> RouterDeps:
    return RouterDeps(StreamRouter(SqsQueue(client=clients.sqs), settings.queues))
