"""The runner-stats pipeline's props: its settings, its alarm thresholds and the construct's inputs."""

from __future__ import annotations

from dataclasses import dataclass, field

from aws_cdk import aws_kinesis as kinesis

from onceflow.infra.common import (
    CommonProps,
    ConfigError,
    TableOptions,
    check_reserved_concurrency,
    require_positive,
    validate_pipeline_props,
)
from onceflow.runtime.runner_stats import contract


@dataclass(frozen=True)
class RunnerStatsConfig:
    """The pipeline's settings: the stream it creates, the event source mapping, the function and
    the handler's limits. Every field is checked at synth (`validate`) with a message naming it.

    stream_mode, shard_count, stream_retention_hours: the stream the construct creates (not used
        with your own stream, except that shard_count bounds reserved_concurrency from below).
    batch_size, batching_window_seconds, parallelization_factor, retry_attempts,
        max_record_age_seconds: the Kinesis event source mapping. It always bisects a failing
        batch, reports batch item failures and sends what it gives up on to the on-failure queue.
    parallelization_factor, producer contract: devices put each record with partition key = user
        id. Lambda keeps order only per partition key (one key's records go to one of the P
        concurrent batch chains of a shard, in shard order), so with a factor above 1 a user's
        records still stay in order on one chain, and the user's runs and tendency record are
        written by one chain at a time. tests/faults/runner_stats/test_runner_stats_parallelization.py
        replays P = 2, 5 and 10 chains (with crashes and lost responses) against one clean pass.
        Keys of user#run also end correct (the tendency write is version-guarded and its merge
        order-free), at the price of tendency conflicts; what must hold is per-run order. A key
        per message breaks it: one chain lagging behind another lets a run's gaps close, and the
        lagging messages become `too_late` rejects (the same test file shows it).
    gap_max_lag, gap_max_open: how far behind, and how many, missing sequence numbers a run keeps
        open; a message for a gap closed beyond them is a `too_late` reject.
    archive_chunk_size, commit_attempts, max_message_bytes, reject_payload_max_bytes,
        timestamp_max_age_seconds, timestamp_max_ahead_seconds: the handler's limits.
    memory_mb, timeout_seconds: the function. Lambda gives one vCPU at 1,769 MB and a share in
        proportion below; the handler is CPU-bound at a full shard, so memory sets its throughput.
    io_concurrency: how many users one invocation processes at once (threads, each with its own
        connection); a batch of fewer users commits each user's runs on the threads left free. 32
        lets one shard's full batch of 1,000 runs wait for about 30 DynamoDB round trips instead of
        over 1,000.
    reserved_concurrency: None (the default) runs in the account's unreserved pool; a number
        reserves that many, and must cover the batches the mapping runs at once (shards x
        parallelization factor), or the stream falls behind for good.
    """

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
    # One full vCPU: the handler's CPU (botocore's client side, about 0.4 ms per call) and not its
    # round trips sets what a shard sustains; 1,769 MB sustains a shard's 1,000 records/s at
    # parallelization factor 1 with CPU 1.5x what the bench measures (`make bench --only latency`,
    # the power-tuning table), for the same $ per million records, to the cent, as 256 MB.
    memory_mb: int = 1769
    timeout_seconds: int = 60
    reserved_concurrency: int | None = None
    io_concurrency: int = 32

    @property
    def concurrent_batches(self) -> int:
        """What the event source mapping runs at once: one batch per shard and parallelization slot
        (an on-demand stream starts with 4 shards)."""
        shards = self.shard_count if self.stream_mode == kinesis.StreamMode.PROVISIONED else 4
        return shards * self.parallelization_factor

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
        if not 1 <= self.archive_chunk_size <= contract.ARCHIVE_CHUNK_SIZE_MAX:
            raise ConfigError(
                f"runner_stats.archive_chunk_size must be 1..{contract.ARCHIVE_CHUNK_SIZE_MAX} (keeps the run item near 1 KB)"
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
        if not 1 <= self.io_concurrency <= contract.IO_CONCURRENCY_MAX:
            raise ConfigError(
                f"runner_stats.io_concurrency must be 1..{contract.IO_CONCURRENCY_MAX} (threads and connections per invocation)"
            )
        check_reserved_concurrency(
            "runner_stats",
            self.reserved_concurrency,
            at_least=self.concurrent_batches,
            why="the shards x parallelization factor batches the stream is read in at once",
        )


@dataclass(frozen=True)
class RunnerStatsAlarms:
    """When the runner-stats pipeline pages someone. Counts are per 5-minute period."""

    iterator_age_ms: int = 15 * 60 * 1000  # the stream keeps 24 h; alarm long before
    iterator_age_minutes: int = 5  # consecutive 1-minute periods above the threshold (both age alarms)
    # The second, louder age alarm: records this old are within reach of max_record_age_seconds,
    # where the mapping gives up on them (to the on-failure queue, replayable only while the stream
    # keeps them). Must lie between iterator_age_ms and the maximum record age.
    record_age_at_risk_ms: int = 2 * 3600 * 1000
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
        if self.record_age_at_risk_ms <= self.iterator_age_ms:
            raise ConfigError("monitoring.runner_stats.record_age_at_risk_ms must be above iterator_age_ms (it is the later, louder alarm)")
        require_positive("monitoring.runner_stats", self, exclude=("iterator_age_ms", "iterator_age_minutes", "record_age_at_risk_ms"))

    def validate_against(self, settings: RunnerStatsConfig) -> None:
        """Both age alarms fire, over their periods, before the mapping gives records up (max_record_age_seconds,
        at most the stream's retention), so an operator has the time between to act."""
        window_ms = self.iterator_age_minutes * 60_000
        if self.record_age_at_risk_ms + window_ms >= settings.max_record_age_seconds * 1000:
            raise ConfigError(
                "monitoring.runner_stats.record_age_at_risk_ms plus its evaluation periods must be below "
                "runner_stats.max_record_age_seconds (the alarm must fire before records are given up on)"
            )


@dataclass(frozen=True)
class RunnerStatsPipelineProps:
    """Inputs of RunnerStatsPipeline; every one has a production-safe default.

    settings: the stream, the event source mapping, the function and the handler's limits.
    common: removal policy (data retained by default), log retention and level, Powertools layer.
    tables: billing mode (on-demand by default) and the tables' own removal policy.
    stream: an existing Kinesis stream to consume; by default an encrypted stream is created
        from `settings`. CDK grants the function read access to yours.
    acknowledge_findings: True (the default) adds this construct's cdk-nag acknowledgements, each
        for one of its resources with the reason it holds there, so a stack that adds the
        AwsSolutions and Serverless packs needs no call of its own. False leaves them to the
        caller, who may add this construct's set with acknowledge_runner_stats(construct) or write its own.
    """

    settings: RunnerStatsConfig = field(default_factory=RunnerStatsConfig)
    common: CommonProps = field(default_factory=CommonProps)
    tables: TableOptions = field(default_factory=TableOptions)
    stream: kinesis.IStream | None = None
    acknowledge_findings: bool = True

    def validate(self) -> None:
        validate_pipeline_props("RunnerStatsPipelineProps", self.settings, RunnerStatsConfig, self.common, self.tables)
