"""The runner-stats pipeline's alarms and dashboard."""

from __future__ import annotations

from dataclasses import dataclass, field

from aws_cdk import aws_sns as sns
from constructs import Construct

from onceflow.infra.common import expect_types
from onceflow.infra.monitoring import FIVE_MINUTES, ONE_MINUTE, PipelineMonitoring, count
from onceflow.infra.runner_stats.construct import RunnerStatsPipeline
from onceflow.infra.runner_stats.props import RunnerStatsAlarms
from onceflow.runtime.runner_stats import contract


@dataclass(frozen=True)
class RunnerStatsMonitoringProps:
    """Inputs of RunnerStatsMonitoring.

    pipeline: the RunnerStatsPipeline to watch.
    alarm_topic: where every alarm notifies on ALARM and OK (an AlarmTopic's topic or any existing
        topic); by default the construct creates its own AlarmTopic.
    thresholds: when each alarm fires (defaults: RunnerStatsAlarms()).
    title: the dashboard's heading.
    """

    pipeline: RunnerStatsPipeline
    alarm_topic: sns.ITopic | None = None
    thresholds: RunnerStatsAlarms = field(default_factory=RunnerStatsAlarms)
    title: str = "onceflow: runner stats"

    def validate(self) -> None:
        expect_types(
            "RunnerStatsMonitoringProps", pipeline=(self.pipeline, RunnerStatsPipeline), thresholds=(self.thresholds, RunnerStatsAlarms)
        )
        self.thresholds.validate()
        self.thresholds.validate_against(self.pipeline.settings)


class RunnerStatsMonitoring(PipelineMonitoring):
    """The runner-stats pipeline's alarms (each with a runbook entry) and its dashboard."""

    def __init__(self, scope: Construct, construct_id: str, props: RunnerStatsMonitoringProps) -> None:
        if not isinstance(props, RunnerStatsMonitoringProps):
            raise TypeError("RunnerStatsMonitoring needs RunnerStatsMonitoringProps")
        props.validate()
        super().__init__(scope, construct_id, props.alarm_topic, props.title)
        thresholds = props.thresholds
        function = props.pipeline.function
        self._alarm(
            "IteratorAge",
            "Records wait in the Kinesis stream: the consumer is behind, or retrying a failing batch.",
            function.metric("IteratorAge", statistic="Maximum", period=ONE_MINUTE),
            thresholds.iterator_age_ms,
            periods=thresholds.iterator_age_minutes,
        )
        self._alarm(
            "RecordAgeAtRisk",
            "Records in the stream near the maximum record age, where the mapping gives them up to the on-failure queue;"
            " the stream drops them at its retention.",
            function.metric("IteratorAge", statistic="Maximum", period=ONE_MINUTE),
            thresholds.record_age_at_risk_ms,
            periods=thresholds.iterator_age_minutes,
        )
        self._alarm(
            "OnFailureRecords",
            "Records exhausted their retries or age and were sent to the on-failure queue.",
            props.pipeline.failure_queue.metric_approximate_number_of_messages_visible(statistic="Maximum", period=FIVE_MINUTES),
            thresholds.on_failure_messages,
        )
        self._alarm(
            contract.METRIC_REJECTED_RECORDS,  # the alarm is named after its metric
            "Devices send records the handler rejects (kept in the rejects table with the reason).",
            count(contract.METRIC_REJECTED_RECORDS, contract.SERVICE),
            thresholds.rejected_per_5min,
        )
        self._alarm(
            contract.METRIC_STALE_MESSAGES,  # the alarm is named after its metric
            "Messages arrive for runs whose statistics already moved past them (late redeliveries or device clocks).",
            count(contract.METRIC_STALE_MESSAGES, contract.SERVICE),
            thresholds.stale_per_5min,
        )
        self._alarm(
            contract.METRIC_SUSPECT_JUMPS,  # the alarm is named after its metric
            "Devices send sequence ids far ahead of their runs; those messages are held, not applied, until the run corroborates them.",
            count(contract.METRIC_SUSPECT_JUMPS, contract.SERVICE),
            thresholds.suspect_jumps_per_5min,
        )
        self._alarm(
            contract.METRIC_DUPLICATE_MESSAGES,  # the alarm is named after its metric
            "A storm of duplicate messages: a producer or the event source is re-sending in a loop.",
            count(contract.METRIC_DUPLICATE_MESSAGES, contract.SERVICE),
            thresholds.duplicate_per_5min,
        )
        self._alarm(
            "HandlerErrors",
            "The handler failed invocations (batches are retried, bisected, then sent to the on-failure queue).",
            function.metric_errors(statistic="Sum", period=FIVE_MINUTES),
            thresholds.errors_per_5min,
        )
        self._alarm(
            "HandlerThrottles",
            "Lambda throttled the handler: the account or function concurrency is exhausted.",
            function.metric_throttles(statistic="Sum", period=FIVE_MINUTES),
            thresholds.throttles_per_5min,
        )
        self._graph(
            "Messages",
            [
                count(name, contract.SERVICE)
                for name in (
                    contract.METRIC_ACCEPTED_MESSAGES,
                    contract.METRIC_DUPLICATE_MESSAGES,
                    contract.METRIC_STALE_MESSAGES,
                    contract.METRIC_GAPS_CLOSED,
                )
            ],
        )
        self._graph("Commit retries (stale-write guard lost a race)", [count(contract.METRIC_COMMIT_RETRIES, contract.SERVICE)])
        self._dashboard()
