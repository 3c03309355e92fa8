"""`make serve`'s HTTP APIs: the API Gateway HTTP API (payload 2.0) event each route's request becomes,
what API Gateway answers by itself (no route, refused callers), and the outputs file it writes."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from devtools.aws.template_resources import Template, resources_of_type
from devtools.local.http_api import ApiServer, HttpApi, Integration, Route
from devtools.local.stack import LocalStack
from onceflow.clients.local import LOCAL_ENDPOINT_OUTPUT, LOCAL_REGION_OUTPUT, LocalCloud, local_cloud
from ops.cli import StackKind, resources_from_outputs_file
from runtime.event_log import contract as event_log_contract
from runtime.taxi_etl import contract as taxi_etl_contract
from tests.integration.local import raw_http


def request(
    base_url: str, method: str, target: str, body: bytes | None = None, headers: list[tuple[str, str]] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request with exactly these headers (repeats kept); status, headers, body."""
    return raw_http.request(base_url + target, method, body, headers or [])


class Recorder:
    """Stands in for a Lambda integration: keeps each event, answers with a fixed response."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any]) -> dict[str, Any]:
        self.events.append(event)
        return {"statusCode": 299, "headers": {"content-type": "application/json", "x-seen": "yes"}, "body": json.dumps({"ok": True})}


@pytest.fixture
def recorded(local_stack: LocalStack) -> Iterator[tuple[Recorder, str, str]]:
    """The served route tables of both APIs, in front of a recorder instead of the functions."""
    recorder = Recorder()
    integration = Integration("recorder", recorder)
    servers = [
        ApiServer(HttpApi(server.api.name, server.api.api_id, [Route(r.method, r.path, integration) for r in server.api.routes])).start()
        for server in (local_stack.event_log_server, local_stack.taxi_server)
    ]
    try:
        yield recorder, servers[0].url, servers[1].url
    finally:
        for server in servers:
            server.stop()


def route_keys(template: Template) -> set[str]:
    return {str(route["Properties"]["RouteKey"]) for route in resources_of_type(template, "AWS::ApiGatewayV2::Route").values()}


def test_the_served_routes_are_the_synthesized_ones(local_stack: LocalStack, dev_templates: dict[str, Template]) -> None:
    # Given the routes of both synthesized HTTP APIs
    event_log = route_keys(dev_templates["Onceflow-dev-EventLog"])
    taxi = route_keys(dev_templates["Onceflow-dev-TaxiEtl"])
    # When the local APIs' route tables are read
    served_log = {route.key for route in local_stack.event_log_server.api.routes}
    served_taxi = {route.key for route in local_stack.taxi_server.api.routes}
    # Then each serves exactly its template's route keys
    assert served_log == event_log
    assert served_taxi == taxi
    assert f"GET {taxi_etl_contract.ROUTE_ROW_STATE}" in served_taxi


def test_an_append_becomes_the_v2_event_api_gateway_sends(recorded: tuple[Recorder, str, str]) -> None:
    recorder, log_url, _ = recorded
    # Given a JSON append to a log id with an encoded space, a repeated query parameter and a repeated header
    body = json.dumps({"request_id": "r-00000001", "position": 1}).encode()
    headers = [("Content-Type", "application/json"), ("X-Trace", "a"), ("X-Trace", "b"), ("Cookie", "c1=1; c2=2")]
    # When it is sent
    status, response_headers, answer = request(log_url, "POST", "/logs/sheet%201/entries?x=1&x=2&empty=", body, headers)
    # Then the integration's response is what the caller gets
    assert (status, json.loads(answer), response_headers["x-seen"]) == (299, {"ok": True}, "yes")
    assert response_headers["apigw-requestid"]
    # and the integration got the route's event: route key, decoded path and parameter, raw and parsed query
    (event,) = recorder.events
    assert event["version"] == "2.0"
    assert event["routeKey"] == "POST /logs/{logId}/entries"
    assert event["rawPath"] == "/logs/sheet 1/entries"
    assert event["pathParameters"] == {"logId": "sheet 1"}
    assert event["rawQueryString"] == "x=1&x=2&empty="
    assert event["queryStringParameters"] == {"x": "1,2", "empty": ""}
    # headers lower-cased, repeats joined by commas, cookies apart
    assert event["headers"]["content-type"] == "application/json"
    assert event["headers"]["x-trace"] == "a,b"
    assert "cookie" not in event["headers"]
    assert event["cookies"] == ["c1=1", "c2=2"]
    # a JSON body as text
    assert (event["body"], event["isBase64Encoded"]) == (body.decode(), False)
    context = event["requestContext"]
    assert context["http"]["method"] == "POST"
    assert context["http"]["path"] == "/logs/sheet 1/entries"
    assert context["http"]["sourceIp"] == "127.0.0.1"
    assert (context["routeKey"], context["stage"]) == (event["routeKey"], "$default")
    assert context["requestId"] == response_headers["apigw-requestid"]


@pytest.mark.parametrize(
    ("method", "target", "route_key", "parameters"),
    [
        ("POST", "/logs/budget/payloads", "POST /logs/{logId}/payloads", {"logId": "budget"}),
        ("POST", "/logs/budget/payloads/complete", "POST /logs/{logId}/payloads/complete", {"logId": "budget"}),
        ("GET", "/logs/budget/snapshot?after=10.5", "GET /logs/{logId}/snapshot", {"logId": "budget"}),
    ],
)
def test_each_event_log_route_fills_its_path_parameter(
    recorded: tuple[Recorder, str, str], method: str, target: str, route_key: str, parameters: dict[str, str]
) -> None:
    recorder, log_url, _ = recorded
    # When a request of the route is sent (no body on the GET)
    body = b'{"request_id": "r-00000001"}' if method == "POST" else None
    status, _, _ = request(log_url, method, target, body, [("Content-Type", "application/json")])
    # Then its event names the route and the log id
    assert status == 299
    (event,) = recorder.events
    assert (event["routeKey"], event["pathParameters"]) == (route_key, parameters)
    if method == "GET":
        assert event["queryStringParameters"] == {"after": "10.5"}
        assert "body" not in event
        assert event["isBase64Encoded"] is False


def test_a_binary_trip_body_is_base64_and_a_csv_one_text(recorded: tuple[Recorder, str, str]) -> None:
    recorder, _, taxi_url = recorded
    line = b"2,2019-10-23T16:39:42.000,2019-10-23T17:14:10.000,1,7.93,1,N,138,170,1,29.5,1,0.5,7.98,6.12,0.3,47.9,2.5"
    # When one line is posted as octet-stream, and a batch as text/csv
    request(taxi_url, "POST", taxi_etl_contract.ROUTE_TRIP, line, [("Content-Type", "application/octet-stream")])
    request(taxi_url, "POST", taxi_etl_contract.ROUTE_TRIP_BATCH, line, [("Content-Type", "text/csv")])
    # Then the first event carries the bytes base64-encoded, the second as text, each on its route
    single, batch = recorder.events
    assert single["routeKey"] == f"POST {taxi_etl_contract.ROUTE_TRIP}"
    assert single["isBase64Encoded"] is True
    assert base64.b64decode(single["body"]) == line
    assert "pathParameters" not in single
    assert batch["routeKey"] == f"POST {taxi_etl_contract.ROUTE_TRIP_BATCH}"
    assert (batch["body"], batch["isBase64Encoded"]) == (line.decode(), False)


def test_a_row_id_is_the_row_state_routes_parameter_and_a_literal_route_wins(recorded: tuple[Recorder, str, str]) -> None:
    recorder, _, taxi_url = recorded
    # When a row is read, and a batch posted (its literal segment also fits the row route's template)
    request(taxi_url, "GET", "/trips/k-load-2019-10-row-1")
    request(taxi_url, "POST", taxi_etl_contract.ROUTE_TRIP_BATCH, b"x", [("Content-Type", "text/csv")])
    # Then the GET names the row id, and the POST goes to the batch route with no parameter
    read, posted = recorder.events
    assert read["routeKey"] == f"GET {taxi_etl_contract.ROUTE_ROW_STATE}"
    assert read["pathParameters"] == {taxi_etl_contract.KEY_STORE_REQUEST_ID: "k-load-2019-10-row-1"}
    assert posted["routeKey"] == f"POST {taxi_etl_contract.ROUTE_TRIP_BATCH}"
    assert "pathParameters" not in posted


@pytest.mark.parametrize(("method", "target"), [("GET", "/logs"), ("GET", "/logs/a/entries"), ("DELETE", "/trips/k-1"), ("GET", "/")])
def test_no_route_is_api_gateways_404(recorded: tuple[Recorder, str, str], method: str, target: str) -> None:
    recorder, log_url, taxi_url = recorded
    # When a path or method no route has is requested, on either API
    answers = [request(url, method, target) for url in (log_url, taxi_url)]
    # Then both answer 404 {"message": "Not Found"} without calling anything
    assert [(status, json.loads(body)) for status, _, body in answers] == [(404, {"message": "Not Found"})] * 2
    assert recorder.events == []


def test_an_unsigned_event_log_request_is_forbidden(local_stack: LocalStack) -> None:
    # Given an append with no SigV4 Authorization header, and one with another scheme
    body = json.dumps({"request_id": "unsigned-0001", "position": 1, "event": {"kind": "SetCell", "cell": "A1", "value": "1"}}).encode()
    # When they are sent
    unsigned = request(local_stack.event_log_url, "POST", "/logs/unsigned/entries", body, [("Content-Type", "application/json")])
    bearer = request(local_stack.event_log_url, "POST", "/logs/unsigned/entries", body, [("Authorization", "Bearer x")])
    # Then API Gateway's IAM check refuses both, and nothing was appended
    for status, _, answer in (unsigned, bearer):
        assert (status, json.loads(answer)) == (403, {"message": "Forbidden"})
    log_table = local_stack.outputs["Onceflow-local-EventLog"][event_log_contract.OUTPUT_LOG_TABLE]
    items = local_stack.client("dynamodb").query(
        TableName=log_table,
        KeyConditionExpression="#log = :log",
        ExpressionAttributeNames={"#log": event_log_contract.KEY_LOG_ID},
        ExpressionAttributeValues={":log": {"S": "unsigned"}},
    )["Items"]
    assert items == []


def test_the_taxi_api_refuses_a_wrong_key_and_asks_for_a_missing_one(local_stack: LocalStack) -> None:
    line = b"2,2019-10-23T16:39:42.000,2019-10-23T17:14:10.000,1,7.93,1,N,138,170,1,29.5,1,0.5,7.98,6.12,0.3,47.9,2.5"
    # When a trip is posted with a wrong key, without one, and a row read with the right one
    wrong = request(local_stack.taxi_url, "POST", taxi_etl_contract.ROUTE_TRIP, line, [("Authorization", "not-the-key")])
    missing = request(local_stack.taxi_url, "POST", taxi_etl_contract.ROUTE_TRIP, line)
    allowed = request(local_stack.taxi_url, "GET", "/trips/k-never-posted", None, [("Authorization", local_stack.api_key)])
    # Then the authorizer's deny is 403, a missing identity 401 (the authorizer is not called), the right key passes
    assert (wrong[0], json.loads(wrong[2])) == (403, {"message": "Forbidden"})
    assert (missing[0], json.loads(missing[2])) == (401, {"message": "Unauthorized"})
    assert allowed[0] == 404
    assert json.loads(allowed[2])[taxi_etl_contract.KEY_STORE_REQUEST_ID] == "k-never-posted"


def test_the_outputs_file_has_every_stack_output_and_the_local_cloud(local_stack: LocalStack, dev_templates: dict[str, Template]) -> None:
    # Given the outputs file the stack wrote
    assert local_stack.outputs_file is not None
    document = json.loads(local_stack.outputs_file.read_text())
    # Then it has the three pipelines' stacks under their local names, with every output key of the template
    assert sorted(document) == ["Onceflow-local-EventLog", "Onceflow-local-RunnerStats", "Onceflow-local-TaxiEtl"]
    for kind in ("EventLog", "RunnerStats", "TaxiEtl"):
        template_keys = {key for key, spec in dev_templates[f"Onceflow-dev-{kind}"]["Outputs"].items() if "Export" not in spec}
        local_keys = set(LocalCloud("", "", "", "").outputs())
        assert set(document[f"Onceflow-local-{kind}"]) == template_keys | local_keys
        assert document[f"Onceflow-local-{kind}"][LOCAL_ENDPOINT_OUTPUT] == local_stack.moto_endpoint
        assert document[f"Onceflow-local-{kind}"][LOCAL_REGION_OUTPUT] == local_stack.region
    # and the embedded cloud it names is the stack's: endpoint, region and its dummy key pair
    assert local_cloud(document, local_stack.outputs_file) == LocalCloud(
        local_stack.moto_endpoint, local_stack.region, local_stack.access_key_id, local_stack.secret_access_key
    )
    # and the API URLs are the local servers, the names the embedded resources
    assert document["Onceflow-local-EventLog"][event_log_contract.OUTPUT_API_URL] == local_stack.event_log_url
    assert document["Onceflow-local-TaxiEtl"][taxi_etl_contract.OUTPUT_API_URL] == local_stack.taxi_url
    secret_arn = document["Onceflow-local-TaxiEtl"][taxi_etl_contract.OUTPUT_API_KEY_SECRET_ARN]
    assert local_stack.client("secretsmanager").get_secret_value(SecretId=secret_arn)["SecretString"] == local_stack.api_key
    # and the operator tools' `--env local` finds each kind in it
    kind = StackKind("EventLog", {event_log_contract.OUTPUT_PENDING_TABLE: "pending_table"})
    pending_table = resources_from_outputs_file(local_stack.outputs_file, "local", kind)["pending_table"]
    assert local_stack.client("dynamodb").describe_table(TableName=pending_table)["Table"]["TableStatus"] == "ACTIVE"


def test_the_local_stack_runs_transactions_without_copying_the_tables(local_stack: LocalStack) -> None:
    # Given the local stack running, Then moto's TransactWriteItems is the copy-free one of devtools/aws/moto_patches.py
    # (moto's own deep-copies every table it touches: an append cost a copy of the whole log and its stream)
    from moto.dynamodb.models import DynamoDBBackend

    assert DynamoDBBackend.transact_write_items.__qualname__.startswith("fast_transactions.")
