#!/usr/bin/env python3
"""CDK app: picks the environment (-c env=dev|prod), builds its stacks, adds compliance checks."""

from __future__ import annotations

from aws_cdk import App

from onceflow.infra.compliance import add_compliance_checks
from onceflow.infra.config import load_config
from onceflow.infra.event_log.stack import EventLogStack
from onceflow.infra.runner_stats.stack import RunnerStatsStack
from onceflow.infra.stacks import AlarmsStack
from onceflow.infra.taxi_etl.stack import TaxiEtlStack


def build_app(app: App | None = None) -> App:
    app = app or App()
    config = load_config(app.node.try_get_context("env"))
    topic = AlarmsStack(app, config.stack_name("Alarms"), config=config).alarm_topic.topic
    RunnerStatsStack(app, config.stack_name("RunnerStats"), config=config, alarm_topic=topic)
    EventLogStack(app, config.stack_name("EventLog"), config=config, alarm_topic=topic)
    TaxiEtlStack(app, config.stack_name("TaxiEtl"), config=config, alarm_topic=topic)
    add_compliance_checks(app)
    return app


if __name__ == "__main__":
    build_app().synth()
