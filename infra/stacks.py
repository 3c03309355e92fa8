"""What every stack of the app does the same way (the environment's tags and the alarm topic), and the
alarms stack whose topic the pipeline stacks of one environment share."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack, Tags
from aws_cdk import aws_sns as sns
from constructs import Construct

from onceflow.infra.config import EnvConfig
from onceflow.infra.monitoring import AlarmTopic


class OnceflowStack(Stack):
    """A stack tagged with the environment's project, environment and owner tags."""

    def __init__(self, scope: Construct, construct_id: str, *, config: EnvConfig, description: str, **kwargs: Any) -> None:
        # Stack-level tags (cdk.json's explicitStackTags) and the same tags on every resource.
        # The environment's account and region when it names them; environment-agnostic otherwise.
        kwargs.setdefault("env", config.environment)
        super().__init__(scope, construct_id, description=description, tags=config.tags, **kwargs)
        self.config = config
        for key, value in config.tags.items():
            Tags.of(self).add(key, value)

    def alarm_topic_or_own(self, alarm_topic: sns.ITopic | None) -> sns.ITopic:
        """The shared topic when the app passes one; otherwise (a stack deployed alone) its own."""
        if alarm_topic is not None:
            return alarm_topic
        return AlarmTopic(self, "Alarms", self.config.alarm_topic_props()).topic


class AlarmsStack(OnceflowStack):
    def __init__(self, scope: Construct, construct_id: str, *, config: EnvConfig, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, config=config, description="onceflow alarm topic (KMS-encrypted SNS)", **kwargs)
        self.alarm_topic = AlarmTopic(self, "AlarmTopic", config.alarm_topic_props())
        # Subscribe a pager or chat integration here (or set monitoring.alarm_email).
        CfnOutput(self, "AlarmTopicArn", value=self.alarm_topic.topic.topic_arn)
