"""The encrypted SNS topic every alarm notifies, and the base of each pipeline's monitoring.

Built on plain CloudWatch constructs rather than cdk-monitoring-constructs (the README's
"Monitoring" section says why). Each pipeline's monitoring construct (infra/<pipeline>/monitoring.py)
takes the pipeline construct, the environment config (every threshold comes from
`config.monitoring`) and an alarm topic, which may be the app's `AlarmTopic` or any existing topic.
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


class PipelineMonitoring(Construct):
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


def count(metric_name: str, service: str, **dimensions: str) -> cloudwatch.Metric:
    """A handler's own EMF count, summed per 5 minutes."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=metric_name,
        dimensions_map={"service": service, **dimensions},
        statistic="Sum",
        period=FIVE_MINUTES,
    )
