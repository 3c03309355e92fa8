"""The constructs as a library: each builds a production-safe pipeline with no props, takes only
its own props (never the repository's EnvConfig), and lets a user override what is safe to
override (function memory, timeout and reserved concurrency, event source settings, table
billing and removal), each override checked before anything is built, with a message naming it.

Stacks here are plain `Stack`s in an `App` without the repository's cdk.json, as a new user's
would be; those that synthesize with cdk-nag add the packs with `add_compliance_checks`.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk.assertions import Template

import onceflow.constructs as public
from devtools.aws.template_resources import resources_of_type
from onceflow.constructs import (
    CommonProps,
    ConfigError,
    EventLog,
    EventLogConfig,
    EventLogProps,
    RunnerStatsConfig,
    RunnerStatsMonitoring,
    RunnerStatsMonitoringProps,
    RunnerStatsPipeline,
    RunnerStatsPipelineProps,
    TableOptions,
    TaxiEtlConfig,
    TaxiEtlSaga,
    TaxiEtlSagaProps,
    add_compliance_checks,
)
from onceflow.infra.config import load_config
from runtime.event_log import contract as event_log_contract
from runtime.runner_stats import contract as runner_stats_contract
from runtime.taxi_etl import contract as taxi_etl_contract

CONSTRUCTS = {"runner_stats": RunnerStatsPipeline, "event_log": EventLog, "taxi_etl": TaxiEtlSaga}
PROPS = {"runner_stats": RunnerStatsPipelineProps, "event_log": EventLogProps, "taxi_etl": TaxiEtlSagaProps}
STATEFUL = ("AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::Logs::LogGroup", "AWS::Kinesis::Stream", "AWS::S3::Bucket", "AWS::KMS::Key")


def build(pipeline: str, props: Any = None, tmp_path: Path | None = None) -> dict[str, Any]:
    stack = Stack(App(outdir=str(tmp_path) if tmp_path else None), "Team")
    CONSTRUCTS[pipeline](stack, "Pipeline", props)
    return Template.from_stack(stack).to_json()


def function_with_handler(template: dict[str, Any], handler: str) -> dict[str, Any]:
    (function,) = [f for f in resources_of_type(template, "AWS::Lambda::Function").values() if f["Properties"]["Handler"] == handler]
    return function


def mapping_of(template: dict[str, Any], function_handler: str) -> dict[str, Any]:
    function_id = next(
        name
        for name, body in resources_of_type(template, "AWS::Lambda::Function").items()
        if body["Properties"]["Handler"] == function_handler
    )
    (mapping,) = [
        m["Properties"]
        for m in resources_of_type(template, "AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["FunctionName"] == {"Ref": function_id}
    ]
    return mapping


# --- defaults --------------------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", CONSTRUCTS)
def test_with_no_props_each_pipeline_passes_cdk_nag_and_keeps_its_data(pipeline: str, tmp_path: Path) -> None:
    # Given a new user's app: a plain stack, the nag packs, and the construct with no props
    app = App(outdir=str(tmp_path))
    stack = Stack(app, "Team")
    CONSTRUCTS[pipeline](stack, "Pipeline")
    add_compliance_checks(app)
    # When it is synthesized (an open finding raises)
    template = app.synth().get_stack_by_name("Team").template
    # Then every stateful resource is retained, and every table is deletion-protected and on-demand
    for resource_type in STATEFUL:
        for name, body in resources_of_type(template, resource_type).items():
            assert body.get("DeletionPolicy") == "Retain", (resource_type, name)
    tables = resources_of_type(template, "AWS::DynamoDB::Table").values()
    assert tables
    assert all(t["Properties"]["DeletionProtectionEnabled"] is True for t in tables)
    assert all(t["Properties"]["BillingMode"] == "PAY_PER_REQUEST" for t in tables)
    # and logs are kept three months
    assert {g["Properties"]["RetentionInDays"] for g in resources_of_type(template, "AWS::Logs::LogGroup").values()} == {90}


@pytest.mark.parametrize("pipeline", CONSTRUCTS)
def test_a_construct_refuses_the_repositorys_env_config_with_a_clear_message(pipeline: str, tmp_path: Path) -> None:
    # Given the repository's whole EnvConfig, passed where the construct's own props or settings belong
    config = load_config("dev")
    stack = Stack(App(outdir=str(tmp_path)), "Team")
    # When it is given as the props, or as the props' settings
    # Then the first is a TypeError naming the props class, the second a ConfigError naming the field, and nothing was built
    with pytest.raises(TypeError, match=PROPS[pipeline].__name__):
        CONSTRUCTS[pipeline](stack, "AsProps", config)
    with pytest.raises(ConfigError, match=rf"{PROPS[pipeline].__name__}\.settings must be a \w+Config, not EnvConfig"):
        CONSTRUCTS[pipeline](stack, "AsSettings", PROPS[pipeline](settings=config))
    assert stack.node.children == []


def test_monitoring_without_a_topic_makes_its_own_encrypted_alarm_topic(tmp_path: Path) -> None:
    # Given a pipeline and its monitoring, with no topic named
    stack = Stack(App(outdir=str(tmp_path)), "Team")
    runs = RunnerStatsPipeline(stack, "Runs")
    monitoring = RunnerStatsMonitoring(stack, "RunsMonitoring", RunnerStatsMonitoringProps(pipeline=runs))
    template = Template.from_stack(stack).to_json()
    # Then one topic, with its own KMS key, is notified by every alarm on ALARM and OK
    (topic_id,) = resources_of_type(template, "AWS::SNS::Topic")
    assert "KmsMasterKeyId" in template["Resources"][topic_id]["Properties"]
    alarms = resources_of_type(template, "AWS::CloudWatch::Alarm").values()
    assert len(alarms) == len(monitoring.alarms) == 9
    assert all(a["Properties"]["AlarmActions"] == [{"Ref": topic_id}] == a["Properties"]["OKActions"] for a in alarms)


# --- function overrides ----------------------------------------------------------------------


def test_runner_stats_function_memory_timeout_and_reserved_concurrency(tmp_path: Path) -> None:
    # Given a pipeline with its function's settings overridden
    settings = RunnerStatsConfig(memory_mb=1024, timeout_seconds=300, reserved_concurrency=4, shard_count=2, parallelization_factor=2)
    template = build("runner_stats", RunnerStatsPipelineProps(settings=settings), tmp_path)
    # Then the function has them
    props = function_with_handler(template, runner_stats_contract.HANDLER)["Properties"]
    assert (props["MemorySize"], props["Timeout"], props["ReservedConcurrentExecutions"]) == (1024, 300, 4)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"reserved_concurrency": 1, "shard_count": 2}, r"runner_stats reserved concurrency must be 2\.\.10000 \(the shards x"),
        ({"reserved_concurrency": 3, "shard_count": 2, "parallelization_factor": 2}, r"must be 4\.\.10000"),
        ({"reserved_concurrency": 0}, r"reserved concurrency must be 1\.\.10000"),
        ({"timeout_seconds": 901}, r"runner_stats\.timeout_seconds must be 3\.\.900"),
        ({"memory_mb": 64}, r"runner_stats\.memory_mb must be 128\.\.10240"),
    ],
)
def test_runner_stats_refuses_an_unsafe_function_override(changes: dict[str, Any], message: str, tmp_path: Path) -> None:
    # Given a function override that would throttle the stream forever, stop the function, or leave the bounds
    stack = Stack(App(outdir=str(tmp_path)), "Team")
    # When the pipeline is built with it
    # Then it is refused with a message naming it, before anything is built
    with pytest.raises(ConfigError, match=message):
        RunnerStatsPipeline(stack, "Runs", RunnerStatsPipelineProps(settings=RunnerStatsConfig(**changes)))
    assert stack.node.try_find_child("Runs") is None


def test_event_log_reserved_concurrency_per_function(tmp_path: Path) -> None:
    # Given reservations for the API, the worker (covering its queue's concurrency) and the finalizer
    settings = EventLogConfig(reserved_concurrency={"api": 20, "worker": 12, "finalizer": 3}, worker_max_concurrency=12)
    template = build("event_log", EventLogProps(settings=settings), tmp_path)
    # Then each function has its own, the others none
    reserved = {
        handler: function_with_handler(template, handler)["Properties"].get("ReservedConcurrentExecutions")
        for handler in (
            event_log_contract.HANDLER_API,
            event_log_contract.HANDLER_WORKER,
            event_log_contract.HANDLER_FINALIZER,
            event_log_contract.HANDLER_ROUTER,
            event_log_contract.HANDLER_PENDING_CHECK,
        )
    }
    assert list(reserved.values()) == [20, 12, 3, None, None]
    # and SQS hands the finalizer no more at once than it may run (a throttled delivery counts as a receive)
    assert mapping_of(template, event_log_contract.HANDLER_FINALIZER)["ScalingConfig"] == {"MaximumConcurrency": 3}
    assert mapping_of(template, event_log_contract.HANDLER_WORKER)["ScalingConfig"] == {"MaximumConcurrency": 12}


@pytest.mark.parametrize(
    ("reservations", "message"),
    [
        ({"worker": 9}, r"event_log\.reserved_concurrency\['worker'\] reserved concurrency must be 10\.\.10000 \(its queue runs"),
        ({"finalizer": 1}, r"\['finalizer'\] reserved concurrency must be 2\.\.10000"),
        ({"router": 0}, r"\['router'\] reserved concurrency must be 1\.\.10000"),
        ({"snapshots": 5}, r"event_log\.reserved_concurrency names no function \['snapshots'\]"),
    ],
)
def test_event_log_refuses_an_unsafe_reservation(reservations: dict[str, int], message: str, tmp_path: Path) -> None:
    stack = Stack(App(outdir=str(tmp_path)), "Team")
    with pytest.raises(ConfigError, match=message):
        EventLog(stack, "Sheets", EventLogProps(settings=EventLogConfig(reserved_concurrency=reservations)))
    assert stack.node.try_find_child("Sheets") is None


def test_taxi_reserved_concurrency_per_function_but_never_on_the_flag_step(tmp_path: Path) -> None:
    # Given reservations for the authorizer and the Validate phase
    settings = TaxiEtlConfig(reserved_concurrency={"authorizer": 5, "validate": 7})
    template = build("taxi_etl", TaxiEtlSagaProps(settings=settings), tmp_path)
    # Then those two functions have them
    assert function_with_handler(template, taxi_etl_contract.HANDLER_AUTHORIZER)["Properties"]["ReservedConcurrentExecutions"] == 5
    validate = taxi_etl_contract.PHASE_HANDLERS[taxi_etl_contract.PHASE_VALIDATION]
    assert function_with_handler(template, validate)["Properties"]["ReservedConcurrentExecutions"] == 7
    # and the flag function, the failure path, cannot be given one
    stack = Stack(App(outdir=str(tmp_path / "flag")), "Team")
    with pytest.raises(ConfigError, match=r"names no function that may take one \['flag'\].*the flag function is the failure path"):
        TaxiEtlSaga(stack, "Taxis", TaxiEtlSagaProps(settings=TaxiEtlConfig(reserved_concurrency={"flag": 5})))


# --- event source overrides -------------------------------------------------------------------


def test_runner_stats_event_source_settings(tmp_path: Path) -> None:
    # Given the mapping's settings overridden
    settings = RunnerStatsConfig(
        batch_size=500, batching_window_seconds=10, parallelization_factor=3, retry_attempts=20, max_record_age_seconds=3600
    )
    mapping = mapping_of(build("runner_stats", RunnerStatsPipelineProps(settings=settings), tmp_path), runner_stats_contract.HANDLER)
    # Then the mapping has them, and keeps its safe defaults
    assert {key: mapping[key] for key in ("BatchSize", "MaximumBatchingWindowInSeconds", "ParallelizationFactor")} == {
        "BatchSize": 500,
        "MaximumBatchingWindowInSeconds": 10,
        "ParallelizationFactor": 3,
    }
    assert (mapping["MaximumRetryAttempts"], mapping["MaximumRecordAgeInSeconds"]) == (20, 3600)
    assert mapping["BisectBatchOnFunctionError"] is True
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert "OnFailure" in mapping["DestinationConfig"]


def test_event_log_router_event_source_settings(tmp_path: Path) -> None:
    # Given the router's mapping with a batching window and a parallelization factor
    settings = EventLogConfig(router_batch_size=50, router_batching_window_seconds=2, router_parallelization_factor=4)
    mapping = mapping_of(build("event_log", EventLogProps(settings=settings), tmp_path), event_log_contract.HANDLER_ROUTER)
    # Then the mapping has them; by default it sets neither (the service's defaults)
    assert (mapping["BatchSize"], mapping["MaximumBatchingWindowInSeconds"], mapping["ParallelizationFactor"]) == (50, 2, 4)
    default = mapping_of(build("event_log", None, tmp_path / "default"), event_log_contract.HANDLER_ROUTER)
    assert "MaximumBatchingWindowInSeconds" not in default
    assert "ParallelizationFactor" not in default


@pytest.mark.parametrize(
    ("pipeline", "settings", "message"),
    [
        ("runner_stats", RunnerStatsConfig(batch_size=2001), r"runner_stats\.batch_size must be 1\.\.2000"),
        ("runner_stats", RunnerStatsConfig(parallelization_factor=11), r"runner_stats\.parallelization_factor must be 1\.\.10"),
        ("runner_stats", RunnerStatsConfig(retry_attempts=-1), r"runner_stats\.retry_attempts must be 0\.\.10000"),
        ("runner_stats", RunnerStatsConfig(max_record_age_seconds=30), r"runner_stats\.max_record_age_seconds must be 60\.\.604800"),
        ("event_log", EventLogConfig(router_batching_window_seconds=301), r"event_log\.router_batching_window_seconds must be 0\.\.300"),
        ("event_log", EventLogConfig(router_parallelization_factor=0), r"event_log\.router_parallelization_factor must be 1\.\.10"),
    ],
)
def test_an_event_source_override_out_of_bounds_is_refused(pipeline: str, settings: Any, message: str, tmp_path: Path) -> None:
    stack = Stack(App(outdir=str(tmp_path)), "Team")
    with pytest.raises(ConfigError, match=message):
        CONSTRUCTS[pipeline](stack, "Pipeline", PROPS[pipeline](settings=settings))
    assert stack.node.children == []


# --- tables: billing and removal ----------------------------------------------------------------


@pytest.mark.parametrize("pipeline", CONSTRUCTS)
def test_provisioned_tables_get_their_capacity_and_pass_cdk_nag(pipeline: str, tmp_path: Path) -> None:
    # Given provisioned billing with capacities
    tables = TableOptions(billing_mode=dynamodb.BillingMode.PROVISIONED, read_capacity=7, write_capacity=3)
    app = App(outdir=str(tmp_path))
    stack = Stack(app, "Team")
    CONSTRUCTS[pipeline](stack, "Pipeline", PROPS[pipeline](tables=tables))
    add_compliance_checks(app)
    template = app.synth().get_stack_by_name("Team").template
    # Then every table, and every index, is provisioned with them
    for table in resources_of_type(template, "AWS::DynamoDB::Table").values():
        properties = table["Properties"]
        assert properties.get("BillingMode", "PROVISIONED") == "PROVISIONED"
        assert properties["ProvisionedThroughput"] == {"ReadCapacityUnits": 7, "WriteCapacityUnits": 3}
        for index in properties.get("GlobalSecondaryIndexes", []):
            assert index["ProvisionedThroughput"] == {"ReadCapacityUnits": 7, "WriteCapacityUnits": 3}


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        (TableOptions(billing_mode=dynamodb.BillingMode.PROVISIONED), r"PROVISIONED needs read_capacity of 1\.\.40000"),
        (TableOptions(billing_mode=dynamodb.BillingMode.PROVISIONED, read_capacity=5), r"needs write_capacity"),
        (TableOptions(read_capacity=5), r"read_capacity and write_capacity apply only to billing_mode PROVISIONED"),
        (TableOptions(removal_policy=RemovalPolicy.SNAPSHOT), r"tables: removal_policy must be"),
    ],
)
def test_a_table_override_that_cannot_work_is_refused(tables: TableOptions, message: str, tmp_path: Path) -> None:
    stack = Stack(App(outdir=str(tmp_path)), "Team")
    with pytest.raises(ConfigError, match=message):
        RunnerStatsPipeline(stack, "Runs", RunnerStatsPipelineProps(tables=tables))
    assert stack.node.children == []


def test_removal_policy_for_everything_and_for_the_tables_alone(tmp_path: Path) -> None:
    # Given a throwaway environment that still keeps its tables
    props = EventLogProps(
        common=CommonProps(removal_policy=RemovalPolicy.DESTROY), tables=TableOptions(removal_policy=RemovalPolicy.RETAIN)
    )
    template = build("event_log", props, tmp_path)
    # Then the tables are retained and deletion-protected, and everything else is deleted with the stack
    for table in resources_of_type(template, "AWS::DynamoDB::Table").values():
        assert (table["DeletionPolicy"], table["Properties"]["DeletionProtectionEnabled"]) == ("Retain", True)
    for resource_type in ("AWS::SQS::Queue", "AWS::Logs::LogGroup", "AWS::S3::Bucket"):
        assert {body["DeletionPolicy"] for body in resources_of_type(template, resource_type).values()} == {"Delete"}
    # and the other way round: tables deleted and unprotected, the rest retained
    props = EventLogProps(tables=TableOptions(removal_policy=RemovalPolicy.DESTROY))
    template = build("event_log", props, tmp_path / "other")
    for table in resources_of_type(template, "AWS::DynamoDB::Table").values():
        assert (table["DeletionPolicy"], table["Properties"]["DeletionProtectionEnabled"]) == ("Delete", False)
    assert {body["DeletionPolicy"] for body in resources_of_type(template, "AWS::SQS::Queue").values()} == {"Retain"}


@pytest.mark.parametrize(
    ("common", "message"),
    [
        (CommonProps(removal_policy=RemovalPolicy.SNAPSHOT), r"removal_policy must be RemovalPolicy\.RETAIN or RemovalPolicy\.DESTROY"),
        (CommonProps(log_level="TRACE"), r"log_level 'TRACE' is not a Powertools log level"),
        (CommonProps(powertools_layer_version="2.40.0"), r"powertools_layer_version must be a Powertools v3 release"),
    ],
)
def test_common_props_are_checked(common: CommonProps, message: str, tmp_path: Path) -> None:
    stack = Stack(App(outdir=str(tmp_path)), "Team")
    with pytest.raises(ConfigError, match=message):
        TaxiEtlSaga(stack, "Taxis", TaxiEtlSagaProps(common=common))
    assert stack.node.children == []


# --- the public API ------------------------------------------------------------------------------


def test_every_public_name_is_documented_and_every_props_field_is_described() -> None:
    # Given the public API
    assert sorted(public.__all__) == sorted(set(public.__all__))
    for name in public.__all__:
        value = getattr(public, name)
        if isinstance(value, str):
            continue
        # Then every class and function has a docstring
        assert inspect.getdoc(value), name
        # and every field of a props or settings dataclass is named in its docstring
        if dataclasses.is_dataclass(value) and (name.endswith("Props") or name in {"TableOptions", "CommonProps"}):
            doc = inspect.getdoc(value) or ""
            undocumented = [field.name for field in dataclasses.fields(value) if field.name not in doc]
            assert undocumented == [], (name, undocumented)
