"""The seed's own taxi workflow shape, run on moto with the same rows, for `make bench` only.

The seed (its deploy program's state machine, "CriticalDataPipeline") takes one row per execution,
started by API Gateway directly (an HTTP API integration of subtype StepFunctions-StartExecution,
so no API function), and runs:

    Validate -> Choice -> Transform -> Choice -> Store -> Succeed
    Validate rejects       -> flag validation                           -> Fail
    Transform rejects      -> Parallel(flag transformation, flag validation)      -> Fail
    Store fails (Catch)    -> Parallel(flag store, flag transformation, flag validation) -> Fail

Each task is `arn:aws:states:::lambda:invoke` with `OutputPath: $.Payload`, retried on Lambda's
service errors (3 attempts, 1 s, backoff 2). Each phase puts its status row (StoreRequestId,
RawTuple, StatusReason 0) with an unconditional PutItem before it acts; Store also puts the final
item (StoreRequestId, EntryIdx and 19 trip attributes); a flag step sets StatusReason with an
UpdateItem conditional on the row existing. The id is a number made from the time, a PRNG and the
row, so each request, retries included, is a new transaction. The seed configures no state-machine
logging and no tracing; its Go functions log only Lambda's START, END and REPORT lines.

Read from the seed's deploy program (its ASL and its tables) and its Go functions (what each writes).
This module builds that shape (the ASL below is written for this benchmark, not copied) with
Python stand-ins for the seed's functions that make the same DynamoDB calls. Which rows pass is
decided by this project's rules (`validate_line`, `transform_tuple`): the seed's own validator
expects 20 columns and `YYYY-MM-DD hh:mm:ss` dates and would refuse every row of the sample, which
would measure its failure path instead of its work.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from devtools.aws.capacity import CapacityMeter
from devtools.aws.moto_fit import reaches_into_moto
from devtools.taxi_world import ACCOUNT, LAMBDA_INVOKE, client, embedded_saga_cloud, function_arn, state_transitions
from runtime.taxi_etl import contract as taxi_etl_contract
from runtime.taxi_etl.trip_lines import Accepted, transform_tuple, validate_line

VALIDATION_TABLE, TRANSFORMATION_TABLE, STORE_TABLE = "validationStatus", "transformationStatus", "storeStatus"
FINAL_TABLE = "nycYellowTaxis"
FUNCTIONS = {
    "validate": "SeedValidate",
    "transform": "SeedTransform",
    "store": "SeedStore",
    "flag_validation": "SeedFlagValidateFailed",
    "flag_transformation": "SeedFlagTransformFailed",
    "flag_store": "SeedFlagStoreFailed",
}
LAMBDA_SERVICE_ERRORS = [
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
]
# The final item's trip attributes, in the order of the transformed tuple's columns (EntryIdx aside).
TRIP_ATTRIBUTES = (
    ("VendorId", "S"),
    ("PickupTime", "S"),
    ("DropoffTime", "S"),
    ("PassengerCount", "N"),
    ("TripDistance", "N"),
    ("RatecodeId", "S"),
    ("StoreAndFwdFlag", "S"),
    ("PuLocationId", "N"),
    ("DoLocationId", "N"),
    ("PaymentType", "S"),
    ("FareAmount", "N"),
    ("Extra", "N"),
    ("MtaTax", "N"),
    ("TipAmount", "N"),
    ("TollsAmount", "N"),
    ("ImprovementSurcharge", "N"),
    ("TotalAmount", "N"),
    ("CongestionSurcharge", "N"),
    ("AirportFee", "N"),
)
# Lambda's platform lines for one invocation of a function in the default text log format.
_REQUEST_ID = "4b5c7e3a-9f1d-4c2e-8a6b-2d3f1e0c9a7b"
PLATFORM_LOG_LINES = (
    f"START RequestId: {_REQUEST_ID} Version: $LATEST",
    f"END RequestId: {_REQUEST_ID}",
    f"REPORT RequestId: {_REQUEST_ID}\tDuration: 12.34 ms\tBilled Duration: 13 ms\tMemory Size: 128 MB\tMax Memory Used: 21 MB\t",
)


def _task(function: str, next_state: str | None, catch_to: str | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {
        "Type": "Task",
        "Resource": "arn:aws:states:::lambda:invoke",
        "OutputPath": "$.Payload",
        "Parameters": {"Payload.$": "$", "FunctionName": function_arn(FUNCTIONS[function])},
        "Retry": [{"ErrorEquals": LAMBDA_SERVICE_ERRORS, "IntervalSeconds": 1, "MaxAttempts": 3, "BackoffRate": 2}],
    }
    if next_state is None:
        state["End"] = True
    else:
        state["Next"] = next_state
    if catch_to is not None:
        state["Catch"] = [{"ErrorEquals": ["States.TaskFailed"], "Next": catch_to, "ResultPath": "$.error"}]
    return state


def _flags(*functions: str, next_state: str) -> dict[str, Any]:
    branches = [{"StartAt": name, "States": {name: _task(name, None)}} for name in functions]
    return {"Type": "Parallel", "Branches": branches, "Next": next_state}


def _passed(next_state: str, otherwise: str) -> dict[str, Any]:
    return {"Type": "Choice", "Choices": [{"Variable": "$.success", "BooleanEquals": True, "Next": next_state}], "Default": otherwise}


def seed_definition() -> dict[str, Any]:
    """The seed's state-machine shape, with the stand-in functions' ARNs."""
    return {
        "Comment": "The seed's taxi workflow shape (make bench)",
        "StartAt": "Validate",
        "States": {
            "Validate": _task("validate", "ValidationPassed"),
            "ValidationPassed": _passed("Transform", otherwise="FlagValidation"),
            "Transform": _task("transform", "TransformationPassed", catch_to="FlagValidation"),
            "TransformationPassed": _passed(taxi_etl_contract.PHASE_STORE, otherwise="FlagTransformation"),
            "FlagTransformation": _flags("flag_transformation", "flag_validation", next_state="TransformationFailed"),
            taxi_etl_contract.PHASE_STORE: _task("store", "Stored", catch_to="FlagStore"),
            "FlagStore": _flags("flag_store", "flag_transformation", "flag_validation", next_state="StoreFailed"),
            "FlagValidation": _task("flag_validation", "ValidationFailed"),
            "Stored": {"Type": "Succeed"},
            "ValidationFailed": {"Type": "Fail"},
            "TransformationFailed": {"Type": "Fail"},
            "StoreFailed": {"Type": "Fail"},
        },
    }


@dataclass
class SeedFunctions:
    """Python stand-ins for the seed's six functions: the same DynamoDB calls, this project's verdicts."""

    dynamodb: Any
    calls: list[str] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1_700_000_000_000))

    def routes(self) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        return {
            FUNCTIONS["validate"]: self.validate,
            FUNCTIONS["transform"]: self.transform,
            FUNCTIONS["store"]: self.store,
            FUNCTIONS["flag_validation"]: lambda event: self.flag(VALIDATION_TABLE, event),
            FUNCTIONS["flag_transformation"]: lambda event: self.flag(TRANSFORMATION_TABLE, event),
            FUNCTIONS["flag_store"]: lambda event: self.flag(STORE_TABLE, event),
        }

    def _put_status(self, table: str, transaction_id: int, raw_tuple: str) -> None:
        item = {
            taxi_etl_contract.KEY_STORE_REQUEST_ID: {"N": str(transaction_id)},
            "RawTuple": {"S": raw_tuple},
            "StatusReason": {"N": "0"},
        }
        self.dynamodb.put_item(TableName=table, Item=item)

    def validate(self, event: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("validate")
        transaction_id = next(self._ids)  # time + PRNG + row in the seed: new on every request
        line = str(event["tuple"])
        self._put_status(VALIDATION_TABLE, transaction_id, line)
        verdict = validate_line(line)
        if isinstance(verdict, Accepted):
            return {"success": True, "reason": 0, "transactionId": transaction_id, "tuple": verdict.tuple}
        return {"success": False, "reason": 1, "transactionId": transaction_id, "tuple": ""}

    def transform(self, event: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("transform")
        transaction_id, validated = int(event["transactionId"]), str(event["tuple"])
        self._put_status(TRANSFORMATION_TABLE, transaction_id, validated)
        verdict = transform_tuple(validated)
        if isinstance(verdict, Accepted):
            return {"success": True, "reason": 0, "transactionId": transaction_id, "tuple": verdict.tuple}
        return {"success": False, "reason": 2, "transactionId": transaction_id, "tuple": validated}

    def store(self, event: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("store")
        transaction_id, transformed = int(event["transactionId"]), str(event["tuple"])
        self._put_status(STORE_TABLE, transaction_id, transformed)
        cells = transformed.split("\t")
        item: dict[str, Any] = {taxi_etl_contract.KEY_STORE_REQUEST_ID: {"N": str(transaction_id)}, "EntryIdx": {"N": "0"}}
        for (name, kind), cell in zip(TRIP_ATTRIBUTES, cells, strict=False):
            item[name] = {kind: cell or "0"} if kind == "N" else {"S": cell}
        self.dynamodb.put_item(TableName=FINAL_TABLE, Item=item)
        return {"success": True, "reason": 0, "transactionId": transaction_id}

    def flag(self, table: str, event: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(f"flag {table}")
        reason = int(event.get("reason") or 0) or 3
        self.dynamodb.update_item(
            TableName=table,
            Key={taxi_etl_contract.KEY_STORE_REQUEST_ID: {"N": str(event["transactionId"])}},
            UpdateExpression="SET StatusReason = :reason",
            ConditionExpression="attribute_exists(StoreRequestId)",
            ExpressionAttributeValues={":reason": {"N": str(reason)}},
        )
        return {"flagged": True}


def create_seed_tables(dynamodb: Any) -> None:
    number_key = [{"AttributeName": taxi_etl_contract.KEY_STORE_REQUEST_ID, "AttributeType": "N"}]
    for table in (VALIDATION_TABLE, TRANSFORMATION_TABLE, STORE_TABLE):
        dynamodb.create_table(
            TableName=table,
            AttributeDefinitions=number_key,
            KeySchema=[{"AttributeName": taxi_etl_contract.KEY_STORE_REQUEST_ID, "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
    dynamodb.create_table(
        TableName=FINAL_TABLE,
        AttributeDefinitions=[*number_key, {"AttributeName": "EntryIdx", "AttributeType": "N"}],
        KeySchema=[
            {"AttributeName": taxi_etl_contract.KEY_STORE_REQUEST_ID, "KeyType": "HASH"},
            {"AttributeName": "EntryIdx", "KeyType": "RANGE"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )


@reaches_into_moto(LAMBDA_INVOKE)
@contextmanager
def routed(routes: dict[str, Callable[[dict[str, Any]], dict[str, Any]]]) -> Iterator[None]:
    """moto's Lambda invocations of these function names go to the in-process stand-ins."""
    from moto.awslambda_simple.models import LambdaSimpleBackend

    def invoke(backend: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: dict[str, str]) -> bytes:
        name = function_name.split(":function:")[-1].split(":")[0]
        try:
            result: Any = routes[name](json.loads(body) if body else {})
        except Exception as error:
            response_headers["x-amz-function-error"] = "Unhandled"
            result = {"errorType": type(error).__name__, "errorMessage": str(error)}
        return json.dumps(result).encode()

    with mock.patch.object(LambdaSimpleBackend, "invoke", invoke):
        yield


@dataclass(frozen=True)
class SeedRun:
    requests: int
    executions: int
    transitions: int
    invocations: int
    wru: float
    rru: float
    stored: int  # items in the final table
    dynamodb_calls: int


def run_seed_shape(requests: list[list[str]]) -> SeedRun:
    """Each one-row request through the seed's shape; what it cost, counted as for the other designs."""
    if any(len(request) != 1 for request in requests):
        raise ValueError("the seed takes one row per request")
    with embedded_saga_cloud():
        dynamodb, stepfunctions = client("dynamodb"), client("stepfunctions")
        create_seed_tables(dynamodb)
        meter = CapacityMeter()
        meter.attach(dynamodb)
        functions = SeedFunctions(dynamodb)
        machine_arn = stepfunctions.create_state_machine(
            name="SeedCriticalDataPipeline",
            definition=json.dumps(seed_definition()),
            roleArn=f"arn:aws:iam::{ACCOUNT}:role/SeedStateMachineRole",
            type="STANDARD",
        )["stateMachineArn"]
        with routed(functions.routes()):
            for number, (line,) in enumerate(requests):
                stepfunctions.start_execution(stateMachineArn=machine_arn, name=f"seed-{number}", input=json.dumps({"tuple": line}))
        execution_arns = [
            execution["executionArn"]
            for page in stepfunctions.get_paginator("list_executions").paginate(stateMachineArn=machine_arn)
            for execution in page["executions"]
        ]
        transitions = 0
        for arn in execution_arns:
            pages = stepfunctions.get_paginator("get_execution_history").paginate(executionArn=arn)
            transitions += state_transitions([event for page in pages for event in page["events"]])
        wru, rru, dynamodb_calls = meter.wru, meter.rru, sum(meter.calls.values())  # before the count below
        stored = sum(page["Count"] for page in dynamodb.get_paginator("scan").paginate(TableName=FINAL_TABLE, Select="COUNT"))
        return SeedRun(
            requests=len(requests),
            executions=len(execution_arns),
            transitions=transitions,
            invocations=len(functions.calls),
            wru=wru,
            rru=rru,
            stored=stored,
            dynamodb_calls=dynamodb_calls,
        )
