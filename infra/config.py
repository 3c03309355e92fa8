"""Typed per-environment configuration, read from CDK context and validated at synth time: the
composition root of the repository's own app.

`cdk synth -c env=dev` (the default) or `-c env=prod`. Values live here, not in cdk.json, so
they are typed and reviewed; cdk.json only selects the environment. Each pipeline's settings and
alarm thresholds are defined in its slice (infra/<pipeline>/props.py); this module composes them,
with what every construct shares (`common`), into each construct's props.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from aws_cdk import Environment, RemovalPolicy
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn

from onceflow.infra.common import POWERTOOLS_LAYER_VERSION, CommonProps, ConfigError, TracingMode
from onceflow.infra.event_log.props import EventLogAlarms, EventLogConfig, EventLogProps
from onceflow.infra.monitoring import AlarmTopicProps
from onceflow.infra.runner_stats.props import RunnerStatsAlarms, RunnerStatsConfig, RunnerStatsPipelineProps
from onceflow.infra.taxi_etl.props import TaxiEtlAlarms, TaxiEtlConfig, TaxiEtlSagaProps

__all__ = [
    "ENVIRONMENTS",
    "PIPELINE_STACKS",
    "ConfigError",
    "EnvConfig",
    "EventLogAlarms",
    "EventLogConfig",
    "MonitoringConfig",
    "RunnerStatsAlarms",
    "RunnerStatsConfig",
    "TaxiEtlAlarms",
    "TaxiEtlConfig",
    "TracingMode",
    "load_config",
]


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
        AlarmTopicProps(alarm_email=self.alarm_email).validate()
        self.runner_stats.validate()
        self.event_log.validate()
        self.taxi_etl.validate()


@dataclass(frozen=True)
class EnvConfig:
    """One environment of the repository's app: where it deploys, how it is named and tagged, and
    each pipeline's settings and alarm thresholds.

    account, region: where `cdk deploy` puts the stacks. Unset (None), the stacks are
        environment-agnostic and deploy to the account and region of the credentials the CLI
        runs with (--profile, AWS_PROFILE, AWS_REGION or the profile's region); docs/deploying.md
        says how they are chosen.
    tracing: CommonProps.tracing of every construct of the environment.
    """

    name: str
    stack_prefix: str
    owner: str
    retain_data: bool
    log_retention: logs.RetentionDays
    powertools_layer_version: str = POWERTOOLS_LAYER_VERSION
    log_level: str = "INFO"
    tracing: TracingMode = TracingMode.ACTIVE
    account: str | None = None
    region: str | None = None
    runner_stats: RunnerStatsConfig = field(default_factory=RunnerStatsConfig)
    event_log: EventLogConfig = field(default_factory=EventLogConfig)
    taxi_etl: TaxiEtlConfig = field(default_factory=TaxiEtlConfig)
    monitoring: MonitoringConfig = field(default_factory=MonitoringConfig)

    @property
    def removal_policy(self) -> RemovalPolicy:
        return RemovalPolicy.RETAIN if self.retain_data else RemovalPolicy.DESTROY

    @property
    def common(self) -> CommonProps:
        """What every construct of this environment shares."""
        return CommonProps(
            removal_policy=self.removal_policy,
            log_retention=self.log_retention,
            log_level=self.log_level,
            powertools_layer_version=self.powertools_layer_version,
            tracing=self.tracing,
        )

    @property
    def environment(self) -> Environment | None:
        """The stacks' CDK environment; None leaves them environment-agnostic."""
        if self.account is None and self.region is None:
            return None
        return Environment(account=self.account, region=self.region)

    def title(self, pipeline: str) -> str:
        """A dashboard's heading, e.g. 'onceflow prod: runner stats'."""
        return f"onceflow {self.name}: {pipeline}"

    def runner_stats_props(self) -> RunnerStatsPipelineProps:
        return RunnerStatsPipelineProps(settings=self.runner_stats, common=self.common)

    def event_log_props(self) -> EventLogProps:
        return EventLogProps(settings=self.event_log, common=self.common)

    def taxi_etl_props(self) -> TaxiEtlSagaProps:
        return TaxiEtlSagaProps(settings=self.taxi_etl, common=self.common)

    def alarm_topic_props(self) -> AlarmTopicProps:
        return AlarmTopicProps(removal_policy=self.removal_policy, alarm_email=self.monitoring.alarm_email, label=f"onceflow {self.name}")

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
        if self.account is not None and not re.fullmatch(r"\d{12}", self.account):
            raise ConfigError(f"account {self.account!r} must be a 12-digit AWS account id (or None: the CLI's credentials decide)")
        if self.region is not None and not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", self.region):
            raise ConfigError(f"region {self.region!r} is not an AWS region name such as eu-west-1 (or None: the CLI's profile decides)")
        self.common.validate()
        self.runner_stats.validate()
        self.event_log.validate()
        self.taxi_etl.validate()
        self.monitoring.validate()
        self.monitoring.runner_stats.validate_against(self.runner_stats)
        self.monitoring.event_log.validate_against(self.event_log)
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
        log_level="DEBUG",
        # Lambda's own segments, as in prod, so dev measures what prod runs; TracingMode.SDK adds a
        # subsegment per AWS call when a phase needs that, at 0.1x to 0.2x of boto3's import per cold start
        # (docs/tracing.md, "Tracing").
        tracing=TracingMode.ACTIVE,
        runner_stats=RunnerStatsConfig(),
        # SnapStart off (the default): dev's functions are invoked rarely, so nearly every request
        # would be a restore, and each deploy's versions would be billed their cache for nothing.
        event_log=EventLogConfig(snap_start=False),
        taxi_etl=TaxiEtlConfig(execution_log_level=sfn.LogLevel.ALL, execution_log_data=True, snap_start=False),
    ),
    "prod": EnvConfig(
        name="prod",
        stack_prefix="Onceflow-prod",
        owner="onceflow-team",
        retain_data=True,
        log_retention=logs.RetentionDays.THREE_MONTHS,
        # No tracing SDK in the functions: cold start within 1.3x of boto3's import, and nothing that
        # reaches end of support (the X-Ray SDK's is 2027-02-25). Lambda and Step Functions still trace.
        tracing=TracingMode.ACTIVE,
        runner_stats=RunnerStatsConfig(
            shard_count=2,
            stream_retention_hours=48,
            batch_size=1000,
            # Devices send every 30 s, so any window under 30 s still folds about one message
            # per run into each write: the window buys fewer invocations, not fewer WRU
            # (`make bench` shows both). 5 s keeps the added latency small.
            batching_window_seconds=5,
            max_record_age_seconds=24 * 3600,
            # Sized by `make bench --only latency` (the power-tuning table): twice a shard's ingest
            # with CPU counted, at 1.5x the CPU measured; among the cells of equal $ per million (to the
            # cent), the fewest concurrent batches. Factor 2 keeps order per partition key (= user).
            memory_mb=1769,
            parallelization_factor=2,
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
            # SnapStart off in prod too, until a measured cold start says otherwise: these functions
            # import in about 120-150 ms of CPU (docs/tracing.md, "Cold start"), and build their clients at the first
            # request, so a snapshot would hold only the imports; while Python's SnapStart bills every
            # version's cache for as long as it exists and every restore (docs/tracing.md, "SnapStart"). Turn it
            # on here, and for the taxi API below, when the API's cold-start p99 matters more than that bill.
            snap_start=False,
        ),
        taxi_etl=TaxiEtlConfig(
            batch_max_lines=200,
            api_rate_limit=200,
            api_burst_limit=400,
            # An outage of AWS is waited out longer than in dev: backoff up to 2 min, the redrive 5 min later,
            # so a phase may take up to 17.4 min of backoff and waiting (TaxiEtlConfig.redrive_budget_seconds).
            transient_retry_max_delay_seconds=120,
            auto_redrive_wait_seconds=300,
            execution_timeout_minutes=30,
            snap_start=False,  # as the event log's (above)
        ),
        monitoring=MonitoringConfig(
            # Early: 5 min behind. Loud: 6 h, with 18 h left before the 24 h maximum age gives records
            # up and 42 h before the 48 h retention drops them.
            runner_stats=RunnerStatsAlarms(iterator_age_ms=5 * 60 * 1000, record_age_at_risk_ms=6 * 3600 * 1000),
            event_log=EventLogAlarms(oldest_pending_snapshot_seconds=3 * 3600),
        ),
    ),
}


def load_config(env_name: str | None) -> EnvConfig:
    name = env_name or "dev"
    if name not in ENVIRONMENTS:
        raise ConfigError(f"unknown environment {name!r}; choose one of {', '.join(sorted(ENVIRONMENTS))}")
    return ENVIRONMENTS[name].validate()
