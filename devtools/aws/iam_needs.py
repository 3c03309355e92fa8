"""What IAM allows an AWS call needs: each SDK call a function makes, mapped to the actions and
resource ARNs that AWS authorizes it against, following the Service Authorization Reference
("Actions, resources, and condition keys for <service>"); and the grants the Lambda service itself
uses on a function's behalf (its event sources, destination, logs and traces), from AWS's docs.

moto evaluates none of this. `devtools.aws.call_audit` evaluates these needs against each function's
synthesized role (`devtools.aws.iam_policy`) for every call the code makes, so a call the role
would not allow fails in the embedded cloud as it would on AWS.

The embedded cloud names each resource after its logical id (tables, queues, streams, secrets and
state machines by the id itself, buckets by the id in lower case), so a call's physical name is also
the template's resource: `ResourceCatalog` turns both into the same ARNs, and knows which resources
a customer managed KMS key encrypts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlparse

REGION: Final = "us-east-1"
ACCOUNT: Final = "123456789012"  # moto's default account, the one the embedded cloud runs in


@dataclass(frozen=True)
class Need:
    """One action on one resource that a request must be allowed, with the request's condition keys."""

    action: str
    resource: str
    context: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        keys = "".join(f" [{key}={value}]" for key, value in self.context)
        return f"{self.action} on {self.resource}{keys}"


@dataclass(frozen=True)
class ServiceNeed:
    """A grant the Lambda service uses for the function, not the function's code, and where AWS says so."""

    need: Need
    source: str


# --- ARNs ------------------------------------------------------------------------------------


def table_arn(name: str) -> str:
    return f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}"


def bucket_arn(name: str) -> str:
    return f"arn:aws:s3:::{name}"


def queue_arn(name: str) -> str:
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"


def stream_arn(name: str) -> str:
    return f"arn:aws:kinesis:{REGION}:{ACCOUNT}:stream/{name}"


def state_machine_arn(name: str) -> str:
    return f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{name}"


def secret_arn(name: str) -> str:
    # Secrets Manager appends six random characters to a secret's name in its ARN.
    return f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{name}-??????"


def key_arn(key_id: str) -> str:
    return f"arn:aws:kms:{REGION}:{ACCOUNT}:key/{key_id}"


def log_group_arn(name: str) -> str:
    return f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{name}:*"


def queue_name(queue_url_or_arn: str) -> str:
    if queue_url_or_arn.startswith("arn:"):
        return queue_url_or_arn.rsplit(":", 1)[1]
    return urlparse(queue_url_or_arn).path.rstrip("/").rsplit("/", 1)[1]


def secret_name(secret_id: str) -> str:
    """A secret's name from its name or ARN (whose last part is the name and a dash and six characters)."""
    if not secret_id.startswith("arn:"):
        return secret_id
    return secret_id.split(":secret:", 1)[1].rsplit("-", 1)[0]


# --- which resources a customer managed key encrypts -------------------------------------------


@dataclass
class ResourceCatalog:
    """Resource name -> the ARN of the customer managed KMS key that encrypts it (from the templates).

    Only customer managed keys matter to the caller's role: an AWS managed key (aws/s3, aws/sqs,
    aws/dynamodb, aws/kinesis, aws/secretsmanager) is used through its key policy, which trusts every
    principal of the account that the service itself authorizes.
    """

    customer_keys: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_templates(cls, templates: Iterable[Mapping[str, Any]]) -> ResourceCatalog:
        catalog = cls()
        for template in templates:
            resources = template.get("Resources", {})
            for logical_id, resource in resources.items():
                key = _customer_key(resource, resources)
                if key is not None:
                    name = logical_id.lower() if resource["Type"] == "AWS::S3::Bucket" else logical_id
                    catalog.customer_keys[name] = key_arn(key)
        return catalog

    def key_for(self, name: str) -> str | None:
        return self.customer_keys.get(name)


def _customer_key(resource: Mapping[str, Any], resources: Mapping[str, Any]) -> str | None:
    """The logical id of the template's KMS key that encrypts this resource, if one does."""
    props = resource.get("Properties", {})
    candidates: list[Any] = []
    kind = resource["Type"]
    if kind == "AWS::SQS::Queue":
        candidates.append(props.get("KmsMasterKeyId"))
    elif kind == "AWS::DynamoDB::Table":
        candidates.append(props.get("SSESpecification", {}).get("KMSMasterKeyId"))
    elif kind == "AWS::Kinesis::Stream":
        candidates.append(props.get("StreamEncryption", {}).get("KeyId"))
    elif kind == "AWS::SecretsManager::Secret":
        candidates.append(props.get("KmsKeyId"))
    elif kind == "AWS::S3::Bucket":
        for rule in props.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", []):
            candidates.append(rule.get("ServerSideEncryptionByDefault", {}).get("KMSMasterKeyID"))
    for candidate in candidates:
        if isinstance(candidate, Mapping):
            target = candidate.get("Ref") or (candidate.get("Fn::GetAtt") or [None])[0]
            if target in resources and resources[target]["Type"] == "AWS::KMS::Key":
                return str(target)
    return None


# --- the calls --------------------------------------------------------------------------------

# DynamoDB operations authorized by the action of the same name on the table (or index) they name.
_DYNAMODB_TABLE_ACTIONS: Final = frozenset(
    {"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "DescribeTable", "ConditionCheckItem"}
)
# TransactWriteItems has no action of its own: each item is authorized as its single-item write.
_TRANSACT_WRITE_ACTIONS: Final = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem"}
# Same-named S3 actions on the object ARN; HeadObject is authorized as s3:GetObject.
_S3_OBJECT_ACTIONS: Final = {
    "GetObject": "s3:GetObject",
    "HeadObject": "s3:GetObject",
    "PutObject": "s3:PutObject",
    "DeleteObject": "s3:DeleteObject",
    "GetObjectTagging": "s3:GetObjectTagging",
    "PutObjectTagging": "s3:PutObjectTagging",
    "DeleteObjectTagging": "s3:DeleteObjectTagging",
}
# SQS: every batch operation is authorized as its single-message action.
_SQS_ACTIONS: Final = {
    "SendMessage": "sqs:SendMessage",
    "SendMessageBatch": "sqs:SendMessage",
    "ReceiveMessage": "sqs:ReceiveMessage",
    "DeleteMessage": "sqs:DeleteMessage",
    "DeleteMessageBatch": "sqs:DeleteMessage",
    "ChangeMessageVisibility": "sqs:ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
    "GetQueueAttributes": "sqs:GetQueueAttributes",
}


class UnmappedCall(LookupError):
    """A call this module has no rule for: add one before a function may make it."""


def call_needs(service: str, operation: str, params: Mapping[str, Any], catalog: ResourceCatalog | None = None) -> list[Need]:
    """The needs of one SDK call (`service` is the client's service name, `operation` the API's name)."""
    catalog = catalog or ResourceCatalog()
    rule = _RULES.get(service)
    if rule is None:
        raise UnmappedCall(f"no IAM rule for {service}:{operation}")
    return rule(operation, params, catalog)


def _dynamodb(operation: str, params: Mapping[str, Any], catalog: ResourceCatalog) -> list[Need]:
    needs: list[Need] = []
    if operation in _DYNAMODB_TABLE_ACTIONS:
        table = str(params["TableName"])
        resource = table_arn(table)
        if operation in {"Query", "Scan"} and params.get("IndexName"):
            resource = f"{resource}/index/{params['IndexName']}"  # an index is its own resource
        needs.append(Need(f"dynamodb:{operation}", resource))
        tables = [table]
    elif operation in {"BatchGetItem", "BatchWriteItem"}:
        tables = sorted(params["RequestItems"])
        needs.extend(Need(f"dynamodb:{operation}", table_arn(table)) for table in tables)
    elif operation == "TransactWriteItems":
        tables = []
        for item in params["TransactItems"]:
            ((kind, request),) = item.items()
            tables.append(str(request["TableName"]))
            needs.append(Need(f"dynamodb:{_TRANSACT_WRITE_ACTIONS[kind]}", table_arn(request["TableName"])))
    elif operation == "TransactGetItems":
        tables = [str(item["Get"]["TableName"]) for item in params["TransactItems"]]
        needs.extend(Need("dynamodb:GetItem", table_arn(table)) for table in tables)
    else:
        raise UnmappedCall(f"no IAM rule for dynamodb:{operation}")
    # A table under a customer managed key: DynamoDB decrypts its table key with the caller's permission.
    for table in dict.fromkeys(tables):
        key = catalog.key_for(table)
        if key is not None:
            needs.append(Need("kms:Decrypt", key))
    return _unique(needs)


def _s3(operation: str, params: Mapping[str, Any], catalog: ResourceCatalog) -> list[Need]:
    bucket = str(params["Bucket"])
    key = catalog.key_for(bucket)
    if operation in _S3_OBJECT_ACTIONS:
        resource = f"{bucket_arn(bucket)}/{params['Key']}"
        action = _S3_OBJECT_ACTIONS[operation]
        if operation in {"GetObject", "HeadObject"} and params.get("VersionId"):
            # A read of one given version is authorized as s3:GetObjectVersion alone (s3:GetObject is not needed).
            action = "s3:GetObjectVersion"
        needs = [Need(action, resource)]
        if operation == "PutObject" and params.get("Tagging"):
            needs.append(Need("s3:PutObjectTagging", resource))  # tags set with the object need their own action
        if key is not None and operation in {"GetObject", "HeadObject"}:
            needs.append(Need("kms:Decrypt", key))
        if key is not None and operation == "PutObject":
            needs.append(Need("kms:GenerateDataKey", key))
        return needs
    if operation in {"ListObjectsV2", "ListObjects"}:
        context = tuple(
            (f"s3:{name.lower()}", str(params[param]))
            for name, param in (("prefix", "Prefix"), ("delimiter", "Delimiter"))
            if param in params
        )
        return [Need("s3:ListBucket", bucket_arn(bucket), context)]
    if operation == "DeleteObjects":
        # One s3:DeleteObject per key the request names.
        return _unique([Need("s3:DeleteObject", f"{bucket_arn(bucket)}/{item['Key']}") for item in params["Delete"]["Objects"]])
    raise UnmappedCall(f"no IAM rule for s3:{operation}")


def _sqs(operation: str, params: Mapping[str, Any], catalog: ResourceCatalog) -> list[Need]:
    if operation == "GetQueueUrl":
        return [Need("sqs:GetQueueUrl", queue_arn(str(params["QueueName"])))]
    if operation not in _SQS_ACTIONS:
        raise UnmappedCall(f"no IAM rule for sqs:{operation}")
    name = queue_name(str(params["QueueUrl"]))
    needs = [Need(_SQS_ACTIONS[operation], queue_arn(name))]
    key = catalog.key_for(name)
    if key is not None and operation in {"SendMessage", "SendMessageBatch"}:
        needs += [Need("kms:GenerateDataKey", key), Need("kms:Decrypt", key)]
    if key is not None and operation == "ReceiveMessage":
        needs.append(Need("kms:Decrypt", key))
    return needs


def _stepfunctions(operation: str, params: Mapping[str, Any], catalog: ResourceCatalog) -> list[Need]:
    if operation in {"StartExecution", "StartSyncExecution"}:
        return [Need(f"states:{operation}", str(params["stateMachineArn"]))]
    if operation in {"DescribeExecution", "StopExecution", "GetExecutionHistory", "ListMapRuns"}:
        return [Need(f"states:{operation}", str(params["executionArn"]))]  # the execution ARN, not the machine's
    if operation == "DescribeMapRun":
        return [Need("states:DescribeMapRun", str(params["mapRunArn"]))]
    raise UnmappedCall(f"no IAM rule for stepfunctions:{operation}")


def _secretsmanager(operation: str, params: Mapping[str, Any], catalog: ResourceCatalog) -> list[Need]:
    if operation not in {"GetSecretValue", "DescribeSecret"}:
        raise UnmappedCall(f"no IAM rule for secretsmanager:{operation}")
    name = secret_name(str(params["SecretId"]))
    needs = [Need(f"secretsmanager:{operation}", f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{name}-XXXXXX")]
    key = catalog.key_for(name)
    if key is not None and operation == "GetSecretValue":
        needs.append(Need("kms:Decrypt", key))
    return needs


_RULES: Final = {
    "dynamodb": _dynamodb,
    "s3": _s3,
    "sqs": _sqs,
    "stepfunctions": _stepfunctions,
    "secretsmanager": _secretsmanager,
}


def _unique(needs: list[Need]) -> list[Need]:
    return list(dict.fromkeys(needs))


# --- what the Lambda service uses on the function's behalf ---------------------------------------

LOGS_SOURCE: Final = "AWSLambdaBasicExecutionRole: logs:CreateLogStream, logs:PutLogEvents (the log group exists: no CreateLogGroup)"
TRACES_SOURCE: Final = "AWSXRayDaemonWriteAccess, needed with active tracing: xray:PutTraceSegments, xray:PutTelemetryRecords"
KINESIS_SOURCE: Final = (
    "Lambda developer guide, Kinesis execution role permissions (AWSLambdaKinesisExecutionRole): kinesis:DescribeStream, "
    "DescribeStreamSummary, GetRecords, GetShardIterator, ListShards, ListStreams, SubscribeToShard"
)
DYNAMODB_STREAMS_SOURCE: Final = (
    "Lambda developer guide, DynamoDB Streams execution role permissions (AWSLambdaDynamoDBExecutionRole): "
    "dynamodb:DescribeStream, GetRecords, GetShardIterator, ListStreams"
)
SQS_SOURCE: Final = (
    "Lambda developer guide, SQS execution role permissions (AWSLambdaSQSQueueExecutionRole): "
    "sqs:ReceiveMessage, DeleteMessage, GetQueueAttributes"
)
ON_FAILURE_SOURCE: Final = (
    "Lambda developer guide, on-failure destinations for stream event sources: sqs:SendMessage on the destination queue"
)


def service_needs(template: Mapping[str, Any], function_id: str) -> list[ServiceNeed]:
    """What the Lambda service needs of this function's role, derived from its template resources."""
    resources = template["Resources"]
    function = resources[function_id]["Properties"]
    needs: list[ServiceNeed] = []
    log_group = function.get("LoggingConfig", {}).get("LogGroup")
    if isinstance(log_group, Mapping) and "Ref" in log_group:
        for action in ("logs:CreateLogStream", "logs:PutLogEvents"):
            needs.append(ServiceNeed(Need(action, log_group_arn(log_group["Ref"])), LOGS_SOURCE))
    if function.get("TracingConfig", {}).get("Mode") == "Active":
        for action in ("xray:PutTraceSegments", "xray:PutTelemetryRecords"):
            needs.append(ServiceNeed(Need(action, "*"), TRACES_SOURCE))
    for mapping in resources.values():
        props = mapping.get("Properties", {})
        if mapping["Type"] != "AWS::Lambda::EventSourceMapping" or props.get("FunctionName") != {"Ref": function_id}:
            continue
        source = props["EventSourceArn"]
        target = source["Fn::GetAtt"][0]
        kind = resources[target]["Type"]
        if kind == "AWS::Kinesis::Stream":
            stream = stream_arn(target)
            for action in ("DescribeStream", "DescribeStreamSummary", "GetRecords", "GetShardIterator", "ListShards", "SubscribeToShard"):
                needs.append(ServiceNeed(Need(f"kinesis:{action}", stream), KINESIS_SOURCE))
            needs.append(ServiceNeed(Need("kinesis:ListStreams", stream), KINESIS_SOURCE))
        elif kind == "AWS::DynamoDB::Table":
            stream = table_arn(target) + "/stream/*"
            for action in ("DescribeStream", "GetRecords", "GetShardIterator"):
                needs.append(ServiceNeed(Need(f"dynamodb:{action}", stream), DYNAMODB_STREAMS_SOURCE))
            needs.append(ServiceNeed(Need("dynamodb:ListStreams", "*"), DYNAMODB_STREAMS_SOURCE))
        elif kind == "AWS::SQS::Queue":
            for action in ("ReceiveMessage", "DeleteMessage", "GetQueueAttributes"):
                needs.append(ServiceNeed(Need(f"sqs:{action}", queue_arn(target)), SQS_SOURCE))
        destination = props.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
        if isinstance(destination, Mapping) and "Fn::GetAtt" in destination:
            needs.append(ServiceNeed(Need("sqs:SendMessage", queue_arn(destination["Fn::GetAtt"][0])), ON_FAILURE_SOURCE))
    return needs
