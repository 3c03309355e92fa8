"""Dashboards and alarms of the three pipelines, and the encrypted SNS topic their alarms notify.

Built on plain CloudWatch constructs rather than cdk-monitoring-constructs (the README's
"Monitoring" section says why). One construct per pipeline: it takes the pipeline construct,
the environment config (every threshold comes from `config.monitoring`) and an alarm topic,
which may be the app's `AlarmTopic` or any existing topic of the user's.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from infra.config import EnvConfig
from infra.constructs.event_log import PENDING_CHECK_SERVICE, SNAPSHOT_OUTCOMES, WORKER_SERVICE, EventLog
from infra.constructs.runner_stats import SERVICE as RUNNER_STATS_SERVICE
from infra.constructs.runner_stats import RunnerStatsPipeline
from infra.constructs.taxi_etl import AUTHORIZER_SERVICE, FLAG_SERVICE, TaxiEtlSaga
from infra.lambda_factory import METRICS_NAMESPACE

FIVE_MINUTES = Duration.minutes(5)
ONE_MINUTE = Duration.minutes(1)
RUNBOOK = "README.md, 'Alarm runbook'"


@dataclass(frozen=True)
class AlarmTopicProps:
    """config: the environment (removal policy; `monitoring.alarm_email` is subscribed when set)."""

    config: EnvConfig


class AlarmTopic(Construct):
    """An SNS topic for alarm notifications, encrypted with its own rotating KMS key.

    CloudWatch cannot publish to a topic encrypted with the AWS-managed SNS key, so the key is a
    customer key whose policy lets CloudWatch (of this account only) use it.
    """

    key: kms.Key
    topic: sns.Topic

    def __init__(self, scope: Construct, construct_id: str, props: AlarmTopicProps) -> None:
        if not isinstance(props, AlarmTopicProps):
            raise TypeError("AlarmTopic needs AlarmTopicProps")
        props.config.validate()
        super().__init__(scope, construct_id)
        config = props.config
        account = Stack.of(self).account
        self.key = kms.Key(
            self,
            "Key",
            description=f"onceflow {config.name} alarm topic",
            enable_key_rotation=True,
            removal_policy=config.removal_policy,
        )
        cloudwatch_principal = iam.ServicePrincipal("cloudwatch.amazonaws.com")
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[cloudwatch_principal],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions={"StringEquals": {"aws:SourceAccount": account}},
            )
        )
        self.topic = sns.Topic(self, "Topic", display_name=f"onceflow {config.name} alarms", master_key=self.key, enforce_ssl=True)
        # Kept in prod: pagers subscribed to its ARN outside CloudFormation must not lose it.
        self.topic.apply_removal_policy(config.removal_policy)
        # enforce_ssl gives the topic a policy, which replaces SNS's default one: allow CloudWatch explicitly.
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[cloudwatch_principal],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={"StringEquals": {"aws:SourceAccount": account}},
            )
        )
        if config.monitoring.alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(config.monitoring.alarm_email))


class _PipelineMonitoring(Construct):
    """A pipeline's alarms (each notifying the topic on ALARM and OK) and its dashboard."""

    dashboard: cloudwatch.Dashboard
    alarms: dict[str, cloudwatch.Alarm]

    def __init__(self, scope: Construct, construct_id: str, alarm_topic: sns.ITopic, title: str) -> None:
        super().__init__(scope, construct_id)
        self._action = actions.SnsAction(alarm_topic)
        self._title = title
        self.alarms = {}
        self._graphs: list[cloudwatch.IWidget] = []

    def _alarm(
        self,
        name: str,
        description: str,
        metric: cloudwatch.IMetric,
        threshold: float,
        *,
        periods: int = 1,
        missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
    ) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(
            self,
            name,
            alarm_description=f"{description} Runbook: {RUNBOOK}, {name}.",
            metric=metric,
            threshold=threshold,
            evaluation_periods=periods,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=missing,
        )
        alarm.add_alarm_action(self._action)
        alarm.add_ok_action(self._action)
        self.alarms[name] = alarm
        self._graphs.append(cloudwatch.AlarmWidget(title=name, alarm=alarm, width=8, height=6))
        return alarm

    def _graph(self, title: str, metrics: list[cloudwatch.IMetric]) -> None:
        """A graph of metrics no alarm watches, for context while one fires."""
        self._graphs.append(cloudwatch.GraphWidget(title=title, left=metrics, width=8, height=6))

    def _dashboard(self) -> None:
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", default_interval=Duration.hours(3))
        self.dashboard.add_widgets(
            cloudwatch.TextWidget(markdown=f"# {self._title}\nEvery alarm has a runbook entry: {RUNBOOK}.", width=24, height=2)
        )
        self.dashboard.add_widgets(cloudwatch.AlarmStatusWidget(alarms=list(self.alarms.values()), title="Alarms", width=24))
        for start in range(0, len(self._graphs), 3):
            self.dashboard.add_widgets(*self._graphs[start : start + 3])


def _count(metric_name: str, service: str, **dimensions: str) -> cloudwatch.Metric:
    """A handler's own EMF count, summed per 5 minutes."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=metric_name,
        dimensions_map={"service": service, **dimensions},
        statistic="Sum",
        period=FIVE_MINUTES,
    )


@dataclass(frozen=True)
class RunnerStatsMonitoringProps:
    """pipeline: the RunnerStatsPipeline to watch; config: thresholds (config.monitoring.runner_stats);
    alarm_topic: where every alarm notifies (AlarmTopic.topic or an existing topic)."""

    pipeline: RunnerStatsPipeline
    config: EnvConfig
    alarm_topic: sns.ITopic


class RunnerStatsMonitoring(_PipelineMonitoring):
    def __init__(self, scope: Construct, construct_id: str, props: RunnerStatsMonitoringProps) -> None:
        if not isinstance(props, RunnerStatsMonitoringProps):
            raise TypeError("RunnerStatsMonitoring needs RunnerStatsMonitoringProps")
        props.config.validate()
        super().__init__(scope, construct_id, props.alarm_topic, f"onceflow {props.config.name}: runner stats")
        thresholds = props.config.monitoring.runner_stats
        function = props.pipeline.function
        self._alarm(
            "IteratorAge",
            "Records wait in the Kinesis stream: the consumer is behind, or retrying a failing batch.",
            function.metric("IteratorAge", statistic="Maximum", period=ONE_MINUTE),
            thresholds.iterator_age_ms,
            periods=thresholds.iterator_age_minutes,
        )
        self._alarm(
            "OnFailureRecords",
            "Records exhausted their retries or age and were sent to the on-failure queue.",
            props.pipeline.failure_queue.metric_approximate_number_of_messages_visible(statistic="Maximum", period=FIVE_MINUTES),
            thresholds.on_failure_messages,
        )
        self._alarm(
            "RejectedRecords",
            "Devices send records the handler rejects (kept in the rejects table with the reason).",
            _count("RejectedRecords", RUNNER_STATS_SERVICE),
            thresholds.rejected_per_5min,
        )
        self._alarm(
            "StaleMessages",
            "Messages arrive for runs whose statistics already moved past them (late redeliveries or device clocks).",
            _count("StaleMessages", RUNNER_STATS_SERVICE),
            thresholds.stale_per_5min,
        )
        self._alarm(
            "SuspectJumps",
            "Devices send sequence ids far ahead of their runs; those messages are held, not applied, until the run corroborates them.",
            _count("SuspectJumps", RUNNER_STATS_SERVICE),
            thresholds.suspect_jumps_per_5min,
        )
        self._alarm(
            "DuplicateMessages",
            "A storm of duplicate messages: a producer or the event source is re-sending in a loop.",
            _count("DuplicateMessages", RUNNER_STATS_SERVICE),
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
            [_count(name, RUNNER_STATS_SERVICE) for name in ("AcceptedMessages", "DuplicateMessages", "StaleMessages", "GapsClosed")],
        )
        self._graph("Commit retries (stale-write guard lost a race)", [_count("CommitRetries", RUNNER_STATS_SERVICE)])
        self._dashboard()


@dataclass(frozen=True)
class EventLogMonitoringProps:
    """event_log: the EventLog to watch; config: thresholds (config.monitoring.event_log);
    alarm_topic: where every alarm notifies (AlarmTopic.topic or an existing topic)."""

    event_log: EventLog
    config: EnvConfig
    alarm_topic: sns.ITopic


class EventLogMonitoring(_PipelineMonitoring):
    def __init__(self, scope: Construct, construct_id: str, props: EventLogMonitoringProps) -> None:
        if not isinstance(props, EventLogMonitoringProps):
            raise TypeError("EventLogMonitoring needs EventLogMonitoringProps")
        props.config.validate()
        super().__init__(scope, construct_id, props.alarm_topic, f"onceflow {props.config.name}: event log and snapshots")
        thresholds = props.config.monitoring.event_log
        log = props.event_log
        check_period = Duration.minutes(3 * thresholds.pending_check_minutes)
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
                metric_name="OldestPendingSnapshotAgeSeconds",
                dimensions_map={"service": PENDING_CHECK_SERVICE},
                statistic="Maximum",
                period=check_period,
            ),
            thresholds.oldest_pending_snapshot_seconds,
            # The check reports every run, 0 when nothing is pending: silence means it is broken.
            missing=cloudwatch.TreatMissingData.BREACHING,
        )
        self._alarm(
            "StuckSnapshotsResent",
            "The pending check re-sent the build message of a stuck snapshot: its message was lost or dead-lettered;"
            " the build is being recovered automatically, find out why it stalled.",
            cloudwatch.Metric(
                namespace=METRICS_NAMESPACE,
                metric_name="StuckSnapshotsResent",
                dimensions_map={"service": PENDING_CHECK_SERVICE},
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
                metric_name="SnapshotBuildSeconds",
                dimensions_map={"service": WORKER_SERVICE},
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
        self._graph("Stuck pending snapshots", [_count("StuckPendingSnapshots", PENDING_CHECK_SERVICE)])
        self._graph(
            "Snapshot messages",
            [_count(f"Snapshots{outcome}", WORKER_SERVICE) for outcome in SNAPSHOT_OUTCOMES],
        )
        self._graph("Errors by function", list(errors.values()))
        self._dashboard()


@dataclass(frozen=True)
class TaxiEtlMonitoringProps:
    """saga: the TaxiEtlSaga to watch; config: thresholds (config.monitoring.taxi_etl);
    alarm_topic: where every alarm notifies (AlarmTopic.topic or an existing topic)."""

    saga: TaxiEtlSaga
    config: EnvConfig
    alarm_topic: sns.ITopic


class TaxiEtlMonitoring(_PipelineMonitoring):
    def __init__(self, scope: Construct, construct_id: str, props: TaxiEtlMonitoringProps) -> None:
        if not isinstance(props, TaxiEtlMonitoringProps):
            raise TypeError("TaxiEtlMonitoring needs TaxiEtlMonitoringProps")
        props.config.validate()
        super().__init__(scope, construct_id, props.alarm_topic, f"onceflow {props.config.name}: taxi ETL saga")
        thresholds = props.config.monitoring.taxi_etl
        saga = props.saga
        machine = saga.state_machine
        ended_badly = {
            "failed": machine.metric_failed(statistic="Sum", period=FIVE_MINUTES),
            "timedOut": machine.metric_timed_out(statistic="Sum", period=FIVE_MINUTES),
        }
        self._alarm(
            "FailedExecutions",
            "Executions failed or timed out (a flagged row fails its execution too: see the flag alarms).",
            cloudwatch.MathExpression(expression="failed + timedOut", using_metrics=ended_badly, label="Failed", period=FIVE_MINUTES),
            thresholds.failed_executions_per_5min,
        )
        for phase, threshold in (
            ("validation", thresholds.flagged_validation_per_5min),
            ("transformation", thresholds.flagged_transformation_per_5min),
            ("store", thresholds.flagged_store_per_5min),
        ):
            self._alarm(
                f"Flagged{phase.title()}",
                f"Executions whose rows the {phase} flag step flagged.",
                _count("ExecutionsFlagged", FLAG_SERVICE, phase=phase),
                threshold,
            )
        self._alarm(
            "AuthorizerDenials",
            "The authorizer refused keys (counted per uncached decision: API Gateway caches them).",
            _count("RequestsDenied", AUTHORIZER_SERVICE),
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
