"""The taxi ETL saga stack of one environment."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput
from aws_cdk import aws_sns as sns
from constructs import Construct

from onceflow.infra.config import EnvConfig
from onceflow.infra.stacks import OnceflowStack
from onceflow.infra.taxi_etl.construct import TaxiEtlSaga
from onceflow.infra.taxi_etl.monitoring import TaxiEtlMonitoring, TaxiEtlMonitoringProps
from onceflow.runtime.taxi_etl import contract


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
        self.saga = TaxiEtlSaga(self, "TaxiEtl", config.taxi_etl_props())
        self.monitoring = TaxiEtlMonitoring(
            self,
            "TaxiEtlMonitoring",
            TaxiEtlMonitoringProps(
                saga=self.saga,
                alarm_topic=self.alarm_topic_or_own(alarm_topic),
                thresholds=config.monitoring.taxi_etl,
                title=config.title("taxi ETL saga"),
            ),
        )
        CfnOutput(self, contract.OUTPUT_DASHBOARD, value=self.monitoring.dashboard.dashboard_name)
        CfnOutput(self, contract.OUTPUT_API_URL, value=self.saga.http_api.api_endpoint)
        # The ARN, not the key: `aws secretsmanager get-secret-value --secret-id <arn>` reads it.
        CfnOutput(self, contract.OUTPUT_API_KEY_SECRET_ARN, value=self.saga.api_key_secret.secret_arn)
        CfnOutput(self, contract.OUTPUT_STATE_MACHINE_ARN, value=self.saga.state_machine.state_machine_arn)
        CfnOutput(self, contract.OUTPUT_BULK_STATE_MACHINE_ARN, value=self.saga.bulk_state_machine.state_machine_arn)
        CfnOutput(self, contract.OUTPUT_INGEST_BUCKET, value=self.saga.ingest_bucket.bucket_name)
        CfnOutput(self, contract.OUTPUT_TRIPS_TABLE, value=self.saga.final_table.table_name)
        for phase, table in self.saga.status_tables.items():
            CfnOutput(self, contract.OUTPUT_STATUS_TABLES[phase], value=table.table_name)
