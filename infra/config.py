"""Typed per-environment configuration, read from CDK context and validated at synth time.

`cdk synth -c env=dev` (the default) or `-c env=prod`. Values live here, not in cdk.json, so
they are typed and reviewed; cdk.json only selects the environment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from aws_cdk import RemovalPolicy
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn

from runtime.event_log import contract as event_log_contract
from runtime.runner_stats import contract as runner_stats_contract


class ConfigError(ValueError):
    """The environment configuration is invalid; synth stops before building anything."""


@dataclass(frozen=True)
class RunnerStatsConfig:
    stream_mode: kinesis.StreamMode = kinesis.StreamMode.PROVISIONED
    shard_count: int = 1
    stream_retention_hours: int = 24
    batch_size: int = 100
    batching_window_seconds: int = 0
    parallelization_factor: int = 1
    retry_attempts: int = 10
    max_record_age_seconds: int = 6 * 3600
    gap_max_lag: int = 40
    gap_max_open: int = 64
    archive_chunk_size: int = 20
    commit_attempts: int = 4
    # Kinesis's record limit: fields beyond the five known ones (device metadata) are ignored.
    max_message_bytes: int = 1_048_576
    reject_payload_max_bytes: int = 4096
    # timestamp_utc must lie within [arrival - max age, arrival + max ahead] of the record's
    # approximateArrivalTimestamp: a device buffers up to a day offline; clocks drift minutes.
    timestamp_max_age_seconds: int = 24 * 3600
    timestamp_max_ahead_seconds: int = 5 * 60
    memory_mb: int = 256
    timeout_seconds: int = 60

    def validate(self) -> None:
        if self.stream_mode == kinesis.StreamMode.PROVISIONED and not 1 <= self.shard_count <= 500:
            raise ConfigError("runner_stats.shard_count must be 1..500 for a provisioned stream")
        if not 24 <= self.stream_retention_hours <= 8760:
            raise ConfigError("runner_stats.stream_retention_hours must be 24..8760")
        if not 1 <= self.batch_size <= 2_000:
            # Kinesis allows 10000, but one run's messages of a batch wait in its run item until
            # the next flush; 2000 keeps that item far below DynamoDB's 400 KB even in the worst case.
            raise ConfigError("runner_stats.batch_size must be 1..2000 (bounds the run item's archive tail)")
        if not 0 <= self.batching_window_seconds <= 300:
            raise ConfigError("runner_stats.batching_window_seconds must be 0..300")
        if not 1 <= self.parallelization_factor <= 10:
            raise ConfigError("runner_stats.parallelization_factor must be 1..10")
        if not 0 <= self.retry_attempts <= 10_000:
            raise ConfigError("runner_stats.retry_attempts must be 0..10000 (bounded, never infinite)")
        if not 60 <= self.max_record_age_seconds <= 604_800:
            raise ConfigError("runner_stats.max_record_age_seconds must be 60..604800")
        if self.max_record_age_seconds > self.stream_retention_hours * 3600:
            raise ConfigError("runner_stats.max_record_age_seconds must not exceed the stream retention")
        if not 1 <= self.archive_chunk_size <= runner_stats_contract.ARCHIVE_CHUNK_SIZE_MAX:
            raise ConfigError(
                f"runner_stats.archive_chunk_size must be 1..{runner_stats_contract.ARCHIVE_CHUNK_SIZE_MAX} (keeps the run item near 1 KB)"
            )
        if self.gap_max_lag < 1 or self.gap_max_open < 1 or self.commit_attempts < 1:
            raise ConfigError("runner_stats gap bounds and commit_attempts must be >= 1")
        if not 3 <= self.timeout_seconds <= 900:
            raise ConfigError("runner_stats.timeout_seconds must be 3..900")
        if not 128 <= self.memory_mb <= 10_240:
            raise ConfigError("runner_stats.memory_mb must be 128..10240")
        if not 256 <= self.max_message_bytes <= 1_048_576:
            raise ConfigError("runner_stats.max_message_bytes must be 256..1048576 (Kinesis records are at most 1 MiB)")
        if not 0 <= self.reject_payload_max_bytes <= 65_536:
            raise ConfigError("runner_stats.reject_payload_max_bytes must be 0..65536 (a reject is one DynamoDB item)")
        if not 60 <= self.timestamp_max_age_seconds <= 30 * 24 * 3600:
            raise ConfigError("runner_stats.timestamp_max_age_seconds must be 60..2592000 (a minute to 30 days before arrival)")
        if not 1 <= self.timestamp_max_ahead_seconds <= 24 * 3600:
            raise ConfigError("runner_stats.timestamp_max_ahead_seconds must be 1..86400 (a second to a day after arrival)")


QUEUE_RETENTION_SECONDS = 14 * 24 * 3600  # SQS's longest, on every queue of the project


@dataclass(frozen=True)
class EventLogConfig:
    """The event log, its snapshots and its side-effect queues."""

    snapshot_every: int = 1000  # events between two Snapshot entries
    chunk_bytes: int = 256 * 1024  # a snapshot chunk is flushed at this size (bounds the worker's memory)
    max_value_bytes: int = 4096  # larger cell values go through the large-payload flow
    max_body_bytes: int = 16_384
    payload_max_bytes: int = 100 * 1024 * 1024
    pending_tag: str = "onceflow-pending=true"
    pending_expiry_days: int = 2  # uploads never completed are deleted by the lifecycle rule
    noncurrent_expiry_days: int = 30  # overwritten object versions (a rebuilt chunk) are kept this long
    url_expiry_seconds: int = 900
    read_page_limit: int = 1000
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
    backoff_cap_seconds: int = event_log_contract.SQS_MAX_VISIBILITY_SECONDS
    snapshot_max_receives: int = 24  # deferrals and hand-offs count too; then the DLQ
    finalizer_max_receives: int = 5
    finalizer_timeout_seconds: int = 30
    # The scheduled check re-sends the build message of every stuck row (same deterministic
    # request id; the worker drops repeats). Off only for an operator who recovers by hand.
    resend_stuck_snapshots: bool = True

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
        if not 1 <= self.backoff_base_seconds <= self.backoff_cap_seconds <= event_log_contract.SQS_MAX_VISIBILITY_SECONDS:
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


STEP_FUNCTIONS_MAX_PAYLOAD_BYTES = 256 * 1024
VALIDATE_MAX_LINE_BYTES = 4096  # runtime.taxi_etl.trips.MAX_LINE_BYTES: longer lines would only be flagged


@dataclass(frozen=True)
class TaxiEtlConfig:
    """The taxi ETL saga: its API, authorizer, state machine and phase functions."""

    # STANDARD: execution names deduplicate starts (the API's idempotency rests on it) and the
    # history is kept 90 days. EXPRESS is cheaper per row but runs a repeated start again; see
    # the README before choosing it.
    workflow_type: sfn.StateMachineType = sfn.StateMachineType.STANDARD
    batch_max_lines: int = 100
    # A batch travels as the execution input, which Step Functions caps at 256 KiB; the
    # phases' outputs are a little larger than their input, so a batch stays well below.
    batch_max_bytes: int = 64 * 1024
    max_line_bytes: int = VALIDATE_MAX_LINE_BYTES
    authorizer_cache_seconds: int = 300  # API Gateway caches an allow/deny per key this long
    secret_cache_seconds: int = 300  # the authorizer re-reads the key from Secrets Manager after this
    secret_refresh_floor_seconds: int = 10  # a refused key re-reads the secret at most this often
    api_rate_limit: int = 50
    api_burst_limit: int = 100
    service_retry_attempts: int = 6  # Lambda service exceptions (throttles, 5xx)
    task_retry_attempts: int = 2  # any other task failure (a crash, a timeout): every phase is idempotent
    retry_interval_seconds: int = 2
    retry_max_delay_seconds: int = 60
    execution_timeout_minutes: int = 15
    phase_timeout_seconds: int = 60
    phase_memory_mb: int = 256
    api_timeout_seconds: int = 10
    # What the state machine sends to CloudWatch Logs. ERROR without execution data (the default,
    # prod's) logs only failures, with no row content; ALL with data (dev's) logs every state's
    # input and output, which is what debugging a phase needs and adds $2.70 (batch route) to $7.30
    # (one row per request) per million rows (`make bench` prices both).
    execution_log_level: sfn.LogLevel = sfn.LogLevel.ERROR
    execution_log_data: bool = False

    def validate(self) -> None:
        if self.workflow_type not in (sfn.StateMachineType.STANDARD, sfn.StateMachineType.EXPRESS):
            raise ConfigError("taxi_etl.workflow_type must be STANDARD or EXPRESS")
        if not 1 <= self.batch_max_lines <= 1000:
            raise ConfigError("taxi_etl.batch_max_lines must be 1..1000")
        if not 256 <= self.max_line_bytes <= min(self.batch_max_bytes, VALIDATE_MAX_LINE_BYTES):
            raise ConfigError("taxi_etl.max_line_bytes must be 256..batch_max_bytes and at most 4096 (what Validate accepts)")
        if self.batch_max_bytes > STEP_FUNCTIONS_MAX_PAYLOAD_BYTES // 3:
            # validate's output holds the batch plus its verdicts; transform's holds it again.
            raise ConfigError("taxi_etl.batch_max_bytes must be at most a third of Step Functions' 256 KiB payload limit")
        if not 0 <= self.authorizer_cache_seconds <= 3600:
            raise ConfigError("taxi_etl.authorizer_cache_seconds must be 0..3600 (API Gateway's limit)")
        if not 1 <= self.secret_refresh_floor_seconds <= self.secret_cache_seconds <= 3600:
            raise ConfigError("taxi_etl secret caching must satisfy 1 <= refresh floor <= cache seconds <= 3600")
        if not 1 <= self.api_rate_limit <= self.api_burst_limit:
            raise ConfigError("taxi_etl api rate limit must be positive and at most the burst limit")
        if not 0 <= self.service_retry_attempts <= 10 or not 0 <= self.task_retry_attempts <= 5:
            raise ConfigError("taxi_etl retries must be bounded: service 0..10, task 0..5")
        if not 1 <= self.retry_interval_seconds <= self.retry_max_delay_seconds <= 3600:
            raise ConfigError("taxi_etl retry interval must be 1..retry_max_delay_seconds (at most 3600)")
        for timeout in (self.phase_timeout_seconds, self.api_timeout_seconds):
            if not 3 <= timeout <= 900:
                raise ConfigError("taxi_etl function timeouts must be 3..900 s")
        if self.api_timeout_seconds > 29:
            raise ConfigError("taxi_etl.api_timeout_seconds must be at most 29 (the HTTP API integration limit)")
        if self.workflow_type == sfn.StateMachineType.EXPRESS and self.execution_timeout_minutes > 5:
            raise ConfigError("taxi_etl.execution_timeout_minutes must be at most 5 for EXPRESS workflows")
        if not 1 <= self.execution_timeout_minutes <= 24 * 60:
            raise ConfigError("taxi_etl.execution_timeout_minutes must be 1..1440")
        if not 128 <= self.phase_memory_mb <= 10_240:
            raise ConfigError("taxi_etl.phase_memory_mb must be 128..10240")
        if not isinstance(self.execution_log_level, sfn.LogLevel):
            raise ConfigError("taxi_etl.execution_log_level must be an aws_stepfunctions.LogLevel (ALL, ERROR, FATAL or OFF)")
        if self.execution_log_level == sfn.LogLevel.OFF and self.execution_log_data:
            raise ConfigError("taxi_etl.execution_log_data needs an execution_log_level other than OFF")
        if self.workflow_type == sfn.StateMachineType.EXPRESS and self.execution_log_level == sfn.LogLevel.OFF:
            raise ConfigError("taxi_etl.execution_log_level must not be OFF for EXPRESS workflows: their logs are their only history")


@dataclass(frozen=True)
class RunnerStatsAlarms:
    """When the runner-stats pipeline pages someone. Counts are per 5-minute period."""

    iterator_age_ms: int = 15 * 60 * 1000  # the stream keeps 24 h; alarm long before
    iterator_age_minutes: int = 5  # consecutive 1-minute periods above the threshold
    on_failure_messages: int = 1  # any record given up on is data to recover
    rejected_per_5min: int = 10
    stale_per_5min: int = 50  # a run's aggregate older than a redelivered message: normal in small numbers
    suspect_jumps_per_5min: int = 10  # sequences held far ahead of their run: a device numbering wrongly
    duplicate_per_5min: int = 5_000  # duplicates are normal under at-least-once; a storm means a retry loop
    errors_per_5min: int = 5  # failed invocations (the batch is retried, bisected, then given up)
    throttles_per_5min: int = 1

    def validate(self) -> None:
        if self.iterator_age_ms < 60_000 or not 1 <= self.iterator_age_minutes <= 60:
            raise ConfigError("monitoring.runner_stats: iterator age at least one minute, over 1..60 periods")
        _positive("monitoring.runner_stats", self, exclude=("iterator_age_ms", "iterator_age_minutes"))


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
    pending_check_minutes: int = 5  # how often the scheduled check looks at the pending table

    def validate(self) -> None:
        if not 60_000 <= self.router_iterator_age_ms < 24 * 3600 * 1000:
            raise ConfigError("monitoring.event_log.router_iterator_age_ms must be 1 min..24 h (the stream's retention)")
        if not 1 <= self.pending_check_minutes <= 60:
            raise ConfigError("monitoring.event_log.pending_check_minutes must be 1..60")
        if self.oldest_pending_snapshot_seconds < self.pending_check_minutes * 60:
            raise ConfigError("monitoring.event_log.oldest_pending_snapshot_seconds must be at least one check interval")
        _positive("monitoring.event_log", self)


@dataclass(frozen=True)
class TaxiEtlAlarms:
    """When the taxi saga pages someone. Counts are per 5-minute period."""

    # Flagged executions end in a Fail state, so this counts rejected rows' executions too.
    failed_executions_per_5min: int = 20
    flagged_validation_per_5min: int = 20  # bad input: the clients' data
    flagged_transformation_per_5min: int = 5  # valid rows that cannot be converted
    flagged_store_per_5min: int = 1  # the store failed after its retries: ours to fix
    authorizer_denials_per_5min: int = 50
    api_4xx_per_5min: int = 100
    api_5xx_per_5min: int = 1
    execution_p99_ms: int = 120_000  # a clean run takes seconds; retries with backoff take minutes

    def validate(self) -> None:
        _positive("monitoring.taxi_etl", self)


def _positive(prefix: str, thresholds: object, exclude: tuple[str, ...] = ()) -> None:
    for name, value in vars(thresholds).items():
        if name not in exclude and value < 1:
            raise ConfigError(f"{prefix}.{name} must be at least 1")


@dataclass(frozen=True)
class MonitoringConfig:
    """Alarm thresholds per pipeline, and who hears the alarms."""

    # Subscribed to the alarm topic when set (the address confirms by mail). Leave it empty to
    # subscribe a pager or chat integration to the AlarmTopicArn output instead.
    alarm_email: str | None = None
    runner_stats: RunnerStatsAlarms = field(default_factory=RunnerStatsAlarms)
    event_log: EventLogAlarms = field(default_factory=EventLogAlarms)
    taxi_etl: TaxiEtlAlarms = field(default_factory=TaxiEtlAlarms)

    def validate(self) -> None:
        if self.alarm_email is not None and not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", self.alarm_email):
            raise ConfigError(f"monitoring.alarm_email {self.alarm_email!r} is not an e-mail address")
        self.runner_stats.validate()
        self.event_log.validate()
        self.taxi_etl.validate()


@dataclass(frozen=True)
class EnvConfig:
    name: str
    stack_prefix: str
    owner: str
    retain_data: bool
    log_retention: logs.RetentionDays
    powertools_layer_version: str
    log_level: str = "INFO"
    runner_stats: RunnerStatsConfig = field(default_factory=RunnerStatsConfig)
    event_log: EventLogConfig = field(default_factory=EventLogConfig)
    taxi_etl: TaxiEtlConfig = field(default_factory=TaxiEtlConfig)
    monitoring: MonitoringConfig = field(default_factory=MonitoringConfig)

    @property
    def removal_policy(self) -> RemovalPolicy:
        return RemovalPolicy.RETAIN if self.retain_data else RemovalPolicy.DESTROY

    def stack_name(self, pipeline: str) -> str:
        """`Onceflow-<env>-<pipeline>`: every stack of the app is named here."""
        if pipeline not in PIPELINE_STACKS:
            raise ConfigError(f"no stack {pipeline!r}; the app's stacks are {', '.join(PIPELINE_STACKS)}")
        return f"{self.stack_prefix}-{pipeline}"

    @property
    def tags(self) -> dict[str, str]:
        return {"project": "onceflow", "environment": self.name, "owner": self.owner}

    def validate(self) -> EnvConfig:
        if not re.fullmatch(r"[a-z][a-z0-9-]{1,20}", self.name):
            raise ConfigError(f"environment name {self.name!r} must be lower-case letters, digits and dashes")
        if not re.fullmatch(r"3\.\d+\.\d+", self.powertools_layer_version):
            raise ConfigError("powertools_layer_version must be a Powertools v3 release such as 3.37.0")
        if self.log_level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ConfigError(f"log_level {self.log_level!r} is not a Powertools log level")
        self.runner_stats.validate()
        self.event_log.validate()
        self.taxi_etl.validate()
        self.monitoring.validate()
        if self.monitoring.runner_stats.iterator_age_ms >= self.runner_stats.max_record_age_seconds * 1000:
            raise ConfigError("monitoring.runner_stats.iterator_age_ms must fire before records reach max_record_age_seconds")
        if self.monitoring.event_log.router_iterator_age_ms >= self.event_log.router_max_record_age_seconds * 1000:
            raise ConfigError("monitoring.event_log.router_iterator_age_ms must fire before records reach router_max_record_age_seconds")
        if self.monitoring.event_log.oldest_pending_snapshot_seconds <= self.event_log.stuck_after_seconds:
            raise ConfigError("monitoring.event_log.oldest_pending_snapshot_seconds must exceed event_log.stuck_after_seconds")
        return self


# The app's stacks of one environment, "<stack_prefix>-<name>", in deployment order.
PIPELINE_STACKS = ("Alarms", "RunnerStats", "EventLog", "TaxiEtl")

ENVIRONMENTS: dict[str, EnvConfig] = {
    "dev": EnvConfig(
        name="dev",
        stack_prefix="Onceflow-dev",
        owner="onceflow-team",
        retain_data=False,
        log_retention=logs.RetentionDays.ONE_WEEK,
        powertools_layer_version="3.37.0",
        log_level="DEBUG",
        runner_stats=RunnerStatsConfig(),
        taxi_etl=TaxiEtlConfig(execution_log_level=sfn.LogLevel.ALL, execution_log_data=True),
    ),
    "prod": EnvConfig(
        name="prod",
        stack_prefix="Onceflow-prod",
        owner="onceflow-team",
        retain_data=True,
        log_retention=logs.RetentionDays.THREE_MONTHS,
        powertools_layer_version="3.37.0",
        runner_stats=RunnerStatsConfig(
            shard_count=2,
            stream_retention_hours=48,
            batch_size=1000,
            # Devices send every 30 s, so any window under 30 s still folds about one message
            # per run into each write: the window buys fewer invocations, not fewer WRU
            # (`make bench` shows both). 5 s keeps the added latency small.
            batching_window_seconds=5,
            max_record_age_seconds=24 * 3600,
            memory_mb=512,
            timeout_seconds=120,
        ),
        event_log=EventLogConfig(
            snapshot_every=10_000,
            worker_timeout_seconds=900,
            worker_memory_mb=1024,
            lease_seconds=1200,
            handoff_margin_seconds=60,
            api_rate_limit=500,
            api_burst_limit=1000,
        ),
        taxi_etl=TaxiEtlConfig(batch_max_lines=200, api_rate_limit=200, api_burst_limit=400),
        monitoring=MonitoringConfig(
            runner_stats=RunnerStatsAlarms(iterator_age_ms=5 * 60 * 1000),
            event_log=EventLogAlarms(oldest_pending_snapshot_seconds=3 * 3600),
        ),
    ),
}


def load_config(env_name: str | None) -> EnvConfig:
    name = env_name or "dev"
    if name not in ENVIRONMENTS:
        raise ConfigError(f"unknown environment {name!r}; choose one of {', '.join(sorted(ENVIRONMENTS))}")
    return ENVIRONMENTS[name].validate()
