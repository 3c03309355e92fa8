"""The refusals both HTTP APIs answer, and what they answer with: each class carries its HTTP status.

A refusal is an exception whose class carries its status; the mapping is by isinstance, so a
pipeline's errors (runtime/<pipeline>/errors.py) subclass these and inherit the status of the
nearest base unless they set their own. Apart from runtime/shared/http.py (the routing and the
request bodies, which only the HTTP handlers load), so every function's parsing can raise them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar


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


class UnsupportedMediaType(InvalidRequest):
    """The body is not in a media type the route takes (HTTP 415); the answer lists the ones it does,
    so a client can fix its Content-Type without reading the docs."""

    status = 415

    def __init__(self, message: str, accepted: Sequence[str]) -> None:
        super().__init__(message)
        self.accepted = tuple(accepted)

    def body(self) -> dict[str, Any]:
        return {**super().body(), "accepted": list(self.accepted)}


class NotFound(Refusal):
    """What the request names does not exist (HTTP 404)."""

    status = 404


class Conflict(Refusal):
    """The request conflicts with the current state; another request may succeed (HTTP 409)."""

    status = 409


class Unprocessable(Refusal):
    """The request reuses an id for a different request (HTTP 422)."""

    status = 422
