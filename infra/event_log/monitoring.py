"""The event log's alarms and dashboard."""

from __future__ import annotations

from dataclasses import dataclass, field

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sns as sns
from constructs import Construct

from onceflow.infra.common import expect_types
from onceflow.infra.event_log.construct import EventLog
from onceflow.infra.event_log.props import EventLogAlarms
from onceflow.infra.lambda_factory import METRICS_NAMESPACE
from onceflow.infra.monitoring import FIVE_MINUTES, PipelineMonitoring, count
from onceflow.runtime.event_log import contract


@dataclass(frozen=True)
class EventLogMonitoringProps:
    """Inputs of EventLogMonitoring.

    event_log: the EventLog to watch.
    alarm_topic: where every alarm notifies on ALARM and OK (an AlarmTopic's topic or any existing
        topic); by default the construct creates its own AlarmTopic.
    thresholds: when each alarm fires (defaults: EventLogAlarms()), checked against the event
        log's settings (the pending check's interval, the stuck-row age, the record age).
    title: the dashboard's heading.
    """

    event_log: EventLog
    alarm_topic: sns.ITopic | None = None
    thresholds: EventLogAlarms = field(default_factory=EventLogAlarms)
    title: str = "onceflow: event log and snapshots"

    def validate(self) -> None:
        expect_types("EventLogMonitoringProps", event_log=(self.event_log, EventLog), thresholds=(self.thresholds, EventLogAlarms))
        self.thresholds.validate_against(self.event_log.settings)


class EventLogMonitoring(PipelineMonitoring):
    """The event log's alarms (each with a runbook entry) and its dashboard."""

    def __init__(self, scope: Construct, construct_id: str, props: EventLogMonitoringProps) -> None:
        if not isinstance(props, EventLogMonitoringProps):
            raise TypeError("EventLogMonitoring needs EventLogMonitoringProps")
        props.validate()
        super().__init__(scope, construct_id, props.alarm_topic, props.title)
        thresholds = props.thresholds
        log = props.event_log
        check_period = Duration.minutes(3 * log.settings.pending_check_minutes)
        self._alarm(
            "RouterIteratorAge",
            "Table-stream records wait for the side-effect router: it is behind or retrying a failing batch.",
            log.router_function.metric("IteratorAge", statistic="Maximum", period=FIVE_MINUTES),
            thresholds.router_iterator_age_ms,
        )
        self._alarm(
            "RouterOnFailureRecords",
            "The router gave up on table-stream records; their side-effect messages were never sent.",
            log.stream_failure_queue.metric_approximate_number_of_messages_visible(statistic="Maximum", period=FIVE_MINUTES),
            thresholds.stream_failure_messages,
        )
        self._alarm(
            "SnapshotQueueAge",
            "The oldest snapshot message has waited long: builds are deferred behind a stuck predecessor or failing.",
            log.snapshot_queue.metric_approximate_age_of_oldest_message(statistic="Maximum", period=FIVE_MINUTES),
            thresholds.snapshot_queue_oldest_seconds,
        )
        self._alarm(
            "SnapshotDeadLetters",
            "Snapshot messages exhausted their receives and are in the snapshot DLQ.",
            log.snapshot_dead_letter_queue.metric_approximate_number_of_messages_visible(statistic="Maximum", period=FIVE_MINUTES),
            thresholds.dead_letter_messages,
        )
        self._alarm(
            "PayloadDeadLetters",
            "Payload-finalization messages exhausted their receives and are in the payload DLQ.",
            log.payload_dead_letter_queue.metric_approximate_number_of_messages_visible(statistic="Maximum", period=FIVE_MINUTES),
            thresholds.dead_letter_messages,
        )
        self._alarm(
            "OldestPendingSnapshot",
            "A snapshot has been pending too long, or the scheduled pending check stopped reporting.",
            cloudwatch.Metric(
                namespace=METRICS_NAMESPACE,
                metric_name=contract.METRIC_OLDEST_PENDING_SNAPSHOT_AGE,
                dimensions_map={"service": contract.SERVICE_PENDING_CHECK},
                statistic="Maximum",
                period=check_period,
            ),
            thresholds.oldest_pending_snapshot_seconds,
            # The check reports every run, 0 when nothing is pending: silence means it is broken.
            missing=cloudwatch.TreatMissingData.BREACHING,
        )
        self._alarm(
            contract.METRIC_STUCK_SNAPSHOTS_RESENT,
            "The pending check re-sent the build message of a stuck snapshot: its message was lost or dead-lettered;"
            " the build is being recovered automatically, find out why it stalled.",
            cloudwatch.Metric(
                namespace=METRICS_NAMESPACE,
                metric_name=contract.METRIC_STUCK_SNAPSHOTS_RESENT,
                dimensions_map={"service": contract.SERVICE_PENDING_CHECK},
                statistic="Sum",
                period=check_period,
            ),
            thresholds.stuck_snapshots_resent,
        )
        self._alarm(
            "SnapshotBuildDuration",
            "A snapshot took long to build, across its hand-offs.",
            cloudwatch.Metric(
                namespace=METRICS_NAMESPACE,
                metric_name=contract.METRIC_SNAPSHOT_BUILD_SECONDS,
                dimensions_map={"service": contract.SERVICE_WORKER},
                statistic="Maximum",
                period=FIVE_MINUTES,
            ),
            thresholds.snapshot_build_seconds,
        )
        functions = {
            "router": log.router_function,
            "worker": log.worker_function,
            "finalizer": log.finalizer_function,
            "check": log.pending_check_function,
        }
        errors = {name: function.metric_errors(statistic="Sum", period=FIVE_MINUTES) for name, function in functions.items()}
        self._alarm(
            "FunctionErrors",
            "The router, snapshot worker, payload finalizer or pending check failed invocations.",
            cloudwatch.MathExpression(expression=" + ".join(errors), using_metrics=dict(errors), label="Errors", period=FIVE_MINUTES),
            thresholds.errors_per_5min,
        )
        self._graph("Stuck pending snapshots", [count(contract.METRIC_STUCK_PENDING_SNAPSHOTS, contract.SERVICE_PENDING_CHECK)])
        self._graph(
            "Snapshot messages",
            [count(metric, contract.SERVICE_WORKER) for metric in contract.METRIC_SNAPSHOT_OUTCOMES.values()],
        )
        self._graph("Errors by function", list(errors.values()))
        self._dashboard()
