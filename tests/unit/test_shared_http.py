"""runtime/shared/http.py: one isinstance-based mapping of refusals to HTTP status for both APIs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from runtime.shared.http import Conflict, InvalidRequest, NotFound, PayloadTooLarge, Refusal, Unprocessable, answer_refusals


class PipelineConflict(Conflict):
    """A pipeline's own refusal, as runtime/<pipeline>/errors.py defines them."""

    def __init__(self, next_position: int) -> None:
        super().__init__("taken")
        self.next_position = next_position

    def body(self) -> dict[str, Any]:
        return {**super().body(), "next_position": self.next_position}


def http_event(path: str) -> dict[str, Any]:
    return {
        "version": "2.0",
        "routeKey": f"GET {path}",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {},
        "requestContext": {"http": {"method": "GET", "path": path}, "stage": "$default"},
        "isBase64Encoded": False,
    }


@pytest.mark.parametrize(
    ("refusal", "status"),
    [(InvalidRequest("x"), 400), (PayloadTooLarge("x"), 413), (NotFound("x"), 404), (PipelineConflict(7), 409), (Unprocessable("x"), 422)],
)
def test_each_refusal_is_answered_with_its_status_body_and_count(refusal: Refusal, status: int) -> None:
    # Given an API whose route raises a refusal, and a counter
    app = APIGatewayHttpResolver()
    counted: list[Refusal] = []
    answer_refusals(app, counted.append)

    @app.get("/thing")
    def thing() -> None:
        raise refusal

    # When the route is called
    response = app.resolve(http_event("/thing"), {})
    # Then the answer has the refusal's status, its body, and it was counted once
    assert response["statusCode"] == status
    assert json.loads(response["body"]) == refusal.body()
    assert counted == [refusal]


def test_a_subclass_gets_its_nearest_bases_status_and_a_non_refusal_is_not_answered_as_one() -> None:
    # Given a pipeline's subclasses
    class BadCell(InvalidRequest):
        pass

    # Then the status comes from the nearest base that sets one
    assert BadCell("x").status == 400
    assert PipelineConflict(1).body() == {"error": "taken", "next_position": 1}
    # and a ValueError that is no Refusal escapes (a bug answers 500, never a 4xx)
    app = APIGatewayHttpResolver()
    answer_refusals(app, lambda refusal: None)

    @app.get("/bug")
    def bug() -> None:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        app.resolve(http_event("/bug"), {})
