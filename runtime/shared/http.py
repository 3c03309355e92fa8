"""What both HTTP APIs share: JSON responses and one mapping of expected refusals to HTTP status.

A refusal is an exception whose class carries its status; the mapping is by isinstance, so a
pipeline's errors (runtime/<pipeline>/errors.py) subclass these and inherit the status of the
nearest base unless they set their own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # Powertools' event handler (tens of ms of imports, asyncio among them) is loaded by the HTTP handlers alone
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response


class Refusal(Exception):
    """The request is refused as sent; the client must change it (or wait) before it can succeed."""

    status: ClassVar[int] = 400

    def body(self) -> dict[str, Any]:
        return {"error": str(self)}


class InvalidRequest(Refusal, ValueError):
    """The request cannot be served as sent (HTTP 400)."""

    status = 400


class PayloadTooLarge(InvalidRequest):
    """The request is over a size or count limit (HTTP 413)."""

    status = 413


class NotFound(Refusal):
    """What the request names does not exist (HTTP 404)."""

    status = 404


class Conflict(Refusal):
    """The request conflicts with the current state; another request may succeed (HTTP 409)."""

    status = 409


class Unprocessable(Refusal):
    """The request reuses an id for a different request (HTTP 422)."""

    status = 422


def json_response(status: int, body: dict[str, Any]) -> Response[str]:
    from aws_lambda_powertools.event_handler import Response, content_types

    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=json.dumps(body))


def refusal_response(refusal: Refusal) -> Response[str]:
    return json_response(refusal.status, refusal.body())


def answer_refusals(app: APIGatewayHttpResolver, counted: Callable[[Refusal], None]) -> None:
    """Answer every Refusal a route raises with its status and body, after `counted` records it.
    Powertools looks exception handlers up along the exception's MRO, so this one covers every subclass."""

    def answer(refusal: Refusal) -> Response[str]:
        counted(refusal)
        return refusal_response(refusal)

    app.exception_handler(Refusal)(answer)
