"""onceflow's public construct API: the three pipelines, their monitoring, and the cdk-nag packs.

Each pipeline builds a production-safe pipeline from defaults::

    from aws_cdk import App, Stack
    from onceflow.constructs import EventLog, RunnerStatsPipeline, TaxiEtlSaga, add_compliance_checks

    app = App()
    stack = Stack(app, "Pipelines")
    RunnerStatsPipeline(stack, "Runs")
    EventLog(stack, "Sheets")
    TaxiEtlSaga(stack, "Taxis")
    add_compliance_checks(app)  # AwsSolutions and Serverless; each construct acknowledges its own findings
    app.synth()

Every construct takes a props dataclass whose fields are documented and validated before
anything is built; what it creates is exposed as typed attributes.
"""

from __future__ import annotations

from onceflow.infra.common import POWERTOOLS_LAYER_VERSION, CommonProps, ConfigError, TableOptions, TracingMode
from onceflow.infra.compliance import acknowledge, add_compliance_checks
from onceflow.infra.event_log.compliance import acknowledge_event_log, acknowledge_imported_bucket
from onceflow.infra.event_log.construct import EventLog
from onceflow.infra.event_log.monitoring import EventLogMonitoring, EventLogMonitoringProps
from onceflow.infra.event_log.props import EventLogAlarms, EventLogConfig, EventLogProps
from onceflow.infra.monitoring import AlarmTopic, AlarmTopicProps
from onceflow.infra.runner_stats.compliance import acknowledge_runner_stats
from onceflow.infra.runner_stats.construct import RunnerStatsPipeline
from onceflow.infra.runner_stats.monitoring import RunnerStatsMonitoring, RunnerStatsMonitoringProps
from onceflow.infra.runner_stats.props import RunnerStatsAlarms, RunnerStatsConfig, RunnerStatsPipelineProps
from onceflow.infra.taxi_etl.compliance import acknowledge_taxi_etl
from onceflow.infra.taxi_etl.construct import TaxiEtlSaga
from onceflow.infra.taxi_etl.monitoring import TaxiEtlMonitoring, TaxiEtlMonitoringProps
from onceflow.infra.taxi_etl.props import TaxiEtlAlarms, TaxiEtlConfig, TaxiEtlSagaProps

__all__ = [
    "POWERTOOLS_LAYER_VERSION",
    "AlarmTopic",
    "AlarmTopicProps",
    "CommonProps",
    "ConfigError",
    "EventLog",
    "EventLogAlarms",
    "EventLogConfig",
    "EventLogMonitoring",
    "EventLogMonitoringProps",
    "EventLogProps",
    "RunnerStatsAlarms",
    "RunnerStatsConfig",
    "RunnerStatsMonitoring",
    "RunnerStatsMonitoringProps",
    "RunnerStatsPipeline",
    "RunnerStatsPipelineProps",
    "TableOptions",
    "TaxiEtlAlarms",
    "TaxiEtlConfig",
    "TaxiEtlMonitoring",
    "TaxiEtlMonitoringProps",
    "TaxiEtlSaga",
    "TaxiEtlSagaProps",
    "TracingMode",
    "acknowledge",
    "acknowledge_event_log",
    "acknowledge_imported_bucket",
    "acknowledge_runner_stats",
    "acknowledge_taxi_etl",
    "add_compliance_checks",
]
