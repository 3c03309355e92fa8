"""Properties of the synthesized taxi ETL saga stack, for every environment.

The templates come from the session fixtures `dev_templates` / `prod_templates` (tests/conftest.py):
`app.build_app` with cdk.json's context and cdk-nag on, i.e. what `cdk synth -c env=...` produces.
Expected permissions, environment names, states and routes are written out literally here (not
derived from infra/taxi_etl/construct.py), so a construct edit that changes them shows up as a
failing test, not as a silent drift. Sizes, limits and retries are read from the environment's config.
Variants (an EXPRESS workflow, an existing secret) are built in a fresh App without cdk-nag.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Match, Template

from devtools.aws.template_resources import cdk_context, resources_of_type
from onceflow.infra.config import ConfigError, EnvConfig, TaxiEtlConfig, load_config
from onceflow.infra.taxi_etl.construct import TaxiEtlSaga
from onceflow.infra.taxi_etl.props import STEP_FUNCTIONS_MAX_PAYLOAD_BYTES, WORKFLOW_DEFAULTS, ExecutionLimits, TaxiEtlSagaProps
from onceflow.infra.taxi_etl.stack import TaxiEtlStack
from runtime.shared.contract import TRACING_MODE_VARIABLE
from runtime.taxi_etl.api_wiring import ApiSettings
from runtime.taxi_etl.authorizer_wiring import AuthorizerSettings
from runtime.taxi_etl.bulk_chunk_wiring import BulkChunkSettings
from runtime.taxi_etl.bulk_wiring import BulkPlanSettings, BulkReportSettings, LoadsSettings
from runtime.taxi_etl.flag_wiring import FlagSettings
from runtime.taxi_etl.phase_wiring import PhaseSettings
from runtime.taxi_etl.row_state_wiring import RowStateSettings
from runtime.taxi_etl.store_wiring import StoreSettings
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
    resource,
    role_of,
    sdk_layer_ref,
    unconditional,
    variables_of,
)

# What the brief fixes per environment (independent of infra/config.py on purpose).
EXPECTED = {
    "dev": {"removal": "Delete", "protected": False, "log_retention_days": 7, "execution_log": ("ALL", True)},
    # prod logs failures only, and no row content (priced in docs/taxi-etl.md, "Cost and throughput")
    "prod": {"removal": "Retain", "protected": True, "log_retention_days": 90, "execution_log": ("ERROR", False)},
}

VALIDATE = "runtime.taxi_etl.validate_handler.handler"
TRANSFORM = "runtime.taxi_etl.transform_handler.handler"
STORE = "runtime.taxi_etl.store_handler.handler"
FLAG = "runtime.taxi_etl.flag_handler.handler"
API = "runtime.taxi_etl.api_handler.handler"
AUTHORIZER = "runtime.taxi_etl.authorizer_handler.handler"
ROW_STATE = "runtime.taxi_etl.row_state_handler.handler"
BULK_PLAN = "runtime.taxi_etl.bulk_plan_handler.handler"
BULK_CHUNK = "runtime.taxi_etl.bulk_chunk_handler.handler"
BULK_REPORT = "runtime.taxi_etl.bulk_report_handler.handler"
LOADS_API = "runtime.taxi_etl.loads_api_handler.handler"
LOAD_STARTER = "runtime.taxi_etl.load_starter_handler.handler"
BULK_HANDLERS = (BULK_PLAN, BULK_CHUNK, BULK_REPORT, LOADS_API, LOAD_STARTER)
HANDLERS = (VALIDATE, TRANSFORM, STORE, FLAG, API, AUTHORIZER, ROW_STATE, *BULK_HANDLERS)
STATE_MACHINE_FUNCTIONS = (VALIDATE, TRANSFORM, STORE, FLAG)
BULK_STATE_MACHINE_FUNCTIONS = (BULK_PLAN, BULK_CHUNK, BULK_REPORT)
SERVICE_NAMES = {
    VALIDATE: "taxi-etl-validation",
    TRANSFORM: "taxi-etl-transformation",
    STORE: "taxi-etl-store",
    FLAG: "taxi-etl-flag",
    API: "taxi-etl-api",
    AUTHORIZER: "taxi-etl-authorizer",
    ROW_STATE: "taxi-etl-row-state",
    BULK_PLAN: "taxi-etl-bulk-plan",
    BULK_CHUNK: "taxi-etl-bulk-chunk",
    BULK_REPORT: "taxi-etl-bulk-report",
    LOADS_API: "taxi-etl-loads-api",
    LOAD_STARTER: "taxi-etl-load-starter",
}
SETTINGS_CLASSES: dict[str, Any] = {
    VALIDATE: PhaseSettings,
    TRANSFORM: PhaseSettings,
    STORE: StoreSettings,
    FLAG: FlagSettings,
    API: ApiSettings,
    AUTHORIZER: AuthorizerSettings,
    ROW_STATE: RowStateSettings,
    BULK_PLAN: BulkPlanSettings,
    BULK_CHUNK: BulkChunkSettings,
    BULK_REPORT: BulkReportSettings,
    LOADS_API: LoadsSettings,
    LOAD_STARTER: LoadsSettings,
}

# Exactly the variables each handler's settings class reads (runtime/taxi_etl/*_wiring.py).
ENVIRONMENT_NAMES = {
    VALIDATE: {"STATUS_TABLE"},
    TRANSFORM: {"STATUS_TABLE"},
    STORE: {"STATUS_TABLE", "FINAL_TABLE"},
    FLAG: {"VALIDATION_STATUS_TABLE", "TRANSFORMATION_STATUS_TABLE", "STORE_STATUS_TABLE", "FINAL_TABLE"},
    API: {
        "STATE_MACHINE_ARN",
        "WORKFLOW_TYPE",
        "BATCH_MAX_LINES",
        "BATCH_MAX_BYTES",
        "MAX_LINE_BYTES",
        "VALIDATION_STATUS_TABLE",
        "TRANSFORMATION_STATUS_TABLE",
        "STORE_STATUS_TABLE",
        "FINAL_TABLE",
    },
    AUTHORIZER: {"API_KEY_SECRET_ID", "SECRET_CACHE_SECONDS", "SECRET_REFRESH_FLOOR_SECONDS"},
    ROW_STATE: {"VALIDATION_STATUS_TABLE", "TRANSFORMATION_STATUS_TABLE", "STORE_STATUS_TABLE", "FINAL_TABLE"},
    BULK_PLAN: {"INGEST_BUCKET", "CHUNK_ROWS"},
    BULK_CHUNK: {
        "INGEST_BUCKET",
        "MAX_LINE_BYTES",
        "VALIDATION_STATUS_TABLE",
        "TRANSFORMATION_STATUS_TABLE",
        "STORE_STATUS_TABLE",
        "FINAL_TABLE",
    },
    BULK_REPORT: {"INGEST_BUCKET"},
    LOADS_API: {"INGEST_BUCKET", "BULK_STATE_MACHINE_ARN"},
    LOAD_STARTER: {"INGEST_BUCKET", "BULK_STATE_MACHINE_ARN"},
}
FACTORY_ENV_NAMES = {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE", "POWERTOOLS_LOG_LEVEL", TRACING_MODE_VARIABLE}

# Logical ids: stable on purpose (a changed logical id replaces the resource, i.e. loses the data).
VALIDATION_TABLE = "TaxiEtlValidationStatusTableB61CF96D"
TRANSFORMATION_TABLE = "TaxiEtlTransformationStatusTable089A6E38"
STORE_TABLE = "TaxiEtlStoreStatusTable16B49BBF"
TRIPS_TABLE = "TaxiEtlTripsTableA1D9F594"
STATUS_TABLES = {"Validation": VALIDATION_TABLE, "Transformation": TRANSFORMATION_TABLE, "Store": STORE_TABLE}
TABLES = {VALIDATION_TABLE, TRANSFORMATION_TABLE, STORE_TABLE, TRIPS_TABLE}
SECRET = "TaxiEtlApiKeySecretED324806"
STATE_MACHINE = "TaxiEtlStateMachine72705BD6"
STATE_MACHINE_LOGS = "TaxiEtlStateMachineLogsDBA6863A"
STATE_MACHINE_LOGS_KEY = "TaxiEtlStateMachineLogsKey1F444E60"
HTTP_API = "TaxiEtlHttpApi46141E76"
API_AUTHORIZER = "TaxiEtlHttpApiApiKeyAuthorizer917F94FE"
API_ACCESS_LOGS = "TaxiEtlApiAccessLogsAE5ABF75"
BULK_STATE_MACHINE = "TaxiEtlBulkStateMachine479724BD"
BULK_STATE_MACHINE_LOGS = "TaxiEtlBulkStateMachineLogsDAFF3427"
INGEST_BUCKET = "TaxiEtlIngestBucket32077F3C"
INGEST_ACCESS_LOG_BUCKET = "TaxiEtlIngestAccessLogBucketB028E7F3"
LOAD_STARTER_QUEUE = "TaxiEtlLoadStarterQueueAA91307C"
LOAD_STARTER_DEAD_LETTER_QUEUE = "TaxiEtlLoadStarterDeadLetterQueueF0270890"

PHASES = ("Validation", "Transformation", "Store")
PHASE_HANDLERS = {"Validation": VALIDATE, "Transformation": TRANSFORM, "Store": STORE}
# Where a phase goes when all is well: the next phase, or the Succeed state after Store.
NEXT_AFTER = {"Validation": "Transformation", "Transformation": "Store", "Store": "Stored"}
POST_ROUTES = {"POST /trips", "POST /trips/batch"}
ROW_STATE_ROUTE = "GET /trips/{StoreRequestId}"
LOADS_ROUTES = {"POST /loads", "GET /loads/{LoadId}"}
ROUTES = POST_ROUTES | {ROW_STATE_ROUTE} | LOADS_ROUTES
LAMBDA_SERVICE_ERRORS = [
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
    "Lambda.ClientExecutionTimeoutException",
]
# What a task raises when AWS failed it (runtime/taxi_etl/transient.py), then Lambda's own: retried longer.
TRANSIENT_ERRORS = ["TransientInfrastructureError", *LAMBDA_SERVICE_ERRORS]
# An Express workflow's 5 minutes hold a phase's retries and its automatic redrive only with fewer, shorter retries.
EXPRESS_RETRIES = {"transient_retry_attempts": 4, "auto_redrive_wait_seconds": 60}
POWERTOOLS_PARAMETER = "/aws/service/powertools/python/arm64/python3.13/3.37.0"

XRAY_ACTIONS = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
LOG_ACTIONS = {"logs:CreateLogStream", "logs:PutLogEvents"}
# The state machine role's "*" statement: Step Functions' log delivery and X-Ray, neither of which
# supports resource-level permissions (the cdk-nag IAM5[Resource::*] acknowledgement relies on it).
STATE_MACHINE_WILDCARD_ACTIONS = {
    "logs:CreateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:DescribeLogGroups",
    "logs:DescribeResourcePolicies",
    "logs:GetLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:UpdateLogDelivery",
    "xray:GetSamplingRules",
    "xray:GetSamplingTargets",
    "xray:PutTelemetryRecords",
    "xray:PutTraceSegments",
}
KMS_ENCRYPT_DECRYPT = {"kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*"}
IMPORTED_SECRET_NAME = "onceflow/taxi-api-key"


# --- fixtures and helpers ---------------------------------------------------------------------


@pytest.fixture
def template_json(env_templates: dict[str, dict[str, Any]], config: EnvConfig) -> dict[str, Any]:
    return env_templates[f"{config.stack_prefix}-TaxiEtl"]


def executions_of(state_machine_id: str) -> dict[str, Any]:
    """The ARN pattern of every execution of the state machine (CDK's grant_execution)."""
    name = {"Fn::Select": [6, {"Fn::Split": [":", ref(state_machine_id)]}]}
    return {
        "Fn::Join": [
            "",
            ["arn:", ref("AWS::Partition"), ":states:", ref("AWS::Region"), ":", ref("AWS::AccountId"), ":execution:", name, ":*"],
        ]
    }


def policy_statements(template_json: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    """The statements of the one inline policy attached to the role."""
    policies = [p for p in resources_of_type(template_json, "AWS::IAM::Policy").values() if ref(role_id) in p["Properties"]["Roles"]]
    assert len(policies) == 1, f"expected one inline policy on {role_id}, found {len(policies)}"
    assert policies[0]["Properties"]["Roles"] == [ref(role_id)], "a policy shared between roles"
    return list(policies[0]["Properties"]["PolicyDocument"]["Statement"])


def statements_of(template_json: dict[str, Any], handler: str) -> list[dict[str, Any]]:
    return policy_statements(template_json, role_of(template_json, handler))


def granted_by(statements: list[dict[str, Any]]) -> Grants:
    """(resource, condition) -> every action allowed on it, over all statements."""
    grants: Grants = {}
    for statement in statements:
        assert statement["Effect"] == "Allow", statement
        assert not {"NotAction", "NotResource", "NotPrincipal", "Principal"} & set(statement), statement
        condition = key(statement["Condition"]) if "Condition" in statement else None
        for res in as_list(statement["Resource"]):
            grants.setdefault((key(res), condition), set()).update(as_list(statement["Action"]))
    return grants


def expected_grants(template_json: dict[str, Any], handler: str) -> Grants:
    """What each function may do, written out per resource (X-Ray's "*" is checked on its own)."""
    own_logs = (arn(log_group_of(template_json, handler)), LOG_ACTIONS)
    if handler == VALIDATE:
        # its status row: a conditional update, on its own status table only
        return unconditional(own_logs, (arn(VALIDATION_TABLE), {"dynamodb:UpdateItem"}))
    if handler == TRANSFORM:
        return unconditional(own_logs, (arn(TRANSFORMATION_TABLE), {"dynamodb:UpdateItem"}))
    if handler == STORE:
        # its status row (a conditional update) and the typed item in the final (trips) table (a conditional put)
        return unconditional(own_logs, (arn(STORE_TABLE), {"dynamodb:UpdateItem"}), (arn(TRIPS_TABLE), {"dynamodb:PutItem"}))
    if handler == FLAG:
        # sets the reason in every status table; only reads the final table (a stored row is not flagged)
        return unconditional(
            own_logs,
            (arn(VALIDATION_TABLE), {"dynamodb:UpdateItem"}),
            (arn(TRANSFORMATION_TABLE), {"dynamodb:UpdateItem"}),
            (arn(STORE_TABLE), {"dynamodb:UpdateItem"}),
            (arn(TRIPS_TABLE), {"dynamodb:BatchGetItem"}),
        )
    if handler == API:
        # starts executions of its one state machine and reads them back (a repeated request); reads a
        # single unkeyed row's four items first (one already stored or flagged starts no execution)
        return unconditional(
            own_logs,
            (ref(STATE_MACHINE), {"states:StartExecution"}),
            (executions_of(STATE_MACHINE), {"states:DescribeExecution"}),
            *((arn(table), {"dynamodb:BatchGetItem"}) for table in sorted(TABLES)),
        )
    if handler == ROW_STATE:
        # reads the row's four items in one BatchGetItem; writes nothing, starts nothing
        return unconditional(own_logs, *((arn(table), {"dynamodb:BatchGetItem"}) for table in sorted(TABLES)))
    if handler == AUTHORIZER:
        return unconditional(own_logs, (ref(SECRET), {"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"}))
    return bulk_grants(template_json, handler, own_logs)


def objects(prefix: str) -> dict[str, Any]:
    """The ingest bucket's objects under a prefix (CDK's arn_for_objects)."""
    return {"Fn::Join": ["", [arn(INGEST_BUCKET), f"/{prefix}*"]]}


def map_runs_of(state_machine_id: str, label: str) -> dict[str, Any]:
    """The ARN pattern of the map runs of a state machine's labelled Distributed Map."""
    name = {"Fn::Select": [6, {"Fn::Split": [":", ref(state_machine_id)]}]}
    return {
        "Fn::Join": [
            "",
            ["arn:", ref("AWS::Partition"), ":states:", ref("AWS::Region"), ":", ref("AWS::AccountId"), ":mapRun:", name, f"/{label}:*"],
        ]
    }


def bulk_grants(template_json: dict[str, Any], handler: str, own_logs: tuple[Any, set[str]]) -> Grants:
    """The bulk route's functions: prefix-scoped S3 rights, and the bulk state machine for the two that start loads.
    A read of a load's exact version is s3:GetObjectVersion alone; s3:ListBucket makes a missing key answer 404."""
    # every key the loads and their files are under, and a missing key's 404
    list_bucket = (arn(INGEST_BUCKET), {"s3:ListBucket"})
    if handler == BULK_PLAN:
        # reads the file's version once; writes the manifest
        return unconditional(own_logs, (objects("incoming/"), {"s3:GetObjectVersion"}), (objects("loads/"), {"s3:PutObject"}), list_bucket)
    if handler == BULK_CHUNK:
        # its byte range of the version; its done marker (HeadObject) and its summary; the rows' trips items and status
        # rows read in batches before any write, status rows written for flagged rows only, each new trip put once
        return unconditional(
            own_logs,
            (objects("incoming/"), {"s3:GetObjectVersion"}),
            (objects("loads/"), {"s3:GetObject", "s3:PutObject"}),
            list_bucket,
            (arn(VALIDATION_TABLE), {"dynamodb:BatchGetItem", "dynamodb:UpdateItem"}),
            (arn(TRANSFORMATION_TABLE), {"dynamodb:BatchGetItem", "dynamodb:UpdateItem"}),
            (arn(STORE_TABLE), {"dynamodb:BatchGetItem", "dynamodb:UpdateItem"}),
            (arn(TRIPS_TABLE), {"dynamodb:PutItem", "dynamodb:BatchGetItem"}),
        )
    if handler == BULK_REPORT:
        # lists and reads the summaries under loads/ only, writes the report
        listing = {(key(arn(INGEST_BUCKET)), key({"StringLike": {"s3:prefix": "loads/*"}})): {"s3:ListBucket"}}
        return unconditional(own_logs, (objects("loads/"), {"s3:GetObject", "s3:PutObject"})) | listing
    starts = (
        (ref(BULK_STATE_MACHINE), {"states:StartExecution"}),
        (executions_of(BULK_STATE_MACHINE), {"states:DescribeExecution"} | ({"states:ListMapRuns"} if handler == LOADS_API else set())),
    )
    if handler == LOADS_API:
        # HeadObject of the file (latest or given version); the report and manifest; a running load's map run
        return unconditional(
            own_logs,
            (objects("incoming/"), {"s3:GetObject", "s3:GetObjectVersion"}),
            (objects("loads/"), {"s3:GetObject"}),
            list_bucket,
            *starts,
            (map_runs_of(BULK_STATE_MACHINE, "Chunks"), {"states:DescribeMapRun"}),
        )
    assert handler == LOAD_STARTER
    # the event names the version: no S3 right; consumes its queue (CDK's SqsEventSource grant)
    consume = {"sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueUrl", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}
    return unconditional(own_logs, *starts, (arn(LOAD_STARTER_QUEUE), consume))


def references(value: Any) -> Iterator[str]:
    """Every logical id (or pseudo parameter) a template value names through Ref or Fn::GetAtt."""
    if isinstance(value, dict):
        if "Ref" in value:
            yield str(value["Ref"])
        if "Fn::GetAtt" in value:
            yield str(value["Fn::GetAtt"][0])
        for item in value.values():
            yield from references(item)
    elif isinstance(value, list):
        for item in value:
            yield from references(item)


def contains_key(value: Any, wanted: str) -> bool:
    if isinstance(value, dict):
        return wanted in value or any(contains_key(item, wanted) for item in value.values())
    if isinstance(value, list):
        return any(contains_key(item, wanted) for item in value)
    return False


# --- the state machine's definition -------------------------------------------------------------


def definition_parts(template_json: dict[str, Any]) -> list[Any]:
    props = resource(template_json, STATE_MACHINE, "AWS::StepFunctions::StateMachine")["Properties"]
    separator, parts = props["DefinitionString"]["Fn::Join"]
    assert separator == ""
    return list(parts)


def definition(template_json: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parsed definition, with every non-string part of the Fn::Join replaced by a placeholder,
    and placeholder -> the template value it stands for."""
    text = ""
    tokens: dict[str, Any] = {}
    for part in definition_parts(template_json):
        if isinstance(part, str):
            text += part
        else:
            placeholder = f"__token{len(tokens)}__"
            tokens[placeholder] = part
            text += placeholder
    return json.loads(text), tokens


def successors(state: dict[str, Any]) -> set[str]:
    """Every state the state can move to: Next, Choice rules and Default, Catch."""
    found = {state["Next"]} if "Next" in state else set()
    found |= {choice["Next"] for choice in state.get("Choices", [])}
    found |= {state["Default"]} if "Default" in state else set()
    found |= {catcher["Next"] for catcher in state.get("Catch", [])}
    return found


def expected_retry(config: EnvConfig) -> list[dict[str, Any]]:
    settings = config.taxi_etl
    backoff = {"IntervalSeconds": settings.retry_interval_seconds, "BackoffRate": 2, "JitterStrategy": "FULL"}
    return [
        {"ErrorEquals": ["PhaseInputError"], "MaxAttempts": 0},
        {
            "ErrorEquals": TRANSIENT_ERRORS,
            **backoff,
            "MaxDelaySeconds": settings.transient_retry_max_delay_seconds,
            "MaxAttempts": settings.execution_limits.transient_retry_attempts,
        },
        {
            "ErrorEquals": ["States.TaskFailed", "States.Timeout"],
            **backoff,
            "MaxDelaySeconds": settings.retry_max_delay_seconds,
            "MaxAttempts": settings.task_retry_attempts,
        },
    ]


def catches(transient: str, other: str) -> list[dict[str, Any]]:
    """A task's catchers: AWS's failures to `transient`, anything else to `other`, both keeping the state and adding $.error."""
    return [
        {"ErrorEquals": TRANSIENT_ERRORS, "ResultPath": "$.error", "Next": transient},
        {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": other},
    ]


# --- building variants in a fresh app (no cdk-nag) -----------------------------------------------


def dev_with(**taxi_etl: Any) -> EnvConfig:
    dev = load_config("dev")
    return replace(dev, taxi_etl=replace(dev.taxi_etl, **taxi_etl))


def synth_stack(config: EnvConfig, tmp_path: Path) -> dict[str, Any]:
    app = App(context=cdk_context(config.name), outdir=str(tmp_path))
    stack = TaxiEtlStack(app, "TaxiEtlVariant", config=config)
    return dict(Template.from_stack(stack).to_json())


def saga_with_imported_secret(tmp_path: Path) -> tuple[dict[str, Any], Any]:
    """A saga in a plain stack, given an existing secret by name; the template and the secret's ARN as synthesized."""
    app = App(context=cdk_context("dev"), outdir=str(tmp_path))
    stack = Stack(app, "OwnSecret")
    secret = secretsmanager.Secret.from_secret_name_v2(stack, "Existing", IMPORTED_SECRET_NAME)
    TaxiEtlSaga(stack, "TaxiEtl", replace(load_config("dev").taxi_etl_props(), api_key_secret=secret))
    return dict(Template.from_stack(stack).to_json()), stack.resolve(secret.secret_arn)


# --- 1. the tables ------------------------------------------------------------------------------


def test_four_tables_keyed_by_the_store_request_id_only(template_json: dict[str, Any]) -> None:
    # Given the stack's tables
    tables = resources_of_type(template_json, "AWS::DynamoDB::Table")
    # When we read their keys
    # Then there are exactly the three status tables and the trips table, each keyed by StoreRequestId (S) alone
    assert set(tables) == TABLES
    for logical_id, table in tables.items():
        props = table["Properties"]
        assert props["KeySchema"] == [{"AttributeName": "StoreRequestId", "KeyType": "HASH"}], logical_id
        assert props["AttributeDefinitions"] == [{"AttributeName": "StoreRequestId", "AttributeType": "S"}], logical_id
        # and none has an index or a stream (nothing reads them but the functions below)
        assert not {"GlobalSecondaryIndexes", "LocalSecondaryIndexes", "StreamSpecification"} & set(props), logical_id


def test_every_table_is_encrypted_on_demand_with_point_in_time_recovery(template: Template) -> None:
    # Given the four tables
    # When we look at encryption, billing and backups
    # Then every table has server-side encryption, on-demand billing and point-in-time recovery
    template.all_resources_properties(
        "AWS::DynamoDB::Table",
        {
            "SSESpecification": {"SSEEnabled": True},
            "BillingMode": "PAY_PER_REQUEST",
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
        },
    )


def test_tables_are_retained_and_deletion_protected_only_in_prod(template: Template, env_name: str) -> None:
    # Given the environment's expectation (prod keeps data, dev is disposable)
    expected = EXPECTED[env_name]
    # When we look at the tables' policies and deletion protection
    # Then prod retains and protects all four, and dev destroys them and protects none
    template.all_resources("AWS::DynamoDB::Table", {"DeletionPolicy": expected["removal"], "UpdateReplacePolicy": expected["removal"]})
    template.all_resources_properties("AWS::DynamoDB::Table", {"DeletionProtectionEnabled": expected["protected"]})


@pytest.mark.parametrize(
    "resource_type", ["AWS::Logs::LogGroup", "AWS::KMS::Key", "AWS::SecretsManager::Secret", "AWS::StepFunctions::StateMachine"]
)
def test_other_stateful_resources_are_retained_only_in_prod(
    template: Template, template_json: dict[str, Any], env_name: str, resource_type: str
) -> None:
    # Given the log groups, the logs key and the API key secret
    policy = EXPECTED[env_name]["removal"]
    assert resources_of_type(template_json, resource_type)
    # When we look at their deletion and replacement policies
    # Then prod retains them (logs stay readable, the key and the secret stay usable, the execution
    # history that deduplicates repeated requests stays) and dev deletes them
    template.all_resources(resource_type, {"DeletionPolicy": policy, "UpdateReplacePolicy": policy})


# --- 2. the state machine: type, tracing, encrypted execution logs ------------------------------


def test_state_machine_is_standard_traced_and_logs_at_the_environments_level(
    template_json: dict[str, Any], config: EnvConfig, env_name: str
) -> None:
    # Given the per-batch state machine (the other is the bulk route's)
    assert set(resources_of_type(template_json, "AWS::StepFunctions::StateMachine")) == {STATE_MACHINE, BULK_STATE_MACHINE}
    props = resource(template_json, STATE_MACHINE, "AWS::StepFunctions::StateMachine")["Properties"]
    # When we read its type, tracing and logging
    # Then it is a Standard workflow (the configured default), traced with X-Ray
    assert config.taxi_etl.workflow_type == sfn.StateMachineType.STANDARD
    assert props["StateMachineType"] == "STANDARD"
    assert props["TracingConfiguration"] == {"Enabled": True}
    # and it logs to its own log group: every event with the execution data in dev, failures
    # without row content in prod
    level, with_data = EXPECTED[env_name]["execution_log"]
    assert props["LoggingConfiguration"] == {
        "Destinations": [{"CloudWatchLogsLogGroup": {"LogGroupArn": arn(STATE_MACHINE_LOGS)}}],
        "IncludeExecutionData": with_data,
        "Level": level,
    }
    assert STATE_MACHINE_LOGS not in {log_group_of(template_json, handler) for handler in HANDLERS}
    # and an execution is stopped after the configured time
    parsed, _ = definition(template_json)
    assert parsed["TimeoutSeconds"] == config.taxi_etl.execution_limits.execution_timeout_minutes * 60


def test_execution_logs_are_encrypted_with_a_rotating_key_the_logs_service_may_use(template_json: dict[str, Any], env_name: str) -> None:
    # Given the execution log group
    log_group = resource(template_json, STATE_MACHINE_LOGS, "AWS::Logs::LogGroup")["Properties"]
    # When we follow its KMS key
    assert log_group["KmsKeyId"] == arn(STATE_MACHINE_LOGS_KEY)
    key_props = resource(template_json, STATE_MACHINE_LOGS_KEY, "AWS::KMS::Key")["Properties"]
    # Then the key rotates
    assert key_props["EnableKeyRotation"] is True
    # and its policy lets the regional CloudWatch Logs service principal encrypt and decrypt with it
    logs_principal = {"Service": {"Fn::Join": ["", ["logs.", ref("AWS::Region"), ".amazonaws.com"]]}}
    statements = [s for s in key_props["KeyPolicy"]["Statement"] if s.get("Principal") == logs_principal]
    assert len(statements) == 1, key_props["KeyPolicy"]
    assert statements[0]["Effect"] == "Allow"
    assert set(as_list(statements[0]["Action"])) == KMS_ENCRYPT_DECRYPT
    # and the log group keeps the environment's retention
    assert log_group["RetentionInDays"] == EXPECTED[env_name]["log_retention_days"]


def test_state_machine_role_invokes_only_its_four_functions(template_json: dict[str, Any]) -> None:
    # Given the state machine's role
    role_id = resource(template_json, STATE_MACHINE, "AWS::StepFunctions::StateMachine")["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    role = resource(template_json, role_id, "AWS::IAM::Role")["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "states.amazonaws.com"}
    assert "ManagedPolicyArns" not in role and "Policies" not in role
    # When we read what it may do
    grants = granted_by(policy_statements(template_json, role_id))
    # Then it may invoke the three phase functions and the flag function (and their versions), not the API's
    invocable = {}
    for handler in STATE_MACHINE_FUNCTIONS:
        function_id, _ = function(template_json, handler)
        invocable[(key(arn(function_id)), None)] = {"lambda:InvokeFunction"}
        invocable[(key({"Fn::Join": ["", [arn(function_id), ":*"]]}), None)] = {"lambda:InvokeFunction"}
    # and on "*" only the log-delivery and X-Ray actions, which have no resource-level permissions
    assert grants == {**invocable, (key("*"), None): STATE_MACHINE_WILDCARD_ACTIONS}


# --- 3. the definition: phases, retries, catches and flag steps ---------------------------------


def test_definition_has_exactly_the_saga_states(template_json: dict[str, Any]) -> None:
    # Given the parsed definition
    parsed, _ = definition(template_json)
    states = parsed["States"]
    # When we list its states by name and type
    types = {name: state["Type"] for name, state in states.items()}
    # Then it is, per phase: the task, its rejects choice, its flag task, the choice after it and its Fail;
    # and its automatic redrive: a retryable flag, a wait, the flags cleared, the phase again with its
    # rejects choice, and the flag for rows still failing; and one Succeed at the end
    expected: dict[str, str] = {"Stored": "Succeed"}
    for phase in PHASES:
        expected |= {
            phase: "Task",
            f"{phase}Rejects": "Choice",
            f"Flag{phase}": "Task",
            f"AfterFlag{phase}": "Choice",
            f"{phase}Failed": "Fail",
            f"Flag{phase}Retryable": "Task",
            f"Wait{phase}Redrive": "Wait",
            f"Clear{phase}Flags": "Task",
            f"Redrive{phase}": "Task",
            f"Redrive{phase}Rejects": "Choice",
            f"Flag{phase}StillRetryable": "Task",
        }
    assert types == expected


def test_definition_runs_validation_then_transformation_then_store(template_json: dict[str, Any]) -> None:
    # Given the parsed definition
    parsed, _ = definition(template_json)
    states = parsed["States"]
    # When we follow it from the start, taking the no-rejects branch of each phase
    assert parsed["StartAt"] == "Validation"
    order, current = [], parsed["StartAt"]
    while states[current]["Type"] == "Task":
        order.append(current)
        rejects = states[states[current]["Next"]]
        assert rejects["Type"] == "Choice"
        # Then a phase with rejected rows goes to its flag step, and otherwise on to the next phase
        assert rejects["Choices"] == [{"Variable": "$.hasRejected", "BooleanEquals": True, "Next": f"Flag{current}"}]
        current = rejects["Default"]
    # and the phases run in order, ending in the Succeed state
    assert order == list(PHASES)
    assert current == "Stored"
    assert states["Stored"]["Type"] == "Succeed"


TASKS = [
    name
    for phase in PHASES
    for name in (phase, f"Flag{phase}", f"Flag{phase}Retryable", f"Clear{phase}Flags", f"Redrive{phase}", f"Flag{phase}StillRetryable")
]


@pytest.mark.parametrize("state_name", TASKS)
def test_every_task_retries_service_errors_and_crashes_but_never_bad_input(
    template_json: dict[str, Any], config: EnvConfig, state_name: str
) -> None:
    # Given a task of the saga (a phase or a flag step)
    parsed, _ = definition(template_json)
    task = parsed["States"][state_name]
    assert task["Type"] == "Task"
    # When we read its retriers (Step Functions applies the first one whose ErrorEquals matches)
    retry = task["Retry"]
    # Then, in this order: bad input is not retried, AWS failing the task (the handlers' TransientInfrastructureError
    # and Lambda's own service errors) is retried with full-jitter exponential backoff, and any other failure or a
    # timeout a bounded number of times
    assert retry == expected_retry(config)
    # and no retrier is unbounded
    assert all(0 <= retrier["MaxAttempts"] <= 10 for retrier in retry)


@pytest.mark.parametrize("phase", PHASES)
def test_a_failed_phase_task_is_caught_into_its_flag_step(template_json: dict[str, Any], phase: str) -> None:
    # Given the phase's task
    parsed, _ = definition(template_json)
    task = parsed["States"][phase]
    # When we read its catchers
    # Then AWS's failures left after the retries go to the retryable flag that starts the automatic redrive,
    # every other error to the phase's own flag step, each keeping the state and adding $.error
    assert task["Catch"] == catches(f"Flag{phase}Retryable", f"Flag{phase}")
    # and the task passes its output on whole (no ResultPath), after which the rejects choice follows
    assert "ResultPath" not in task
    assert task["Next"] == f"{phase}Rejects"


@pytest.mark.parametrize("phase", PHASES)
def test_flag_step_gets_its_phase_and_the_state_and_adds_its_outcome(template_json: dict[str, Any], phase: str) -> None:
    # Given the phase's flag step
    parsed, _ = definition(template_json)
    flag = parsed["States"][f"Flag{phase}"]
    # When we read its input, output and next state
    # Then it sends the phase's name and the whole state, puts its answer at $.flag and moves to its choice
    assert flag["Parameters"] == {"phase": phase.lower(), "state.$": "$"}
    assert flag["ResultPath"] == "$.flag"
    assert flag["Next"] == f"AfterFlag{phase}"
    # and it catches nothing: a flag step that fails fails the execution
    assert "Catch" not in flag


@pytest.mark.parametrize("phase", PHASES)
def test_failed_state_reports_the_flag_steps_error_and_cause(template_json: dict[str, Any], phase: str) -> None:
    # Given the phase's Fail state
    parsed, _ = definition(template_json)
    failed = parsed["States"][f"{phase}Failed"]
    # When we read it
    # Then it fails the execution with the error and cause the flag step returned
    assert failed == {"Type": "Fail", "ErrorPath": "$.flag.error", "CausePath": "$.flag.cause"}


@pytest.mark.parametrize("phase", PHASES)
def test_after_a_flag_step_the_saga_fails_or_moves_to_the_next_phase(template_json: dict[str, Any], phase: str) -> None:
    # Given the choice after the phase's flag step
    parsed, _ = definition(template_json)
    states = parsed["States"]
    choice = states[f"AfterFlag{phase}"]
    # When we read its rules
    # Then a caught error always fails; otherwise the rows that passed go on; with none passed it fails
    assert choice["Type"] == "Choice"
    assert choice["Choices"] == [
        {"Variable": "$.error", "IsPresent": True, "Next": f"{phase}Failed"},
        {"Variable": "$.hasPassed", "BooleanEquals": True, "Next": NEXT_AFTER[phase]},
    ]
    assert choice["Default"] == f"{phase}Failed"
    # and every path from the flag step ends in that Fail or reaches the next phase (or Stored), nothing else
    ends, seen, pending = set(), set(), [f"Flag{phase}"]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if states[name]["Type"] == "Fail" or name == NEXT_AFTER[phase]:
            ends.add(name)
            continue
        assert not states[name].get("End"), f"{name} ends the execution"
        assert successors(states[name]), f"{name} goes nowhere"
        pending.extend(successors(states[name]))
    assert ends == {f"{phase}Failed", NEXT_AFTER[phase]}


@pytest.mark.parametrize("phase", PHASES)
def test_a_phase_aws_failed_is_flagged_retryable_waited_for_and_run_once_more(
    template_json: dict[str, Any], config: EnvConfig, phase: str
) -> None:
    # Given the states of the phase's automatic redrive
    parsed, tokens = definition(template_json)
    states = parsed["States"]
    retryable, wait, clear = states[f"Flag{phase}Retryable"], states[f"Wait{phase}Redrive"], states[f"Clear{phase}Flags"]
    redrive, still = states[f"Redrive{phase}"], states[f"Flag{phase}StillRetryable"]
    # When we read them
    # Then the rows AWS failed are flagged retryable (the flag function's mode), keeping the state and adding $.flag
    assert retryable["Parameters"] == {"phase": phase.lower(), "state.$": "$", "flagMode": "retryable"}
    assert (retryable["ResultPath"], retryable["Next"], "Catch" in retryable) == ("$.flag", f"Wait{phase}Redrive", False)
    # and after the configured wait, the retryable flags are cleared (its outcome kept apart, at $.cleared)
    assert {name: value for name, value in wait.items() if name != "Comment"} == {
        "Type": "Wait",
        "Seconds": config.taxi_etl.execution_limits.auto_redrive_wait_seconds,
        "Next": f"Clear{phase}Flags",
    }
    assert clear["Parameters"] == {"phase": phase.lower(), "state.$": "$", "flagMode": "clear"}
    assert (clear["ResultPath"], clear["Next"]) == ("$.cleared", f"Redrive{phase}")
    # and the phase runs once more on the same rows, on the same function, with its output passed on whole
    assert tokens[redrive["Resource"]] == tokens[states[phase]["Resource"]] and "ResultPath" not in redrive and "Parameters" not in redrive
    assert states[redrive["Next"]]["Choices"] == states[states[phase]["Next"]]["Choices"]
    assert states[redrive["Next"]]["Default"] == NEXT_AFTER[phase]
    # and AWS failing the clear or that second pass flags the rows retryable for good (the alarmed count), any
    # other error as a first pass's; both end where the phase's own flag step does
    for task in (clear, redrive):
        assert task["Catch"] == catches(f"Flag{phase}StillRetryable", f"Flag{phase}")
    assert still["Parameters"] == {"phase": phase.lower(), "state.$": "$", "flagMode": "redriven"}
    assert (still["ResultPath"], still["Next"], "Catch" in still) == ("$.flag", f"AfterFlag{phase}", False)
    # and the redrive happens once: only the phase's first pass leads to the retryable flag, and nothing leads back to it
    into_retryable = sorted(name for name, state in states.items() if f"Flag{phase}Retryable" in successors(state))
    assert into_retryable == [phase]


def test_every_state_is_reachable_and_every_path_ends_in_stored_or_a_fail(template_json: dict[str, Any]) -> None:
    # Given the parsed definition
    parsed, _ = definition(template_json)
    states = parsed["States"]
    # When we walk every transition from the start
    seen, pending = set(), [parsed["StartAt"]]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        assert name in states, f"a transition to the unknown state {name}"
        pending.extend(successors(states[name]))
    # Then every state is reachable
    assert seen == set(states)
    # and only the Succeed and the three Fail states end an execution; every other state moves on
    terminal = {name for name, state in states.items() if not successors(state)}
    assert terminal == {"Stored", *(f"{phase}Failed" for phase in PHASES)}
    assert not [name for name, state in states.items() if state.get("End")]


def test_tasks_invoke_the_right_functions(template_json: dict[str, Any]) -> None:
    # Given the definition's Fn::Join parts
    parts = definition_parts(template_json)
    # When we look at every part that is not a string
    for index, part in enumerate(parts):
        if isinstance(part, str):
            continue
        # Then each one is a function's ARN, and it stands exactly as the value of a "Resource"
        assert parts[index - 1].endswith('"Resource":"'), parts[index - 1][-40:]
        assert parts[index + 1].startswith('"'), parts[index + 1][:40]
        assert set(part) == {"Fn::GetAtt"} and part["Fn::GetAtt"][1] == "Arn", part
    # and each phase task invokes its phase's function, each flag step the flag function (directly, not
    # through the lambda:invoke integration, so the task's output is the function's payload)
    parsed, tokens = definition(template_json)
    expected = {phase: PHASE_HANDLERS[phase] for phase in PHASES} | {f"Redrive{phase}": PHASE_HANDLERS[phase] for phase in PHASES}
    for phase in PHASES:
        expected |= {name: FLAG for name in (f"Flag{phase}", f"Flag{phase}Retryable", f"Clear{phase}Flags", f"Flag{phase}StillRetryable")}
    tasks = {name: state for name, state in parsed["States"].items() if state["Type"] == "Task"}
    assert set(tasks) == set(expected)
    for name, handler in expected.items():
        function_id, _ = function(template_json, handler)
        assert tokens[tasks[name]["Resource"]] == arn(function_id), name
    # and no task invokes the API or the authorizer function
    invoked = {key(tokens[task["Resource"]]) for task in tasks.values()}
    assert invoked == {key(arn(function(template_json, handler)[0])) for handler in STATE_MACHINE_FUNCTIONS}


# --- 4. the workflow type and the config's limits ------------------------------------------------


def test_express_config_gives_an_express_state_machine_and_tells_the_api(tmp_path: Path) -> None:
    # Given the dev config with an Express workflow (whose executions may last 5 minutes at most)
    config = dev_with(workflow_type=sfn.StateMachineType.EXPRESS, execution_timeout_minutes=5, **EXPRESS_RETRIES)
    # When the stack is synthesized with it
    template_json = synth_stack(config, tmp_path)
    props = resource(template_json, STATE_MACHINE, "AWS::StepFunctions::StateMachine")["Properties"]
    # Then the state machine is an Express one, still traced and logging everything, stopped after 5 minutes
    assert props["StateMachineType"] == "EXPRESS"
    assert props["TracingConfiguration"] == {"Enabled": True}
    assert props["LoggingConfiguration"]["Level"] == "ALL" and props["LoggingConfiguration"]["IncludeExecutionData"] is True
    assert definition(template_json)[0]["TimeoutSeconds"] == 300
    # and the API knows it, so it does not count on Standard's deduplication of execution names
    assert variables_of(template_json, API)["WORKFLOW_TYPE"] == "EXPRESS"
    assert ApiSettings.from_env(resolved_environment(template_json, API)).deduplicates_starts is False


def test_express_alone_takes_its_own_timeout_and_retries_and_builds(tmp_path: Path) -> None:
    # Given the construct's defaults with an Express workflow and nothing else changed
    taxi_etl = TaxiEtlConfig(workflow_type=sfn.StateMachineType.EXPRESS)
    # When it is validated and the saga is built with it
    taxi_etl.validate()
    stack = Stack(App(outdir=str(tmp_path)), "Express")
    TaxiEtlSaga(stack, "TaxiEtl", TaxiEtlSagaProps(settings=taxi_etl))
    template_json = dict(Template.from_stack(stack).to_json())
    # Then the execution timeout is Express's 5 minutes, with fewer, shorter retries that fit in them
    assert taxi_etl.execution_limits == WORKFLOW_DEFAULTS[sfn.StateMachineType.EXPRESS]
    assert taxi_etl.execution_limits.execution_timeout_minutes == 5
    assert taxi_etl.redrive_budget_seconds == 2 * (2 + 4 + 8 + 16 + 2 + 4) + 60 <= 300
    machine = resource(template_json, STATE_MACHINE, "AWS::StepFunctions::StateMachine")
    assert machine["Properties"]["StateMachineType"] == "EXPRESS"
    # and the bulk route's machine stays STANDARD (its names start a load once; a Distributed Map needs it)
    assert resource(template_json, BULK_STATE_MACHINE, "AWS::StepFunctions::StateMachine")["Properties"]["StateMachineType"] == "STANDARD"
    parsed, _ = definition(template_json)
    assert parsed["TimeoutSeconds"] == 300
    retries = [retry for state in parsed["States"].values() for retry in state.get("Retry", [])]
    transient_retries = {retry["MaxAttempts"] for retry in retries if retry["ErrorEquals"] == TRANSIENT_ERRORS}
    assert transient_retries == {4}
    # while Standard's defaults stay what they were: 15 minutes, 8 retries of AWS's failures, a 2-minute wait
    assert TaxiEtlConfig().execution_limits == ExecutionLimits(
        execution_timeout_minutes=15, transient_retry_attempts=8, auto_redrive_wait_seconds=120
    )


def test_a_value_set_wins_over_the_workflow_types_default() -> None:
    # Given an Express config with one of the three limits set
    taxi_etl = TaxiEtlConfig(workflow_type=sfn.StateMachineType.EXPRESS, execution_timeout_minutes=4)
    # When its limits in effect are read
    limits = taxi_etl.execution_limits
    # Then the value set is kept and the other two are Express's
    assert limits == ExecutionLimits(execution_timeout_minutes=4, transient_retry_attempts=4, auto_redrive_wait_seconds=60)
    # and a Standard config derived from it by replace() keeps only what was set, not Express's defaults
    assert replace(taxi_etl, workflow_type=sfn.StateMachineType.STANDARD).execution_limits == ExecutionLimits(
        execution_timeout_minutes=4, transient_retry_attempts=8, auto_redrive_wait_seconds=120
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param(
            {"workflow_type": sfn.StateMachineType.EXPRESS, "execution_timeout_minutes": 6},
            "execution_timeout_minutes must be at most 5 for EXPRESS",
            id="express-longer-than-5-minutes",
        ),
        pytest.param({"execution_timeout_minutes": 0}, "execution_timeout_minutes must be 1..1440", id="no-execution-time"),
        pytest.param({"execution_timeout_minutes": 24 * 60 + 1}, "execution_timeout_minutes must be 1..1440", id="execution-over-a-day"),
        pytest.param(
            {"batch_max_bytes": STEP_FUNCTIONS_MAX_PAYLOAD_BYTES // 3 + 1},
            "batch_max_bytes must be at most a third of Step Functions' 256 KiB payload limit",
            id="batch-over-a-third-of-256-KiB",
        ),
        pytest.param({"max_line_bytes": 64 * 1024 + 1}, "max_line_bytes must be 256..batch_max_bytes", id="line-larger-than-batch"),
        pytest.param({"max_line_bytes": 4097}, "at most 4096 (what Validate accepts)", id="line-longer-than-validate-accepts"),
        pytest.param({"batch_max_lines": 0}, "batch_max_lines must be 1..1000", id="empty-batches"),
        pytest.param({"batch_max_lines": 1001}, "batch_max_lines must be 1..1000", id="batch-over-1000-lines"),
        pytest.param({"authorizer_cache_seconds": 3601}, "authorizer_cache_seconds must be 0..3600", id="authorizer-cache-over-an-hour"),
        pytest.param({"authorizer_cache_seconds": -1}, "authorizer_cache_seconds must be 0..3600", id="negative-authorizer-cache"),
        pytest.param(
            {"transient_retry_attempts": 11}, "retries must be bounded: transient 0..10, task 0..5", id="transient-retries-over-10"
        ),
        pytest.param(
            {"transient_retry_attempts": -1}, "retries must be bounded: transient 0..10, task 0..5", id="transient-retries-unbounded"
        ),
        pytest.param({"task_retry_attempts": 6}, "retries must be bounded: transient 0..10, task 0..5", id="task-retries-over-5"),
        pytest.param({"task_retry_attempts": -1}, "retries must be bounded: transient 0..10, task 0..5", id="task-retries-unbounded"),
        pytest.param(
            {"transient_retry_attempts": 1, "task_retry_attempts": 2},
            "transient_retry_attempts must be at least task_retry_attempts",
            id="aws-failures-retried-less-than-crashes",
        ),
        pytest.param(
            {"transient_retry_max_delay_seconds": 30},
            "transient_retry_max_delay_seconds must be retry_max_delay_seconds..3600",
            id="aws-failures-waited-less-than-crashes",
        ),
        pytest.param({"auto_redrive_wait_seconds": 0}, "auto_redrive_wait_seconds must be 1..3600", id="redrive-without-a-wait"),
        pytest.param({"auto_redrive_wait_seconds": 3601}, "auto_redrive_wait_seconds must be 1..3600", id="redrive-wait-over-an-hour"),
        pytest.param(
            {"auto_redrive_wait_seconds": 600},
            "a phase's retries, the wait and its redrive's retries take up to 1096 s of backoff, more than execution_timeout_minutes"
            " allows (900 s)",
            id="redrive-outlasting-the-execution",
        ),
        pytest.param(
            {"workflow_type": sfn.StateMachineType.EXPRESS, "transient_retry_attempts": 8},
            "take up to 556 s of backoff, more than execution_timeout_minutes allows (300 s)",
            id="express-too-short-for-standards-retries",
        ),
        pytest.param({"retry_interval_seconds": 61}, "retry interval must be 1..retry_max_delay_seconds", id="interval-over-max-delay"),
        pytest.param({"retry_max_delay_seconds": 3601}, "retry interval must be 1..retry_max_delay_seconds", id="max-delay-over-an-hour"),
        pytest.param({"secret_refresh_floor_seconds": 301}, "refresh floor <= cache seconds", id="refresh-floor-over-cache"),
        pytest.param({"secret_cache_seconds": 3601}, "cache seconds <= 3600", id="secret-cache-over-an-hour"),
        pytest.param({"api_rate_limit": 101}, "rate limit must be positive and at most the burst limit", id="rate-over-burst"),
        pytest.param({"api_rate_limit": 0}, "rate limit must be positive and at most the burst limit", id="no-rate"),
        pytest.param({"api_timeout_seconds": 30}, "api_timeout_seconds must be at most 29", id="api-timeout-over-integration-limit"),
        pytest.param({"phase_timeout_seconds": 901}, "function timeouts must be 3..900", id="phase-timeout-over-lambda-limit"),
        pytest.param({"phase_memory_mb": 127}, "phase_memory_mb must be 128..10240", id="phase-memory-too-small"),
        pytest.param({"execution_log_level": "ALL"}, "execution_log_level must be an aws_stepfunctions.LogLevel", id="log-level-as-text"),
        pytest.param(
            {"execution_log_level": sfn.LogLevel.OFF, "execution_log_data": True},
            "execution_log_data needs an execution_log_level other than OFF",
            id="execution-data-without-logs",
        ),
        pytest.param(
            {
                "workflow_type": sfn.StateMachineType.EXPRESS,
                "execution_timeout_minutes": 5,
                "execution_log_level": sfn.LogLevel.OFF,
                "execution_log_data": False,
                **EXPRESS_RETRIES,
            },
            "must not be OFF for EXPRESS workflows",
            id="express-without-its-only-history",
        ),
        pytest.param({"bulk_chunk_rows": 99}, "bulk_chunk_rows must be an integer 100..10000", id="bulk-chunks-too-small"),
        pytest.param({"bulk_chunk_rows": 10_001}, "bulk_chunk_rows must be an integer 100..10000", id="bulk-chunks-too-large"),
        pytest.param({"bulk_max_concurrency": 0}, "bulk_max_concurrency must be an integer of at least 1", id="bulk-unbounded-concurrency"),
        pytest.param(
            {"bulk_tolerated_failure_percentage": -1.0},
            "bulk_tolerated_failure_percentage must be a number 0..100",
            id="bulk-negative-tolerance",
        ),
        pytest.param(
            {"bulk_tolerated_failure_percentage": 100.5},
            "bulk_tolerated_failure_percentage must be a number 0..100",
            id="bulk-tolerance-over-100",
        ),
        pytest.param(
            {"bulk_tolerated_failure_percentage": True},
            "bulk_tolerated_failure_percentage must be a number 0..100",
            id="bulk-tolerance-as-bool",
        ),
        pytest.param(
            {"bulk_task_timeout_seconds": 901},
            "bulk_task_timeout_seconds must be phase_timeout_seconds..900",
            id="bulk-timeout-over-lambda-limit",
        ),
        pytest.param(
            {"phase_timeout_seconds": 120, "bulk_task_timeout_seconds": 119},
            "bulk_task_timeout_seconds must be phase_timeout_seconds..900",
            id="bulk-timeout-under-a-phases",
        ),
        pytest.param({"ingest_retention_days": 0}, "ingest_retention_days must be an integer of at least 1", id="ingest-kept-no-day"),
        pytest.param(
            {"ingest_retention_days": 30, "load_report_retention_days": 29},
            "load_report_retention_days must be an integer of at least ingest_retention_days",
            id="reports-expiring-before-their-files",
        ),
    ],
)
def test_config_refuses_limits_the_services_do_not_allow(overrides: dict[str, Any], message: str) -> None:
    # Given the dev config with one value out of bounds
    config = dev_with(**overrides)
    # When it is validated (as load_config and the construct do)
    # Then it is refused with a message naming the setting and its bound
    with pytest.raises(ConfigError, match=re.escape(message)):
        config.validate()


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param(
            {"workflow_type": sfn.StateMachineType.EXPRESS, "execution_timeout_minutes": 5, **EXPRESS_RETRIES}, id="express-at-5-minutes"
        ),
        pytest.param({"batch_max_bytes": STEP_FUNCTIONS_MAX_PAYLOAD_BYTES // 3}, id="batch-at-a-third-of-256-KiB"),
        pytest.param({"authorizer_cache_seconds": 3600}, id="authorizer-cache-an-hour"),
        pytest.param({"authorizer_cache_seconds": 0}, id="authorizer-cache-off"),
        pytest.param({"transient_retry_attempts": 0, "task_retry_attempts": 0}, id="no-retries"),
        pytest.param({"transient_retry_attempts": 10, "task_retry_attempts": 5, "execution_timeout_minutes": 17}, id="most-retries"),
        pytest.param({"auto_redrive_wait_seconds": 404}, id="redrive-filling-the-execution-timeout"),
        pytest.param({"api_timeout_seconds": 29}, id="api-timeout-29"),
        pytest.param({"execution_log_level": sfn.LogLevel.OFF, "execution_log_data": False}, id="no-execution-logs"),
        pytest.param({"execution_log_level": sfn.LogLevel.FATAL, "execution_log_data": False}, id="fatal-execution-logs"),
        pytest.param({"bulk_chunk_rows": 100, "bulk_max_concurrency": 1}, id="bulk-smallest-chunks-one-at-a-time"),
        pytest.param({"bulk_chunk_rows": 10_000, "bulk_task_timeout_seconds": 900}, id="bulk-largest-chunks-longest-timeout"),
        pytest.param({"bulk_tolerated_failure_percentage": 100.0}, id="bulk-every-chunk-may-fail"),
        pytest.param({"ingest_retention_days": 90, "load_report_retention_days": 90}, id="reports-kept-as-long-as-files"),
    ],
)
def test_config_accepts_values_at_the_bounds(overrides: dict[str, Any]) -> None:
    # Given the dev config with one value at its bound
    config = dev_with(**overrides)
    # When it is validated
    # Then it is accepted
    assert config.validate() is config


def test_retries_in_the_definition_follow_a_changed_config(tmp_path: Path) -> None:
    # Given a config with other retry counts than the defaults
    config = dev_with(transient_retry_attempts=3, task_retry_attempts=0, transient_retry_max_delay_seconds=90)
    # When the stack is synthesized with it
    template_json = synth_stack(config, tmp_path)
    # Then every task's retriers carry the new counts
    parsed, _ = definition(template_json)
    for name, state in parsed["States"].items():
        if state["Type"] == "Task":
            assert state["Retry"] == expected_retry(config), name


# --- 5. the HTTP API -----------------------------------------------------------------------------


def test_the_trips_and_loads_routes_all_behind_the_one_authorizer(template: Template, template_json: dict[str, Any]) -> None:
    # Given the API's routes
    routes = resources_of_type(template_json, "AWS::ApiGatewayV2::Route")
    # When we read their keys and authorization
    # Then there are exactly POST /trips, POST /trips/batch, GET /trips/{StoreRequestId}, POST /loads and
    # GET /loads/{LoadId} (no catch-all)
    assert sorted(route["Properties"]["RouteKey"] for route in routes.values()) == sorted(ROUTES)
    # and all require the one Lambda authorizer of this API
    assert set(resources_of_type(template_json, "AWS::ApiGatewayV2::Authorizer")) == {API_AUTHORIZER}
    template.all_resources_properties("AWS::ApiGatewayV2::Route", {"AuthorizationType": "CUSTOM", "AuthorizerId": ref(API_AUTHORIZER)})
    # and the POST /trips routes integrate with the API function, the GET route with the read-only one, the loads
    # routes with the loads API, each as a proxy with payload format 2.0
    api_id, _ = function(template_json, API)
    row_state_id, _ = function(template_json, ROW_STATE)
    loads_id, _ = function(template_json, LOADS_API)
    integrations = resources_of_type(template_json, "AWS::ApiGatewayV2::Integration")
    assert len(integrations) == 3
    for integration in integrations.values():
        assert integration["Properties"]["IntegrationType"] == "AWS_PROXY"
        assert integration["Properties"]["PayloadFormatVersion"] == "2.0"
    for route in routes.values():
        target = route["Properties"]["Target"]["Fn::Join"][1]
        assert target[0] == "integrations/" and target[1]["Ref"] in integrations
        uri = integrations[target[1]["Ref"]]["Properties"]["IntegrationUri"]
        route_key = route["Properties"]["RouteKey"]
        assert uri == arn(row_state_id if route_key == ROW_STATE_ROUTE else loads_id if route_key in LOADS_ROUTES else api_id)


def test_authorizer_is_a_cached_simple_request_authorizer_on_the_authorization_header(
    template_json: dict[str, Any], config: EnvConfig
) -> None:
    # Given the API's authorizer
    props = resource(template_json, API_AUTHORIZER, "AWS::ApiGatewayV2::Authorizer")["Properties"]
    # When we read its type, identity and caching
    # Then it is a REQUEST authorizer answering simple allow/deny (payload 2.0), keyed by the Authorization header
    assert props["ApiId"] == ref(HTTP_API)
    assert props["AuthorizerType"] == "REQUEST"
    assert props["EnableSimpleResponses"] is True
    assert props["AuthorizerPayloadFormatVersion"] == "2.0"
    assert props["IdentitySource"] == ["$request.header.Authorization"]
    # and API Gateway caches each answer for the configured time
    assert props["AuthorizerResultTtlInSeconds"] == config.taxi_etl.authorizer_cache_seconds
    # and it invokes the authorizer function
    authorizer_id, _ = function(template_json, AUTHORIZER)
    assert arn(authorizer_id) in props["AuthorizerUri"]["Fn::Join"][1]


def test_only_this_api_may_invoke_the_api_and_authorizer_functions(template_json: dict[str, Any]) -> None:
    # Given the Lambda permissions
    api_id, _ = function(template_json, API)
    authorizer_id, _ = function(template_json, AUTHORIZER)
    permissions = [p["Properties"] for p in resources_of_type(template_json, "AWS::Lambda::Permission").values()]
    # When we read who may invoke what, from where
    sources: dict[str, list[list[Any]]] = {}
    for props in permissions:
        assert props["Principal"] == "apigateway.amazonaws.com" and props["Action"] == "lambda:InvokeFunction", props
        sources.setdefault(props["FunctionName"]["Fn::GetAtt"][0], []).append(props["SourceArn"]["Fn::Join"][1])
    # Then API Gateway may invoke the API function from the two POST routes of this API only,
    # and the read-only function from the GET route only
    row_state_id, _ = function(template_json, ROW_STATE)
    loads_id, _ = function(template_json, LOADS_API)
    assert set(sources) == {api_id, authorizer_id, row_state_id, loads_id}
    assert sorted(parts[-1] for parts in sources[api_id]) == ["/*/*/trips", "/*/*/trips/batch"]
    assert [parts[-1] for parts in sources[row_state_id]] == ["/*/*/trips/{StoreRequestId}"]
    assert sorted(parts[-1] for parts in sources[loads_id]) == ["/*/*/loads", "/*/*/loads/{LoadId}"]
    assert all(ref(HTTP_API) in parts for parts in sources[api_id] + sources[row_state_id] + sources[loads_id])
    # and the authorizer function as this API's authorizer only
    (authorizer_source,) = sources[authorizer_id]
    assert authorizer_source[-3:] == [ref(HTTP_API), "/authorizers/", ref(API_AUTHORIZER)]


def test_default_stage_throttles_and_writes_json_access_logs_with_authorizer_errors(
    template: Template, template_json: dict[str, Any], config: EnvConfig, env_name: str
) -> None:
    # Given the API's one stage
    template.resource_count_is("AWS::ApiGatewayV2::Stage", 1)
    (stage,) = resources_of_type(template_json, "AWS::ApiGatewayV2::Stage").values()
    props = stage["Properties"]
    # When we read its throttling and access logs
    # Then it is the auto-deployed $default stage, throttled as configured
    assert props["StageName"] == "$default" and props["AutoDeploy"] is True
    assert props["DefaultRouteSettings"] == {
        "ThrottlingRateLimit": config.taxi_etl.api_rate_limit,
        "ThrottlingBurstLimit": config.taxi_etl.api_burst_limit,
    }
    # and it writes JSON access logs to the API's own log group, including why the authorizer refused
    access = props["AccessLogSettings"]
    assert access["DestinationArn"] == arn(API_ACCESS_LOGS)
    assert (
        resource(template_json, API_ACCESS_LOGS, "AWS::Logs::LogGroup")["Properties"]["RetentionInDays"]
        == EXPECTED[env_name]["log_retention_days"]
    )
    fields = json.loads(access["Format"])
    assert isinstance(fields, dict)
    assert fields["requestId"] == "$context.requestId"
    assert fields["authorizerError"] == "$context.authorizer.error"
    assert {"routeKey", "status", "error", "integrationError"} <= set(fields)


# --- 6. IAM least privilege, per function ------------------------------------------------------


def test_every_function_role_is_lambdas_own_without_managed_or_embedded_policies(template_json: dict[str, Any]) -> None:
    # Given the functions, each with its own role, the two state machines' roles, and CDK's bucket notifications
    # handler's (a deploy-time custom resource: CDK's own role with the basic execution policy, acknowledged in compliance.py)
    roles = {role_of(template_json, handler) for handler in HANDLERS}
    assert len(roles) == len(HANDLERS)
    machine_roles = {
        resource(template_json, machine, "AWS::StepFunctions::StateMachine")["Properties"]["RoleArn"]["Fn::GetAtt"][0]
        for machine in (STATE_MACHINE, BULK_STATE_MACHINE)
    }
    (notifications_handler,) = [
        function_id
        for function_id, body in resources_of_type(template_json, "AWS::Lambda::Function").items()
        if function_id.startswith("BucketNotificationsHandler")
    ]
    notifications_role = resource(template_json, notifications_handler, "AWS::Lambda::Function")["Properties"]["Role"]["Fn::GetAtt"][0]
    # When we look at the stack's roles and policies
    assert set(resources_of_type(template_json, "AWS::IAM::Role")) == roles | machine_roles | {notifications_role}
    # (one per function role, one per state machine role, the bulk machine's Distributed Map policy, and the
    # notifications handler's s3:PutBucketNotification)
    assert len(resources_of_type(template_json, "AWS::IAM::Policy")) == len(roles) + 2 + 1 + 1
    # Then only Lambda may assume each function role, and each carries no managed or embedded policies
    for role_id in roles:
        role = resource(template_json, role_id, "AWS::IAM::Role")["Properties"]
        assert "ManagedPolicyArns" not in role and "Policies" not in role
        assert role["AssumeRolePolicyDocument"]["Statement"] == [
            {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}}
        ]


@pytest.mark.parametrize("handler", HANDLERS)
def test_each_function_has_exactly_its_actions_on_its_own_resources(template_json: dict[str, Any], handler: str) -> None:
    # Given the function's inline policy, resource by resource (the "*" statement is tested below)
    grants = {target: actions for target, actions in granted_by(statements_of(template_json, handler)).items() if target[0] != key("*")}
    # When we compare it with what the function needs
    expected = expected_grants(template_json, handler)
    # Then every resource it names is one it needs, with exactly the actions it needs there
    assert set(grants) == set(expected), f"{handler}: unexpected {set(grants) - set(expected)}, missing {set(expected) - set(grants)}"
    for target, actions in expected.items():
        assert grants[target] == actions, f"{handler} on {target}: extra {grants[target] - actions}, missing {actions - grants[target]}"


@pytest.mark.parametrize("handler", HANDLERS)
def test_only_the_xray_statement_uses_a_wildcard_resource(template_json: dict[str, Any], handler: str) -> None:
    # Given the function's statements
    statements = statements_of(template_json, handler)
    # When we pick those naming the resource "*"
    wildcard = [s for s in statements if "*" in as_list(s["Resource"])]
    # Then there is one, holding only X-Ray's actions (which support no resource-level permissions)
    assert len(wildcard) == 1, wildcard
    assert as_list(wildcard[0]["Resource"]) == ["*"]
    assert set(as_list(wildcard[0]["Action"])) == XRAY_ACTIONS


@pytest.mark.parametrize("handler", HANDLERS)
def test_role_writes_only_to_the_functions_own_log_group(template_json: dict[str, Any], handler: str) -> None:
    # Given the function's statements
    statements = statements_of(template_json, handler)
    # When we pick those with CloudWatch Logs actions
    logs = [s for s in statements if any(a.startswith("logs:") for a in as_list(s["Action"]))]
    # Then there is one: stream creation and writes to the function's own log group (the factory's grant)
    assert logs == [{"Action": sorted(LOG_ACTIONS), "Effect": "Allow", "Resource": arn(log_group_of(template_json, handler))}]


@pytest.mark.parametrize("handler", HANDLERS)
def test_no_wildcard_actions(template_json: dict[str, Any], handler: str) -> None:
    # Given the function's statements
    # When we look at every action
    actions = {action for statement in statements_of(template_json, handler) for action in as_list(statement["Action"])}
    # Then none is a wildcard (no dynamodb:*, states:*, secretsmanager:*, ...)
    assert not [action for action in actions if "*" in action], actions


def test_no_function_touches_another_functions_resources(template_json: dict[str, Any]) -> None:
    # Given every resource a function may act on and the functions allowed to (written out)
    owners = {
        # GET /trips/{id} only reads the four tables; so does the API, before a single unkeyed row starts
        # and the bulk chunk, which runs the phases and the flag step on its rows
        VALIDATION_TABLE: {VALIDATE, FLAG, ROW_STATE, API, BULK_CHUNK},
        TRANSFORMATION_TABLE: {TRANSFORM, FLAG, ROW_STATE, API, BULK_CHUNK},
        STORE_TABLE: {STORE, FLAG, ROW_STATE, API, BULK_CHUNK},
        TRIPS_TABLE: {STORE, FLAG, ROW_STATE, API, BULK_CHUNK},  # the flag function only reads it
        SECRET: {AUTHORIZER},
        STATE_MACHINE: {API},
        STATE_MACHINE_LOGS: set(),
        STATE_MACHINE_LOGS_KEY: set(),
        API_ACCESS_LOGS: set(),
        INGEST_BUCKET: {BULK_PLAN, BULK_CHUNK, BULK_REPORT, LOADS_API},  # the starter's event names the version
        INGEST_ACCESS_LOG_BUCKET: set(),
        BULK_STATE_MACHINE: {LOADS_API, LOAD_STARTER},
        BULK_STATE_MACHINE_LOGS: set(),
        LOAD_STARTER_QUEUE: {LOAD_STARTER},
        LOAD_STARTER_DEAD_LETTER_QUEUE: set(),
    }
    # When we look for each resource's logical id in each function's policy
    for handler in HANDLERS:
        policy = json.dumps(statements_of(template_json, handler))
        for logical_id, allowed in owners.items():
            # Then only its owners mention it
            assert (f'"{logical_id}"' in policy) == (handler in allowed), f"{handler} and {logical_id}"


def test_no_function_reaches_another_pipelines_resources(env_templates: dict[str, dict[str, Any]], config: EnvConfig) -> None:
    # Given the environment's stacks: this one and the other pipelines'
    name = f"{config.stack_prefix}-TaxiEtl"
    template_json = env_templates[name]
    others = {other: t for other, t in env_templates.items() if other != name}
    assert others
    # When we look at every resource the saga's roles name
    named = [
        statement["Resource"]
        for policy in resources_of_type(template_json, "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    # Then each is "*" or built only from this stack's own resources and pseudo parameters: no literal
    # ARN, no import from another stack
    for res in (item for value in named for item in as_list(value)):
        if res == "*":
            continue
        assert not isinstance(res, str), f"a literal ARN {res}"
        assert "Fn::ImportValue" not in json.dumps(res)
        ids = set(references(res))
        assert ids and all(i.startswith("AWS::") or i in template_json["Resources"] for i in ids), res
    # and the only export is the alarm topic's ARN, which other stacks import only as alarm actions
    alarms_stack = config.stack_name("Alarms")
    exports = {
        output["Export"]["Name"] for other in env_templates.values() for output in other.get("Outputs", {}).values() if "Export" in output
    }
    assert len(exports) == 1 and exports.pop().startswith(f"{alarms_stack}:ExportsOutputRefAlarmTopic")
    for other_name, other in env_templates.items():
        for logical_id, body in other["Resources"].items():
            if "Fn::ImportValue" in json.dumps(body):
                assert body["Type"] == "AWS::CloudWatch::Alarm", f"{other_name}/{logical_id} imports from another stack"
                imports = [action for name in ("AlarmActions", "OKActions") for action in body["Properties"][name]]
                assert all(set(action) == {"Fn::ImportValue"} for action in imports), logical_id
    # and no other stack names one of the saga's resources (a resource of its own under the same logical id,
    # as each stack's SdkLayer is, is not a reference)
    for other_name, other in others.items():
        text = json.dumps(other)
        assert not [lid for lid in template_json["Resources"] if lid not in other["Resources"] and f'"{lid}"' in text], other_name


# --- 7. environments and the runtime's settings ------------------------------------------------


@pytest.mark.parametrize("handler", HANDLERS)
def test_environment_names_are_exactly_what_the_settings_class_reads(
    template_json: dict[str, Any], config: EnvConfig, handler: str
) -> None:
    # Given the function's environment
    variables = variables_of(template_json, handler)
    # When we split it into the factory's Powertools names and the function's own
    # Then the Powertools names are set, and the rest are exactly the names its settings class reads
    assert variables["POWERTOOLS_SERVICE_NAME"] == SERVICE_NAMES[handler]
    assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "onceflow"
    assert variables[TRACING_MODE_VARIABLE] == "active"
    assert variables["POWERTOOLS_LOG_LEVEL"] == config.log_level
    assert set(variables) - FACTORY_ENV_NAMES == ENVIRONMENT_NAMES[handler]


@pytest.mark.parametrize("handler", HANDLERS)
def test_settings_class_reads_exactly_the_expected_names(handler: str) -> None:
    # Given an environment with every variable any taxi handler uses, set to valid values
    values = {name: "x" for names in ENVIRONMENT_NAMES.values() for name in names}
    values |= {
        "WORKFLOW_TYPE": "STANDARD",
        "BATCH_MAX_LINES": "100",
        "BATCH_MAX_BYTES": "65536",
        "MAX_LINE_BYTES": "4096",
        "SECRET_CACHE_SECONDS": "300",
        "SECRET_REFRESH_FLOOR_SECONDS": "10",
        "CHUNK_ROWS": "2000",
    }
    environment = RecordingEnvironment(values)
    # When the handler's settings class reads it
    SETTINGS_CLASSES[handler].from_env(environment)
    # Then it asked for exactly the names the infra sets for that function (nothing more, nothing less)
    assert environment.read == ENVIRONMENT_NAMES[handler]


@pytest.mark.parametrize("handler", HANDLERS)
def test_settings_class_parses_the_synthesized_environment(template_json: dict[str, Any], handler: str) -> None:
    # Given the function's environment, with Refs replaced by dummy strings
    environment = resolved_environment(template_json, handler)
    # When its settings class reads it, as the handler does at cold start
    # Then it accepts it
    assert SETTINGS_CLASSES[handler].from_env(environment) is not None


def test_synthesized_settings_carry_the_configured_values(template_json: dict[str, Any], config: EnvConfig) -> None:
    # Given the parsed settings of the API and the authorizer
    settings = config.taxi_etl
    api = ApiSettings.from_env(resolved_environment(template_json, API))
    authorizer = AuthorizerSettings.from_env(resolved_environment(template_json, AUTHORIZER))
    # When we compare them with the config
    # Then the API knows the workflow type and the batch limits, and deduplicates on Standard
    assert api.workflow_type == settings.workflow_type.value == "STANDARD"
    assert api.deduplicates_starts is True
    assert (api.batch_max_lines, api.batch_max_bytes, api.max_line_bytes) == (
        settings.batch_max_lines,
        settings.batch_max_bytes,
        settings.max_line_bytes,
    )
    # and the authorizer caches the key as configured
    assert (authorizer.cache_seconds, authorizer.refresh_floor_seconds) == (
        settings.secret_cache_seconds,
        settings.secret_refresh_floor_seconds,
    )


def test_resource_variables_point_at_the_right_resources(template_json: dict[str, Any]) -> None:
    # Given the functions' environments
    # When we read the variables naming tables, the state machine and the secret
    # Then each is the Ref (name or ARN) of the resource it is named after
    expected = {
        VALIDATE: {"STATUS_TABLE": ref(VALIDATION_TABLE)},
        TRANSFORM: {"STATUS_TABLE": ref(TRANSFORMATION_TABLE)},
        STORE: {"STATUS_TABLE": ref(STORE_TABLE), "FINAL_TABLE": ref(TRIPS_TABLE)},
        FLAG: {
            "VALIDATION_STATUS_TABLE": ref(VALIDATION_TABLE),
            "TRANSFORMATION_STATUS_TABLE": ref(TRANSFORMATION_TABLE),
            "STORE_STATUS_TABLE": ref(STORE_TABLE),
            "FINAL_TABLE": ref(TRIPS_TABLE),
        },
        API: {
            "STATE_MACHINE_ARN": ref(STATE_MACHINE),
            "VALIDATION_STATUS_TABLE": ref(VALIDATION_TABLE),
            "TRANSFORMATION_STATUS_TABLE": ref(TRANSFORMATION_TABLE),
            "STORE_STATUS_TABLE": ref(STORE_TABLE),
            "FINAL_TABLE": ref(TRIPS_TABLE),
        },
        AUTHORIZER: {"API_KEY_SECRET_ID": ref(SECRET)},
        BULK_PLAN: {"INGEST_BUCKET": ref(INGEST_BUCKET)},
        BULK_CHUNK: {
            "INGEST_BUCKET": ref(INGEST_BUCKET),
            "VALIDATION_STATUS_TABLE": ref(VALIDATION_TABLE),
            "TRANSFORMATION_STATUS_TABLE": ref(TRANSFORMATION_TABLE),
            "STORE_STATUS_TABLE": ref(STORE_TABLE),
            "FINAL_TABLE": ref(TRIPS_TABLE),
        },
        BULK_REPORT: {"INGEST_BUCKET": ref(INGEST_BUCKET)},
        LOADS_API: {"INGEST_BUCKET": ref(INGEST_BUCKET), "BULK_STATE_MACHINE_ARN": ref(BULK_STATE_MACHINE)},
        LOAD_STARTER: {"INGEST_BUCKET": ref(INGEST_BUCKET), "BULK_STATE_MACHINE_ARN": ref(BULK_STATE_MACHINE)},
    }
    for handler, refs in expected.items():
        actual = {name: value for name, value in variables_of(template_json, handler).items() if not isinstance(value, str)}
        assert actual == refs, handler


# --- every function comes from the Lambda factory -----------------------------------------------


@pytest.mark.parametrize("handler", HANDLERS)
def test_function_has_the_factory_shape(template_json: dict[str, Any], env_name: str, handler: str) -> None:
    # Given one of the functions
    _, fn = function(template_json, handler)
    props = fn["Properties"]
    # When we look at its runtime, tracing, logging and layer
    # Then it is Python 3.13 on arm64 with active tracing and JSON logs into its own log group
    assert props["Runtime"] == "python3.13"
    assert props["Architectures"] == ["arm64"]
    assert props["TracingConfig"] == {"Mode": "Active"}
    assert props["LoggingConfig"]["LogFormat"] == "JSON"
    log_group = resource(template_json, log_group_of(template_json, handler), "AWS::Logs::LogGroup")
    assert log_group["Properties"]["RetentionInDays"] == EXPECTED[env_name]["log_retention_days"]
    # and uses the AWS-managed Powertools layer, resolved from SSM at deploy time, then the stack's SDK layer
    powertools, sdk = props["Layers"]
    assert sdk == sdk_layer_ref(template_json)
    assert template_json["Parameters"][powertools["Ref"]] == {"Type": "AWS::SSM::Parameter::Value<String>", "Default": POWERTOOLS_PARAMETER}


def test_functions_are_sized_from_the_config_and_have_their_own_log_groups(template_json: dict[str, Any], config: EnvConfig) -> None:
    # Given the functions (and CDK's bucket notifications handler, which runs at deploy time only)
    assert len(resources_of_type(template_json, "AWS::Lambda::Function")) == len(HANDLERS) + 1
    settings = config.taxi_etl
    # When we read their timeouts and memory
    # Then the phase and flag functions and the API follow the config
    for handler in STATE_MACHINE_FUNCTIONS:
        props = function(template_json, handler)[1]["Properties"]
        assert (props["Timeout"], props["MemorySize"]) == (settings.phase_timeout_seconds, settings.phase_memory_mb), handler
    assert function(template_json, API)[1]["Properties"]["Timeout"] == settings.api_timeout_seconds
    # and the bulk tasks take the bulk timeout (a chunk holds more rows than a batch), the loads API and starter the API's
    for handler in BULK_STATE_MACHINE_FUNCTIONS:
        props = function(template_json, handler)[1]["Properties"]
        assert (props["Timeout"], props["MemorySize"]) == (settings.bulk_task_timeout_seconds, settings.phase_memory_mb), handler
    for handler in (LOADS_API, LOAD_STARTER):
        assert function(template_json, handler)[1]["Properties"]["Timeout"] == settings.api_timeout_seconds
    # and the authorizer answers within API Gateway's 10 s limit for Lambda authorizers
    assert function(template_json, AUTHORIZER)[1]["Properties"]["Timeout"] == 10
    # and no two functions share a log group; the others are the two machines' execution logs and the API's access logs
    log_groups = {log_group_of(template_json, handler) for handler in HANDLERS}
    assert len(log_groups) == len(HANDLERS)
    others = {STATE_MACHINE_LOGS, BULK_STATE_MACHINE_LOGS, API_ACCESS_LOGS}
    assert set(resources_of_type(template_json, "AWS::Logs::LogGroup")) == log_groups | others


def test_handler_paths_are_the_contracts_constants() -> None:
    # Given the handler paths written out here, the contract's constants and the construct's
    from onceflow.infra.taxi_etl import construct as taxi_etl
    from runtime.taxi_etl import contract
    from runtime.taxi_etl.errors import PhaseInputError
    from runtime.taxi_etl.models import Phase

    # When they are compared
    # Then they are the same, so the functions found above are the ones the construct means
    assert contract.PHASE_HANDLERS == PHASE_HANDLERS
    assert (contract.HANDLER_FLAG, contract.HANDLER_API, contract.HANDLER_AUTHORIZER) == (FLAG, API, AUTHORIZER)
    assert taxi_etl.LAMBDA_SERVICE_ERRORS == LAMBDA_SERVICE_ERRORS
    # and the contract's phases and error name are the runtime's (the state machine's Retry names the error class)
    assert tuple(phase.value.title() for phase in Phase) == contract.PHASES
    assert PhaseInputError.__name__ == contract.ERROR_PHASE_INPUT


# --- 8. the secret and the outputs ---------------------------------------------------------------


def test_api_key_secret_is_generated_and_never_in_the_template(template_json: dict[str, Any]) -> None:
    # Given the stack's secrets
    assert set(resources_of_type(template_json, "AWS::SecretsManager::Secret")) == {SECRET}
    props = resource(template_json, SECRET, "AWS::SecretsManager::Secret")["Properties"]
    # When we read how its value comes about
    # Then Secrets Manager generates a 48-character key without punctuation (safe in a header)
    assert props["GenerateSecretString"] == {"ExcludePunctuation": True, "PasswordLength": 48}
    # and no value is written anywhere in the template: no SecretString, no resolve of a secret value
    assert not contains_key(template_json, "SecretString")
    assert "{{resolve:secretsmanager" not in json.dumps(template_json)
    # and the authorizer gets the secret's ARN, never its value
    assert variables_of(template_json, AUTHORIZER)["API_KEY_SECRET_ID"] == ref(SECRET)


def test_outputs_name_the_api_the_secret_the_state_machine_and_every_table(template_json: dict[str, Any]) -> None:
    # Given the stack's outputs
    outputs = template_json["Outputs"]
    # When we read their values
    values = {name: output["Value"] for name, output in outputs.items()}
    # Then they are exactly the API's URL, the secret's ARN (not its value), the two state machines, the ingest
    # bucket, the four tables and the dashboard
    (dashboard,) = resources_of_type(template_json, "AWS::CloudWatch::Dashboard")
    assert values == {
        "DashboardName": ref(dashboard),
        "ApiUrl": {"Fn::GetAtt": [HTTP_API, "ApiEndpoint"]},
        "ApiKeySecretArn": ref(SECRET),
        "StateMachineArn": ref(STATE_MACHINE),
        "BulkStateMachineArn": ref(BULK_STATE_MACHINE),
        "IngestBucketName": ref(INGEST_BUCKET),
        "TripsTableName": ref(TRIPS_TABLE),
        "ValidationStatusTableName": ref(VALIDATION_TABLE),
        "TransformationStatusTableName": ref(TRANSFORMATION_TABLE),
        "StoreStatusTableName": ref(STORE_TABLE),
    }
    # and none is exported to other stacks
    assert not [name for name, output in outputs.items() if "Export" in output]


# --- 9. the construct on its own (no cdk-nag, no app) -------------------------------------------


def test_an_existing_secret_is_used_instead_of_a_new_one(tmp_path: Path) -> None:
    # Given a saga given an existing secret, imported by name
    template_json, secret_arn = saga_with_imported_secret(tmp_path)
    # When we look at the template
    # Then no secret is created
    assert resources_of_type(template_json, "AWS::SecretsManager::Secret") == {}
    # and the authorizer reads that secret: its variable names it and its role may read it (and nothing else new)
    assert variables_of(template_json, AUTHORIZER)["API_KEY_SECRET_ID"] == secret_arn
    (statement,) = [s for s in statements_of(template_json, AUTHORIZER) if "secretsmanager:GetSecretValue" in as_list(s["Action"])]
    assert set(as_list(statement["Action"])) == {"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"}
    # and the secret's name is what was given
    assert secret_arn["Fn::Join"][1][-1].endswith(f":secret:{IMPORTED_SECRET_NAME}")


def test_an_existing_secret_imported_by_name_can_really_be_read(tmp_path: Path) -> None:
    # Given a saga given an existing secret, imported by name
    template_json, _ = saga_with_imported_secret(tmp_path)
    # When we read the resource of the authorizer's GetSecretValue statement
    (statement,) = [s for s in statements_of(template_json, AUTHORIZER) if "secretsmanager:GetSecretValue" in as_list(s["Action"])]
    last_part = statement["Resource"]["Fn::Join"][1][-1]
    # Then it matches the secret's full ARN, whose name Secrets Manager suffixes with "-" and six characters
    assert last_part.endswith(f":secret:{IMPORTED_SECRET_NAME}-??????")


def test_construct_requires_its_props_type(tmp_path: Path) -> None:
    # Given a stack
    stack = Stack(App(outdir=str(tmp_path)), "Untyped")
    # When the saga is given something else than its props
    # Then it refuses, and nothing was added to the stack
    with pytest.raises(TypeError, match="TaxiEtlSagaProps"):
        TaxiEtlSaga(stack, "X", object())  # type: ignore[arg-type]
    assert stack.node.try_find_child("X") is None


def test_construct_exposes_what_it_created(tmp_path: Path) -> None:
    # Given a saga built in a plain stack
    stack = Stack(App(context=cdk_context("dev"), outdir=str(tmp_path)), "Exposed")
    saga = TaxiEtlSaga(stack, "TaxiEtl", load_config("dev").taxi_etl_props())
    # When we resolve its typed attributes
    # Then they are the template's resources, the status tables in phase order
    assert list(saga.status_tables) == list(PHASES)
    resolved = {phase: stack.resolve(table.table_name) for phase, table in saga.status_tables.items()}
    assert resolved == {phase: ref(logical_id) for phase, logical_id in STATUS_TABLES.items()}
    assert stack.resolve(saga.final_table.table_name) == ref(TRIPS_TABLE)
    assert stack.resolve(saga.state_machine.state_machine_arn) == ref(STATE_MACHINE)
    assert stack.resolve(saga.api_key_secret.secret_arn) == ref(SECRET)
    template = Template.from_stack(stack)
    template.has_resource_properties("AWS::Lambda::Function", Match.object_like({"Handler": AUTHORIZER}))
    # and the read-only function of GET /trips/{StoreRequestId} is the one with that handler
    row_state_id, _ = function(dict(template.to_json()), ROW_STATE)
    assert stack.resolve(saga.row_state_function.function_arn) == {"Fn::GetAtt": [row_state_id, "Arn"]}
    # and the bulk route's resources are its attributes: the machine, its logs, the bucket, the queues, each function
    assert stack.resolve(saga.bulk_state_machine.state_machine_arn) == ref(BULK_STATE_MACHINE)
    assert stack.resolve(saga.bulk_state_machine_logs.log_group_name) == ref(BULK_STATE_MACHINE_LOGS)
    assert stack.resolve(saga.ingest_bucket.bucket_name) == ref(INGEST_BUCKET)
    assert stack.resolve(saga.ingest_access_log_bucket.bucket_name) == ref(INGEST_ACCESS_LOG_BUCKET)
    assert stack.resolve(saga.load_starter_queue.queue_url) == ref(LOAD_STARTER_QUEUE)
    assert stack.resolve(saga.load_starter_dead_letter_queue.queue_url) == ref(LOAD_STARTER_DEAD_LETTER_QUEUE)
    bulk_functions = {
        BULK_PLAN: saga.bulk_plan_function,
        BULK_CHUNK: saga.bulk_chunk_function,
        BULK_REPORT: saga.bulk_report_function,
        LOADS_API: saga.loads_api_function,
        LOAD_STARTER: saga.load_starter_function,
    }
    for handler, created in bulk_functions.items():
        function_id, _ = function(dict(template.to_json()), handler)
        assert stack.resolve(created.function_arn) == {"Fn::GetAtt": [function_id, "Arn"]}, handler


def test_a_trips_table_with_its_own_key_can_be_read_by_get_and_only_read(tmp_path: Path) -> None:
    # Given a saga given an existing trips table encrypted with a customer managed key, imported with that key
    stack = Stack(App(context=cdk_context("dev"), outdir=str(tmp_path)), "OwnTripsKey")
    key_arn = "arn:aws:kms:us-east-1:111122223333:key/11111111-2222-3333-4444-555555555555"
    trips = dynamodb.Table.from_table_attributes(
        stack, "Trips", table_name="nycYellowTaxis", encryption_key=kms.Key.from_key_arn(stack, "TripsKey", key_arn)
    )
    TaxiEtlSaga(stack, "TaxiEtl", replace(load_config("dev").taxi_etl_props(), trips_table=trips))
    template_json = dict(Template.from_stack(stack).to_json())
    # When we read what the GET function may do with that key
    grants = granted_by(statements_of(template_json, ROW_STATE))
    # Then it may decrypt with it (DynamoDB decrypts the item for the reader), nothing more
    assert grants[(key(key_arn), None)] == {"kms:Decrypt"}
    # and on the table it still only reads
    table_grants = [actions for (target, _), actions in grants.items() if "nycYellowTaxis" in json.dumps(target)]
    assert table_grants == [{"dynamodb:BatchGetItem"}]
