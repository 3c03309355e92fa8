"""The runner-stats stack of one environment."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput
from aws_cdk import aws_sns as sns
from constructs import Construct

from onceflow.infra.config import EnvConfig
from onceflow.infra.runner_stats.construct import RunnerStatsPipeline
from onceflow.infra.runner_stats.monitoring import RunnerStatsMonitoring, RunnerStatsMonitoringProps
from onceflow.infra.stacks import OnceflowStack
from onceflow.runtime.runner_stats import contract


class RunnerStatsStack(OnceflowStack):
    def __init__(
        self, scope: Construct, construct_id: str, *, config: EnvConfig, alarm_topic: sns.ITopic | None = None, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, config=config, description="onceflow runner stats: Kinesis -> Lambda -> DynamoDB", **kwargs)
        self.pipeline = RunnerStatsPipeline(self, "RunnerStats", config.runner_stats_props())
        self.monitoring = RunnerStatsMonitoring(
            self,
            "RunnerStatsMonitoring",
            RunnerStatsMonitoringProps(
                pipeline=self.pipeline,
                alarm_topic=self.alarm_topic_or_own(alarm_topic),
                thresholds=config.monitoring.runner_stats,
                title=config.title("runner stats"),
            ),
        )
        CfnOutput(self, contract.OUTPUT_STREAM_NAME, value=self.pipeline.stream.stream_name)
        CfnOutput(self, contract.OUTPUT_RUN_STATS_TABLE, value=self.pipeline.run_stats_table.table_name)
        # What the operator tools read (python -m ops.runner_stats_reprocess --stack <name>).
        CfnOutput(self, contract.OUTPUT_TENDENCY_TABLE, value=self.pipeline.tendency_table.table_name)
        CfnOutput(self, contract.OUTPUT_MESSAGES_TABLE, value=self.pipeline.messages_table.table_name)
        CfnOutput(self, contract.OUTPUT_DASHBOARD, value=self.monitoring.dashboard.dashboard_name)
