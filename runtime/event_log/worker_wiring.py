"""The snapshot worker's settings and dependencies (one module per function: see api_wiring)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from runtime.event_log.contract import (
    ENV_BACKOFF_BASE_SECONDS,
    ENV_BACKOFF_CAP_SECONDS,
    ENV_BUCKET,
    ENV_CHUNK_BYTES,
    ENV_HANDOFF_MARGIN_MS,
    ENV_LEASE_SECONDS,
    ENV_LOG_TABLE,
    ENV_PENDING_TABLE,
    ENV_SNAPSHOT_QUEUE_URL,
    SQS_MAX_VISIBILITY_SECONDS,
)
from runtime.event_log.objects import S3Objects, SqsQueue
from runtime.event_log.snapshots import SnapshotWorker, WorkerOptions
from runtime.event_log.store import DynamoLogStore, DynamoPendingStore
from runtime.shared.aws import Clients
from runtime.shared.settings import SettingsError, int_setting, require_str


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    log_table: str
    pending_table: str
    bucket: str
    options: WorkerOptions

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WorkerSettings:
        defaults = WorkerOptions(queue_url="")
        options = WorkerOptions(
            queue_url=require_str(env, ENV_SNAPSHOT_QUEUE_URL),
            chunk_bytes=int_setting(env, ENV_CHUNK_BYTES, defaults.chunk_bytes, minimum=256),
            lease_seconds=int_setting(env, ENV_LEASE_SECONDS, int(defaults.lease_seconds)),
            handoff_margin_ms=int_setting(env, ENV_HANDOFF_MARGIN_MS, defaults.handoff_margin_ms),
            backoff_base_seconds=int_setting(env, ENV_BACKOFF_BASE_SECONDS, int(defaults.backoff_base_seconds)),
            backoff_cap_seconds=int_setting(env, ENV_BACKOFF_CAP_SECONDS, int(defaults.backoff_cap_seconds)),
        )
        if options.backoff_cap_seconds > SQS_MAX_VISIBILITY_SECONDS:
            raise SettingsError(
                f"{ENV_BACKOFF_CAP_SECONDS} must be at most {SQS_MAX_VISIBILITY_SECONDS} (the longest SQS visibility timeout)"
            )
        return cls(
            log_table=require_str(env, ENV_LOG_TABLE),
            pending_table=require_str(env, ENV_PENDING_TABLE),
            bucket=require_str(env, ENV_BUCKET),
            options=options,
        )


@dataclass(frozen=True, slots=True)
class WorkerDeps:
    settings: WorkerSettings
    log_store: DynamoLogStore
    pending_store: DynamoPendingStore
    objects: S3Objects
    queue: SqsQueue
    # A caller's own worker (the devtools world's: virtual clock, seeded jitter, injected faults).
    new_worker: Callable[[], SnapshotWorker] | None = None

    def worker(self) -> SnapshotWorker:
        """A fresh worker per invocation: it counts its own progress; the clients are shared."""
        if self.new_worker is not None:
            return self.new_worker()
        return SnapshotWorker(self.log_store, self.pending_store, self.objects, self.queue, self.settings.options)


def build(settings: WorkerSettings, clients: Clients) -> WorkerDeps:
    return WorkerDeps(
        settings,
        DynamoLogStore(settings.log_table, client=clients.dynamodb),
        DynamoPendingStore(settings.pending_table, client=clients.dynamodb),
        S3Objects(settings.bucket, client=clients.s3),
        SqsQueue(client=clients.sqs),
    )
