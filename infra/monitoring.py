"""The encrypted SNS topic every alarm notifies, and the base of each pipeline's monitoring.

Built on plain CloudWatch constructs rather than cdk-monitoring-constructs (docs/monitoring.md
says why). Each pipeline's monitoring construct (infra/<pipeline>/monitoring.py)
takes the pipeline construct, its thresholds and an alarm topic, which may be an `AlarmTopic` or
any existing topic (by default it makes its own `AlarmTopic`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from onceflow.infra.common import CommonProps, ConfigError
from onceflow.infra.lambda_factory import METRICS_NAMESPACE

FIVE_MINUTES = Duration.minutes(5)
ONE_MINUTE = Duration.minutes(1)
RUNBOOK = "README.md, 'Alarm runbook'"


@dataclass(frozen=True)
class AlarmTopicProps:
    """Inputs of AlarmTopic.

    removal_policy: RETAIN (the default) keeps the topic and its key, so pagers subscribed to its
        ARN outside CloudFormation keep it; DESTROY suits a throwaway environment.
    alarm_email: subscribed to the topic when set (the address confirms by mail). Leave it empty
        to subscribe a pager or chat integration to the topic instead.
    label: names the topic and its key ("<label> alarms", "<label> alarm topic").
    """

    removal_policy: RemovalPolicy = RemovalPolicy.RETAIN
    alarm_email: str | None = None
    label: str = "onceflow"

    def validate(self) -> None:
        CommonProps(removal_policy=self.removal_policy).validate()
        if self.alarm_email is not None and not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", self.alarm_email):
            raise ConfigError(f"monitoring.alarm_email {self.alarm_email!r} is not an e-mail address")


class AlarmTopic(Construct):
    """An SNS topic for alarm notifications, encrypted with its own rotating KMS key.

    CloudWatch cannot publish to a topic encrypted with the AWS-managed SNS key, so the key is a
    customer key whose policy lets CloudWatch (of this account only) use it.
    """

    key: kms.Key
    topic: sns.Topic

    def __init__(self, scope: Construct, construct_id: str, props: AlarmTopicProps | None = None) -> None:
        props = props if props is not None else AlarmTopicProps()
        if not isinstance(props, AlarmTopicProps):
            raise TypeError("AlarmTopic needs AlarmTopicProps")
        props.validate()
        super().__init__(scope, construct_id)
        account = Stack.of(self).account
        self.key = kms.Key(
            self,
            "Key",
            description=f"{props.label} alarm topic",
            enable_key_rotation=True,
            removal_policy=props.removal_policy,
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
        self.topic = sns.Topic(self, "Topic", display_name=f"{props.label} alarms", master_key=self.key, enforce_ssl=True)
        # Kept in prod: pagers subscribed to its ARN outside CloudFormation must not lose it.
        self.topic.apply_removal_policy(props.removal_policy)
        # enforce_ssl gives the topic a policy, which replaces SNS's default one: allow CloudWatch explicitly.
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[cloudwatch_principal],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={"StringEquals": {"aws:SourceAccount": account}},
            )
        )
        if props.alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(props.alarm_email))


class PipelineMonitoring(Construct):
    """A pipeline's alarms (each notifying the topic on ALARM and OK) and its dashboard; without a
    topic, its own AlarmTopic (`alarm_topic`)."""

    dashboard: cloudwatch.Dashboard
    alarms: dict[str, cloudwatch.Alarm]
    alarm_topic: sns.ITopic

    def __init__(self, scope: Construct, construct_id: str, alarm_topic: sns.ITopic | None, title: str) -> None:
        super().__init__(scope, construct_id)
        self.alarm_topic = alarm_topic if alarm_topic is not None else AlarmTopic(self, "AlarmTopic").topic
        self._action = actions.SnsAction(self.alarm_topic)
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
