"""One HTTP request to the local stack with exactly the headers a test gives: no Content-Type of
http.client's own, repeated headers kept, and (with `own_host=True`) no Host or Accept-Encoding
either, so a signed request carries only what it signed."""

from __future__ import annotations

import http.client
from collections.abc import Sequence
from urllib.parse import urlsplit

Headers = Sequence[tuple[str, str]]


def request(
    url: str, method: str, body: bytes | None = None, headers: Headers = (), *, own_host: bool = False
) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and body of one request to `url` (path and query sent as they are)."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        connection.putrequest(method, target, skip_host=own_host, skip_accept_encoding=own_host)
        for name, value in headers:
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, {name.lower(): value for name, value in response.getheaders()}, response.read()
    finally:
        connection.close()
