"""The payload finalizer's settings and dependencies (one module per function: see api_wiring)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.event_log.contract import (
    ENV_BUCKET,
    ENV_PAYLOAD_QUEUE_URL,
)
from runtime.event_log.objects import S3Objects, SqsQueue
from runtime.shared.aws import Clients
from runtime.shared.settings import require_str


@dataclass(frozen=True, slots=True)
class FinalizerSettings:
    bucket: str
    queue_url: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> FinalizerSettings:
        return cls(bucket=require_str(env, ENV_BUCKET), queue_url=require_str(env, ENV_PAYLOAD_QUEUE_URL))


@dataclass(frozen=True, slots=True)
class FinalizerDeps:
    settings: FinalizerSettings
    objects: S3Objects
    queue: SqsQueue


def build(settings: FinalizerSettings, clients: Clients) -> FinalizerDeps:
    return FinalizerDeps(settings, S3Objects(settings.bucket, client=clients.s3), SqsQueue(client=clients.sqs))
