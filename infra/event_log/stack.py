"""The event-log stack of one environment."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput
from aws_cdk import aws_sns as sns
from constructs import Construct

from onceflow.infra.config import EnvConfig
from onceflow.infra.event_log.construct import EventLog
from onceflow.infra.event_log.monitoring import EventLogMonitoring, EventLogMonitoringProps
from onceflow.infra.stacks import OnceflowStack
from onceflow.runtime.event_log import contract


class EventLogStack(OnceflowStack):
    def __init__(
        self, scope: Construct, construct_id: str, *, config: EnvConfig, alarm_topic: sns.ITopic | None = None, **kwargs: Any
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            config=config,
            description="onceflow event log: API -> DynamoDB log -> stream -> SQS -> snapshot worker",
            **kwargs,
        )
        self.event_log = EventLog(self, "EventLog", config.event_log_props())
        self.monitoring = EventLogMonitoring(
            self,
            "EventLogMonitoring",
            EventLogMonitoringProps(
                event_log=self.event_log,
                alarm_topic=self.alarm_topic_or_own(alarm_topic),
                thresholds=config.monitoring.event_log,
                title=config.title("event log and snapshots"),
            ),
        )
        CfnOutput(self, contract.OUTPUT_DASHBOARD, value=self.monitoring.dashboard.dashboard_name)
        CfnOutput(self, contract.OUTPUT_API_URL, value=self.event_log.http_api.api_endpoint)
        CfnOutput(self, contract.OUTPUT_LOG_TABLE, value=self.event_log.log_table.table_name)
        CfnOutput(self, contract.OUTPUT_BUCKET, value=self.event_log.bucket.bucket_name)
        # What the operator tools read (python -m ops.event_log_reprocess --stack <name>).
        CfnOutput(self, contract.OUTPUT_PENDING_TABLE, value=self.event_log.pending_table.table_name)
        CfnOutput(self, contract.OUTPUT_SNAPSHOT_QUEUE_URL, value=self.event_log.snapshot_queue.queue_url)
        CfnOutput(self, contract.OUTPUT_PAYLOAD_QUEUE_URL, value=self.event_log.payload_queue.queue_url)
