"""Alarms, dashboards and the alarm topic of every environment, and the scheduled pending check.

The templates come from the session fixtures `dev_templates` / `prod_templates` (tests/conftest.py):
`app.build_app` with cdk.json's context and cdk-nag on, i.e. what `cdk synth -c env=...` produces.
Which alarms exist, what each one watches (namespace, metric, dimensions, statistic, period) and how
it treats missing data are written out here (not derived from infra/<pipeline>/monitoring.py), so a
construct edit that changes them shows up as a failing test; thresholds and evaluation periods are
read from the environment's `config.monitoring`. Variants (other thresholds, an e-mail subscriber, a
stack deployed alone) are built in a fresh App; the variant app goes through `app.build_app` itself,
with `load_config` replaced.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Template

import app as cdk_app
from devtools.aws.template_resources import cdk_context, resources_of_type
from onceflow.infra.config import ConfigError, EnvConfig, EventLogAlarms, MonitoringConfig, RunnerStatsAlarms, TaxiEtlAlarms, load_config
from onceflow.infra.monitoring import AlarmTopic, AlarmTopicProps
from onceflow.infra.runner_stats.stack import RunnerStatsStack
from onceflow.infra.stacks import AlarmsStack
from runtime.event_log.pending_check import StuckRules
from runtime.event_log.pending_check_wiring import PendingCheckSettings
from runtime.shared.contract import TRACING_MODE_VARIABLE
from tests.infra.template_queries import (
    Grants,
    RecordingEnvironment,
    arn,
    as_list,
    function,
    key,
    log_group_of,
    ref,
    resolved_environment,
    role_of,
    unconditional,
    variables_of,
)

PIPELINES = ("RunnerStats", "EventLog", "TaxiEtl")

# What the brief fixes per environment (independent of infra/config.py on purpose).
EXPECTED = {
    # stuck after: the snapshot queue's visibility timeout (6 worker timeouts) plus the lease
    "dev": {
        "iterator_age_ms": 15 * 60 * 1000,
        "record_age_at_risk_ms": 2 * 3600 * 1000,
        "stuck_after_seconds": 6 * 300 + 600,
        "lease_seconds": 600,
        "schedule": "rate(5 minutes)",
    },
    "prod": {
        "iterator_age_ms": 5 * 60 * 1000,
        "record_age_at_risk_ms": 6 * 3600 * 1000,
        "stuck_after_seconds": 6 * 900 + 1200,
        "lease_seconds": 1200,
        "schedule": "rate(5 minutes)",
    },
}

# Every alarm description ends with its runbook entry; the name there identifies the alarm.
RUNBOOK_SUFFIX = re.compile(r"\S Runbook: README\.md, 'Alarm runbook', (\w+)\.$")
ALARM_NAMES = {
    "RunnerStats": {
        "IteratorAge",
        "RecordAgeAtRisk",
        "OnFailureRecords",
        "RejectedRecords",
        "StaleMessages",
        "SuspectJumps",
        "DuplicateMessages",
        "HandlerErrors",
        "HandlerThrottles",
    },
    "EventLog": {
        "RouterIteratorAge",
        "RouterOnFailureRecords",
        "SnapshotQueueAge",
        "SnapshotDeadLetters",
        "PayloadDeadLetters",
        "OldestPendingSnapshot",
        "StuckSnapshotsResent",
        "SnapshotBuildDuration",
        "FunctionErrors",
    },
    "TaxiEtl": {
        "FailedExecutions",
        "FlaggedValidation",
        "FlaggedTransformation",
        "FlaggedStore",
        "AuthorizerDenials",
        "Api4xx",
        "Api5xx",
        "ExecutionDuration",
        "StillRetryable",
        "FailedLoads",
    },
}
ALARM_CASES = [pytest.param(pipeline, name, id=f"{pipeline}-{name}") for pipeline in PIPELINES for name in sorted(ALARM_NAMES[pipeline])]

# Alarm -> (section of config.monitoring, field) of its threshold.
THRESHOLDS = {
    "IteratorAge": ("runner_stats", "iterator_age_ms"),
    "RecordAgeAtRisk": ("runner_stats", "record_age_at_risk_ms"),
    "OnFailureRecords": ("runner_stats", "on_failure_messages"),
    "RejectedRecords": ("runner_stats", "rejected_per_5min"),
    "StaleMessages": ("runner_stats", "stale_per_5min"),
    "SuspectJumps": ("runner_stats", "suspect_jumps_per_5min"),
    "DuplicateMessages": ("runner_stats", "duplicate_per_5min"),
    "HandlerErrors": ("runner_stats", "errors_per_5min"),
    "HandlerThrottles": ("runner_stats", "throttles_per_5min"),
    "RouterIteratorAge": ("event_log", "router_iterator_age_ms"),
    "RouterOnFailureRecords": ("event_log", "stream_failure_messages"),
    "SnapshotQueueAge": ("event_log", "snapshot_queue_oldest_seconds"),
    "SnapshotDeadLetters": ("event_log", "dead_letter_messages"),
    "PayloadDeadLetters": ("event_log", "dead_letter_messages"),
    "OldestPendingSnapshot": ("event_log", "oldest_pending_snapshot_seconds"),
    "StuckSnapshotsResent": ("event_log", "stuck_snapshots_resent"),
    "SnapshotBuildDuration": ("event_log", "snapshot_build_seconds"),
    "FunctionErrors": ("event_log", "errors_per_5min"),
    "FailedExecutions": ("taxi_etl", "failed_executions_per_5min"),
    "FlaggedValidation": ("taxi_etl", "flagged_validation_per_5min"),
    "FlaggedTransformation": ("taxi_etl", "flagged_transformation_per_5min"),
    "FlaggedStore": ("taxi_etl", "flagged_store_per_5min"),
    "AuthorizerDenials": ("taxi_etl", "authorizer_denials_per_5min"),
    "Api4xx": ("taxi_etl", "api_4xx_per_5min"),
    "Api5xx": ("taxi_etl", "api_5xx_per_5min"),
    "ExecutionDuration": ("taxi_etl", "execution_p99_ms"),
    "StillRetryable": ("taxi_etl", "still_retryable_rows_per_5min"),
    "FailedLoads": ("taxi_etl", "failed_loads_per_5min"),
}
# Alarms evaluated over more than one period: alarm -> (section, field) of the count.
EVALUATION_PERIODS = {"IteratorAge": ("runner_stats", "iterator_age_minutes"), "RecordAgeAtRisk": ("runner_stats", "iterator_age_minutes")}
# Only the pending check's alarm fires on silence: the check reports every run, 0 when nothing is pending.
BREACHING_ON_MISSING_DATA = {"OldestPendingSnapshot"}
SECTIONS = {"runner_stats": RunnerStatsAlarms, "event_log": EventLogAlarms, "taxi_etl": TaxiEtlAlarms}

NAMESPACE = "onceflow"
FIVE_MINUTES = 300
RUNNER_STATS_HANDLER = "runtime.runner_stats.handler.handler"
ROUTER = "runtime.event_log.router_handler.handler"
WORKER = "runtime.event_log.worker_handler.handler"
FINALIZER = "runtime.event_log.finalizer_handler.handler"
PENDING_CHECK = "runtime.event_log.pending_check_handler.handler"

# Event-log logical ids (stable on purpose; the same ids test_event_log_infra.py writes out).
PENDING_TABLE = "EventLogPendingSnapshotsTableF14172F7"
SNAPSHOT_QUEUE = "EventLogSnapshotQueue3BCA2897"
SNAPSHOT_DLQ = "EventLogSnapshotDeadLetterQueue755EF947"
PAYLOAD_DLQ = "EventLogPayloadDeadLetterQueueA4620FE4"
STREAM_FAILURE_QUEUE = "EventLogStreamFailureQueue2D32FEEA"
# The taxi stack's two state machines, by role (the ids tests/infra/taxi_etl/test_taxi_etl_infra.py writes out):
# the saga's, one execution per batch of rows, and the bulk route's, one execution per load.
SAGA_STATE_MACHINE = "TaxiEtlStateMachine72705BD6"
BULK_STATE_MACHINE = "TaxiEtlBulkStateMachine479724BD"

# The pending check's own variables (runtime/event_log/pending_check_wiring.py, PendingCheckSettings); the
# snapshot queue's URL only when config.event_log.resend_stuck_snapshots is on (the default).
PENDING_CHECK_ENV_NAMES = {"PENDING_TABLE", "STUCK_AFTER_SECONDS", "LEASE_SECONDS", "RESEND_STUCK_SNAPSHOTS"}
PENDING_CHECK_RESEND_ENV_NAMES = {"SNAPSHOT_QUEUE_URL", "MAX_CLAIMS_TO_RESEND"}
SQS_SEND = {"sqs:SendMessage"}  # to the queue URL from its environment: no GetQueueUrl or GetQueueAttributes
FACTORY_ENV_NAMES = {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE", "POWERTOOLS_LOG_LEVEL", TRACING_MODE_VARIABLE}
XRAY_ACTIONS = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
LOG_ACTIONS = {"logs:CreateLogStream", "logs:PutLogEvents"}

# Every threshold differs from its default, so each one's way into the template is checked.
VARIANT_MONITORING = MonitoringConfig(
    runner_stats=RunnerStatsAlarms(
        iterator_age_ms=10 * 60 * 1000,
        iterator_age_minutes=7,
        record_age_at_risk_ms=3 * 3600 * 1000,
        on_failure_messages=2,
        rejected_per_5min=11,
        stale_per_5min=51,
        suspect_jumps_per_5min=12,
        duplicate_per_5min=5001,
        errors_per_5min=6,
        throttles_per_5min=2,
    ),
    event_log=EventLogAlarms(
        router_iterator_age_ms=10 * 60 * 1000,
        stream_failure_messages=2,
        snapshot_queue_oldest_seconds=7200,
        dead_letter_messages=3,
        oldest_pending_snapshot_seconds=3 * 3600,
        stuck_snapshots_resent=2,
        snapshot_build_seconds=2400,
        errors_per_5min=7,
    ),
    taxi_etl=TaxiEtlAlarms(
        failed_executions_per_5min=21,
        flagged_validation_per_5min=22,
        flagged_transformation_per_5min=6,
        flagged_store_per_5min=2,
        authorizer_denials_per_5min=51,
        api_4xx_per_5min=101,
        api_5xx_per_5min=2,
        execution_p99_ms=180_000,
        still_retryable_rows_per_5min=3,
        failed_loads_per_5min=2,
    ),
)
# ... the pending check runs every 10 minutes, and its re-sending of stuck builds is switched off.
VARIANT_CONFIG = dataclasses.replace(
    load_config("dev"),
    event_log=dataclasses.replace(load_config("dev").event_log, resend_stuck_snapshots=False, pending_check_minutes=10),
    monitoring=VARIANT_MONITORING,
)


# --- fixtures and helpers ---------------------------------------------------------------------


@pytest.fixture
def alarms_template(env_templates: dict[str, dict[str, Any]], config: EnvConfig) -> dict[str, Any]:
    return env_templates[config.stack_name("Alarms")]


@pytest.fixture
def event_log_json(env_templates: dict[str, dict[str, Any]], config: EnvConfig) -> dict[str, Any]:
    return env_templates[config.stack_name("EventLog")]


def synth_app(config: EnvConfig, outdir: Path) -> dict[str, dict[str, Any]]:
    """`app.build_app` (cdk-nag included) with `config` in place of the shipped environment."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cdk_app, "load_config", lambda _name: config)
        assembly = cdk_app.build_app(App(context=cdk_context(config.name), outdir=str(outdir))).synth()
    return {stack.stack_name: stack.template for stack in assembly.stacks}


@pytest.fixture(scope="module")
def variant_templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return synth_app(VARIANT_CONFIG, tmp_path_factory.mktemp("monitoring-variant"))


def threshold_of(config: EnvConfig, section: str, field: str) -> int:
    return int(getattr(getattr(config.monitoring, section), field))


def alarms_by_name(template_json: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Alarm name (from its description's runbook suffix) -> (logical id, properties)."""
    alarms: dict[str, tuple[str, dict[str, Any]]] = {}
    for logical_id, alarm in resources_of_type(template_json, "AWS::CloudWatch::Alarm").items():
        match = RUNBOOK_SUFFIX.search(alarm["Properties"].get("AlarmDescription", ""))
        assert match, f"{logical_id} has no runbook suffix in its description"
        assert match.group(1) not in alarms, f"two alarms named {match.group(1)}"
        alarms[match.group(1)] = (logical_id, alarm["Properties"])
    return alarms


def topic_action(alarms_template: dict[str, Any]) -> dict[str, Any]:
    """How a pipeline stack names the Alarms stack's topic: an import of the export of its Ref (the ARN)."""
    (topic_id,) = resources_of_type(alarms_template, "AWS::SNS::Topic")
    exports = [
        output["Export"]["Name"]
        for output in alarms_template["Outputs"].values()
        if "Export" in output and output["Value"] == ref(topic_id)
    ]
    assert len(exports) == 1, f"expected one export of the topic ARN, found {exports}"
    return {"Fn::ImportValue": exports[0]}


def dimensions(**values: Any) -> list[dict[str, Any]]:
    return [{"Name": name, "Value": value} for name, value in sorted(values.items())]


def lambda_metric(function_id: str, metric_name: str, statistic: str, period: int = FIVE_MINUTES) -> dict[str, Any]:
    return {
        "Namespace": "AWS/Lambda",
        "MetricName": metric_name,
        "Dimensions": dimensions(FunctionName=ref(function_id)),
        "Statistic": statistic,
        "Period": period,
    }


def queue_metric(queue_id: str, metric_name: str) -> dict[str, Any]:
    return {
        "Namespace": "AWS/SQS",
        "MetricName": metric_name,
        "Dimensions": dimensions(QueueName={"Fn::GetAtt": [queue_id, "QueueName"]}),
        "Statistic": "Maximum",
        "Period": FIVE_MINUTES,
    }


def own_metric(metric_name: str, statistic: str = "Sum", period: int = FIVE_MINUTES, **dims: str) -> dict[str, Any]:
    """A handler's EMF metric in the project's namespace."""
    return {"Namespace": NAMESPACE, "MetricName": metric_name, "Dimensions": dimensions(**dims), "Statistic": statistic, "Period": period}


def metric_stat(metric_id: str, namespace: str, metric_name: str, **dims: Any) -> dict[str, Any]:
    """One input of a math expression (not returned, summed over 5 minutes)."""
    return {
        "Id": metric_id,
        "MetricStat": {
            "Metric": {"Namespace": namespace, "MetricName": metric_name, "Dimensions": dimensions(**dims)},
            "Period": FIVE_MINUTES,
            "Stat": "Sum",
        },
        "ReturnData": False,
    }


def expected_metrics(pipeline: str, template_json: dict[str, Any], config: EnvConfig) -> dict[str, dict[str, Any]]:
    """What each alarm of the pipeline watches, as its template properties."""
    if pipeline == "RunnerStats":
        handler, _ = function(template_json, RUNNER_STATS_HANDLER)
        (failure_queue,) = resources_of_type(template_json, "AWS::SQS::Queue")
        return {
            "IteratorAge": lambda_metric(handler, "IteratorAge", "Maximum", period=60),
            "RecordAgeAtRisk": lambda_metric(handler, "IteratorAge", "Maximum", period=60),
            "OnFailureRecords": queue_metric(failure_queue, "ApproximateNumberOfMessagesVisible"),
            "RejectedRecords": own_metric("RejectedRecords", service="runner-stats"),
            "StaleMessages": own_metric("StaleMessages", service="runner-stats"),
            "SuspectJumps": own_metric("SuspectJumps", service="runner-stats"),
            "DuplicateMessages": own_metric("DuplicateMessages", service="runner-stats"),
            "HandlerErrors": lambda_metric(handler, "Errors", "Sum"),
            "HandlerThrottles": lambda_metric(handler, "Throttles", "Sum"),
        }
    if pipeline == "EventLog":
        functions = {name: function(template_json, handler)[0] for name, handler in _EVENT_LOG_ERROR_INPUTS.items()}
        check_period = 3 * config.event_log.pending_check_minutes * 60
        return {
            "RouterIteratorAge": lambda_metric(functions["router"], "IteratorAge", "Maximum"),
            "RouterOnFailureRecords": queue_metric(STREAM_FAILURE_QUEUE, "ApproximateNumberOfMessagesVisible"),
            "SnapshotQueueAge": queue_metric(SNAPSHOT_QUEUE, "ApproximateAgeOfOldestMessage"),
            "SnapshotDeadLetters": queue_metric(SNAPSHOT_DLQ, "ApproximateNumberOfMessagesVisible"),
            "PayloadDeadLetters": queue_metric(PAYLOAD_DLQ, "ApproximateNumberOfMessagesVisible"),
            "OldestPendingSnapshot": own_metric(
                "OldestPendingSnapshotAgeSeconds", "Maximum", period=check_period, service="event-log-pending-check"
            ),
            "StuckSnapshotsResent": own_metric("StuckSnapshotsResent", "Sum", period=check_period, service="event-log-pending-check"),
            "SnapshotBuildDuration": own_metric("SnapshotBuildSeconds", "Maximum", service="event-log-snapshots"),
            "FunctionErrors": {
                "Metrics": [
                    {"Expression": "router + worker + finalizer + check", "Label": "Errors", "ReturnData": True},
                    *(metric_stat(name, "AWS/Lambda", "Errors", FunctionName=ref(function_id)) for name, function_id in functions.items()),
                ]
            },
        }
    assert pipeline == "TaxiEtl"
    assert set(resources_of_type(template_json, "AWS::StepFunctions::StateMachine")) == {SAGA_STATE_MACHINE, BULK_STATE_MACHINE}
    (http_api,) = resources_of_type(template_json, "AWS::ApiGatewayV2::Api")
    api_metric = {"Namespace": "AWS/ApiGateway", "Dimensions": dimensions(ApiId=ref(http_api)), "Statistic": "Sum", "Period": FIVE_MINUTES}
    return {
        "FailedExecutions": {
            "Metrics": [
                {"Expression": "failed + timedOut", "Label": "Failed", "ReturnData": True},
                metric_stat("failed", "AWS/States", "ExecutionsFailed", StateMachineArn=ref(SAGA_STATE_MACHINE)),
                metric_stat("timedOut", "AWS/States", "ExecutionsTimedOut", StateMachineArn=ref(SAGA_STATE_MACHINE)),
            ]
        },
        "FlaggedValidation": own_metric("ExecutionsFlagged", service="taxi-etl-flag", phase="validation"),
        "FlaggedTransformation": own_metric("ExecutionsFlagged", service="taxi-etl-flag", phase="transformation"),
        "FlaggedStore": own_metric("ExecutionsFlagged", service="taxi-etl-flag", phase="store"),
        "AuthorizerDenials": own_metric("RequestsDenied", service="taxi-etl-authorizer"),
        "Api4xx": {**api_metric, "MetricName": "4xx"},
        "Api5xx": {**api_metric, "MetricName": "5xx"},
        "ExecutionDuration": {
            "Namespace": "AWS/States",
            "MetricName": "ExecutionTime",
            "Dimensions": dimensions(StateMachineArn=ref(SAGA_STATE_MACHINE)),
            "ExtendedStatistic": "p99",
            "Period": FIVE_MINUTES,
        },
        # rows the flag step flagged retryable for good, after the automatic redrive, in any phase
        "StillRetryable": {
            "Metrics": [
                {"Expression": "validation + transformation + store", "Label": "Still retryable", "ReturnData": True},
                *(
                    metric_stat(phase, NAMESPACE, "RowsStillRetryable", service="taxi-etl-flag", phase=phase)
                    for phase in ("validation", "transformation", "store")
                ),
            ]
        },
        # loads the bulk machine ended FAILED or TIMED_OUT: a failure the loader's caller sees
        "FailedLoads": {
            "Metrics": [
                {"Expression": "failed + timedOut", "Label": "Failed loads", "ReturnData": True},
                metric_stat("failed", "AWS/States", "ExecutionsFailed", StateMachineArn=ref(BULK_STATE_MACHINE)),
                metric_stat("timedOut", "AWS/States", "ExecutionsTimedOut", StateMachineArn=ref(BULK_STATE_MACHINE)),
            ]
        },
    }


# The FunctionErrors expression's inputs: metric id -> the function whose errors it sums.
_EVENT_LOG_ERROR_INPUTS = {"router": ROUTER, "worker": WORKER, "finalizer": FINALIZER, "check": PENDING_CHECK}


def expected_alarm(pipeline: str, name: str, template_json: dict[str, Any], config: EnvConfig) -> dict[str, Any]:
    """The alarm's properties, except its description, actions and tags (checked on their own)."""
    periods = threshold_of(config, *EVALUATION_PERIODS[name]) if name in EVALUATION_PERIODS else 1
    return {
        **expected_metrics(pipeline, template_json, config)[name],
        "Threshold": threshold_of(config, *THRESHOLDS[name]),
        "EvaluationPeriods": periods,
        "ComparisonOperator": "GreaterThanOrEqualToThreshold",
        "TreatMissingData": "breaching" if name in BREACHING_ON_MISSING_DATA else "notBreaching",
    }


def comparable(properties: dict[str, Any]) -> dict[str, Any]:
    """Alarm properties without what is checked elsewhere, dimensions in name order, and the
    math expression's generated id dropped (the metric ids it refers to are kept)."""
    result = {name: value for name, value in properties.items() if name not in {"AlarmDescription", "AlarmActions", "OKActions", "Tags"}}
    if "Dimensions" in result:
        result["Dimensions"] = sorted(result["Dimensions"], key=lambda dimension: dimension["Name"])
    if "Metrics" in result:
        result["Metrics"] = [
            {name: value for name, value in metric.items() if not ("Expression" in metric and name == "Id")} for metric in result["Metrics"]
        ]
    return result


def assert_alarms_match(pipeline: str, template_json: dict[str, Any], config: EnvConfig, action: dict[str, Any]) -> None:
    alarms = alarms_by_name(template_json)
    assert set(alarms) == ALARM_NAMES[pipeline]
    for name, (logical_id, properties) in alarms.items():
        assert comparable(properties) == comparable(expected_alarm(pipeline, name, template_json, config)), f"{pipeline} {name}"
        assert properties["AlarmActions"] == [action], f"{name} ({logical_id}) alarm action"
        assert properties["OKActions"] == [action], f"{name} ({logical_id}) OK action"
        assert "InsufficientDataActions" not in properties


def dashboard_of(template_json: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The one dashboard's body, parsed, with each token of its Fn::Join as a placeholder; and the tokens."""
    dashboards = resources_of_type(template_json, "AWS::CloudWatch::Dashboard")
    assert len(dashboards) == 1, f"expected one dashboard, found {sorted(dashboards)}"
    (dashboard,) = dashboards.values()
    separator, parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"]
    assert separator == ""
    tokens: dict[str, Any] = {}
    text = ""
    for part in parts:
        if isinstance(part, str):
            text += part
        else:
            placeholder = f"@token{len(tokens)}@"
            tokens[placeholder] = part
            text += placeholder
    return json.loads(text), tokens


def pending_check_statements(template_json: dict[str, Any]) -> list[dict[str, Any]]:
    role_id = role_of(template_json, PENDING_CHECK)
    policies = [p for p in resources_of_type(template_json, "AWS::IAM::Policy").values() if ref(role_id) in p["Properties"]["Roles"]]
    assert len(policies) == 1, f"expected one inline policy on the pending check's role, found {len(policies)}"
    assert policies[0]["Properties"]["Roles"] == [ref(role_id)], "a policy shared between roles"
    return list(policies[0]["Properties"]["PolicyDocument"]["Statement"])


def pending_check_grants(template_json: dict[str, Any]) -> Grants:
    grants: Grants = {}
    for statement in pending_check_statements(template_json):
        assert statement["Effect"] == "Allow", statement
        assert not {"NotAction", "NotResource", "Condition"} & set(statement), statement
        for res in as_list(statement["Resource"]):
            grants.setdefault((key(res), None), set()).update(as_list(statement["Action"]))
    return grants


def rate(minutes: int) -> str:
    return f"rate({minutes} minute)" if minutes == 1 else f"rate({minutes} minutes)"


# --- 1. every alarm: its metric, threshold, periods and missing-data treatment ------------------


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_each_pipeline_stack_has_exactly_its_alarms(env_templates: dict[str, dict[str, Any]], config: EnvConfig, pipeline: str) -> None:
    # Given the pipeline's stack
    template_json = env_templates[config.stack_name(pipeline)]
    # When we name its alarms by their descriptions' runbook suffix
    alarms = alarms_by_name(template_json)
    # Then they are exactly the listed ones, so an alarm added without a test fails here
    assert set(alarms) == ALARM_NAMES[pipeline]
    assert len(resources_of_type(template_json, "AWS::CloudWatch::Alarm")) == len(ALARM_NAMES[pipeline])


def test_the_alarms_stack_has_no_alarm(alarms_template: dict[str, Any]) -> None:
    # Given the Alarms stack
    # When we look for alarms and dashboards
    # Then it holds the topic only: every alarm lives with the pipeline it watches
    assert not resources_of_type(alarms_template, "AWS::CloudWatch::Alarm")
    assert not resources_of_type(alarms_template, "AWS::CloudWatch::Dashboard")


@pytest.mark.parametrize(("pipeline", "name"), ALARM_CASES)
def test_alarm_watches_its_metric_at_the_configured_threshold(
    env_templates: dict[str, dict[str, Any]], config: EnvConfig, pipeline: str, name: str
) -> None:
    # Given the pipeline's stack and the environment's thresholds
    template_json = env_templates[config.stack_name(pipeline)]
    # When we read the alarm
    _, properties = alarms_by_name(template_json)[name]
    # Then it watches its metric (namespace, name, dimensions, statistic, period) or math expression,
    # at the configured threshold over the configured periods, firing at or above it, and treats
    # missing data as breaching only for the pending check's alarm
    assert comparable(properties) == comparable(expected_alarm(pipeline, name, template_json, config))


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_every_alarm_notifies_the_shared_topic_on_alarm_and_on_ok(
    env_templates: dict[str, dict[str, Any]], alarms_template: dict[str, Any], config: EnvConfig, pipeline: str
) -> None:
    # Given the topic ARN the Alarms stack exports
    action = topic_action(alarms_template)
    template_json = env_templates[config.stack_name(pipeline)]
    # When we read each alarm's actions
    for name, (_, properties) in alarms_by_name(template_json).items():
        # Then both the ALARM and the OK transition notify that topic (a cross-stack import), and nothing else
        assert properties["AlarmActions"] == [action], name
        assert properties["OKActions"] == [action], name
        assert "InsufficientDataActions" not in properties, name
    # and the pipeline stack has no topic of its own
    assert not resources_of_type(template_json, "AWS::SNS::Topic")


def test_shipped_thresholds_are_the_expected_ones(env_templates: dict[str, dict[str, Any]], config: EnvConfig, env_name: str) -> None:
    # Given the environment's stacks
    runner_stats = alarms_by_name(env_templates[config.stack_name("RunnerStats")])
    # When we read the values that differ between environments
    # Then prod pages on a 5-minute iterator age and dev on 15 minutes
    assert runner_stats["IteratorAge"][1]["Threshold"] == EXPECTED[env_name]["iterator_age_ms"]
    assert runner_stats["IteratorAge"][1]["EvaluationPeriods"] == 5
    # and the louder age alarm at its own threshold
    assert runner_stats["RecordAgeAtRisk"][1]["Threshold"] == EXPECTED[env_name]["record_age_at_risk_ms"]
    assert runner_stats["RecordAgeAtRisk"][1]["EvaluationPeriods"] == 5


def test_both_age_alarms_fire_before_records_are_given_up_or_dropped(env_templates: dict[str, dict[str, Any]], config: EnvConfig) -> None:
    # Given the environment's runner-stats alarms, its mapping's maximum record age and its stream's retention
    runner_stats = alarms_by_name(env_templates[config.stack_name("RunnerStats")])
    max_age_ms = config.runner_stats.max_record_age_seconds * 1000
    retention_ms = config.runner_stats.stream_retention_hours * 3600 * 1000
    # When each age alarm has seen its threshold for all its 1-minute periods
    fired_at = {
        name: runner_stats[name][1]["Threshold"] + runner_stats[name][1]["EvaluationPeriods"] * 60_000
        for name in ("IteratorAge", "RecordAgeAtRisk")
    }
    # Then both have fired before the mapping gives records up, the early one first, and at least an hour apart from the loss
    assert fired_at["IteratorAge"] < fired_at["RecordAgeAtRisk"] < max_age_ms <= retention_ms
    assert max_age_ms - fired_at["RecordAgeAtRisk"] >= 3600 * 1000


def test_only_the_pending_check_alarm_treats_missing_data_as_breaching(env_templates: dict[str, dict[str, Any]], config: EnvConfig) -> None:
    # Given every alarm of the environment
    treatment = {
        name: properties["TreatMissingData"]
        for pipeline in PIPELINES
        for name, (_, properties) in alarms_by_name(env_templates[config.stack_name(pipeline)]).items()
    }
    # When we pick those that fire on silence
    # Then there is exactly one: a silent pending check means it is broken
    assert {name for name, value in treatment.items() if value == "breaching"} == {"OldestPendingSnapshot"}
    assert set(treatment.values()) == {"breaching", "notBreaching"}


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_threshold_in_the_config_is_some_alarms(section: str) -> None:
    # Given the fields of the section's thresholds
    fields = {field.name for field in dataclasses.fields(SECTIONS[section])}
    # When we collect what the alarms read (thresholds and evaluation periods) and what the check reads
    used = {f for s, f in (*THRESHOLDS.values(), *EVALUATION_PERIODS.values()) if s == section}
    # Then no threshold is configured without an alarm using it
    assert fields == used


# --- 2. the alarm topic ------------------------------------------------------------------------


def test_topic_is_encrypted_with_its_own_rotating_key(alarms_template: dict[str, Any]) -> None:
    # Given the Alarms stack
    template = Template.from_json(alarms_template)
    # When we look at its topic and key
    template.resource_count_is("AWS::SNS::Topic", 1)
    template.resource_count_is("AWS::KMS::Key", 1)
    (key_id,) = resources_of_type(alarms_template, "AWS::KMS::Key")
    # Then the topic is encrypted with the stack's KMS key, whose rotation is on
    template.has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": arn(key_id)})
    template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


def test_key_policy_lets_cloudwatch_of_this_account_use_the_key(alarms_template: dict[str, Any]) -> None:
    # Given the key's policy
    (key_resource,) = resources_of_type(alarms_template, "AWS::KMS::Key").values()
    statements = key_resource["Properties"]["KeyPolicy"]["Statement"]
    # When we pick the statements for CloudWatch
    cloudwatch = [s for s in statements if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}]
    # Then exactly one lets it decrypt and generate data keys, only on behalf of this account
    assert cloudwatch == [
        {
            "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
            "Condition": {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}},
            "Effect": "Allow",
            "Principal": {"Service": "cloudwatch.amazonaws.com"},
            "Resource": "*",
        }
    ]
    # and no other service is named in the key policy
    assert all("Service" not in s.get("Principal", {}) for s in statements if s not in cloudwatch)


def test_topic_policy_refuses_plain_http_and_lets_cloudwatch_publish(alarms_template: dict[str, Any]) -> None:
    # Given the topic and its policy
    (topic_id,) = resources_of_type(alarms_template, "AWS::SNS::Topic")
    policies = resources_of_type(alarms_template, "AWS::SNS::TopicPolicy")
    assert len(policies) == 1
    (policy,) = policies.values()
    assert policy["Properties"]["Topics"] == [ref(topic_id)]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    # When we read its statements (without their generated Sids)
    bare = [{name: value for name, value in s.items() if name != "Sid"} for s in statements]
    # Then publishing without TLS is denied to everyone, and CloudWatch of this account may publish
    assert bare == [
        {
            "Action": "sns:Publish",
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            "Effect": "Deny",
            "Principal": "*",
            "Resource": ref(topic_id),
        },
        {
            "Action": "sns:Publish",
            "Condition": {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}},
            "Effect": "Allow",
            "Principal": {"Service": "cloudwatch.amazonaws.com"},
            "Resource": ref(topic_id),
        },
    ]


def test_topic_arn_is_exported_and_shown(alarms_template: dict[str, Any], config: EnvConfig) -> None:
    # Given the Alarms stack's outputs
    (topic_id,) = resources_of_type(alarms_template, "AWS::SNS::Topic")
    outputs = alarms_template["Outputs"]
    # When we read them
    # Then the topic's ARN is an output to subscribe a pager to, and the one export the pipeline stacks import
    assert outputs["AlarmTopicArn"]["Value"] == ref(topic_id)
    assert topic_action(alarms_template)["Fn::ImportValue"].startswith(f"{config.stack_name('Alarms')}:")


def test_no_subscription_by_default(alarms_template: dict[str, Any], config: EnvConfig) -> None:
    # Given a shipped environment, which names no alarm e-mail
    assert config.monitoring.alarm_email is None
    # When we look for subscriptions
    # Then the topic has none (a pager or chat integration is subscribed to the AlarmTopicArn output)
    assert not resources_of_type(alarms_template, "AWS::SNS::Subscription")


def test_an_alarm_email_is_subscribed(tmp_path: Path) -> None:
    # Given a config naming an alarm e-mail
    dev = load_config("dev")
    config = dataclasses.replace(dev, monitoring=dataclasses.replace(dev.monitoring, alarm_email="oncall@example.com"))
    # When the Alarms stack is built with it
    stack = AlarmsStack(App(context=cdk_context("dev"), outdir=str(tmp_path)), "AlarmsVariant", config=config)
    template_json = Template.from_stack(stack).to_json()
    # Then the topic has exactly one subscription: that address, by e-mail
    (topic_id,) = resources_of_type(template_json, "AWS::SNS::Topic")
    subscriptions = resources_of_type(template_json, "AWS::SNS::Subscription")
    assert [s["Properties"] for s in subscriptions.values()] == [
        {"Protocol": "email", "Endpoint": "oncall@example.com", "TopicArn": ref(topic_id)}
    ]


def test_a_stack_deployed_alone_notifies_a_topic_of_its_own(tmp_path: Path) -> None:
    # Given a pipeline stack built without the app's alarm topic
    stack = RunnerStatsStack(App(context=cdk_context("dev"), outdir=str(tmp_path)), "RunnerStatsAlone", config=load_config("dev"))
    template_json = Template.from_stack(stack).to_json()
    # When we look at its topics and its alarms' actions
    (topic_id,) = resources_of_type(template_json, "AWS::SNS::Topic")
    (key_id,) = resources_of_type(template_json, "AWS::KMS::Key")
    # Then it has its own encrypted topic, which every alarm notifies on ALARM and OK
    assert template_json["Resources"][topic_id]["Properties"]["KmsMasterKeyId"] == arn(key_id)
    assert_alarms_match("RunnerStats", template_json, load_config("dev"), ref(topic_id))


def test_alarm_topic_requires_its_props_and_a_valid_config(tmp_path: Path) -> None:
    # Given a stack
    stack = Stack(App(outdir=str(tmp_path)), "Topic")
    dev = load_config("dev")
    # When the topic is given a bare config, or props with a bad e-mail
    # Then it refuses, and nothing was added to the stack
    with pytest.raises(TypeError, match="AlarmTopicProps"):
        AlarmTopic(stack, "Bare", dev)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="alarm_email"):
        AlarmTopic(stack, "Invalid", AlarmTopicProps(alarm_email="oncall"))
    assert stack.node.try_find_child("Invalid") is None


# --- 3. dashboards -------------------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_each_pipeline_has_one_dashboard_showing_every_alarm(
    env_templates: dict[str, dict[str, Any]], config: EnvConfig, pipeline: str
) -> None:
    # Given the pipeline's stack, its alarms and its one dashboard
    template_json = env_templates[config.stack_name(pipeline)]
    alarm_arns = {name: arn(logical_id) for name, (logical_id, _) in alarms_by_name(template_json).items()}
    body, tokens = dashboard_of(template_json)
    widgets = body["widgets"]
    # When we read its widgets
    status = [w for w in widgets if w["type"] == "alarm"]
    annotated = {w["properties"]["title"]: w["properties"]["annotations"]["alarms"] for w in widgets if "annotations" in w["properties"]}
    # Then it opens with the environment's title, one status widget lists every alarm of the stack,
    # and every alarm has its own graph, titled with its name
    assert widgets[0]["type"] == "text" and widgets[0]["properties"]["markdown"].startswith(f"# onceflow {config.name}: ")
    assert len(status) == 1
    assert sorted(map(key, (tokens[a] for a in status[0]["properties"]["alarms"]))) == sorted(map(key, alarm_arns.values()))
    assert {title: [tokens[a] for a in alarms] for title, alarms in annotated.items()} == {
        name: [alarm_arn] for name, alarm_arn in alarm_arns.items()
    }


# --- 4. variants: thresholds from the config ----------------------------------------------------


def test_the_variant_changes_every_threshold() -> None:
    # Given the variant's thresholds and the defaults
    for section, cls in SECTIONS.items():
        variant, default = getattr(VARIANT_MONITORING, section), cls()
        # Then every field differs, so the variant checks each one's way into the template
        unchanged = [f.name for f in dataclasses.fields(cls) if getattr(variant, f.name) == getattr(default, f.name)]
        assert not unchanged, f"{section}: {unchanged}"


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_non_default_thresholds_show_up_in_the_template(variant_templates: dict[str, dict[str, Any]], pipeline: str) -> None:
    # Given the app built with every threshold changed
    template_json = variant_templates[VARIANT_CONFIG.stack_name(pipeline)]
    action = topic_action(variant_templates[VARIANT_CONFIG.stack_name("Alarms")])
    # When we read the pipeline's alarms
    # Then each uses the variant's threshold and periods and still notifies the shared topic
    assert_alarms_match(pipeline, template_json, VARIANT_CONFIG, action)


def test_non_default_values_written_out(variant_templates: dict[str, dict[str, Any]]) -> None:
    # Given the variant app
    runner_stats = alarms_by_name(variant_templates[VARIANT_CONFIG.stack_name("RunnerStats")])
    event_log_json = variant_templates[VARIANT_CONFIG.stack_name("EventLog")]
    event_log = alarms_by_name(event_log_json)
    # When we read a few values literally
    # Then the iterator age pages at 10 minutes over 7 periods, the pending check runs every 10
    # minutes and its alarm looks at 30-minute periods
    assert (runner_stats["IteratorAge"][1]["Threshold"], runner_stats["IteratorAge"][1]["EvaluationPeriods"]) == (600_000, 7)
    assert event_log["OldestPendingSnapshot"][1]["Period"] == 1800
    assert event_log["OldestPendingSnapshot"][1]["Threshold"] == 3 * 3600
    (rule,) = resources_of_type(event_log_json, "AWS::Events::Rule").values()
    assert rule["Properties"]["ScheduleExpression"] == "rate(10 minutes)"


# --- 5. config refusals ------------------------------------------------------------------------


def with_thresholds(config: EnvConfig, section: str, **changes: Any) -> EnvConfig:
    monitoring = config.monitoring
    return dataclasses.replace(
        config, monitoring=dataclasses.replace(monitoring, **{section: dataclasses.replace(getattr(monitoring, section), **changes)})
    )


@pytest.mark.parametrize(
    ("section", "field"), [pytest.param(s, f.name, id=f"{s}.{f.name}") for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)]
)
def test_a_threshold_below_one_is_refused(section: str, field: str) -> None:
    # Given a config with one threshold at 0
    config = with_thresholds(load_config("dev"), section, **{field: 0})
    # When it is validated
    # Then ConfigError names the section
    with pytest.raises(ConfigError, match=f"monitoring.{section}"):
        config.validate()


@pytest.mark.parametrize(("section", "field"), [("runner_stats", "iterator_age_ms"), ("event_log", "router_iterator_age_ms")])
def test_an_iterator_age_under_one_minute_is_refused(config: EnvConfig, section: str, field: str) -> None:
    # Given the environment's config
    # When its iterator age threshold is just under a minute, or exactly one
    # Then the first is refused and the second accepted
    with pytest.raises(ConfigError, match="monitoring"):
        with_thresholds(config, section, **{field: 59_999}).validate()
    assert with_thresholds(config, section, **{field: 60_000}).validate()


def test_an_iterator_age_beyond_the_max_record_age_is_refused(config: EnvConfig) -> None:
    # Given the environment's record ages (the mappings give records up after them)
    runner_max_ms = config.runner_stats.max_record_age_seconds * 1000
    router_max_ms = config.event_log.router_max_record_age_seconds * 1000
    # When an alarm would only fire once records are already given up on
    # Then it is refused; just below is accepted
    window_ms = config.monitoring.runner_stats.iterator_age_minutes * 60_000
    with pytest.raises(ConfigError, match="max_record_age_seconds"):
        with_thresholds(config, "runner_stats", record_age_at_risk_ms=runner_max_ms - window_ms).validate()
    assert with_thresholds(config, "runner_stats", record_age_at_risk_ms=runner_max_ms - window_ms - 1).validate()
    # and the early alarm must come before the loud one
    at_risk_ms = config.monitoring.runner_stats.record_age_at_risk_ms
    with pytest.raises(ConfigError, match="record_age_at_risk_ms must be above iterator_age_ms"):
        with_thresholds(config, "runner_stats", iterator_age_ms=at_risk_ms).validate()
    assert with_thresholds(config, "runner_stats", iterator_age_ms=at_risk_ms - 1).validate()
    with pytest.raises(ConfigError, match="router_max_record_age_seconds"):
        with_thresholds(config, "event_log", router_iterator_age_ms=router_max_ms).validate()
    assert with_thresholds(config, "event_log", router_iterator_age_ms=router_max_ms - 1).validate()
    # and the router's cannot exceed the stream's 24 h retention whatever the record age
    with pytest.raises(ConfigError, match="router_iterator_age_ms"):
        with_thresholds(config, "event_log", router_iterator_age_ms=24 * 3600 * 1000).validate()


def test_the_pending_alarm_must_fire_after_a_row_counts_as_stuck(config: EnvConfig, env_name: str) -> None:
    # Given the environment's stuck threshold: the snapshot queue's visibility timeout plus the lease,
    # so always past the lease (a live build renews its lease and never looks stuck)
    stuck_after = config.event_log.stuck_after_seconds
    assert stuck_after == EXPECTED[env_name]["stuck_after_seconds"]
    assert stuck_after == config.event_log.snapshot_visibility_seconds + config.event_log.lease_seconds > config.event_log.lease_seconds
    # When the oldest-pending alarm's threshold equals it (it would page for rows not stuck yet)
    # Then it is refused; one second more is accepted
    with pytest.raises(ConfigError, match="oldest_pending_snapshot_seconds"):
        with_thresholds(config, "event_log", oldest_pending_snapshot_seconds=stuck_after).validate()
    assert with_thresholds(config, "event_log", oldest_pending_snapshot_seconds=stuck_after + 1).validate()


def test_pending_check_interval_is_bounded(config: EnvConfig) -> None:
    # Given the environment's config
    # When the check would run less often than hourly, or its alarm's threshold is shorter than one interval
    # Then both are refused
    every_ten_minutes = dataclasses.replace(config, event_log=dataclasses.replace(config.event_log, pending_check_minutes=10))
    with pytest.raises(ConfigError, match="pending_check_minutes"):
        dataclasses.replace(config, event_log=dataclasses.replace(config.event_log, pending_check_minutes=61)).validate()
    with pytest.raises(ConfigError, match="oldest_pending_snapshot_seconds"):
        with_thresholds(every_ten_minutes, "event_log", oldest_pending_snapshot_seconds=599).validate()


@pytest.mark.parametrize("email", ["", "oncall", "oncall@example", "on call@example.com", "a@b@example.com", "@example.com"])
def test_a_bad_alarm_email_is_refused(email: str) -> None:
    # Given a config whose alarm e-mail is not an address
    dev = load_config("dev")
    config = dataclasses.replace(dev, monitoring=dataclasses.replace(dev.monitoring, alarm_email=email))
    # When it is validated
    # Then ConfigError names the setting
    with pytest.raises(ConfigError, match="alarm_email"):
        config.validate()


def test_a_good_alarm_email_is_accepted() -> None:
    dev = load_config("dev")
    assert dataclasses.replace(dev, monitoring=dataclasses.replace(dev.monitoring, alarm_email="oncall@example.com")).validate()


# --- 6. the scheduled pending check ------------------------------------------------------------


def test_pending_check_runs_on_the_configured_schedule(event_log_json: dict[str, Any], config: EnvConfig, env_name: str) -> None:
    # Given the event-log stack's one schedule and the pending check function
    rules = resources_of_type(event_log_json, "AWS::Events::Rule")
    assert len(rules) == 1
    (rule_id, rule), (check_id, _) = next(iter(rules.items())), function(event_log_json, PENDING_CHECK)
    props = rule["Properties"]
    # When we read its schedule and targets
    # Then it runs at the configured rate, enabled, and its only target is the check, not retried
    # (the next run is minutes away)
    assert props["ScheduleExpression"] == rate(config.event_log.pending_check_minutes) == EXPECTED[env_name]["schedule"]
    assert props["State"] == "ENABLED"
    assert [{n: v for n, v in target.items() if n != "Id"} for target in props["Targets"]] == [
        {"Arn": arn(check_id), "RetryPolicy": {"MaximumRetryAttempts": 0}}
    ]
    # and only this rule may invoke the check
    permissions = [
        p["Properties"]
        for p in resources_of_type(event_log_json, "AWS::Lambda::Permission").values()
        if p["Properties"]["FunctionName"] == arn(check_id)
    ]
    assert permissions == [
        {"Action": "lambda:InvokeFunction", "FunctionName": arn(check_id), "Principal": "events.amazonaws.com", "SourceArn": arn(rule_id)}
    ]


def test_pending_check_may_scan_the_pending_table_and_send_to_the_snapshot_queue(event_log_json: dict[str, Any], config: EnvConfig) -> None:
    # Given the check's role, in an environment that re-sends stuck builds (the default)
    assert config.event_log.resend_stuck_snapshots is True
    # When we collect what it is allowed on each resource
    grants = pending_check_grants(event_log_json)
    # Then it may scan the pending table (its table ARN only: no index, no other table), send to
    # the snapshot queue, write its own log group and send traces; nothing else
    assert grants == {
        **unconditional(
            (arn(PENDING_TABLE), {"dynamodb:Scan"}),
            (arn(SNAPSHOT_QUEUE), SQS_SEND),
            (arn(log_group_of(event_log_json, PENDING_CHECK)), LOG_ACTIONS),
        ),
        (key("*"), None): XRAY_ACTIONS,
    }


def test_a_pending_check_that_does_not_re_send_may_only_scan(variant_templates: dict[str, dict[str, Any]]) -> None:
    # Given the variant, whose pending check has re-sending switched off
    event_log_json = variant_templates[VARIANT_CONFIG.stack_name("EventLog")]
    # When we collect the check's grants
    grants = pending_check_grants(event_log_json)
    # Then it may scan the pending table and nothing else (no queue)
    assert grants == {
        **unconditional(
            (arn(PENDING_TABLE), {"dynamodb:Scan"}),
            (arn(log_group_of(event_log_json, PENDING_CHECK)), LOG_ACTIONS),
        ),
        (key("*"), None): XRAY_ACTIONS,
    }


def resolved_check_environment(template_json: dict[str, Any]) -> tuple[dict[str, Any], RecordingEnvironment]:
    """The check's variables as synthesized, and as a recording environment with Refs replaced by dummy strings."""
    return variables_of(template_json, PENDING_CHECK), RecordingEnvironment(resolved_environment(template_json, PENDING_CHECK))


def test_pending_check_environment_is_exactly_what_its_settings_read(event_log_json: dict[str, Any], config: EnvConfig) -> None:
    # Given the check's environment
    variables, resolved = resolved_check_environment(event_log_json)
    # When PendingCheckSettings reads it, as the handler does at cold start
    settings = PendingCheckSettings.from_env(resolved)
    # Then the factory's Powertools names are set, the rest are exactly the names the settings class
    # reads, and they carry the config's values: re-sending on, to the snapshot queue
    assert variables["POWERTOOLS_SERVICE_NAME"] == "event-log-pending-check"
    assert set(variables) - FACTORY_ENV_NAMES == PENDING_CHECK_ENV_NAMES | PENDING_CHECK_RESEND_ENV_NAMES == resolved.read
    assert variables["PENDING_TABLE"] == ref(PENDING_TABLE)
    assert variables["RESEND_STUCK_SNAPSHOTS"] == "true"
    assert variables["SNAPSHOT_QUEUE_URL"] == ref(SNAPSHOT_QUEUE)
    assert settings.pending_table == "dummy-pending_table"
    assert settings.rules == StuckRules(
        lease_seconds=config.event_log.lease_seconds, stuck_after_seconds=config.event_log.stuck_after_seconds
    )
    assert settings.resend_queue_url == "dummy-snapshot_queue_url"
    assert settings.max_claims_to_resend == 2 * config.event_log.snapshot_max_receives


def test_a_check_with_re_sending_off_gets_no_queue(variant_templates: dict[str, dict[str, Any]]) -> None:
    # Given the variant's check, which does not re-send stuck builds
    variables, resolved = resolved_check_environment(variant_templates[VARIANT_CONFIG.stack_name("EventLog")])
    # When PendingCheckSettings reads its environment
    settings = PendingCheckSettings.from_env(resolved)
    # Then the switch is off, no queue URL is set, and the settings read exactly those names
    assert variables["RESEND_STUCK_SNAPSHOTS"] == "false"
    assert set(variables) - FACTORY_ENV_NAMES == PENDING_CHECK_ENV_NAMES == resolved.read
    assert settings.resend_queue_url is None


def test_pending_check_carries_the_shipped_values(event_log_json: dict[str, Any], env_name: str) -> None:
    # Given the check's environment
    variables = function(event_log_json, PENDING_CHECK)[1]["Properties"]["Environment"]["Variables"]
    # When we read its thresholds
    # Then they are the environment's: stuck after the queue's visibility timeout plus the lease
    # (40 min in dev, 110 min in prod), and the worker's lease
    assert variables["STUCK_AFTER_SECONDS"] == str(EXPECTED[env_name]["stuck_after_seconds"])
    assert variables["LEASE_SECONDS"] == str(EXPECTED[env_name]["lease_seconds"])
