"""The runner-stats handler's settings: read from the environment once, validated, frozen."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.runner_stats.contract import (
    ARCHIVE_CHUNK_SIZE_MAX,
    ENV_ARCHIVE_CHUNK_SIZE,
    ENV_COMMIT_ATTEMPTS,
    ENV_GAP_MAX_LAG,
    ENV_GAP_MAX_OPEN,
    ENV_IO_CONCURRENCY,
    ENV_MAX_MESSAGE_BYTES,
    ENV_MESSAGES_TABLE,
    ENV_REJECT_PAYLOAD_MAX_BYTES,
    ENV_REJECTS_TABLE,
    ENV_RUN_STATS_TABLE,
    ENV_TENDENCY_TABLE,
    ENV_TIMESTAMP_MAX_AGE_SECONDS,
    ENV_TIMESTAMP_MAX_AHEAD_SECONDS,
    IO_CONCURRENCY_MAX,
)
from runtime.runner_stats.models import FoldPolicy, TimestampWindow
from runtime.runner_stats.service import ServiceOptions
from runtime.runner_stats.store import RunStatsTables
from runtime.shared.settings import SettingsError, int_setting, require_str


@dataclass(frozen=True, slots=True)
class RunnerStatsSettings:
    tables: RunStatsTables
    options: ServiceOptions
    reject_payload_max_bytes: int

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RunnerStatsSettings:
        defaults = FoldPolicy()
        policy = FoldPolicy(
            gap_max_lag=int_setting(env, ENV_GAP_MAX_LAG, defaults.gap_max_lag),
            gap_max_open=int_setting(env, ENV_GAP_MAX_OPEN, defaults.gap_max_open),
            archive_chunk_size=int_setting(env, ENV_ARCHIVE_CHUNK_SIZE, defaults.archive_chunk_size),
        )
        window = TimestampWindow()
        max_age = int_setting(env, ENV_TIMESTAMP_MAX_AGE_SECONDS, window.max_age_ms // 1000)
        max_ahead = int_setting(env, ENV_TIMESTAMP_MAX_AHEAD_SECONDS, window.max_ahead_ms // 1000)
        if max_age < 1 or max_ahead < 1:
            raise SettingsError(f"{ENV_TIMESTAMP_MAX_AGE_SECONDS} and {ENV_TIMESTAMP_MAX_AHEAD_SECONDS} must be >= 1")
        io_concurrency = int_setting(env, ENV_IO_CONCURRENCY, ServiceOptions().io_concurrency)
        if io_concurrency > IO_CONCURRENCY_MAX:
            raise SettingsError(f"{ENV_IO_CONCURRENCY} must be <= {IO_CONCURRENCY_MAX}")
        if policy.archive_chunk_size > ARCHIVE_CHUNK_SIZE_MAX:
            raise SettingsError(f"{ENV_ARCHIVE_CHUNK_SIZE} must be <= {ARCHIVE_CHUNK_SIZE_MAX} so the run item stays near 1 KB")
        return cls(
            tables=RunStatsTables(
                run_stats=require_str(env, ENV_RUN_STATS_TABLE),
                tendency=require_str(env, ENV_TENDENCY_TABLE),
                messages=require_str(env, ENV_MESSAGES_TABLE),
                rejects=require_str(env, ENV_REJECTS_TABLE),
            ),
            options=ServiceOptions(
                policy=policy,
                commit_attempts=int_setting(env, ENV_COMMIT_ATTEMPTS, ServiceOptions().commit_attempts),
                max_message_bytes=int_setting(env, ENV_MAX_MESSAGE_BYTES, ServiceOptions().max_message_bytes),
                timestamps=TimestampWindow(max_age_ms=max_age * 1000, max_ahead_ms=max_ahead * 1000),
                io_concurrency=io_concurrency,
            ),
            reject_payload_max_bytes=int_setting(env, ENV_REJECT_PAYLOAD_MAX_BYTES, 4096),
        )
