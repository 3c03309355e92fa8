"""The local servers' body reader (devtools/aws/http_server.py): it reads a body up to a limit and no
further, and reads nothing of a request whose Content-Length is not a number of bytes."""

from __future__ import annotations

import io
from email.message import Message

import pytest

from devtools.aws.http_server import BadContentLength, BodyTooLarge, declared_length, read_body


class FakeHandler:
    """What read_body reads of a BaseHTTPRequestHandler: its headers and its input stream."""

    def __init__(self, headers: dict[str, str], body: bytes) -> None:
        self.headers = Message()
        for name, value in headers.items():
            self.headers[name] = value
        self.rfile = io.BytesIO(body)


def test_a_body_within_the_limit_is_read_whole() -> None:
    # Given a request declaring 5 bytes, and a limit of 10
    handler = FakeHandler({"Content-Length": "5"}, b"abcde and what follows")
    # When its body is read, Then exactly those 5 bytes are
    assert read_body(handler, 10) == b"abcde"  # type: ignore[arg-type]


def test_a_declared_body_over_the_limit_is_not_read() -> None:
    # Given a request declaring 11 bytes against a limit of 10
    handler = FakeHandler({"Content-Length": "11"}, b"x" * 11)
    # When its body is read, Then it is refused and nothing was read
    with pytest.raises(BodyTooLarge):
        read_body(handler, 10)  # type: ignore[arg-type]
    assert handler.rfile.tell() == 0


@pytest.mark.parametrize("declared", ["-1", "12abc", "+5", " ", "0x10", "1e3"])
def test_a_content_length_that_is_no_number_of_bytes_is_refused_and_nothing_is_read(declared: str) -> None:
    # Given a request whose Content-Length is not digits, with 12 MiB behind it (as given, -1 reads to the end)
    handler = FakeHandler({"Content-Length": declared}, b"x" * (12 * 1024 * 1024))
    # When its body is read against a 10 MB limit, or its length asked
    # Then both refuse it, and not a byte was read
    with pytest.raises(BadContentLength):
        read_body(handler, 10 * 1024 * 1024)  # type: ignore[arg-type]
    with pytest.raises(BadContentLength):
        declared_length(handler)  # type: ignore[arg-type]
    assert handler.rfile.tell() == 0
