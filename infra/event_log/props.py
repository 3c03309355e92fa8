"""The event log's props: its settings, its alarm thresholds and the construct's inputs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from aws_cdk import aws_s3 as s3

from onceflow.infra.common import (
    CommonProps,
    ConfigError,
    TableOptions,
    check_reserved_concurrency,
    require_positive,
    validate_pipeline_props,
)
from onceflow.runtime.event_log import contract

QUEUE_RETENTION_SECONDS = 14 * 24 * 3600  # SQS's longest, on every queue of the project
# The functions a reservation can name (EventLogConfig.reserved_concurrency).
EVENT_LOG_FUNCTIONS: Final = ("api", "router", "worker", "finalizer", "pending_check")


@dataclass(frozen=True)
class EventLogConfig:
    """The event log's settings: snapshots, payloads, the API, the stream router, the snapshot
    worker and its leases, the queues, and each function. Every field is checked at synth
    (`validate`) with a message naming it.

    reserved_concurrency: per function ("api", "router", "worker", "finalizer", "pending_check");
        a function left out runs in the account's unreserved pool. The worker's must cover its
        queue's concurrency (max(2, worker_max_concurrency)): SQS counts a throttled delivery as a
        receive, and receives lead to the DLQ. The finalizer's queue is read with at most its
        reservation at once, for the same reason.
    snap_start: Lambda SnapStart for the API function, the only one behind an HTTP route (off by
        default). On, the function gets SnapStart on published versions, CDK publishes a version
        whenever its code or configuration changes, and the API integration invokes the alias
        `live` on it (EventLog.api_alias); the after-restore hooks (runtime/shared/snapstart.py)
        reseed the random sources and drop the cached clients. Python's SnapStart bills each
        version's cached snapshot while it exists and every restore: see the SnapStart
        section of docs/tracing.md before turning it on. Not combinable with provisioned concurrency.
    """

    snapshot_every: int = 1000  # events between two Snapshot entries
    chunk_bytes: int = 256 * 1024  # a snapshot chunk is flushed at this size (bounds the worker's memory)
    max_value_bytes: int = 4096  # larger cell values go through the large-payload flow
    max_body_bytes: int = 16_384
    payload_max_bytes: int = 100 * 1024 * 1024
    pending_tag: str = "onceflow-pending=true"
    pending_expiry_days: int = 2  # uploads never completed are deleted by the lifecycle rule
    noncurrent_expiry_days: int = 30  # overwritten object versions (a rebuilt chunk) are kept this long
    url_expiry_seconds: int = 900
    read_page_limit: int = 1000  # entries per page of a read, at most (a page is also cut to fit Lambda's 6 MB answer)
    api_rate_limit: int = 100  # requests per second, steady state
    api_burst_limit: int = 200
    api_timeout_seconds: int = 10
    api_memory_mb: int = 256
    router_batch_size: int = 100
    router_retry_attempts: int = 5
    router_max_record_age_seconds: int = 6 * 3600
    router_timeout_seconds: int = 30
    worker_timeout_seconds: int = 300
    worker_memory_mb: int = 512
    worker_max_concurrency: int = 10
    lease_seconds: int = 600  # longer than the worker's timeout: an expired lease's holder is dead
    handoff_margin_seconds: int = 30
    backoff_base_seconds: int = 2
    backoff_cap_seconds: int = contract.SQS_MAX_VISIBILITY_SECONDS
    snapshot_max_receives: int = 24  # deferrals and hand-offs count too; then the DLQ
    finalizer_max_receives: int = 5
    finalizer_timeout_seconds: int = 30
    router_batching_window_seconds: int = 0
    router_parallelization_factor: int = 1
    pending_check_minutes: int = 5  # how often the scheduled check looks at the pending table
    reserved_concurrency: Mapping[str, int] = field(default_factory=dict)
    # The scheduled check re-sends the build message of every stuck row (same deterministic
    # request id; the worker drops repeats). Off only for an operator who recovers by hand.
    resend_stuck_snapshots: bool = True
    snap_start: bool = False

    @property
    def snapshot_visibility_seconds(self) -> int:
        """AWS's advice for SQS event sources: at least six times the function timeout."""
        return 6 * self.worker_timeout_seconds

    @property
    def finalizer_visibility_seconds(self) -> int:
        return 6 * self.finalizer_timeout_seconds

    @property
    def stuck_after_seconds(self) -> int:
        """A pending row untouched this long, with no live lease, is stuck: a dead worker's message
        comes back after the visibility timeout, and a successor may take over once the lease ends."""
        return self.snapshot_visibility_seconds + self.lease_seconds

    @property
    def max_claims_to_resend(self) -> int:
        """The pending check re-sends a stuck row's build message only while it has been claimed
        fewer times than this: two queues' worth of receives. A build that keeps dying beyond that
        is a poison build; re-sending it forever would bypass the DLQ."""
        return 2 * self.snapshot_max_receives

    @property
    def longest_deferral_seconds(self) -> int:
        """The most a snapshot message can spend deferred before its last receive (every backoff at its ceiling)."""
        return sum(min(self.backoff_cap_seconds, self.backoff_base_seconds * 2**attempt) for attempt in range(self.snapshot_max_receives))

    def validate(self) -> None:
        if not 10 <= self.snapshot_every <= 10_000_000:
            raise ConfigError("event_log.snapshot_every must be 10..10000000")
        if not 1024 <= self.chunk_bytes <= 64 * 1024 * 1024:
            raise ConfigError("event_log.chunk_bytes must be 1 KiB..64 MiB")
        if not 1 <= self.max_value_bytes < self.max_body_bytes <= 1024 * 1024:
            raise ConfigError("event_log.max_value_bytes must be below max_body_bytes, which is at most 1 MiB")
        if self.max_value_bytes > 300 * 1024:
            raise ConfigError("event_log.max_value_bytes must keep an entry well under DynamoDB's 400 KB item limit")
        name, separator, value = self.pending_tag.partition("=")
        if not (separator and name and value) or "&" in self.pending_tag:
            raise ConfigError("event_log.pending_tag must be one tag as name=value")
        if self.pending_expiry_days < 1 or self.noncurrent_expiry_days < 1:
            raise ConfigError("event_log expiry days must be at least 1")
        if not 60 <= self.url_expiry_seconds <= 7 * 24 * 3600:
            raise ConfigError("event_log.url_expiry_seconds must be 60..604800 (presigned URL limits)")
        if not 3 <= self.worker_timeout_seconds <= 900:
            raise ConfigError("event_log.worker_timeout_seconds must be 3..900")
        if self.lease_seconds <= self.worker_timeout_seconds:
            raise ConfigError("event_log.lease_seconds must exceed worker_timeout_seconds, so only a dead worker's lease expires")
        if self.lease_seconds >= self.snapshot_visibility_seconds:
            raise ConfigError("event_log.lease_seconds must be shorter than the queue's visibility timeout (6 x worker timeout)")
        if not 1 <= self.handoff_margin_seconds < self.worker_timeout_seconds:
            raise ConfigError("event_log.handoff_margin_seconds must be shorter than the worker timeout")
        if not 1 <= self.backoff_base_seconds <= self.backoff_cap_seconds <= contract.SQS_MAX_VISIBILITY_SECONDS:
            raise ConfigError("event_log backoff must be 1 s..12 h (SQS's longest visibility timeout)")
        if not 1 <= self.snapshot_max_receives <= 1000 or not 1 <= self.finalizer_max_receives <= 1000:
            raise ConfigError("event_log max receives must be 1..1000 (bounded, then the DLQ)")
        if self.longest_deferral_seconds > QUEUE_RETENTION_SECONDS // 2:
            # A message keeps its first enqueue time in the DLQ: leave it at least a week there.
            raise ConfigError("event_log.snapshot_max_receives and backoff allow deferrals longer than 7 days (half the queue retention)")
        if not 1 <= self.router_batch_size <= 10_000 or not 0 <= self.router_retry_attempts <= 10_000:
            raise ConfigError("event_log router batch size must be 1..10000 and its retries 0..10000")
        if not 60 <= self.router_max_record_age_seconds <= 24 * 3600:
            raise ConfigError("event_log.router_max_record_age_seconds must be 60..86400 (a DynamoDB stream keeps 24 h)")
        if not 1 <= self.api_rate_limit <= self.api_burst_limit:
            raise ConfigError("event_log api rate limit must be positive and at most the burst limit")
        if not 1 <= self.worker_max_concurrency <= 1000:
            raise ConfigError("event_log.worker_max_concurrency must be 1..1000")
        for timeout in (self.api_timeout_seconds, self.router_timeout_seconds, self.finalizer_timeout_seconds):
            if not 3 <= timeout <= 900:
                raise ConfigError("event_log function timeouts must be 3..900 s")
        if not 128 <= self.api_memory_mb <= 10_240 or not 128 <= self.worker_memory_mb <= 10_240:
            raise ConfigError("event_log memory must be 128..10240 MB")
        if not 0 <= self.router_batching_window_seconds <= 300:
            raise ConfigError("event_log.router_batching_window_seconds must be 0..300")
        if not 1 <= self.router_parallelization_factor <= 10:
            raise ConfigError("event_log.router_parallelization_factor must be 1..10")
        if not 1 <= self.pending_check_minutes <= 60:
            raise ConfigError("event_log.pending_check_minutes must be 1..60")
        if not isinstance(self.snap_start, bool):
            raise ConfigError("event_log.snap_start must be True or False")
        unknown = sorted(set(self.reserved_concurrency) - set(EVENT_LOG_FUNCTIONS))
        if unknown:
            raise ConfigError(f"event_log.reserved_concurrency names no function {unknown}; they are {', '.join(EVENT_LOG_FUNCTIONS)}")
        for function, reserved in self.reserved_concurrency.items():
            at_least, why = 1, ""
            if function == "worker":
                at_least, why = self.worker_queue_concurrency, "its queue runs max(2, worker_max_concurrency) at once"
            elif function == "finalizer":
                at_least, why = 2, "an SQS event source runs at least 2 at once"
            check_reserved_concurrency(f"event_log.reserved_concurrency[{function!r}]", reserved, at_least=at_least, why=why)

    @property
    def worker_queue_concurrency(self) -> int:
        """The snapshot queue's event source runs at most this many workers (SQS's floor is 2)."""
        return max(2, self.worker_max_concurrency)


@dataclass(frozen=True)
class EventLogAlarms:
    """When the event log pages someone. Counts are per 5-minute period."""

    router_iterator_age_ms: int = 5 * 60 * 1000  # a DynamoDB stream keeps 24 h
    stream_failure_messages: int = 1  # stream records the router gave up on
    snapshot_queue_oldest_seconds: int = 3600  # deferred builds grow this; an hour means a build is stuck
    dead_letter_messages: int = 1  # a snapshot or payload message that exhausted its receives
    oldest_pending_snapshot_seconds: int = 2 * 3600
    stuck_snapshots_resent: int = 1  # any automatic recovery: a build message was lost or dead-lettered
    snapshot_build_seconds: int = 1800  # one build across its hand-offs
    errors_per_5min: int = 5  # failed invocations of the router, worker or finalizer

    def validate(self) -> None:
        if not 60_000 <= self.router_iterator_age_ms < 24 * 3600 * 1000:
            raise ConfigError("monitoring.event_log.router_iterator_age_ms must be 1 min..24 h (the stream's retention)")
        require_positive("monitoring.event_log", self)

    def validate_against(self, settings: EventLogConfig) -> None:
        """Thresholds that only make sense against the event log they watch."""
        self.validate()
        if self.oldest_pending_snapshot_seconds < settings.pending_check_minutes * 60:
            raise ConfigError("monitoring.event_log.oldest_pending_snapshot_seconds must be at least one check interval")
        if self.router_iterator_age_ms >= settings.router_max_record_age_seconds * 1000:
            raise ConfigError("monitoring.event_log.router_iterator_age_ms must fire before records reach router_max_record_age_seconds")
        if self.oldest_pending_snapshot_seconds <= settings.stuck_after_seconds:
            raise ConfigError("monitoring.event_log.oldest_pending_snapshot_seconds must exceed event_log.stuck_after_seconds")


@dataclass(frozen=True)
class EventLogProps:
    """Inputs of EventLog; every one has a production-safe default.

    settings: snapshot cadence, chunk size, leases, queues, limits, each function, and SnapStart
        for the API function (settings.snap_start, off by default).
    common: removal policy (data retained by default), log retention and level, Powertools layer.
    tables: billing mode (on-demand by default) and the tables' own removal policy.
    bucket: an existing bucket for large payloads (under payloads/) and snapshot chunks (under
        snapshots/). It must have a lifecycle rule that expires objects tagged with
        settings.pending_tag, or abandoned uploads stay forever. By default the construct
        creates one with that rule, encryption, versioning, TLS only and an access-log bucket.
    acknowledge_findings: True (the default) adds this construct's cdk-nag acknowledgements, each
        for one of its resources with the reason it holds there, so a stack that adds the
        AwsSolutions and Serverless packs needs no call of its own. False leaves them to the
        caller, who may add this construct's set with acknowledge_event_log(construct) or write its own.
    """

    settings: EventLogConfig = field(default_factory=EventLogConfig)
    common: CommonProps = field(default_factory=CommonProps)
    tables: TableOptions = field(default_factory=TableOptions)
    bucket: s3.IBucket | None = None
    acknowledge_findings: bool = True

    def validate(self) -> None:
        validate_pipeline_props("EventLogProps", self.settings, EventLogConfig, self.common, self.tables)
