"""The taxi ETL saga's alarms and dashboard."""

from __future__ import annotations

from dataclasses import dataclass, field

from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from onceflow.infra.common import expect_types
from onceflow.infra.lambda_factory import METRICS_NAMESPACE
from onceflow.infra.monitoring import FIVE_MINUTES, PipelineMonitoring, count
from onceflow.infra.taxi_etl.construct import TaxiEtlSaga
from onceflow.infra.taxi_etl.props import TaxiEtlAlarms
from onceflow.runtime.taxi_etl import contract


@dataclass(frozen=True)
class TaxiEtlMonitoringProps:
    """Inputs of TaxiEtlMonitoring.

    saga: the TaxiEtlSaga to watch.
    alarm_topic: where every alarm notifies on ALARM and OK (an AlarmTopic's topic or any existing
        topic); by default the construct creates its own AlarmTopic.
    thresholds: when each alarm fires (defaults: TaxiEtlAlarms()).
    title: the dashboard's heading.
    """

    saga: TaxiEtlSaga
    alarm_topic: sns.ITopic | None = None
    thresholds: TaxiEtlAlarms = field(default_factory=TaxiEtlAlarms)
    title: str = "onceflow: taxi ETL saga"

    def validate(self) -> None:
        expect_types("TaxiEtlMonitoringProps", saga=(self.saga, TaxiEtlSaga), thresholds=(self.thresholds, TaxiEtlAlarms))
        self.thresholds.validate()


def failed_or_timed_out(machine: sfn.StateMachine, label: str) -> cloudwatch.MathExpression:
    """A state machine's executions that failed or timed out, summed over five minutes."""
    ended_badly = {
        "failed": machine.metric_failed(statistic="Sum", period=FIVE_MINUTES),
        "timedOut": machine.metric_timed_out(statistic="Sum", period=FIVE_MINUTES),
    }
    return cloudwatch.MathExpression(expression="failed + timedOut", using_metrics=ended_badly, label=label, period=FIVE_MINUTES)


class TaxiEtlMonitoring(PipelineMonitoring):
    """The taxi saga's alarms (each with a runbook entry) and its dashboard."""

    def __init__(self, scope: Construct, construct_id: str, props: TaxiEtlMonitoringProps) -> None:
        if not isinstance(props, TaxiEtlMonitoringProps):
            raise TypeError("TaxiEtlMonitoring needs TaxiEtlMonitoringProps")
        props.validate()
        super().__init__(scope, construct_id, props.alarm_topic, props.title)
        thresholds = props.thresholds
        saga = props.saga
        machine = saga.state_machine
        self._alarm(
            "FailedExecutions",
            "Executions failed or timed out (a flagged row fails its execution too: see the flag alarms).",
            failed_or_timed_out(machine, "Failed"),
            thresholds.failed_executions_per_5min,
        )
        # The bulk route's machine: a load that fails (a plan refusing its input, a chunk failing after its retries, a
        # report that cannot be written) or runs out of time is a failure its caller sees on GET /loads/{LoadId}.
        self._alarm(
            "FailedLoads",
            "Bulk loads failed or timed out: their reports (GET /loads/{LoadId}) name the error and the missing chunks.",
            failed_or_timed_out(saga.bulk_state_machine, "Failed loads"),
            thresholds.failed_loads_per_5min,
        )
        for phase, threshold in (
            ("validation", thresholds.flagged_validation_per_5min),
            ("transformation", thresholds.flagged_transformation_per_5min),
            ("store", thresholds.flagged_store_per_5min),
        ):
            self._alarm(
                f"Flagged{phase.title()}",
                f"Executions whose rows the {phase} flag step flagged.",
                count(contract.METRIC_EXECUTIONS_FLAGGED, contract.SERVICE_FLAG, phase=phase),
                threshold,
            )
        # Rows AWS failed through a phase's retries and its one automatic redrive (flagged `retryable:<error>`).
        still_retryable = {
            phase: count(contract.METRIC_ROWS_STILL_RETRYABLE, contract.SERVICE_FLAG, phase=phase)
            for phase in ("validation", "transformation", "store")
        }
        self._alarm(
            "StillRetryable",
            "Rows AWS kept failing (connections, throttles, 5xx) through the retries and the automatic redrive; no verdict on them.",
            cloudwatch.MathExpression(
                expression=" + ".join(still_retryable), using_metrics=still_retryable, label="Still retryable", period=FIVE_MINUTES
            ),
            thresholds.still_retryable_rows_per_5min,
        )
        self._alarm(
            "AuthorizerDenials",
            "The authorizer refused keys (counted per uncached decision: API Gateway caches them).",
            count(contract.METRIC_REQUESTS_DENIED, contract.SERVICE_AUTHORIZER),
            thresholds.authorizer_denials_per_5min,
        )
        self._alarm(
            "Api4xx",
            "Clients get 4xx answers: bad rows or keys, oversized bodies, throttling (429), or GETs of ids no phase has seen (404).",
            saga.http_api.metric_client_error(statistic="Sum", period=FIVE_MINUTES),
            thresholds.api_4xx_per_5min,
        )
        self._alarm(
            "Api5xx",
            "Clients get 5xx answers: the API function or StartExecution failed, or the GET function could not read the tables.",
            saga.http_api.metric_server_error(statistic="Sum", period=FIVE_MINUTES),
            thresholds.api_5xx_per_5min,
        )
        self._alarm(
            "ExecutionDuration",
            "Executions are slow (p99): phases are retrying with backoff, or throttled.",
            machine.metric_time(statistic="p99", period=FIVE_MINUTES),
            thresholds.execution_p99_ms,
        )
        # Every (phase, reason) pair the flag steps published, without listing the rules here.
        self._graph(
            "Rows flagged by phase and reason",
            [
                cloudwatch.MathExpression(
                    expression=f"SEARCH('{{{METRICS_NAMESPACE},phase,reason,service}} MetricName=\"RowsFlagged\"', 'Sum', 300)",
                    using_metrics={},
                    label="",
                    period=FIVE_MINUTES,
                )
            ],
        )
        self._graph(
            "Executions",
            [
                machine.metric_started(statistic="Sum", period=FIVE_MINUTES),
                machine.metric_succeeded(statistic="Sum", period=FIVE_MINUTES),
                machine.metric_failed(statistic="Sum", period=FIVE_MINUTES),
            ],
        )
        self._dashboard()
