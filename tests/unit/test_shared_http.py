"""runtime/shared/http.py: the HTTP APIs' router (method and whole path, `<name>` for one segment) and
one isinstance-based mapping of refusals to HTTP status for both APIs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runtime.shared.http import HttpRequest, HttpResponse, HttpRouter, json_response
from runtime.shared.refusals import Conflict, InvalidRequest, NotFound, PayloadTooLarge, Refusal, Unprocessable


class PipelineConflict(Conflict):
    """A pipeline's own refusal, as runtime/<pipeline>/errors.py defines them."""

    def __init__(self, next_position: int) -> None:
        super().__init__("taken")
        self.next_position = next_position

    def body(self) -> dict[str, Any]:
        return {**super().body(), "next_position": self.next_position}


def http_event(path: str, method: str = "GET", **extra: Any) -> dict[str, Any]:
    return {
        "version": "2.0",
        "routeKey": f"{method} {path}",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {},
        "requestContext": {"http": {"method": method, "path": path}, "stage": "$default"},
        "isBase64Encoded": False,
        **extra,
    }


def router_raising(error: Exception, counted: list[Refusal]) -> HttpRouter[None]:
    router: HttpRouter[None] = HttpRouter(counted.append)

    @router.get("/thing")
    def thing(request: HttpRequest, deps: None) -> HttpResponse:
        raise error

    return router


@pytest.mark.parametrize(
    ("refusal", "status"),
    [(InvalidRequest("x"), 400), (PayloadTooLarge("x"), 413), (NotFound("x"), 404), (PipelineConflict(7), 409), (Unprocessable("x"), 422)],
)
def test_each_refusal_is_answered_with_its_status_body_and_count(refusal: Refusal, status: int) -> None:
    # Given an API whose route raises a refusal, and a counter
    counted: list[Refusal] = []
    router = router_raising(refusal, counted)
    # When the route is called
    response = router.resolve(http_event("/thing"), None)
    # Then the answer has the refusal's status, its body as JSON, and it was counted once
    assert response["statusCode"] == status
    assert response["headers"] == {"Content-Type": "application/json"}
    assert json.loads(response["body"]) == refusal.body()
    assert counted == [refusal]


def test_a_subclass_gets_its_nearest_bases_status_and_a_non_refusal_is_not_answered_as_one() -> None:
    # Given a pipeline's subclasses
    class BadCell(InvalidRequest):
        pass

    # Then the status comes from the nearest base that sets one
    assert BadCell("x").status == 400
    assert PipelineConflict(1).body() == {"error": "taken", "next_position": 1}
    # and a ValueError that is no Refusal escapes uncounted (a bug answers 500, never a 4xx)
    counted: list[Refusal] = []
    with pytest.raises(ValueError, match="a bug"):
        router_raising(ValueError("a bug"), counted).resolve(http_event("/thing"), None)
    assert counted == []


def test_a_route_gets_the_request_the_deps_and_its_path_parameters() -> None:
    # Given routes with a parameter, on two methods, and a longer route sharing their prefix
    router: HttpRouter[str] = HttpRouter(lambda refusal: None)
    seen: list[tuple[str, str, dict[str, Any]]] = []

    @router.post("/logs/<log_id>/payloads")
    def payloads(request: HttpRequest, deps: str, log_id: str) -> HttpResponse:
        seen.append(("payloads", deps, {"log_id": log_id, "body": request.body, "type": request.header("Content-Type")}))
        return json_response(201, {"log_id": log_id})

    @router.post("/logs/<log_id>/payloads/complete")
    def complete(request: HttpRequest, deps: str, log_id: str) -> HttpResponse:
        seen.append(("complete", deps, {"log_id": log_id}))
        return json_response(200, {})

    @router.get("/logs/<log_id>/snapshot")
    def snapshot(request: HttpRequest, deps: str, log_id: str) -> HttpResponse:
        seen.append(("snapshot", deps, {"after": request.query.get("after")}))
        return json_response(200, {})

    # When each is called
    created = router.resolve(http_event("/logs/sheet-1/payloads", "POST", body="{}", headers={"content-type": "application/json"}), "deps")
    router.resolve(http_event("/logs/sheet:2/payloads/complete", "POST"), "deps")
    router.resolve(http_event("/logs/s/snapshot", queryStringParameters={"after": "7"}), "deps")
    # Then each route got its own parameters, the request's body, headers (any case) and query, and the deps
    assert seen == [
        ("payloads", "deps", {"log_id": "sheet-1", "body": "{}", "type": "application/json"}),
        ("complete", "deps", {"log_id": "sheet:2"}),
        ("snapshot", "deps", {"after": "7"}),
    ]
    # And the answer is the Lambda result HTTP APIs expect
    assert created == {
        "statusCode": 201,
        "body": '{"log_id": "sheet-1"}',
        "isBase64Encoded": False,
        "headers": {"Content-Type": "application/json"},
        "cookies": [],
    }


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/trips"), ("POST", "/trips/a"), ("GET", "/trips/a/b"), ("GET", "/trips/"), ("GET", "/trips/a#b"), ("GET", '/trips/a"b')],
)
def test_no_route_matches_and_the_answer_is_404_without_calling_anything(method: str, path: str) -> None:
    # Given one GET route with a parameter
    router: HttpRouter[None] = HttpRouter(lambda refusal: None)
    called: list[str] = []

    @router.get("/trips/<store_request_id>")
    def row(request: HttpRequest, deps: None, store_request_id: str) -> HttpResponse:
        called.append(store_request_id)
        return json_response(200, {})

    # When the path or method matches no route (a parameter is one whole segment of URI characters)
    response = router.resolve(http_event(path, method), None)
    # Then the answer is 404 and no route ran
    assert response["statusCode"] == 404
    assert json.loads(response["body"]) == {"statusCode": 404, "message": "Not found"}
    assert called == []
