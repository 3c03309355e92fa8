"""How the event log's functions are built: each from its settings and the SDK clients, in one place.

Each Lambda handler builds its own once per cold start (`Clients()` builds real clients lazily);
the devtools world, the demo and the tests build them with their own clients (moto, or clients
with faults injected) and drive the same entry points, each module's `handle`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import overload

from runtime.event_log.objects import S3Objects, SqsQueue
from runtime.event_log.service import EventLogService
from runtime.event_log.settings import ApiSettings, FinalizerSettings, PendingCheckSettings, RouterSettings, WorkerSettings
from runtime.event_log.side_effects import StreamRouter
from runtime.event_log.snapshots import SnapshotWorker
from runtime.event_log.store import DynamoLogStore, DynamoPendingStore
from runtime.shared.aws import Clients


@dataclass(frozen=True, slots=True)
class ApiDeps:
    settings: ApiSettings
    service: EventLogService
    objects: S3Objects


@dataclass(frozen=True, slots=True)
class RouterDeps:
    router: StreamRouter


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


@dataclass(frozen=True, slots=True)
class FinalizerDeps:
    settings: FinalizerSettings
    objects: S3Objects
    queue: SqsQueue


@dataclass(frozen=True, slots=True)
class PendingCheckDeps:
    settings: PendingCheckSettings
    store: DynamoPendingStore
    queue: SqsQueue | None  # None when stuck rows are left to the operator
    clock: Callable[[], float] = time.time


@overload
def build(settings: ApiSettings, clients: Clients) -> ApiDeps: ...
@overload
def build(settings: RouterSettings, clients: Clients) -> RouterDeps: ...
@overload
def build(settings: WorkerSettings, clients: Clients) -> WorkerDeps: ...
@overload
def build(settings: FinalizerSettings, clients: Clients) -> FinalizerDeps: ...
@overload
def build(settings: PendingCheckSettings, clients: Clients) -> PendingCheckDeps: ...
def build(
    settings: ApiSettings | RouterSettings | WorkerSettings | FinalizerSettings | PendingCheckSettings, clients: Clients
) -> ApiDeps | RouterDeps | WorkerDeps | FinalizerDeps | PendingCheckDeps:
    """The dependencies of the function whose settings these are."""
    if isinstance(settings, ApiSettings):
        objects = S3Objects(settings.bucket, client=clients.s3)
        return ApiDeps(
            settings, EventLogService(DynamoLogStore(settings.log_table, client=clients.dynamodb), objects, settings.options), objects
        )
    if isinstance(settings, RouterSettings):
        return RouterDeps(StreamRouter(SqsQueue(client=clients.sqs), settings.queues))
    if isinstance(settings, WorkerSettings):
        return WorkerDeps(
            settings,
            DynamoLogStore(settings.log_table, client=clients.dynamodb),
            DynamoPendingStore(settings.pending_table, client=clients.dynamodb),
            S3Objects(settings.bucket, client=clients.s3),
            SqsQueue(client=clients.sqs),
        )
    if isinstance(settings, FinalizerSettings):
        return FinalizerDeps(settings, S3Objects(settings.bucket, client=clients.s3), SqsQueue(client=clients.sqs))
    queue = SqsQueue(client=clients.sqs) if settings.resend_queue_url else None
    return PendingCheckDeps(settings, DynamoPendingStore(settings.pending_table, client=clients.dynamodb), queue)
