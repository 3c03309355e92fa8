"""The alarm topic every pipeline stack of one environment notifies."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput
from constructs import Construct

from infra.config import EnvConfig
from infra.constructs.monitoring import AlarmTopic, AlarmTopicProps
from infra.stacks.base import OnceflowStack


class AlarmsStack(OnceflowStack):
    def __init__(self, scope: Construct, construct_id: str, *, config: EnvConfig, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, config=config, description="onceflow alarm topic (KMS-encrypted SNS)", **kwargs)
        self.alarm_topic = AlarmTopic(self, "AlarmTopic", AlarmTopicProps(config=config))
        # Subscribe a pager or chat integration here (or set monitoring.alarm_email).
        CfnOutput(self, "AlarmTopicArn", value=self.alarm_topic.topic.topic_arn)
