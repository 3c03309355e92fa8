"""Properties of the synthesized runner-stats stack, for every environment.

The templates come from the session fixtures `dev_templates` / `prod_templates` (tests/conftest.py):
`app.build_app` with cdk.json's context and cdk-nag on, i.e. what `cdk synth -c env=...` produces.
Expected values are written out here (not only read back from the config) where the brief fixes
them, so a config edit that changes them shows up as a failing test, not as a silent drift.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_kinesis as kinesis
from aws_cdk.assertions import Match, Template

from devtools.aws.template_resources import PROJECT_ROOT, load_assembly, resources_of_type
from onceflow.infra.config import ConfigError, EnvConfig, load_config
from onceflow.infra.runner_stats.construct import RunnerStatsPipeline
from runtime.runner_stats import contract
from runtime.runner_stats.contract import ENV_MESSAGES_TABLE, ENV_REJECTS_TABLE, ENV_RUN_STATS_TABLE, ENV_TENDENCY_TABLE, HANDLER
from runtime.runner_stats.settings import RunnerStatsSettings
from runtime.shared.contract import TRACING_MODE_VARIABLE
from tests.conftest import assembly_for
from tests.infra.template_queries import sdk_layer_ref

ENVS = ("dev", "prod")

# What the brief fixes per environment (independent of infra/config.py on purpose).
EXPECTED = {
    "dev": {"batch_size": 100, "batching_window": 0, "log_retention_days": 7, "removal": "Delete", "protected": False},
    "prod": {"batch_size": 1000, "batching_window": 5, "log_retention_days": 90, "removal": "Retain", "protected": True},
}

# Every environment name the contract defines (ENV_* constants), which the settings object reads:
# the drift guard between what infra sets and what the handler reads.
RUNTIME_ENV_NAMES = {value for name, value in vars(contract).items() if name.startswith("ENV_")}
RUNTIME_TABLE_ENV_NAMES = {value for name, value in vars(contract).items() if name.startswith("ENV_") and name.endswith("_TABLE")}
FACTORY_ENV_NAMES = {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE", "POWERTOOLS_LOG_LEVEL", TRACING_MODE_VARIABLE}

# Each table env var -> the key schema (HASH, RANGE) of the table it must point at.
TABLE_KEYS = {
    ENV_RUN_STATS_TABLE: ("user_id", "run_id"),
    ENV_TENDENCY_TABLE: ("user_id",),
    ENV_MESSAGES_TABLE: ("run_key", "chunk"),
    ENV_REJECTS_TABLE: ("record_id",),
}
# Exactly the DynamoDB actions the handler needs, per table (TransactWriteItems is authorized as PutItem).
TABLE_ACTIONS = {
    ENV_RUN_STATS_TABLE: {"dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:PutItem"},
    ENV_TENDENCY_TABLE: {"dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:PutItem"},
    # Query: the archive read of a forgotten range (the embedded IAM denied it before this grant).
    ENV_MESSAGES_TABLE: {"dynamodb:PutItem", "dynamodb:Query"},
    ENV_REJECTS_TABLE: {"dynamodb:PutItem"},
}
XRAY_ACTIONS = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
POWERTOOLS_PARAMETER = "/aws/service/powertools/python/arm64/python3.13/3.37.0"
MAX_RETRY_ATTEMPTS = 10_000  # the Kinesis event source's upper bound; -1 would mean "forever"


# --- fixtures and helpers ---------------------------------------------------------------------


@pytest.fixture
def template_json(env_templates: dict[str, dict[str, Any]], config: EnvConfig) -> dict[str, Any]:
    return env_templates[f"{config.stack_prefix}-RunnerStats"]


def only(template_json: dict[str, Any], resource_type: str) -> tuple[str, dict[str, Any]]:
    resources = resources_of_type(template_json, resource_type)
    assert len(resources) == 1, f"expected one {resource_type}, found {sorted(resources)}"
    return next(iter(resources.items()))


def table_ids_by_env_name(template_json: dict[str, Any]) -> dict[str, str]:
    """Table env var name -> logical id, matched by key schema (not by logical id spelling)."""
    by_key: dict[tuple[str, ...], str] = {}
    for logical_id, table in resources_of_type(template_json, "AWS::DynamoDB::Table").items():
        schema = sorted(table["Properties"]["KeySchema"], key=lambda key: key["KeyType"])  # HASH < RANGE
        by_key[tuple(key["AttributeName"] for key in schema)] = logical_id
    assert len(by_key) == len(TABLE_KEYS), f"tables with duplicate or unexpected keys: {by_key}"
    return {env: by_key[keys] for env, keys in TABLE_KEYS.items()}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def handler_statements(template_json: dict[str, Any]) -> list[dict[str, Any]]:
    _, function = only(template_json, "AWS::Lambda::Function")
    role_id = function["Properties"]["Role"]["Fn::GetAtt"][0]
    policies = [
        policy
        for policy in resources_of_type(template_json, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
    ]
    assert len(policies) == 1, f"expected one inline policy on the handler role, found {len(policies)}"
    return list(policies[0]["Properties"]["PolicyDocument"]["Statement"])


def get_att_arn(logical_id: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [logical_id, "Arn"]}


# --- 1. event source mapping ------------------------------------------------------------------


def test_event_source_mapping_batches_bisects_and_reports_item_failures(
    template: Template, template_json: dict[str, Any], env_name: str, config: EnvConfig
) -> None:
    # Given the synthesized stack and its environment's config
    settings = config.runner_stats
    function_id, _ = only(template_json, "AWS::Lambda::Function")
    stream_id, _ = only(template_json, "AWS::Kinesis::Stream")
    queue_id, _ = only(template_json, "AWS::SQS::Queue")
    # When we look at the one event source mapping
    template.resource_count_is("AWS::Lambda::EventSourceMapping", 1)
    # Then it reads the pipeline's stream into the handler from the oldest record, in batches of
    # the configured size, bisecting on errors, with partial batch responses, bounded retries and
    # record age, and sends exhausted records to the pipeline's SQS queue
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "FunctionName": {"Ref": function_id},
            "EventSourceArn": get_att_arn(stream_id),
            "StartingPosition": "TRIM_HORIZON",
            "BatchSize": EXPECTED[env_name]["batch_size"],
            "MaximumBatchingWindowInSeconds": EXPECTED[env_name]["batching_window"],
            "ParallelizationFactor": settings.parallelization_factor,
            "BisectBatchOnFunctionError": True,
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
            "MaximumRetryAttempts": settings.retry_attempts,
            "MaximumRecordAgeInSeconds": settings.max_record_age_seconds,
            "DestinationConfig": {"OnFailure": {"Destination": get_att_arn(queue_id)}},
        },
    )
    assert settings.batch_size == EXPECTED[env_name]["batch_size"]
    assert settings.batching_window_seconds == EXPECTED[env_name]["batching_window"]


def test_event_source_mapping_retries_and_record_age_are_bounded(template_json: dict[str, Any]) -> None:
    # Given the mapping and the stream it reads
    _, mapping = only(template_json, "AWS::Lambda::EventSourceMapping")
    _, stream = only(template_json, "AWS::Kinesis::Stream")
    props = mapping["Properties"]
    # When we read its retry and age limits
    retries, max_age = props["MaximumRetryAttempts"], props["MaximumRecordAgeInSeconds"]
    # Then neither is infinite (-1) and records are given up on before the stream drops them
    assert 0 <= retries <= MAX_RETRY_ATTEMPTS
    assert 60 <= max_age <= stream["Properties"]["RetentionPeriodHours"] * 3600
    assert 1 <= props["ParallelizationFactor"] <= 10


# --- 2. encryption ----------------------------------------------------------------------------


def test_stream_is_kms_encrypted_with_the_aws_managed_key(template: Template) -> None:
    # Given the synthesized stack
    # When we look at the Kinesis stream
    template.resource_count_is("AWS::Kinesis::Stream", 1)
    # Then it is encrypted with the AWS-managed Kinesis key
    template.has_resource_properties("AWS::Kinesis::Stream", {"StreamEncryption": {"EncryptionType": "KMS", "KeyId": "alias/aws/kinesis"}})


def test_every_table_is_encrypted(template: Template) -> None:
    # Given the pipeline's four tables
    template.resource_count_is("AWS::DynamoDB::Table", 4)
    # When we look at their server-side encryption
    # Then every one has it enabled
    template.all_resources_properties("AWS::DynamoDB::Table", {"SSESpecification": {"SSEEnabled": True}})


def test_failure_queue_is_encrypted_and_refuses_plain_http(template: Template, template_json: dict[str, Any]) -> None:
    # Given the one SQS queue (the mapping's on-failure destination)
    queue_id, _ = only(template_json, "AWS::SQS::Queue")
    # When we look at its encryption and its queue policy
    template.has_resource_properties("AWS::SQS::Queue", {"SqsManagedSseEnabled": True})
    # Then a policy on that queue denies every request that does not use TLS
    template.has_resource_properties(
        "AWS::SQS::QueuePolicy",
        {
            "Queues": [{"Ref": queue_id}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        {
                            "Effect": "Deny",
                            "Action": "sqs:*",
                            "Principal": {"AWS": "*"},
                            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            "Resource": get_att_arn(queue_id),
                        }
                    ]
                )
            },
        },
    )


# --- 3. tables and retention of stateful resources --------------------------------------------


def test_every_table_is_on_demand_with_point_in_time_recovery(template: Template) -> None:
    # Given the pipeline's tables
    # When we look at billing and backups
    # Then all are PAY_PER_REQUEST with point-in-time recovery
    template.all_resources_properties(
        "AWS::DynamoDB::Table",
        {
            "BillingMode": "PAY_PER_REQUEST",
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            "ProvisionedThroughput": Match.absent(),
        },
    )


def test_tables_are_retained_and_protected_only_in_prod(template: Template, env_name: str) -> None:
    # Given the environment's retention expectation (prod keeps data, dev is disposable)
    policy, protected = EXPECTED[env_name]["removal"], EXPECTED[env_name]["protected"]
    # When we look at the tables' deletion and replacement policies
    # Then prod retains and deletion-protects every table; dev deletes them and has no protection
    template.all_resources(
        "AWS::DynamoDB::Table",
        {
            "DeletionPolicy": policy,
            "UpdateReplacePolicy": policy,
            "Properties": Match.object_like({"DeletionProtectionEnabled": protected}),
        },
    )


@pytest.mark.parametrize("resource_type", ["AWS::Kinesis::Stream", "AWS::SQS::Queue", "AWS::Logs::LogGroup"])
def test_stream_queue_and_log_group_follow_the_removal_policy(template: Template, env_name: str, resource_type: str) -> None:
    # Given a stateful resource other than a table
    policy = EXPECTED[env_name]["removal"]
    # When we look at its deletion and replacement policies
    template.resource_count_is(resource_type, 1)
    # Then prod retains it and dev deletes it
    template.all_resources(resource_type, {"DeletionPolicy": policy, "UpdateReplacePolicy": policy})


# --- 4. IAM least privilege -------------------------------------------------------------------


def test_handler_role_has_no_managed_or_inline_policies(template: Template, template_json: dict[str, Any]) -> None:
    # Given the handler's role
    _, function = only(template_json, "AWS::Lambda::Function")
    role_id = function["Properties"]["Role"]["Fn::GetAtt"][0]
    # When we look at the role resource itself
    role = template_json["Resources"][role_id]
    # Then only Lambda may assume it, and it carries no managed (e.g. AWSLambdaBasicExecutionRole)
    # or embedded policies: everything it may do is in its one default policy
    template.resource_count_is("AWS::IAM::Role", 1)
    assert role["Type"] == "AWS::IAM::Role"
    assert "ManagedPolicyArns" not in role["Properties"]
    assert "Policies" not in role["Properties"]
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"] == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}}
    ]


def test_dynamodb_actions_are_exactly_those_the_handler_needs_on_its_own_tables(template_json: dict[str, Any]) -> None:
    # Given the handler role's statements and the pipeline's tables, by what the runtime calls them
    table_ids = table_ids_by_env_name(template_json)
    env_by_arn = {json.dumps(get_att_arn(table_id)): env for env, table_id in table_ids.items()}
    statements = [s for s in handler_statements(template_json) if any(a.startswith("dynamodb:") for a in as_list(s["Action"]))]
    # When we collect which actions each table is granted, statement by statement
    granted: dict[str, set[str]] = {env: set() for env in TABLE_ACTIONS}
    for statement in statements:
        actions = set(as_list(statement["Action"]))
        resources = as_list(statement["Resource"])
        assert statement["Effect"] == "Allow" and "Condition" not in statement
        assert all(action.startswith("dynamodb:") for action in actions), f"mixed-service statement: {statement}"
        assert not any("*" in action for action in actions), f"wildcard DynamoDB action: {statement}"
        for resource in resources:
            # Then every resource is the bare ARN of one of the four tables (no "*", no index/stream ARNs)
            env = env_by_arn.get(json.dumps(resource))
            assert env is not None, f"DynamoDB actions on something other than a pipeline table: {resource}"
            # and a statement never gives a table an action that table does not need. (With the
            # @aws-cdk/aws-iam:minimizePolicies flag CDK merges grants with identical actions, so the
            # messages and rejects PutItem grants share one statement; each still names only tables
            # that need exactly those actions.)
            assert actions <= TABLE_ACTIONS[env], f"{env} is granted {sorted(actions - TABLE_ACTIONS[env])} it does not use"
            granted[env] |= actions
    # Then each table is granted exactly its actions, so no Scan/DeleteItem/UpdateItem/dynamodb:*
    assert granted == TABLE_ACTIONS
    forbidden = {"dynamodb:*", "dynamodb:Scan", "dynamodb:DeleteItem"}
    assert not forbidden & set().union(*granted.values())


def test_only_the_xray_statement_uses_a_wildcard_resource(template_json: dict[str, Any]) -> None:
    # Given the handler role's statements
    statements = handler_statements(template_json)
    # When we pick those whose Resource is "*"
    wildcard = [s for s in statements if "*" in as_list(s["Resource"])]
    # Then there is exactly one, and it holds only the two X-Ray actions (which have no resource-level
    # permissions; the cdk-nag IAM5[Resource::*] acknowledgement on this policy relies on this test)
    assert len(wildcard) == 1, wildcard
    assert set(as_list(wildcard[0]["Action"])) == XRAY_ACTIONS
    assert as_list(wildcard[0]["Resource"]) == ["*"]
    # and no statement anywhere uses a wildcard action or a Not* element
    for statement in statements:
        assert not any("*" in action for action in as_list(statement["Action"])), statement
        assert not {"NotAction", "NotResource", "NotPrincipal"} & set(statement), statement
        assert statement["Effect"] == "Allow"


def test_every_other_statement_names_only_the_pipelines_own_resources(template_json: dict[str, Any]) -> None:
    # Given the handler, its log group, stream and queue
    _, function = only(template_json, "AWS::Lambda::Function")
    log_group_ref = function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
    stream_id, _ = only(template_json, "AWS::Kinesis::Stream")
    queue_id, _ = only(template_json, "AWS::SQS::Queue")
    allowed_resources = {
        "logs": [get_att_arn(log_group_ref)],
        "kinesis": [get_att_arn(stream_id)],
        "sqs": [get_att_arn(queue_id)],
        "xray": ["*"],
    }
    # When we group the role's statements by service
    for statement in handler_statements(template_json):
        services = {action.split(":")[0] for action in as_list(statement["Action"])}
        assert len(services) == 1, f"statement mixes services: {statement}"
        service = services.pop()
        if service == "dynamodb":
            continue  # checked action by action above
        # Then logs go only to the function's own log group, reads only to its stream, failed
        # batch records only to its queue; there is no other service
        assert service in allowed_resources, f"unexpected service {service}: {statement}"
        assert as_list(statement["Resource"]) == allowed_resources[service], statement
        if service == "logs":
            assert set(as_list(statement["Action"])) == {"logs:CreateLogStream", "logs:PutLogEvents"}
        if service == "kinesis":
            assert not any(action.startswith("kinesis:Put") for action in as_list(statement["Action"])), statement


# --- 5. the Lambda function -------------------------------------------------------------------


def test_function_runtime_architecture_handler_tracing_and_json_logs(
    template: Template, template_json: dict[str, Any], config: EnvConfig
) -> None:
    # Given the stack's only function and only log group
    template.resource_count_is("AWS::Lambda::Function", 1)
    log_group_id, _ = only(template_json, "AWS::Logs::LogGroup")
    role_id, _ = only(template_json, "AWS::IAM::Role")
    # When we look at its properties
    # Then it is Python 3.13 on arm64, runs the runner-stats handler with active tracing, logs JSON
    # into its own log group, and is sized from the config
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Runtime": "python3.13",
            "Architectures": ["arm64"],
            "Handler": "runtime.runner_stats.handler.handler",
            "TracingConfig": {"Mode": "Active"},
            "LoggingConfig": Match.object_like({"LogFormat": "JSON", "LogGroup": {"Ref": log_group_id}}),
            "Role": get_att_arn(role_id),
            "MemorySize": config.runner_stats.memory_mb,
            "Timeout": config.runner_stats.timeout_seconds,
        },
    )
    assert HANDLER == "runtime.runner_stats.handler.handler"


def test_function_uses_the_aws_managed_powertools_layer_from_ssm(template_json: dict[str, Any]) -> None:
    # Given the function
    _, function = only(template_json, "AWS::Lambda::Function")
    # When we follow its layer references: Powertools', then the stack's SDK layer
    layers = function["Properties"]["Layers"]
    assert len(layers) == 2 and set(layers[0]) == {"Ref"}, layers
    assert layers[1] == sdk_layer_ref(template_json)
    parameter = template_json["Parameters"][layers[0]["Ref"]]
    # Then it is an SSM parameter resolved at deploy time: the public Powertools parameter for
    # arm64 / python3.13 / the pinned version
    Template.from_json(template_json).has_parameter(
        layers[0]["Ref"], {"Type": "AWS::SSM::Parameter::Value<String>", "Default": POWERTOOLS_PARAMETER}
    )
    assert parameter["Default"] == POWERTOOLS_PARAMETER


def test_log_group_retention(template: Template, env_name: str) -> None:
    # Given the function's log group
    template.resource_count_is("AWS::Logs::LogGroup", 1)
    # When we look at its retention
    # Then dev keeps a week and prod three months
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": EXPECTED[env_name]["log_retention_days"]})


def test_environment_names_are_exactly_what_the_runtime_reads(template_json: dict[str, Any], config: EnvConfig) -> None:
    # Given the function's environment
    _, function = only(template_json, "AWS::Lambda::Function")
    variables: dict[str, Any] = function["Properties"]["Environment"]["Variables"]
    # When we split it into the factory's Powertools names and the pipeline's names
    pipeline_names = set(variables) - FACTORY_ENV_NAMES
    table_names = {name for name, value in variables.items() if isinstance(value, dict)}
    # Then the Powertools names are set, and the rest are exactly the ENV_* names that
    # runtime/runner_stats/settings.py reads (nothing missing, nothing the runtime ignores)
    assert variables["POWERTOOLS_SERVICE_NAME"] == "runner-stats"
    assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "onceflow"
    assert variables[TRACING_MODE_VARIABLE] == "active"
    assert variables["POWERTOOLS_LOG_LEVEL"] == config.log_level
    assert pipeline_names == RUNTIME_ENV_NAMES
    assert table_names == RUNTIME_TABLE_ENV_NAMES == set(TABLE_KEYS)


def test_table_variables_point_at_the_right_tables(template_json: dict[str, Any]) -> None:
    # Given the tables, identified by key schema, and the function's environment
    table_ids = table_ids_by_env_name(template_json)
    _, function = only(template_json, "AWS::Lambda::Function")
    variables = function["Properties"]["Environment"]["Variables"]
    # When we read each table variable
    # Then it is a Ref (the table name) of the table with that variable's key schema
    for env, table_id in table_ids.items():
        assert variables[env] == {"Ref": table_id}, f"{env} should name the table keyed {TABLE_KEYS[env]}"


def test_runtime_settings_parse_the_synthesized_environment(template_json: dict[str, Any], config: EnvConfig) -> None:
    # Given the function's environment, with table Refs resolved to their logical ids
    _, function = only(template_json, "AWS::Lambda::Function")
    variables = function["Properties"]["Environment"]["Variables"]
    resolved = {name: value["Ref"] if isinstance(value, dict) else value for name, value in variables.items()}
    # When the runtime builds its settings from it, as the handler does at cold start
    settings = RunnerStatsSettings.from_env(resolved)
    # Then it finds every table and the configured limits
    table_ids = table_ids_by_env_name(template_json)
    tables = settings.tables
    assert (tables.run_stats, tables.tendency, tables.messages, tables.rejects) == tuple(
        table_ids[env] for env in (ENV_RUN_STATS_TABLE, ENV_TENDENCY_TABLE, ENV_MESSAGES_TABLE, ENV_REJECTS_TABLE)
    )
    limits = config.runner_stats
    assert settings.options.policy.gap_max_lag == limits.gap_max_lag
    assert settings.options.policy.gap_max_open == limits.gap_max_open
    assert settings.options.policy.archive_chunk_size == limits.archive_chunk_size
    assert settings.options.commit_attempts == limits.commit_attempts
    assert settings.options.max_message_bytes == limits.max_message_bytes
    assert settings.reject_payload_max_bytes == limits.reject_payload_max_bytes
    assert settings.options.timestamps.max_age_ms == limits.timestamp_max_age_seconds * 1000
    assert settings.options.timestamps.max_ahead_ms == limits.timestamp_max_ahead_seconds * 1000


# --- 6. the code asset ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev_assembly() -> Path:
    """The dev cloud assembly on disk: the directory of the session's dev synth."""
    return assembly_for("dev")


def zip_file_assets(assembly: Path) -> dict[str, dict[str, Any]]:
    manifest = json.loads((assembly / "manifest.json").read_text())
    assets: dict[str, dict[str, Any]] = {}
    for artifact in manifest["artifacts"].values():
        if artifact["type"] == "cdk:asset-manifest":
            files = json.loads((assembly / artifact["properties"]["file"]).read_text())["files"]
            assets.update({asset_id: asset for asset_id, asset in files.items() if asset["source"]["packaging"] == "zip"})
    return assets


def asset_files(directory: Path) -> Iterator[Path]:
    return (path.relative_to(directory) for path in directory.rglob("*"))


def test_function_code_is_one_asset_holding_only_the_runtime_package(dev_assembly: Path) -> None:
    # Given the dev cloud assembly and its stack template
    template_json = load_assembly(dev_assembly)[f"{load_config('dev').stack_prefix}-RunnerStats"]
    _, function = only(template_json, "AWS::Lambda::Function")
    _, layer = only(template_json, "AWS::Lambda::LayerVersion")
    # When we look up the function's code in the asset manifest (the other zip asset is the SDK layer)
    assets = zip_file_assets(dev_assembly)
    keys = {asset_id: destination["objectKey"] for asset_id, asset in assets.items() for destination in asset["destinations"].values()}
    assert sorted(keys.values()) == sorted([function["Properties"]["Code"]["S3Key"], layer["Properties"]["Content"]["S3Key"]])
    (asset,) = [assets[asset_id] for asset_id, key in keys.items() if key == function["Properties"]["Code"]["S3Key"]]
    directory = dev_assembly / asset["source"]["path"]
    contents = sorted(asset_files(directory))
    # Then the asset holds the runtime package and nothing else: no tests, infra, tooling,
    # virtualenv or git data; bytecode only in __pycache__ beside its module (tests/infra/test_lambda_assets.py reads it)
    assert {path.parts[0] for path in contents} == {"runtime"}
    unwanted = {"tests", "infra", "devtools", "benchmarks", ".venv", ".git", "node_modules", "cdk.out"}
    assert not [path for path in contents if unwanted & set(path.parts)]
    compiled = [path for path in contents if "__pycache__" in path.parts]
    assert compiled and all(path.parent.name == "__pycache__" and path.suffix == ".pyc" for path in compiled if path.suffix)
    # and exactly the runtime's source files, including the handler module the function names
    source = sorted(
        path.relative_to(PROJECT_ROOT)
        for path in (PROJECT_ROOT / "runtime").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    )
    assert [path for path in contents if (directory / path).is_file() and "__pycache__" not in path.parts] == source
    module, _ = function["Properties"]["Handler"].rsplit(".", 1)
    assert (directory / (module.replace(".", "/") + ".py")).is_file()


# --- the construct on its own (no cdk-nag, no app) --------------------------------------------


def test_pipeline_consumes_an_existing_stream_instead_of_creating_one(tmp_path: Path) -> None:
    # Given a stack with an imported stream
    stack = Stack(App(outdir=str(tmp_path)), "Consumer")
    arn = "arn:aws:kinesis:eu-west-1:123456789012:stream/existing"
    existing = kinesis.Stream.from_stream_arn(stack, "Existing", arn)
    # When the pipeline is built on it
    RunnerStatsPipeline(stack, "RunnerStats", replace(load_config("dev").runner_stats_props(), stream=existing))
    template = Template.from_stack(stack)
    # Then no stream is created, and the mapping and the read grant use the imported stream
    template.resource_count_is("AWS::Kinesis::Stream", 0)
    template.has_resource_properties("AWS::Lambda::EventSourceMapping", {"EventSourceArn": arn})
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with([Match.object_like({"Action": Match.array_with(["kinesis:GetRecords"]), "Resource": arn})])
            }
        },
    )


def test_pipeline_rejects_an_invalid_config_before_building_anything(tmp_path: Path) -> None:
    # Given a config whose batch size is out of range
    dev = load_config("dev")
    invalid = replace(dev, runner_stats=replace(dev.runner_stats, batch_size=0))
    stack = Stack(App(outdir=str(tmp_path)), "Invalid")
    # When the pipeline is built with it
    with pytest.raises(ConfigError, match="batch_size"):
        RunnerStatsPipeline(stack, "RunnerStats", invalid.runner_stats_props())
    # Then nothing was added to the stack
    assert stack.node.try_find_child("RunnerStats") is None


@pytest.mark.parametrize(
    ("field", "value"),
    [("timestamp_max_age_seconds", 59), ("timestamp_max_age_seconds", 31 * 24 * 3600), ("timestamp_max_ahead_seconds", 0)],
)
def test_timestamp_window_bounds_are_validated_at_synth(field: str, value: int) -> None:
    # Given a config whose timestamp window is out of range
    dev = load_config("dev")
    invalid = replace(dev, runner_stats=replace(dev.runner_stats, **{field: value}))
    # When it is validated, Then the error names the field
    with pytest.raises(ConfigError, match=field):
        invalid.validate()


def test_pipeline_requires_its_props_type(tmp_path: Path) -> None:
    # Given a stack
    stack = Stack(App(outdir=str(tmp_path)), "Untyped")
    # When the pipeline is given a bare config instead of its props
    # Then it refuses
    with pytest.raises(TypeError, match="RunnerStatsPipelineProps"):
        RunnerStatsPipeline(stack, "RunnerStats", load_config("dev"))  # type: ignore[arg-type]


def test_alarms_use_the_configured_thresholds(template: Template, config: EnvConfig) -> None:
    # Given the environment's alarm thresholds
    thresholds = config.monitoring.runner_stats
    # Then the iterator-age alarm watches the handler's IteratorAge maximum at that threshold
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {"MetricName": "IteratorAge", "Namespace": "AWS/Lambda", "Statistic": "Maximum", "Threshold": thresholds.iterator_age_ms},
    )
    # And the on-failure queue alarm fires on the first record given up on
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {"MetricName": "ApproximateNumberOfMessagesVisible", "Namespace": "AWS/SQS", "Threshold": thresholds.on_failure_messages},
    )
    # And the rejected-records alarm reads the handler's own EMF metric
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "MetricName": "RejectedRecords",
            "Namespace": "onceflow",
            "Dimensions": [{"Name": "service", "Value": "runner-stats"}],
            "Statistic": "Sum",
            "Threshold": thresholds.rejected_per_5min,
        },
    )
