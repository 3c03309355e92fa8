"""The event-log pipeline's own exceptions, in one place. The HTTP refusals subclass the shared
ones in runtime/shared/http.py, which map them to a status by isinstance."""

from __future__ import annotations

from typing import Any

from runtime.shared.refusals import Conflict, Unprocessable


class AppendConflict(Conflict):
    """The position is taken by another request, or is not the log's next one (HTTP 409)."""

    def __init__(self, message: str, next_position: int) -> None:
        super().__init__(message)
        self.next_position = next_position

    def body(self) -> dict[str, Any]:
        """The client rebases on next_position."""
        return {**super().body(), "next_position": self.next_position}


class RequestMismatch(Unprocessable):
    """The request id was used before for a different event (HTTP 422)."""


class PayloadNotUploaded(Conflict):
    """Complete was called before the object was uploaded, or after it expired (HTTP 409)."""


class PayloadAlreadyUploaded(Conflict):
    """An upload URL was asked for a request id whose payload is already uploaded (HTTP 409):
    a payload never changes once uploaded, so the log never names bytes that changed."""


class InvalidCell(ValueError):
    """Not a cell reference inside the sheet."""


class PoisonMessage(ValueError):
    """An SQS message or stream record that no retry can make valid."""


class ObjectMissing(Exception):
    """The object is not in the bucket (never uploaded, or expired by the lifecycle rule)."""


class EntryExists(Exception):
    """The entry's position is taken (by this request before, or by another one)."""


class HeadMoved(Exception):
    """The head is not where the append expected it (another append or Snapshot entry)."""


class TransientConflict(Exception):
    """DynamoDB cancelled the transaction for a concurrent one on the same items; retry."""


class RootConflict(Exception):
    """A Snapshot entry already names another root: two builds disagreed. Never overwritten."""
