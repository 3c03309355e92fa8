"""What the local servers share: a stdlib HTTP server on a localhost port, served from a daemon thread,
with a listen backlog deep enough for its bursts of connections; a request's body read up to a limit
and no further; and the connection closed after an answer given before the body was read (lingering,
so a client still sending it reads the answer, not a reset)."""

from __future__ import annotations

import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

HOST = "127.0.0.1"
_CHUNK_SIZE_LINE = re.compile(rb"^([0-9A-Fa-f]+)")
# A chunk-size line (hex digits and extensions) or a trailer longer than this is not read further.
_MAX_LINE = 64 * 1024
# After answering a request whose body it did not read, how long a server discards what the client still
# sends before it closes (a "lingering close"): closing with unread bytes resets the connection, and a
# client still sending its body would get the reset instead of the answer.
LINGER_SECONDS = 2.0
_DISCARD_BYTES = 64 * 1024
# Connections the kernel holds for a server before its accept loop takes them (listen()'s backlog, capped by
# net.core.somaxconn). The stdlib's 5 is too few here: a taxi load opens a connection per read-back GET (urllib
# keeps none alive) and moto's Step Functions executor calls Lambda back through the moto server, while the
# one thread that accepts waits for the GIL behind the handlers. A SYN that finds the queue full is dropped and
# the client sends it again after TCP's initial retransmission timeout, 1 s: with 5, a 400-row load on `make
# serve` had 49 such drops. API Gateway and the AWS endpoints take every connection.
LISTEN_BACKLOG = 1024


_DIGITS = re.compile(r"[0-9]+")


class BadContentLength(ValueError):
    """A Content-Length that is not a decimal number of bytes (negative, or not a number): the request is
    refused with 400 and its body left unread (read as given, -1 would read until the client closes)."""

    def __init__(self, value: str) -> None:
        super().__init__(f"Content-Length {value[:40]!r} is not a number of bytes")


def content_length(handler: BaseHTTPRequestHandler) -> int | None:
    """The request's Content-Length (None: none sent); BadContentLength unless it is digits only."""
    raw = handler.headers.get("Content-Length")
    if raw is None:
        return None
    if not _DIGITS.fullmatch(raw.strip()):
        raise BadContentLength(raw)
    return int(raw)


class BodyTooLarge(Exception):
    """A request body over the reader's limit; nothing past the limit was read (so the connection must close)."""

    def __init__(self, length: int) -> None:
        super().__init__(f"a request body of at least {length} bytes")
        self.length = length  # the declared length, or the chunks' total when reading stopped


def read_body(handler: BaseHTTPRequestHandler, limit: int | None = None) -> bytes:
    """The request's body, by Content-Length or chunked. Over `limit` bytes: BodyTooLarge, without reading
    the rest (a Content-Length over it: nothing; chunked: not the chunk that would pass it). A Content-Length
    that is not a number: BadContentLength, nothing read."""
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
    length = content_length(handler) or 0
    if limit is not None and length > limit:
        raise BodyTooLarge(length)
    return handler.rfile.read(length) if length else b""


def linger_and_close(connection: socket.socket, seconds: float = LINGER_SECONDS) -> None:
    """Half-close `connection` (the answer is sent), discard what the client still sends until it closes
    or `seconds` pass, then close. Nothing is kept: memory stays flat however much it sends."""
    deadline = time.monotonic() + seconds
    try:
        connection.shutdown(socket.SHUT_WR)
        while (left := deadline - time.monotonic()) > 0:
            connection.settimeout(left)
            if not connection.recv(_DISCARD_BYTES):
                break
    except OSError:  # the client reset or timed out: nothing left to wait for
        pass
    connection.close()


class BodyAwareHandler(BaseHTTPRequestHandler):
    """A request handler that may answer before it has read a request's body (a refusal): it then says
    `Connection: close` and closes after the answer, lingering (the body's unread rest would otherwise
    be read as the next request)."""

    body_unread = False

    def leave_body_unread(self) -> None:
        """Call before the answer's headers end: they get `Connection: close`, and the connection closes after it."""
        self.body_unread = True
        self.close_connection = True
        self.send_header("Connection", "close")

    def finish(self) -> None:
        super().finish()  # sends what is still buffered of the answer
        if self.body_unread:
            linger_and_close(self.connection)


def declared_length(handler: BaseHTTPRequestHandler) -> int | None:
    """The request's Content-Length (None: none, or chunked); BadContentLength unless it is digits only."""
    if "chunked" in (handler.headers.get("Transfer-Encoding") or "").lower():
        return None
    return content_length(handler)


class LocalHttpServer(ThreadingHTTPServer):
    """A threading HTTP server (a daemon thread per connection) whose listen backlog is LISTEN_BACKLOG."""

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG


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
