"""Properties of the taxi saga's bulk route in the synthesized stack, for every environment: the ingest bucket and
its ObjectCreated notification, the starter queue, the bulk state machine's definition and role. The per-function
environments and least privilege of the bulk functions are tested with the others' (test_taxi_etl_infra.py:
HANDLERS holds them). Expected values are written out literally, as there; sizes and limits come from the config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from devtools.aws.template_resources import resources_of_type
from onceflow.infra.config import EnvConfig
from tests.infra.taxi_etl.test_taxi_etl_infra import (
    BULK_CHUNK,
    BULK_PLAN,
    BULK_REPORT,
    BULK_STATE_MACHINE,
    BULK_STATE_MACHINE_FUNCTIONS,
    BULK_STATE_MACHINE_LOGS,
    EXPECTED,
    INGEST_ACCESS_LOG_BUCKET,
    INGEST_BUCKET,
    LOAD_STARTER,
    LOAD_STARTER_DEAD_LETTER_QUEUE,
    LOAD_STARTER_QUEUE,
    STATE_MACHINE_LOGS_KEY,
    STATE_MACHINE_WILDCARD_ACTIONS,
    dev_with,
    executions_of,
    expected_retry,
    granted_by,
    objects,
    successors,
    synth_stack,
)
from tests.infra.template_queries import arn, function, key, ref, resource, variables_of

LOAD_INPUT_ERROR = "LoadInputError"
STATES = {"Plan", "Chunks", "Report", "Loaded", "ReportFailed", "LoadFailed"}


@pytest.fixture
def template_json(env_templates: dict[str, dict[str, Any]], config: EnvConfig) -> dict[str, Any]:
    return env_templates[f"{config.stack_prefix}-TaxiEtl"]


def bulk_definition(template_json: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """The bulk state machine's parsed definition (each non-string part of its Fn::Join as a JSON string of it), and
    those parts."""
    props = resource(template_json, BULK_STATE_MACHINE, "AWS::StepFunctions::StateMachine")["Properties"]
    separator, parts = props["DefinitionString"]["Fn::Join"]
    assert separator == ""
    tokens = [part for part in parts if not isinstance(part, str)]
    text = "".join(part if isinstance(part, str) else f"__token{tokens.index(part)}__" for part in parts)
    return json.loads(text), tokens


def token_of(value: str, tokens: list[Any]) -> Any:
    """The template value a definition's placeholder string stands for."""
    assert value.startswith("__token") and value.endswith("__"), value
    return tokens[int(value.removeprefix("__token").removesuffix("__"))]


def task_function(state: dict[str, Any], tokens: list[Any]) -> str:
    """The logical id of the function a Lambda task state invokes."""
    return str(token_of(state["Resource"], tokens)["Fn::GetAtt"][0])


# --- the ingest bucket, its notification and the starter queue -------------------------------------


def test_ingest_bucket_is_encrypted_versioned_private_tls_only_and_logged(template_json: dict[str, Any]) -> None:
    # Given the ingest bucket
    props = resource(template_json, INGEST_BUCKET, "AWS::S3::Bucket")["Properties"]
    # When we read its settings
    # Then it is encrypted at rest, versioned (a load is one object version), closed to the public, without ACLs
    assert props["BucketEncryption"] == {
        "ServerSideEncryptionConfiguration": [{"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
    }
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    # and its server access logs go to its own access log bucket
    assert props["LoggingConfiguration"] == {"DestinationBucketName": ref(INGEST_ACCESS_LOG_BUCKET), "LogFilePrefix": "ingest/"}
    # and its policy refuses every request without TLS
    (policy,) = [
        p for p in resources_of_type(template_json, "AWS::S3::BucketPolicy").values() if p["Properties"]["Bucket"] == ref(INGEST_BUCKET)
    ]
    deny_plain = [
        statement
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Effect"] == "Deny" and statement.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
    ]
    assert len(deny_plain) == 1 and deny_plain[0]["Action"] == "s3:*" and deny_plain[0]["Principal"] == {"AWS": "*"}


def test_ingest_bucket_expires_files_loads_and_old_versions_as_configured(template_json: dict[str, Any], config: EnvConfig) -> None:
    # Given the ingest bucket's lifecycle
    rules = {
        rule["Id"]: rule
        for rule in resource(template_json, INGEST_BUCKET, "AWS::S3::Bucket")["Properties"]["LifecycleConfiguration"]["Rules"]
    }
    settings = config.taxi_etl
    # When we read each rule
    # Then the files under incoming/ expire after the ingest retention, the loads' records after the report retention
    assert rules["ExpireIncomingFiles"] == {
        "Id": "ExpireIncomingFiles",
        "Prefix": "incoming/",
        "ExpirationInDays": settings.ingest_retention_days,
        "Status": "Enabled",
    }
    assert rules["ExpireLoadRecords"] == {
        "Id": "ExpireLoadRecords",
        "Prefix": "loads/",
        "ExpirationInDays": settings.load_report_retention_days,
        "Status": "Enabled",
    }
    # and every noncurrent version (an overwritten or expired file) after the ingest retention, with the delete markers
    # left behind and unfinished uploads
    old = rules["ExpireOldVersions"]
    assert old["NoncurrentVersionExpiration"] == {"NoncurrentDays": settings.ingest_retention_days}
    assert old["ExpiredObjectDeleteMarker"] is True
    assert old["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    assert set(rules) == {"ExpireIncomingFiles", "ExpireLoadRecords", "ExpireOldVersions"}


def test_access_log_bucket_is_private_encrypted_and_expires(template_json: dict[str, Any]) -> None:
    props = resource(template_json, INGEST_ACCESS_LOG_BUCKET, "AWS::S3::Bucket")["Properties"]
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}
    assert all(props["PublicAccessBlockConfiguration"].values())
    assert props["LifecycleConfiguration"]["Rules"] == [{"Id": "ExpireAccessLogs", "ExpirationInDays": 90, "Status": "Enabled"}]


def test_files_created_under_incoming_notify_the_starter_queue_only(template_json: dict[str, Any]) -> None:
    # Given the bucket notifications CDK puts at deploy time
    (notifications,) = resources_of_type(template_json, "Custom::S3BucketNotifications").values()
    props = notifications["Properties"]
    # When we read them
    # Then the ingest bucket sends every ObjectCreated event of a key under incoming/ to the starter queue, and nothing else
    assert props["BucketName"] == ref(INGEST_BUCKET)
    assert props["NotificationConfiguration"] == {
        "QueueConfigurations": [
            {
                "Events": ["s3:ObjectCreated:*"],
                "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "incoming/"}]}},
                "QueueArn": arn(LOAD_STARTER_QUEUE),
            }
        ]
    }
    # and the queue lets S3 send to it only for this bucket
    (policy,) = [
        p
        for p in resources_of_type(template_json, "AWS::SQS::QueuePolicy").values()
        if p["Properties"]["Queues"] == [ref(LOAD_STARTER_QUEUE)]
    ]
    allows = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
    assert len(allows) == 1
    assert allows[0]["Principal"] == {"Service": "s3.amazonaws.com"}
    assert "sqs:SendMessage" in allows[0]["Action"]
    assert allows[0]["Condition"]["ArnLike"] == {"aws:SourceArn": arn(INGEST_BUCKET)}


def test_starter_queue_is_sse_sqs_with_a_bounded_dead_letter_queue_and_feeds_the_starter(
    template_json: dict[str, Any], config: EnvConfig
) -> None:
    # Given the starter queue and its dead-letter queue
    queue = resource(template_json, LOAD_STARTER_QUEUE, "AWS::SQS::Queue")["Properties"]
    dead = resource(template_json, LOAD_STARTER_DEAD_LETTER_QUEUE, "AWS::SQS::Queue")["Properties"]
    # When we read their encryption, retention, visibility and redrive
    # Then both are SQS-managed encrypted (S3 cannot send to a queue under the AWS managed KMS key) and keep 14 days
    for props in (queue, dead):
        assert props["SqsManagedSseEnabled"] is True and "KmsMasterKeyId" not in props
        assert props["MessageRetentionPeriod"] == 14 * 24 * 3600
    # and a message fails at most 5 times before it moves to the dead-letter queue
    assert queue["RedrivePolicy"] == {"deadLetterTargetArn": arn(LOAD_STARTER_DEAD_LETTER_QUEUE), "maxReceiveCount": 5}
    # and the visibility is six times the starter's timeout (AWS's advice for a Lambda event source)
    assert queue["VisibilityTimeout"] == 6 * config.taxi_etl.api_timeout_seconds
    # and the starter is its one consumer, reporting the messages that failed one by one
    starter_id, _ = function(template_json, LOAD_STARTER)
    mappings = [m["Properties"] for m in resources_of_type(template_json, "AWS::Lambda::EventSourceMapping").values()]
    (mapping,) = [m for m in mappings if m["EventSourceArn"] == arn(LOAD_STARTER_QUEUE)]
    assert mapping["FunctionName"] == ref(starter_id)
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["BatchSize"] == 10


# --- the bulk state machine -----------------------------------------------------------------------


def test_bulk_state_machine_is_standard_traced_and_logs_encrypted_at_the_environments_level(
    template_json: dict[str, Any], env_name: str
) -> None:
    # Given the bulk state machine
    props = resource(template_json, BULK_STATE_MACHINE, "AWS::StepFunctions::StateMachine")["Properties"]
    # When we read its type, tracing, logging and timeout
    # Then it is STANDARD whatever the saga's workflow type, traced, and logs as the per-batch machine does, to its own
    # log group encrypted with the saga's rotating logs key
    assert props["StateMachineType"] == "STANDARD"
    assert props["TracingConfiguration"] == {"Enabled": True}
    level, with_data = EXPECTED[env_name]["execution_log"]
    assert props["LoggingConfiguration"] == {
        "Destinations": [{"CloudWatchLogsLogGroup": {"LogGroupArn": arn(BULK_STATE_MACHINE_LOGS)}}],
        "IncludeExecutionData": with_data,
        "Level": level,
    }
    log_group = resource(template_json, BULK_STATE_MACHINE_LOGS, "AWS::Logs::LogGroup")["Properties"]
    assert log_group["KmsKeyId"] == arn(STATE_MACHINE_LOGS_KEY)
    assert log_group["RetentionInDays"] == EXPECTED[env_name]["log_retention_days"]
    # and a load is stopped after a day at most
    parsed, _ = bulk_definition(template_json)
    assert parsed["TimeoutSeconds"] == 24 * 3600


def test_bulk_definition_plans_maps_the_chunks_and_reports(template_json: dict[str, Any], config: EnvConfig) -> None:
    # Given the bulk definition
    parsed, tokens = bulk_definition(template_json)
    states = parsed["States"]
    # When we follow it from its start
    # Then it is Plan -> Chunks -> Report -> Loaded, with ReportFailed -> LoadFailed as the failure path
    assert parsed["StartAt"] == "Plan" and set(states) == STATES
    assert (states["Plan"]["Next"], states["Chunks"]["Next"], states["Report"]["Next"], states["ReportFailed"]["Next"]) == (
        "Chunks",
        "Report",
        "Loaded",
        "LoadFailed",
    )
    assert states["Loaded"]["Type"] == "Succeed"
    assert states["LoadFailed"] == {"Type": "Fail", "Error": "LoadFailed", "CausePath": "$.error.Cause"}
    # and Plan puts its output at $.plan, Report at $.report, each invoking its function
    plan, report, report_failed = states["Plan"], states["Report"], states["ReportFailed"]
    functions = {handler: function(template_json, handler)[0] for handler in BULK_STATE_MACHINE_FUNCTIONS}
    assert (plan["ResultPath"], task_function(plan, tokens)) == ("$.plan", functions[BULK_PLAN])
    assert (report["ResultPath"], task_function(report, tokens)) == ("$.report", functions[BULK_REPORT])
    assert (report_failed["ResultPath"], task_function(report_failed, tokens)) == ("$.report", functions[BULK_REPORT])
    # and Report is given the load and the plan, ReportFailed the whole state (the load, the plan if it ran, the error)
    assert report["Parameters"] == {
        "bucket.$": "$.bucket",
        "key.$": "$.key",
        "versionId.$": "$.versionId",
        "loadId.$": "$.loadId",
        "plan.$": "$.plan",
    }
    assert "Parameters" not in report_failed
    # and a failed plan and a failed map are caught into ReportFailed with the error at $.error
    for state in (plan, states["Chunks"]):
        assert state["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "ReportFailed"}]
    # and a plan refusing its input is never retried; AWS's failures and crashes are, as the saga's tasks are
    assert plan["Retry"][0] == {"ErrorEquals": [LOAD_INPUT_ERROR], "MaxAttempts": 0}
    assert plan["Retry"][1:] == expected_retry(config)[1:]
    # and every path ends in Loaded or LoadFailed
    assert all(successors(state) <= STATES for state in states.values())


def test_chunks_is_a_distributed_map_over_the_plans_manifest(template_json: dict[str, Any], config: EnvConfig) -> None:
    # Given the Chunks state
    parsed, tokens = bulk_definition(template_json)
    chunks = parsed["States"]["Chunks"]
    # When we read its processor, reader, selector and limits
    # Then it is a DISTRIBUTED map with STANDARD children, labelled
    assert chunks["Type"] == "Map" and chunks["Label"] == "Chunks"
    assert chunks["ItemProcessor"]["ProcessorConfig"] == {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"}
    # and its items are the JSON array of the manifest the plan wrote, found through the plan's output
    reader = chunks["ItemReader"]
    assert token_of(reader["Resource"].split(":")[1], tokens) == ref("AWS::Partition")
    assert reader["Resource"].split(":", 2)[2] == "states:::s3:getObject"
    assert reader["ReaderConfig"] == {"InputType": "JSON"}
    assert reader["Parameters"] == {"Bucket.$": "$.plan.manifest.bucket", "Key.$": "$.plan.manifest.key"}
    # and each child gets the load, the file's layout and its manifest item
    assert chunks["ItemSelector"] == {
        "bucket.$": "$.bucket",
        "key.$": "$.key",
        "versionId.$": "$.versionId",
        "loadId.$": "$.loadId",
        "layout.$": "$.plan.layout",
        "chunk.$": "$$.Map.Item.Value",
    }
    # and runs at most the configured chunks at once; with the default tolerance of 0 any failed chunk fails the map
    assert chunks["MaxConcurrency"] == config.taxi_etl.bulk_max_concurrency
    assert config.taxi_etl.bulk_tolerated_failure_percentage == 0 and "ToleratedFailurePercentage" not in chunks
    # and nothing of the children's outputs stays in state (their summaries are in S3)
    assert chunks["ResultPath"] is None
    # and a child is the one Chunk task, retried as the saga's tasks are
    child = chunks["ItemProcessor"]
    assert child["StartAt"] == "Chunk" and set(child["States"]) == {"Chunk"}
    chunk = child["States"]["Chunk"]
    assert chunk["End"] is True and chunk["Retry"] == expected_retry(config)
    assert task_function(chunk, tokens) == function(template_json, BULK_CHUNK)[0]


def test_map_limits_and_the_plans_cut_follow_a_changed_config(tmp_path: Path) -> None:
    # Given a config with its own chunk size, concurrency and tolerance
    config = dev_with(bulk_chunk_rows=500, bulk_max_concurrency=7, bulk_tolerated_failure_percentage=5.0)
    # When the stack is synthesized with it
    template_json = synth_stack(config, tmp_path)
    # Then the map carries them, and the plan cuts chunks of that many lines
    chunks = bulk_definition(template_json)[0]["States"]["Chunks"]
    assert (chunks["MaxConcurrency"], chunks["ToleratedFailurePercentage"]) == (7, 5)
    assert variables_of(template_json, BULK_PLAN)["CHUNK_ROWS"] == "500"


def test_bulk_state_machine_role_invokes_its_three_functions_and_reads_only_manifests(template_json: dict[str, Any]) -> None:
    # Given the bulk state machine's role
    role_id = resource(template_json, BULK_STATE_MACHINE, "AWS::StepFunctions::StateMachine")["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    role = resource(template_json, role_id, "AWS::IAM::Role")["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "states.amazonaws.com"}
    assert "ManagedPolicyArns" not in role and "Policies" not in role
    # When we read its two policies: its own and the one CDK adds for a top-level Distributed Map
    policies = [p for p in resources_of_type(template_json, "AWS::IAM::Policy").values() if ref(role_id) in p["Properties"]["Roles"]]
    assert len(policies) == 2 and all(p["Properties"]["Roles"] == [ref(role_id)] for p in policies)
    statements = [statement for policy in policies for statement in policy["Properties"]["PolicyDocument"]["Statement"]]
    grants = granted_by(statements)
    # Then it may invoke the plan, chunk and report functions (and their versions) and no other
    invocable = {}
    for handler in BULK_STATE_MACHINE_FUNCTIONS:
        function_id, _ = function(template_json, handler)
        invocable[(key(arn(function_id)), None)] = {"lambda:InvokeFunction"}
        invocable[(key({"Fn::Join": ["", [arn(function_id), ":*"]]}), None)] = {"lambda:InvokeFunction"}
    # and read the manifests under loads/ (the ItemReader), nothing else of the bucket
    manifests = {(key(objects("loads/")), None): {"s3:GetObject"}}
    # and start its map runs' children (executions of itself), describe and stop them, and redrive its labelled map runs
    name = {"Fn::Select": [6, {"Fn::Split": [":", ref(BULK_STATE_MACHINE)]}]}
    labelled = {
        "Fn::Join": [
            "",
            ["arn:", ref("AWS::Partition"), ":states:", ref("AWS::Region"), ":", ref("AWS::AccountId"), ":execution:", name, "/Chunks:*"],
        ]
    }
    children = {
        (key(ref(BULK_STATE_MACHINE)), None): {"states:StartExecution"},
        (key(executions_of(BULK_STATE_MACHINE)), None): {"states:DescribeExecution", "states:StopExecution"},
        (key(labelled), None): {"states:RedriveExecution"},
    }
    # and on "*" only the log-delivery and X-Ray actions
    assert grants == {**invocable, **manifests, **children, (key("*"), None): STATE_MACHINE_WILDCARD_ACTIONS}
