"""A stdlib HTTP server on a localhost port, served from a daemon thread, and how a request's body is
read up to a limit: what the local servers share."""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

HOST = "127.0.0.1"
_CHUNK_SIZE_LINE = re.compile(rb"^([0-9A-Fa-f]+)")
# A chunk-size line (hex digits and extensions) or a trailer longer than this is not read further.
_MAX_LINE = 64 * 1024


class BodyTooLarge(Exception):
    """A request body over the reader's limit; nothing past the limit was read (so the connection must close)."""

    def __init__(self, length: int) -> None:
        super().__init__(f"a request body of at least {length} bytes")
        self.length = length  # the declared length, or the chunks' total when reading stopped


def read_body(handler: BaseHTTPRequestHandler, limit: int | None = None) -> bytes:
    """The request's body, by Content-Length or chunked. Over `limit` bytes: BodyTooLarge, without reading
    the rest (a Content-Length over it: nothing; chunked: not the chunk that would pass it)."""
    if "chunked" in (handler.headers.get("Transfer-Encoding") or "").lower():
        chunks: list[bytes] = []
        total = 0
        while True:
            matched = _CHUNK_SIZE_LINE.match(handler.rfile.readline(_MAX_LINE))
            size = int(matched.group(1), 16) if matched else 0
            if size == 0:
                while handler.rfile.readline(_MAX_LINE) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            total += size
            if limit is not None and total > limit:
                raise BodyTooLarge(total)
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline(_MAX_LINE)
    length = int(handler.headers.get("Content-Length") or 0)
    if limit is not None and length > limit:
        raise BodyTooLarge(length)
    return handler.rfile.read(length) if length else b""


def declared_length(handler: BaseHTTPRequestHandler) -> int | None:
    """The request's Content-Length (None: none, or chunked)."""
    if "chunked" in (handler.headers.get("Transfer-Encoding") or "").lower() or handler.headers.get("Content-Length") is None:
        return None
    return int(handler.headers["Content-Length"])


class BackgroundHttpServer:
    """`server` answered on its own daemon thread from start() until stop()."""

    def __init__(self, server: ThreadingHTTPServer, name: str) -> None:
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{authority(self._server)}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()


def authority(server: ThreadingHTTPServer) -> str:
    """host:port the server listens on."""
    host, port = server.server_address[:2]
    return f"{host.decode() if isinstance(host, bytes) else host}:{port}"
