"""AWS service limits the embedded cloud enforces where moto does not (or measures them loosely).

Every number is AWS's, checked against its documentation (the page is named beside it). What
moto already enforces as strictly as AWS, or more strictly, is left to moto:
- DynamoDB item size: moto refuses an item over 405,000 bytes (AWS: 409,600), in PutItem,
  UpdateItem and the items a transaction writes;
- DynamoDB TransactWriteItems over 100 actions: moto refuses them (so does fast_transactions);
- a Lambda response over 6 MB: moto answers Function.ResponseSizeTooLarge above 6,000,000 bytes.

What this module adds (`enforced_service_limits`, entered by moto_patches.embedded_aws and by the local
server's moto_server.serving_state_machines):
- Step Functions: StartExecution input over 262,144 bytes is a ValidationException; a state's
  input when entered, a task's input after Parameters, a task's result and a state's output over
  262,144 bytes (compact JSON, UTF-8; moto measured `json.dumps` with spaces and \\u escapes, and
  refused exactly 262,144) fail with States.DataLimitExceeded, which a `States.ALL` catcher or
  retrier does not match (moto's did; moto_patches.step_functions_as_aws): the execution fails.
- Lambda Invoke: a request payload over 6 MB (RequestResponse) or 1 MB (Event) is refused with
  RequestEntityTooLargeException (moto took any size).
- SQS SendMessage / SendMessageBatch: the message size is the body's UTF-8 bytes plus its
  attributes' names, types and values (moto counted the body's characters only); a batch's
  messages together at most 1 MiB, checked before any is sent.
- DynamoDB TransactWriteItems: the items together at most 4 MB (moto had no such check), and
  every Put's item at most 400 KB before anything is written (so a transaction stays all or
  nothing on fast_transactions too).

The in-process invocations (the local HTTP API, the stream and queue event source mappings)
do not go through moto; they call `check_lambda_request`, `check_lambda_response`,
`fitting_batch` and `http_api_refusal` (`http_api_length_refusal`) from here.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from decimal import Decimal, InvalidOperation
from typing import Any, Final, TypeVar
from unittest import mock

from devtools.aws.moto_fit import InstanceAttribute, Reach, reaches_into_moto

# --- the numbers ----------------------------------------------------------------------------

# Step Functions, "Quotas related to task executions" (docs.aws.amazon.com/step-functions/latest/dg/limits.html,
# also service-quotas.html): "Maximum input or output size for a task, state, or execution: 262,144 bytes of data
# as a UTF-8 encoded string", for task results, state and execution output, and input when scheduling a task,
# entering a state or starting an execution (StartExecution's `input`: "Maximum length of 262144").
STEP_FUNCTIONS_PAYLOAD_BYTES: Final = 262_144
# Step Functions API reference, *FailedEventDetails: an error's `cause` is at most 32,768 characters, its `error` 256.
STEP_FUNCTIONS_CAUSE_CHARS: Final = 32_768
STEP_FUNCTIONS_ERROR_CHARS: Final = 256
# Lambda Invoke API reference (docs.aws.amazon.com/lambda/latest/dg/API_Invoke.html): "For synchronous invocations,
# the maximum payload size is 6 MB. For asynchronous invocations, the maximum payload size is 1 MB" (asynchronous
# raised from 256 KB in 2025: AWS Compute Blog, "More room to build: serverless services now support payloads up to
# 1 MB"). Lambda refuses a larger request with "Request must be smaller than 6291456 bytes for the InvokeFunction
# operation": 6 MB is 6 MiB. Event source mappings build their batches within the synchronous 6 MB.
LAMBDA_SYNC_PAYLOAD_BYTES: Final = 6 * 1024 * 1024
LAMBDA_ASYNC_PAYLOAD_BYTES: Final = 1024 * 1024
# API Gateway, "Quotas for configuring and running an HTTP API" (docs.aws.amazon.com/apigateway/latest/developerguide/
# http-api-quotas.html): "Payload size: 10 MB" and "Maximum integration timeout: 30 seconds", neither adjustable.
HTTP_API_PAYLOAD_BYTES: Final = 10 * 1024 * 1024
HTTP_API_INTEGRATION_TIMEOUT_SECONDS: Final = 30
# SQS API reference, SendMessage's MessageBody: "The maximum size is 1 MiB or 1,048,576 bytes" (raised from 256 KiB in
# August 2025); SendMessageBatch: "The maximum allowed individual message size and the maximum total payload size (the
# sum of the individual lengths of all of the batched messages) are both 1 MiB". A message's attributes (name, type,
# value) count toward its size (SQS Developer Guide, "Amazon SQS message attributes").
SQS_MESSAGE_BYTES: Final = 1024 * 1024
SQS_BATCH_BYTES: Final = 1024 * 1024
# DynamoDB, "Constraints" (docs.aws.amazon.com/amazondynamodb/latest/developerguide/Constraints.html): "The maximum
# item size in DynamoDB is 400 KB, which includes both attribute name binary length (UTF-8 length) and attribute value
# lengths", with 1 KB = 1,024 bytes; TransactWriteItems API reference: "groups up to 100 action requests ... The
# aggregate size of the items in the transaction cannot exceed 4 MB."
DYNAMODB_ITEM_BYTES: Final = 400 * 1024
DYNAMODB_TRANSACTION_ACTIONS: Final = 100
DYNAMODB_TRANSACTION_BYTES: Final = 4 * 1024 * 1024

STATES_DATA_LIMIT_EXCEEDED: Final = "States.DataLimitExceeded"

# --- measuring ------------------------------------------------------------------------------


def json_bytes(value: Any) -> int:
    """The size Step Functions and Lambda limit: the value as compact JSON, in UTF-8 bytes."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return len(text.encode("utf-8", "surrogatepass"))


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _number_bytes(text: str) -> int:
    """DynamoDB's size of a number: 1 byte per two significant digits, plus 1 (leading and trailing zeros trimmed)."""
    try:
        digits = Decimal(text).normalize().as_tuple().digits
    except InvalidOperation:
        return _utf8(text)
    significant = "".join(map(str, digits)).strip("0") or "0"
    return math.ceil(len(significant) / 2) + 1


def _binary_bytes(value: Any) -> int:
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    try:
        return len(base64.b64decode(str(value), validate=True))
    except (binascii.Error, ValueError):
        return _utf8(str(value))


def attribute_value_bytes(value: Mapping[str, Any]) -> int:
    """The size of one DynamoDB AttributeValue (wire format), by the rules of "DynamoDB item sizes and formats"
    (docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html)."""
    (kind, content), *_ = value.items()
    if kind == "S":
        return _utf8(str(content))
    if kind == "N":
        return _number_bytes(str(content))
    if kind == "B":
        return _binary_bytes(content)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(_utf8(str(element)) for element in content)
    if kind == "NS":
        return sum(_number_bytes(str(element)) for element in content)
    if kind == "BS":
        return sum(_binary_bytes(element) for element in content)
    if kind == "L":  # 3 bytes of overhead, and 1 per element
        return 3 + sum(1 + attribute_value_bytes(element) for element in content)
    if kind == "M":
        return 3 + sum(1 + _utf8(name) + attribute_value_bytes(element) for name, element in content.items())
    raise ValueError(f"not a DynamoDB attribute value: {kind}")


def dynamodb_item_bytes(item: Mapping[str, Mapping[str, Any]]) -> int:
    """An item's size: its attribute names' UTF-8 bytes plus its values' sizes."""
    return sum(_utf8(name) + attribute_value_bytes(value) for name, value in item.items())


def sqs_message_bytes(body: str, attributes: Mapping[str, Mapping[str, Any]] | None = None) -> int:
    """What SQS counts against its message size: the body and every attribute's name, data type and value."""
    size = _utf8(body)
    for name, attribute in (attributes or {}).items():
        size += _utf8(name) + _utf8(str(attribute.get("DataType", "")))
        if attribute.get("StringValue") is not None:
            size += _utf8(str(attribute["StringValue"]))
        if attribute.get("BinaryValue") is not None:
            size += _binary_bytes(attribute["BinaryValue"])
    return size


# --- the in-process invocations -------------------------------------------------------------


class LambdaPayloadTooLarge(Exception):
    """What Lambda answers an Invoke whose payload is over its limit (RequestEntityTooLargeException, 413)."""

    code = "RequestEntityTooLargeException"


class LambdaResponseTooLarge(Exception):
    """A function's response over 6 MB: Lambda fails the invocation (Function.ResponseSizeTooLarge)."""

    code = "Function.ResponseSizeTooLarge"


def lambda_request_refusal(size: int, *, asynchronous: bool = False) -> str | None:
    """Lambda's message for a request payload of `size` bytes, or None when it is within the limit."""
    if asynchronous:
        limit = LAMBDA_ASYNC_PAYLOAD_BYTES
        return None if size <= limit else f"{size} byte payload is too large for the Event invocation type (limit {limit} bytes)"
    limit = LAMBDA_SYNC_PAYLOAD_BYTES
    return None if size <= limit else f"Request must be smaller than {limit} bytes for the InvokeFunction operation"


def check_lambda_request(event: Any, *, asynchronous: bool = False) -> int:
    """Raise LambdaPayloadTooLarge unless the event fits one invocation; returns its size."""
    size = json_bytes(event)
    refusal = lambda_request_refusal(size, asynchronous=asynchronous)
    if refusal is not None:
        raise LambdaPayloadTooLarge(refusal)
    return size


def check_lambda_response(result: Any) -> int:
    """Raise LambdaResponseTooLarge unless a synchronous invocation's result fits 6 MB; returns its size."""
    size = json_bytes(result)
    if size > LAMBDA_SYNC_PAYLOAD_BYTES:
        raise LambdaResponseTooLarge(
            f"Response payload size ({size} bytes) exceeded maximum allowed payload size ({LAMBDA_SYNC_PAYLOAD_BYTES} bytes)."
        )
    return size


_Record = TypeVar("_Record")


def fitting_batch(records: Sequence[_Record], to_event: Callable[[Sequence[_Record]], Any]) -> int:
    """How many of the records, from the first, an event source mapping puts in one invocation: as many as the
    batch holds while the event stays within Lambda's synchronous 6 MB (the mapping stops adding records there).
    A single record that does not fit alone raises LambdaPayloadTooLarge: no mapping could deliver it."""
    if not records or json_bytes(to_event(records)) <= LAMBDA_SYNC_PAYLOAD_BYTES:
        return len(records)
    low, high = 1, len(records) - 1  # the longest prefix that fits, by bisection
    check_lambda_request(to_event(records[:1]))
    while low < high:
        middle = (low + high + 1) // 2
        if json_bytes(to_event(records[:middle])) <= LAMBDA_SYNC_PAYLOAD_BYTES:
            low = middle
        else:
            high = middle - 1
    return low


def http_api_refusal(body: bytes) -> tuple[int, dict[str, str]] | None:
    """What an HTTP API answers itself for a request body over its 10 MB payload quota, before any integration."""
    return http_api_length_refusal(len(body))


def http_api_length_refusal(length: int) -> tuple[int, dict[str, str]] | None:
    """http_api_refusal of a body of `length` bytes (one the local server stopped reading at the quota)."""
    if length > HTTP_API_PAYLOAD_BYTES:
        return 413, {"message": "Request Entity Too Large"}
    return None


# --- moto, made to enforce them -------------------------------------------------------------


def _sfn_within(value: Any) -> bool:
    return json_bytes(value) <= STEP_FUNCTIONS_PAYLOAD_BYTES


def _data_limit_failure(env: Any, cause: str, *, lambda_task: bool) -> Exception:
    from devtools.aws.moto_patches import states_failure

    return states_failure(env, "StatesStatesDataLimitExceeded", cause, lambda_task=lambda_task, event="TaskFailed")


_SFN_STATE = "moto.stepfunctions.parser.asl.component.state"
_SFN_LAMBDA_TASK = f"{_SFN_STATE}.exec.state_task.state_task_lambda"


@reaches_into_moto(
    Reach("moto.stepfunctions.exceptions", "ValidationException.__init__", ("self", "msg")),
    Reach("moto.stepfunctions.responses", "StepFunctionResponse.start_execution", ("self",)),
    Reach("moto.stepfunctions.responses", "StepFunctionResponse._get_param", ("self", "param_name", "if_none")),
    Reach(f"{_SFN_STATE}.state", "CommonStateField._eval_state_input", ("self", "env")),
    Reach(f"{_SFN_STATE}.state", "is_within_size_quota", ("value",)),
    Reach(_SFN_LAMBDA_TASK, "StateTaskLambda._eval_parameters", ("self", "env")),
    Reach(_SFN_LAMBDA_TASK, "StateTaskLambda._verify_size_quota", ("self", "env", "value")),
    Reach(_SFN_LAMBDA_TASK, "is_within_size_quota", ("value",)),
    InstanceAttribute(_SFN_LAMBDA_TASK, "StateTaskLambda", attribute="resource"),
    Reach(f"{_SFN_STATE}.exec.state_task.service.state_task_service", "is_within_size_quota", ("value",)),
)
@contextmanager
def _step_functions_limits() -> Iterator[None]:
    import importlib

    from moto.stepfunctions.exceptions import ValidationException
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task_lambda import StateTaskLambda
    from moto.stepfunctions.parser.asl.component.state.state import CommonStateField
    from moto.stepfunctions.responses import StepFunctionResponse

    def start_execution(self: Any) -> Any:
        size = _utf8(str(self._get_param("input", if_none="{}")))
        if size > STEP_FUNCTIONS_PAYLOAD_BYTES:
            raise ValidationException(
                f"1 validation error detected: Value at 'input' failed to satisfy constraint: "
                f"Member must have length less than or equal to {STEP_FUNCTIONS_PAYLOAD_BYTES} (the input is {size} bytes)"
            )
        return original_start(self)

    def eval_state_input(self: Any, env: Any) -> None:
        if not _sfn_within(env.states.get_input()):
            raise _data_limit_failure(
                env,
                f"The state '{self.name}' was entered with an input exceeding the maximum number of bytes service limit "
                f"({STEP_FUNCTIONS_PAYLOAD_BYTES})",
                lambda_task=False,
            )
        original_state_input(self, env)

    def eval_parameters(self: Any, env: Any) -> Any:
        parameters = original_parameters(self, env)
        if not _sfn_within(parameters.get("Payload")):
            raise _data_limit_failure(
                env,
                f"The state/task '{self.resource.resource_arn}' was scheduled with an input exceeding the maximum number of bytes "
                f"service limit ({STEP_FUNCTIONS_PAYLOAD_BYTES})",
                lambda_task=True,
            )
        return parameters

    def lambda_result_quota(self: Any, env: Any, value: Any) -> None:
        # A Lambda task's result is its Payload; moto measured the whole Invoke response around it.
        original_lambda_quota(self, env, value["Payload"] if isinstance(value, dict) and "Payload" in value else value)

    original_start = StepFunctionResponse.start_execution
    original_state_input = CommonStateField._eval_state_input
    original_parameters = StateTaskLambda._eval_parameters
    original_lambda_quota = StateTaskLambda._verify_size_quota
    quota_modules = [
        importlib.import_module("moto.stepfunctions.parser.asl.component.state.state"),
        importlib.import_module("moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task_lambda"),
        importlib.import_module("moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service"),
    ]
    with ExitStack() as stack:
        for module in quota_modules:
            stack.enter_context(mock.patch.object(module, "is_within_size_quota", _sfn_within))
        stack.enter_context(mock.patch.object(StepFunctionResponse, "start_execution", start_execution))
        stack.enter_context(mock.patch.object(CommonStateField, "_eval_state_input", eval_state_input))
        stack.enter_context(mock.patch.object(StateTaskLambda, "_eval_parameters", eval_parameters))
        stack.enter_context(mock.patch.object(StateTaskLambda, "_verify_size_quota", lambda_result_quota))
        yield


@reaches_into_moto(
    Reach("moto.awslambda.responses", "LambdaResponse.invoke", ("self",)),
    InstanceAttribute("moto.awslambda.responses", "LambdaResponse", attribute="body"),
    InstanceAttribute("moto.awslambda.responses", "LambdaResponse", attribute="headers"),
)
@contextmanager
def _lambda_limits() -> Iterator[None]:
    from moto.awslambda.responses import LambdaResponse

    original = LambdaResponse.invoke

    @functools.wraps(original)
    def invoke(self: Any) -> Any:
        body = self.body if isinstance(self.body, bytes) else str(self.body or "").encode("utf-8", "surrogatepass")
        refusal = lambda_request_refusal(len(body), asynchronous=self.headers.get("X-Amz-Invocation-Type") == "Event")
        if refusal is not None:
            error = {"Type": "User", "message": refusal}
            headers = {"x-amzn-errortype": LambdaPayloadTooLarge.code, "content-type": "application/json", "status": "413"}
            return 413, headers, json.dumps(error)
        return original(self)

    with mock.patch.object(LambdaResponse, "invoke", invoke):
        yield


@reaches_into_moto(
    Reach("moto.sqs.exceptions", "BatchRequestTooLong.__init__", ("self", "length")),
    Reach("moto.sqs.exceptions", "InvalidParameterValue.__init__", ("self", "message")),
    Reach("moto.sqs.models", "SQSBackend.send_message", ("self", "queue_name", "message_body", "message_attributes")),
    Reach("moto.sqs.models", "SQSBackend.send_message_batch", ("self", "queue_name", "entries")),
    Reach("moto.sqs.models", "SQSBackend.get_queue", ("self", "queue_name")),
    InstanceAttribute("moto.sqs.models", "Queue", attribute="maximum_message_size"),
)
@contextmanager
def _sqs_limits() -> Iterator[None]:
    from moto.sqs.exceptions import BatchRequestTooLong, InvalidParameterValue
    from moto.sqs.models import SQSBackend

    def check(queue: Any, body: str, attributes: Mapping[str, Any] | None) -> int:
        size = sqs_message_bytes(body, attributes)
        limit = min(int(queue.maximum_message_size), SQS_MESSAGE_BYTES)
        if size > limit:
            raise InvalidParameterValue(
                f"One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes (it is {size}, "
                "counting its attributes)."
            )
        return size

    def send_message(self: Any, queue_name: str, message_body: str, message_attributes: Any = None, *args: Any, **kwargs: Any) -> Any:
        check(self.get_queue(queue_name), message_body, message_attributes)
        return original_send(self, queue_name, message_body, message_attributes, *args, **kwargs)

    def send_message_batch(self: Any, queue_name: str, entries: dict[str, dict[str, Any]]) -> Any:
        queue = self.get_queue(queue_name)
        total = sum(check(queue, entry["MessageBody"], entry.get("MessageAttributes")) for entry in entries.values())
        if total > SQS_BATCH_BYTES:
            raise BatchRequestTooLong(total)
        return original_batch(self, queue_name, entries)

    original_send = SQSBackend.send_message
    original_batch = SQSBackend.send_message_batch
    with (
        mock.patch.object(SQSBackend, "send_message", send_message),
        mock.patch.object(SQSBackend, "send_message_batch", send_message_batch),
    ):
        yield


def _existing_item_bytes(handler: Any, table_name: str, key: Mapping[str, Any]) -> int:
    found = handler.dynamodb_backend.get_item(table_name, dict(key))
    return dynamodb_item_bytes(found.to_json()["Attributes"]) if found is not None else 0


@reaches_into_moto(
    Reach("moto.dynamodb.exceptions", "MockValidationException.__init__", ("self", "message")),
    Reach("moto.dynamodb.responses", "DynamoHandler.transact_write_items", ("self",)),
    InstanceAttribute("moto.dynamodb.responses", "DynamoHandler", attribute="body"),
    InstanceAttribute("moto.dynamodb.responses", "DynamoHandler", attribute="dynamodb_backend"),
    Reach("moto.dynamodb.models", "DynamoDBBackend.get_item", ("self", "table_name", "keys")),
    Reach("moto.dynamodb.models.dynamo_type", "Item.to_json", ("self",)),
)
@contextmanager
def _dynamodb_limits() -> Iterator[None]:
    from moto.dynamodb.exceptions import MockValidationException
    from moto.dynamodb.responses import DynamoHandler

    def transact_write_items(self: Any) -> Any:
        total = 0
        for action in self.body.get("TransactItems", []):
            for kind, operation in action.items():
                if kind == "Put":
                    size = dynamodb_item_bytes(operation["Item"])
                    if size > DYNAMODB_ITEM_BYTES:
                        raise MockValidationException("Item size has exceeded the maximum allowed size")
                else:  # the item it reads or changes, as stored now
                    size = _existing_item_bytes(self, operation["TableName"], operation["Key"])
                total += size
        if total > DYNAMODB_TRANSACTION_BYTES:
            raise MockValidationException(
                f"Transaction request cannot be larger than 4 MB (its items come to {total} bytes; "
                f"the limit is {DYNAMODB_TRANSACTION_BYTES})"
            )
        return original(self)

    original = DynamoHandler.transact_write_items
    with mock.patch.object(DynamoHandler, "transact_write_items", transact_write_items):
        yield


@contextmanager
def enforced_service_limits() -> Iterator[None]:
    """moto refusing what AWS refuses at these limits, while open (see the module's docstring)."""
    with _step_functions_limits(), _lambda_limits(), _sqs_limits(), _dynamodb_limits():
        yield
