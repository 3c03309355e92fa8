"""The taxi ETL saga stack of one environment."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput
from aws_cdk import aws_sns as sns
from constructs import Construct

from infra.config import EnvConfig
from infra.stacks import OnceflowStack
from infra.taxi_etl.construct import TaxiEtlSaga, TaxiEtlSagaProps
from infra.taxi_etl.monitoring import TaxiEtlMonitoring, TaxiEtlMonitoringProps
from runtime.event_log import contract as event_log_contract


class TaxiEtlStack(OnceflowStack):
    def __init__(
        self, scope: Construct, construct_id: str, *, config: EnvConfig, alarm_topic: sns.ITopic | None = None, **kwargs: Any
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            config=config,
            description="onceflow taxi ETL saga: HTTP API -> Step Functions -> validate / transform / store",
            **kwargs,
        )
        self.saga = TaxiEtlSaga(self, "TaxiEtl", TaxiEtlSagaProps(config=config))
        self.monitoring = TaxiEtlMonitoring(
            self,
            "TaxiEtlMonitoring",
            TaxiEtlMonitoringProps(saga=self.saga, config=config, alarm_topic=self.alarm_topic_or_own(alarm_topic)),
        )
        CfnOutput(self, event_log_contract.OUTPUT_DASHBOARD, value=self.monitoring.dashboard.dashboard_name)
        CfnOutput(self, event_log_contract.OUTPUT_API_URL, value=self.saga.http_api.api_endpoint)
        # The ARN, not the key: `aws secretsmanager get-secret-value --secret-id <arn>` reads it.
        CfnOutput(self, "ApiKeySecretArn", value=self.saga.api_key_secret.secret_arn)
        CfnOutput(self, "StateMachineArn", value=self.saga.state_machine.state_machine_arn)
        CfnOutput(self, "TripsTableName", value=self.saga.final_table.table_name)
        for phase, table in self.saga.status_tables.items():
            CfnOutput(self, f"{phase}StatusTableName", value=table.table_name)
