"""What an HTTP API function's answer takes once Lambda serializes it, and the budget every answer keeps.

Lambda refuses a synchronous result over 6 MB (Lambda Developer Guide, "Lambda quotas": invocation
payload, "6 MB each for request and response (synchronous)"), and API Gateway then answers 500.
The result is JSON, and the HTTP body is a JSON string inside it, so the body is escaped twice:
a stored control character is 1 byte, `\\u0001` (6 bytes) in the body and 7 in the result; a quote
or a backslash is 4. What a read answers is therefore measured as the result, never as the items
it came from. The body is `json.dumps`'s default (ASCII only), so the result is ASCII too and its
length is its size in bytes; Lambda's own serializer adds no byte to an ASCII string.

Pure: `runtime/shared/http.py` renders every answer with `http_result`, and the read services
measure theirs with the same function before they answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final, TypeVar

LAMBDA_RESPONSE_BYTES: Final = 6 * 1024 * 1024  # 6,291,456: what Lambda's 6 MB response limit counts
# What an answer that grows with the data (a page of a read) is cut to: 1 MiB under Lambda's limit, for what
# the measure cannot see (a serializer that spaces the result's few keys differently).
RESPONSE_BUDGET_BYTES: Final = 5 * 1024 * 1024
JSON_MEDIA_TYPE: Final = "application/json"
_LIST_SEPARATOR_BYTES: Final = len(", ")

T = TypeVar("T")


def http_result(status: int, body: dict[str, Any]) -> dict[str, Any]:
    """The Lambda result API Gateway HTTP APIs (payload format 2.0) turn into the HTTP response."""
    return {
        "statusCode": status,
        "body": json.dumps(body),
        "isBase64Encoded": False,
        "headers": {"Content-Type": JSON_MEDIA_TYPE},
        "cookies": [],
    }


def result_bytes(status: int, body: dict[str, Any]) -> int:
    """The size of the whole result as Lambda serializes it."""
    return len(json.dumps(http_result(status, body)))


def element_bytes(value: Any) -> int:
    """What `value` adds to the result as one more element of a list in the body: its JSON, escaped
    again inside the body's string, and the separator before it. The escaping is per character, so
    a page's size is its frame's plus the sum of its elements': each is measured once."""
    return len(json.dumps(json.dumps(value))) - 2 + _LIST_SEPARATOR_BYTES


def take_fitting(values: Iterable[T], room: int) -> list[T]:
    """The values, from the first, that fit `room` bytes together as elements of a list in the body
    (`element_bytes`), read lazily; never fewer than one of a non-empty iterable, so that a page always
    moves on (each caller shows that its largest element fits with the rest of its answer)."""
    taken: list[T] = []
    used = 0
    for value in values:
        used += element_bytes(value)
        if used > room and taken:
            break
        taken.append(value)
    return taken
