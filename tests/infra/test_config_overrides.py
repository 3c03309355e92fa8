"""Defaults are valid together: for every settings, thresholds and props dataclass a user sets, changing
any one field alone, to any valid value of its type, is accepted where the construct or the
environment checks it. A field whose default only works with another field's default (as Express's
5 minutes once did with the 15-minute timeout) fails here.

SAMPLES holds, per class, the values each field is set to; it must name every field, so a new field
without a sample fails `test_every_field_has_a_sample`. Enum and bool fields list every other value
the field accepts. Overrides that change what is built (an enum or a bool of a pipeline's settings)
are also synthesized; the others change numbers in a template the construct tests already check.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from types import UnionType
from typing import Any

import pytest
from aws_cdk import App, RemovalPolicy, Stack
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Template

from onceflow.infra.common import CommonProps, TracingMode
from onceflow.infra.config import ENVIRONMENTS, EnvConfig, MonitoringConfig
from onceflow.infra.event_log.construct import EventLog
from onceflow.infra.event_log.props import EventLogAlarms, EventLogConfig, EventLogProps
from onceflow.infra.monitoring import AlarmTopicProps
from onceflow.infra.runner_stats.construct import RunnerStatsPipeline
from onceflow.infra.runner_stats.props import RunnerStatsAlarms, RunnerStatsConfig, RunnerStatsPipelineProps
from onceflow.infra.taxi_etl.construct import TaxiEtlSaga
from onceflow.infra.taxi_etl.props import TaxiEtlAlarms, TaxiEtlConfig, TaxiEtlSagaProps

PROD = ENVIRONMENTS["prod"]
# A team's own environment: EnvConfig's five fields without a default, everything else left as it comes.
TEAM = EnvConfig(name="team", stack_prefix="Team", owner="team", retain_data=True, log_retention=logs.RetentionDays.THREE_MONTHS)
ADOT_EU_WEST_1 = "arn:aws:lambda:eu-west-1:615299751070:layer:AWSOpenTelemetryDistroPython:13"

SAMPLES: dict[type, dict[str, list[Any]]] = {
    RunnerStatsConfig: {
        "stream_mode": [kinesis.StreamMode.ON_DEMAND],
        "shard_count": [4],
        "stream_retention_hours": [48],
        "batch_size": [1000],
        "batching_window_seconds": [5],
        "parallelization_factor": [2],
        "retry_attempts": [3],
        "max_record_age_seconds": [24 * 3600],
        "gap_max_lag": [80],
        "gap_max_open": [16],
        "archive_chunk_size": [10],
        "commit_attempts": [6],
        "max_message_bytes": [65_536],
        "reject_payload_max_bytes": [0, 1024],
        "timestamp_max_age_seconds": [3600],
        "timestamp_max_ahead_seconds": [60],
        "memory_mb": [512],
        "timeout_seconds": [120],
        "reserved_concurrency": [1, 10],
        "io_concurrency": [8],
    },
    EventLogConfig: {
        "snapshot_every": [10_000],
        "chunk_bytes": [1024 * 1024],
        "max_value_bytes": [8192],
        "max_body_bytes": [65_536],
        "payload_max_bytes": [10 * 1024 * 1024],
        "pending_tag": ["team-pending=yes"],
        "pending_expiry_days": [7],
        "noncurrent_expiry_days": [90],
        "url_expiry_seconds": [3600],
        "read_page_limit": [100],
        "api_rate_limit": [150],
        "api_burst_limit": [400],
        "api_timeout_seconds": [20],
        "api_memory_mb": [512],
        "router_batch_size": [500],
        "router_retry_attempts": [10],
        "router_max_record_age_seconds": [3600],
        "router_timeout_seconds": [60],
        "worker_timeout_seconds": [200],
        "worker_memory_mb": [1024],
        "worker_max_concurrency": [20],
        "lease_seconds": [900],
        "handoff_margin_seconds": [60],
        "backoff_base_seconds": [4],
        "backoff_cap_seconds": [3600],
        "snapshot_max_receives": [12],
        "finalizer_max_receives": [10],
        "finalizer_timeout_seconds": [60],
        "router_batching_window_seconds": [1],
        "router_parallelization_factor": [2],
        "pending_check_minutes": [10],
        "reserved_concurrency": [{"api": 5}, {"worker": 10, "finalizer": 2}],
        "resend_stuck_snapshots": [False],
        "snap_start": [True],
    },
    TaxiEtlConfig: {
        "workflow_type": [sfn.StateMachineType.EXPRESS],
        "batch_max_lines": [200],
        "batch_max_bytes": [32 * 1024],
        "max_line_bytes": [1024],
        "authorizer_cache_seconds": [0, 60],
        "secret_cache_seconds": [600],
        "secret_refresh_floor_seconds": [30],
        "api_rate_limit": [100],
        "api_burst_limit": [200],
        "transient_retry_attempts": [4, 10],
        "transient_retry_max_delay_seconds": [120],
        "task_retry_attempts": [0, 3],
        "retry_interval_seconds": [1],
        "retry_max_delay_seconds": [30],
        "auto_redrive_wait_seconds": [300],
        "execution_timeout_minutes": [30],
        "phase_timeout_seconds": [120],
        "phase_memory_mb": [512],
        "api_timeout_seconds": [29],
        "execution_log_level": [sfn.LogLevel.ALL, sfn.LogLevel.FATAL, sfn.LogLevel.OFF],
        "execution_log_data": [True],
        "reserved_concurrency": [{"store": 5}],
        "snap_start": [True],
        "bulk_chunk_rows": [100, 10_000],
        "bulk_max_concurrency": [1, 1_000],
        "bulk_tolerated_failure_percentage": [5.0, 100.0],
        "bulk_task_timeout_seconds": [60, 900],
        "ingest_retention_days": [1, 90],
        "load_report_retention_days": [365],
    },
    CommonProps: {
        "removal_policy": [RemovalPolicy.DESTROY],
        "log_retention": [logs.RetentionDays.ONE_WEEK, logs.RetentionDays.ONE_YEAR],
        "log_level": ["DEBUG", "WARNING", "ERROR"],
        "powertools_layer_version": ["3.36.0"],
        "tracing": [TracingMode.SDK, TracingMode.OTEL, TracingMode.OFF],
        "adot_layer_arns": [{"eu-west-1": ADOT_EU_WEST_1}],
        "sdk_layer": [False],
    },
    RunnerStatsAlarms: {
        "iterator_age_ms": [5 * 60 * 1000],
        "iterator_age_minutes": [10],
        "record_age_at_risk_ms": [3 * 3600 * 1000],
        "on_failure_messages": [5],
        "rejected_per_5min": [50],
        "stale_per_5min": [100],
        "suspect_jumps_per_5min": [20],
        "duplicate_per_5min": [10_000],
        "errors_per_5min": [1],
        "throttles_per_5min": [10],
    },
    EventLogAlarms: {
        "router_iterator_age_ms": [60_000],
        "stream_failure_messages": [3],
        "snapshot_queue_oldest_seconds": [7200],
        "dead_letter_messages": [2],
        "oldest_pending_snapshot_seconds": [3 * 3600],
        "stuck_snapshots_resent": [3],
        "snapshot_build_seconds": [3600],
        "errors_per_5min": [10],
    },
    TaxiEtlAlarms: {
        "failed_executions_per_5min": [50],
        "flagged_validation_per_5min": [100],
        "flagged_transformation_per_5min": [10],
        "flagged_store_per_5min": [3],
        "authorizer_denials_per_5min": [200],
        "api_4xx_per_5min": [500],
        "api_5xx_per_5min": [5],
        "execution_p99_ms": [600_000],
        "still_retryable_rows_per_5min": [5],
        "failed_loads_per_5min": [3],
    },
    MonitoringConfig: {
        "alarm_email": ["ops@example.com"],
        # (prod's runner-stats thresholds fit prod's 24-hour record age only: validate_against refuses them with the default 6 hours)
        "runner_stats": [RunnerStatsAlarms(iterator_age_ms=5 * 60 * 1000)],
        "event_log": [PROD.monitoring.event_log],
        "taxi_etl": [TaxiEtlAlarms(api_5xx_per_5min=5)],
    },
    AlarmTopicProps: {
        "removal_policy": [RemovalPolicy.DESTROY],
        "alarm_email": ["ops@example.com"],
        "label": ["team pipelines"],
    },
    EnvConfig: {
        "name": ["team-dev"],
        "stack_prefix": ["TeamDev"],
        "owner": ["data-team"],
        "retain_data": [False],
        "log_retention": [logs.RetentionDays.ONE_MONTH],
        "powertools_layer_version": ["3.36.0"],
        "log_level": ["DEBUG"],
        "tracing": [TracingMode.SDK, TracingMode.OTEL, TracingMode.OFF],
        "account": ["111122223333"],
        "region": ["eu-west-1"],
        "runner_stats": [PROD.runner_stats],
        "event_log": [PROD.event_log],
        "taxi_etl": [PROD.taxi_etl],
        "monitoring": [MonitoringConfig(alarm_email="ops@example.com", event_log=PROD.monitoring.event_log)],
    },
}

SETTINGS_PROPS: dict[type, type] = {
    RunnerStatsConfig: RunnerStatsPipelineProps,
    EventLogConfig: EventLogProps,
    TaxiEtlConfig: TaxiEtlSagaProps,
}
SETTINGS_SLOT = {RunnerStatsConfig: "runner_stats", EventLogConfig: "event_log", TaxiEtlConfig: "taxi_etl"}
ALARMS_SLOT = {RunnerStatsAlarms: "runner_stats", EventLogAlarms: "event_log", TaxiEtlAlarms: "taxi_etl"}
CONSTRUCTS: dict[type, Callable[..., Any]] = {
    RunnerStatsConfig: RunnerStatsPipeline,
    EventLogConfig: EventLog,
    TaxiEtlConfig: TaxiEtlSaga,
}


def validate_where_used(value: Any) -> None:
    """Every check a value of this class meets when a user sets it: the construct's props, the
    environment (which checks the alarm thresholds against the settings they watch), or its own."""
    kind = type(value)
    if kind in SETTINGS_PROPS:
        SETTINGS_PROPS[kind](settings=value).validate()
        dataclasses.replace(TEAM, **{SETTINGS_SLOT[kind]: value}).validate()
    elif kind is CommonProps:
        for props in SETTINGS_PROPS.values():
            props(common=value).validate()
    elif kind in ALARMS_SLOT:
        dataclasses.replace(TEAM, monitoring=MonitoringConfig(**{ALARMS_SLOT[kind]: value})).validate()
    elif kind is MonitoringConfig:
        dataclasses.replace(TEAM, monitoring=value).validate()
    else:
        value.validate()


def baseline(kind: type) -> Any:
    return TEAM if kind is EnvConfig else kind()


def fits(value: Any, hint: Any) -> bool:
    """Whether a value is of a field's declared type (unions, Mapping[...] and plain classes)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, UnionType):
        return any(fits(value, option) for option in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is not None:
        return isinstance(value, origin)
    return isinstance(value, hint)


OVERRIDES = [
    pytest.param(kind, name, value, id=f"{kind.__name__}.{name}={value!r}"[:120])
    for kind, fields in SAMPLES.items()
    for name, values in fields.items()
    for value in values
]


@pytest.mark.parametrize("kind", list(SAMPLES), ids=lambda kind: kind.__name__)
def test_every_field_has_a_sample_of_its_type_other_than_the_default(kind: type) -> None:
    # Given a config class and its samples
    base = baseline(kind)
    hints = typing.get_type_hints(kind)
    # Then every field has at least one sample, and the table names no field the class lacks
    assert set(SAMPLES[kind]) == {field.name for field in dataclasses.fields(kind)}
    for name, values in SAMPLES[kind].items():
        assert values, name
        default = getattr(base, name)
        for value in values:
            # each of the field's declared type and not its default
            assert fits(value, hints[name]), (name, value)
            assert value != default, name
        # and an enum or bool field lists every other value it accepts (every other member, RemovalPolicy's two others aside)
        if isinstance(default, bool):
            assert values == [not default], name
        elif isinstance(default, enum.Enum):
            accepted = set(type(default)) - {RemovalPolicy.SNAPSHOT, RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE}
            if type(default) is not logs.RetentionDays:  # two dozen periods, alike: two stand for them
                assert set(values) == accepted - {default}, name


@pytest.mark.parametrize(("kind", "name", "value"), OVERRIDES)
def test_any_one_field_changed_alone_is_valid(kind: type, name: str, value: Any) -> None:
    # Given a user's config with this one field changed and every other left at its default
    config = dataclasses.replace(baseline(kind), **{name: value})
    # When it is checked where it is used
    # Then it is accepted (ConfigError would name the field and its rule)
    validate_where_used(config)


STRUCTURAL = [
    pytest.param(kind, name, value, id=f"{kind.__name__}.{name}={value!r}")
    for kind in CONSTRUCTS
    for name, values in SAMPLES[kind].items()
    for value in values
    if isinstance(value, bool | enum.Enum)
]


@pytest.mark.parametrize(("kind", "name", "value"), STRUCTURAL)
def test_an_override_that_changes_what_is_built_builds_alone(kind: type, name: str, value: Any, tmp_path: Path) -> None:
    # Given a pipeline's settings with one enum or bool changed alone
    settings = dataclasses.replace(kind(), **{name: value})
    # When the construct is built with them and the stack synthesized
    stack = Stack(App(outdir=str(tmp_path)), "Team")
    CONSTRUCTS[kind](stack, "Pipeline", SETTINGS_PROPS[kind](settings=settings))
    template = Template.from_stack(stack).to_json()
    # Then it synthesizes, with its functions
    assert any(body["Type"] == "AWS::Lambda::Function" for body in template["Resources"].values())


def test_overrides_cover_each_config_class_a_user_sets() -> None:
    # Given the classes a user fills in: each pipeline's settings and alarm thresholds, the shared props,
    # the monitoring config and the alarm topic's props, and the repository's environment
    expected = {*SETTINGS_PROPS, *ALARMS_SLOT, CommonProps, MonitoringConfig, AlarmTopicProps, EnvConfig}
    # Then each has its samples
    assert set(SAMPLES) == expected
    assert all(isinstance(fields, Mapping) and fields for fields in SAMPLES.values())
