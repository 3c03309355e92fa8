"""One test per rule of devtools/aws/iam_needs.py: what IAM must allow for each kind of call."""

from __future__ import annotations

import pytest

from devtools.aws.iam_needs import (
    Need,
    ResourceCatalog,
    UnmappedCall,
    bucket_arn,
    call_needs,
    key_arn,
    queue_arn,
    service_needs,
    stream_arn,
    table_arn,
)

QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/Jobs"


def test_a_single_item_call_needs_its_own_action_on_the_table() -> None:
    # Given a GetItem, a conditional PutItem and a DescribeTable
    # Then each needs the same-named action on the table's ARN
    for operation in ("GetItem", "PutItem", "UpdateItem", "DeleteItem", "DescribeTable"):
        assert call_needs("dynamodb", operation, {"TableName": "Runs"}) == [Need(f"dynamodb:{operation}", table_arn("Runs"))]


def test_a_query_on_an_index_needs_the_index_arn_not_the_tables() -> None:
    # Given a Query on an index, and one on the table
    on_index = call_needs("dynamodb", "Query", {"TableName": "Log", "IndexName": "BySegment"})
    on_table = call_needs("dynamodb", "Query", {"TableName": "Log"})
    # Then the index is its own resource
    assert on_index == [Need("dynamodb:Query", table_arn("Log") + "/index/BySegment")]
    assert on_table == [Need("dynamodb:Query", table_arn("Log"))]


def test_transact_write_items_needs_each_items_own_action_on_its_table() -> None:
    # Given a transaction that puts, updates, deletes and checks across two tables
    items = [
        {"Put": {"TableName": "Log", "Item": {}}},
        {"Update": {"TableName": "Heads", "Key": {}, "UpdateExpression": "SET a = :a"}},
        {"Delete": {"TableName": "Log", "Key": {}}},
        {"ConditionCheck": {"TableName": "Heads", "Key": {}, "ConditionExpression": "attribute_exists(k)"}},
    ]
    # Then it is authorized item by item (TransactWriteItems has no action of its own)
    assert call_needs("dynamodb", "TransactWriteItems", {"TransactItems": items}) == [
        Need("dynamodb:PutItem", table_arn("Log")),
        Need("dynamodb:UpdateItem", table_arn("Heads")),
        Need("dynamodb:DeleteItem", table_arn("Log")),
        Need("dynamodb:ConditionCheckItem", table_arn("Heads")),
    ]


def test_transact_get_items_needs_get_item_per_table() -> None:
    items = [{"Get": {"TableName": "A", "Key": {}}}, {"Get": {"TableName": "B", "Key": {}}}, {"Get": {"TableName": "A", "Key": {}}}]
    assert call_needs("dynamodb", "TransactGetItems", {"TransactItems": items}) == [
        Need("dynamodb:GetItem", table_arn("A")),
        Need("dynamodb:GetItem", table_arn("B")),
    ]


@pytest.mark.parametrize("operation", ["BatchGetItem", "BatchWriteItem"])
def test_a_batch_call_needs_its_action_on_every_table_it_names(operation: str) -> None:
    # Given a batch over two tables
    needs = call_needs("dynamodb", operation, {"RequestItems": {"Trips": [], "Status": []}})
    # Then the batch action on each of them
    assert needs == [Need(f"dynamodb:{operation}", table_arn("Status")), Need(f"dynamodb:{operation}", table_arn("Trips"))]


def test_a_table_under_a_customer_managed_key_also_needs_kms_decrypt() -> None:
    # Given a table encrypted with the template's own KMS key
    template = {
        "Resources": {
            "Key": {"Type": "AWS::KMS::Key", "Properties": {}},
            "Runs": {
                "Type": "AWS::DynamoDB::Table",
                "Properties": {"SSESpecification": {"KMSMasterKeyId": {"Fn::GetAtt": ["Key", "Arn"]}}},
            },
        }
    }
    catalog = ResourceCatalog.from_templates([template])
    # Then reading it also needs kms:Decrypt on that key
    assert call_needs("dynamodb", "GetItem", {"TableName": "Runs"}, catalog) == [
        Need("dynamodb:GetItem", table_arn("Runs")),
        Need("kms:Decrypt", key_arn("Key")),
    ]


def test_aws_managed_keys_need_nothing_of_the_callers_role() -> None:
    # Given a stream under aws/kinesis and a table with SSE on its AWS owned key
    template = {
        "Resources": {
            "Stream": {
                "Type": "AWS::Kinesis::Stream",
                "Properties": {"StreamEncryption": {"EncryptionType": "KMS", "KeyId": "alias/aws/kinesis"}},
            },
            "Runs": {"Type": "AWS::DynamoDB::Table", "Properties": {"SSESpecification": {"SSEEnabled": True}}},
        }
    }
    # Then no resource is under a customer managed key
    assert ResourceCatalog.from_templates([template]).customer_keys == {}


def test_head_object_is_authorized_as_get_object() -> None:
    assert call_needs("s3", "HeadObject", {"Bucket": "b", "Key": "payloads/x"}) == [Need("s3:GetObject", bucket_arn("b") + "/payloads/x")]


def test_put_object_with_tagging_also_needs_put_object_tagging() -> None:
    # Given an upload that sets a tag, and one that does not
    tagged = call_needs("s3", "PutObject", {"Bucket": "b", "Key": "k", "Tagging": "pending=true"})
    plain = call_needs("s3", "PutObject", {"Bucket": "b", "Key": "k"})
    # Then only the tagged one needs s3:PutObjectTagging
    assert tagged == [Need("s3:PutObject", bucket_arn("b") + "/k"), Need("s3:PutObjectTagging", bucket_arn("b") + "/k")]
    assert plain == [Need("s3:PutObject", bucket_arn("b") + "/k")]


def test_list_objects_v2_needs_list_bucket_on_the_bucket_with_its_prefix() -> None:
    # Given a listing under a prefix
    needs = call_needs("s3", "ListObjectsV2", {"Bucket": "b", "Prefix": "snapshots/s1/"})
    # Then s3:ListBucket on the bucket ARN, carrying s3:prefix for conditions
    assert needs == [Need("s3:ListBucket", bucket_arn("b"), (("s3:prefix", "snapshots/s1/"),))]


def test_delete_objects_needs_delete_object_for_each_key() -> None:
    # Given a DeleteObjects of two keys
    needs = call_needs("s3", "DeleteObjects", {"Bucket": "b", "Delete": {"Objects": [{"Key": "a"}, {"Key": "c/d"}]}})
    # Then s3:DeleteObject on each (there is no s3:DeleteObjects action)
    assert needs == [Need("s3:DeleteObject", bucket_arn("b") + "/a"), Need("s3:DeleteObject", bucket_arn("b") + "/c/d")]


def test_object_tagging_calls_need_their_own_actions() -> None:
    assert call_needs("s3", "DeleteObjectTagging", {"Bucket": "b", "Key": "k"}) == [Need("s3:DeleteObjectTagging", bucket_arn("b") + "/k")]


def test_s3_under_a_customer_managed_key_needs_generate_data_key_to_write_and_decrypt_to_read() -> None:
    catalog = ResourceCatalog({"b": key_arn("K")})
    assert Need("kms:GenerateDataKey", key_arn("K")) in call_needs("s3", "PutObject", {"Bucket": "b", "Key": "k"}, catalog)
    assert Need("kms:Decrypt", key_arn("K")) in call_needs("s3", "GetObject", {"Bucket": "b", "Key": "k"}, catalog)


@pytest.mark.parametrize(
    ("operation", "action"),
    [
        ("SendMessage", "sqs:SendMessage"),
        ("SendMessageBatch", "sqs:SendMessage"),
        ("DeleteMessageBatch", "sqs:DeleteMessage"),
        ("ChangeMessageVisibility", "sqs:ChangeMessageVisibility"),
        ("ReceiveMessage", "sqs:ReceiveMessage"),
    ],
)
def test_sqs_calls_need_their_single_message_action_on_the_queue_of_the_url(operation: str, action: str) -> None:
    assert call_needs("sqs", operation, {"QueueUrl": QUEUE_URL}) == [Need(action, queue_arn("Jobs"))]


def test_sending_to_a_queue_under_a_customer_managed_key_needs_generate_data_key_and_decrypt() -> None:
    catalog = ResourceCatalog({"Jobs": key_arn("K")})
    assert call_needs("sqs", "SendMessage", {"QueueUrl": QUEUE_URL}, catalog) == [
        Need("sqs:SendMessage", queue_arn("Jobs")),
        Need("kms:GenerateDataKey", key_arn("K")),
        Need("kms:Decrypt", key_arn("K")),
    ]


def test_describe_execution_needs_the_execution_arn_not_the_state_machines() -> None:
    execution = "arn:aws:states:us-east-1:123456789012:execution:Saga:row-1"
    assert call_needs("stepfunctions", "DescribeExecution", {"executionArn": execution}) == [Need("states:DescribeExecution", execution)]


def test_start_execution_needs_the_state_machine_arn() -> None:
    machine = "arn:aws:states:us-east-1:123456789012:stateMachine:Saga"
    assert call_needs("stepfunctions", "StartExecution", {"stateMachineArn": machine, "input": "{}"}) == [
        Need("states:StartExecution", machine)
    ]


def test_a_secret_is_named_by_its_arn_whatever_the_call_passed() -> None:
    # Given the same secret by name and by its ARN (name, a dash, six random characters)
    by_name = call_needs("secretsmanager", "GetSecretValue", {"SecretId": "ApiKey"})
    by_arn = call_needs(
        "secretsmanager", "GetSecretValue", {"SecretId": "arn:aws:secretsmanager:us-east-1:123456789012:secret:ApiKey-AbC123"}
    )
    # Then both need the same action on the same ARN
    assert (
        by_name == by_arn == [Need("secretsmanager:GetSecretValue", "arn:aws:secretsmanager:us-east-1:123456789012:secret:ApiKey-XXXXXX")]
    )


def test_a_call_without_a_rule_is_refused_rather_than_guessed() -> None:
    with pytest.raises(UnmappedCall, match="dynamodb:CreateTable"):
        call_needs("dynamodb", "CreateTable", {"TableName": "x"})
    with pytest.raises(UnmappedCall, match="no IAM rule for kinesis:PutRecords"):
        call_needs("kinesis", "PutRecords", {"StreamName": "Runs", "Records": []})


def test_the_lambda_service_needs_its_event_source_destination_logs_and_traces() -> None:
    # Given a traced function with its own log group, a Kinesis mapping and an on-failure queue
    template = {
        "Resources": {
            "Fn": {
                "Type": "AWS::Lambda::Function",
                "Properties": {"LoggingConfig": {"LogGroup": {"Ref": "Logs"}}, "TracingConfig": {"Mode": "Active"}},
            },
            "Logs": {"Type": "AWS::Logs::LogGroup", "Properties": {}},
            "Stream": {"Type": "AWS::Kinesis::Stream", "Properties": {}},
            "Dlq": {"Type": "AWS::SQS::Queue", "Properties": {}},
            "Mapping": {
                "Type": "AWS::Lambda::EventSourceMapping",
                "Properties": {
                    "FunctionName": {"Ref": "Fn"},
                    "EventSourceArn": {"Fn::GetAtt": ["Stream", "Arn"]},
                    "DestinationConfig": {"OnFailure": {"Destination": {"Fn::GetAtt": ["Dlq", "Arn"]}}},
                },
            },
        }
    }
    # When the service-side needs are derived
    needs = {service_need.need.action: service_need for service_need in service_needs(template, "Fn")}
    # Then each comes with the AWS page it is from
    assert needs["kinesis:GetRecords"].need.resource == stream_arn("Stream")
    assert needs["sqs:SendMessage"].need.resource == queue_arn("Dlq")
    assert needs["logs:PutLogEvents"].need.resource == "arn:aws:logs:us-east-1:123456789012:log-group:Logs:*"
    assert needs["xray:PutTraceSegments"].need.resource == "*"
    assert all(service_need.source for service_need in needs.values())
