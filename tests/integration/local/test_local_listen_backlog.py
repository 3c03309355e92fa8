"""The local servers take a burst of connections while their accept loop is busy (devtools/aws/http_server.py,
LISTEN_BACKLOG). With the standard library's backlog of 5, the kernel dropped the SYN of the 7th connection
waiting to be accepted, and that client waited for TCP's retransmission, 1 s: on `make serve`, a 400-row taxi
load (a connection per read-back GET, one per Lambda task of moto's executor) had 49 such drops, and each
stalled a reader or an execution for a second. API Gateway and the AWS endpoints take every connection."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from devtools.aws.http_server import BackgroundHttpServer, LocalHttpServer
from devtools.aws.moto_server import MotoServer
from devtools.local.http_api import ApiServer, HttpApi

# More connections at once than the loader's 16 readers and the state machine executions of a load together.
BURST = 64
# Less than TCP's initial retransmission timeout (1 s, RFC 6298): a connect that takes longer had its SYN dropped.
# A loopback handshake the kernel accepts into the queue completes within the connect call.
HANDSHAKE_SECONDS = 0.9


def plain_server() -> BackgroundHttpServer:
    return BackgroundHttpServer(LocalHttpServer(("127.0.0.1", 0), BaseHTTPRequestHandler), "plain")


def api_server() -> BackgroundHttpServer:
    return ApiServer(HttpApi("backlog", "local-backlog", []))


@pytest.mark.parametrize("make_server", [plain_server, MotoServer, api_server], ids=["LocalHttpServer", "moto server", "HTTP API"])
def test_a_burst_of_connections_waits_in_the_queue_while_nothing_accepts(make_server: Callable[[], BackgroundHttpServer]) -> None:
    # Given a local server listening but not accepting (its serving thread not started: an accept loop
    # that has not had the GIL yet)
    server = make_server()
    try:
        # When BURST clients connect at once
        with connections(server.port, BURST) as opened:
            # Then the kernel completed every handshake into the accept queue: none had its SYN dropped
            assert len(opened) == BURST
    finally:
        server.stop()


@contextlib.contextmanager
def connections(port: int, count: int) -> Iterator[list[socket.socket]]:
    """Up to `count` connections to `port`, opened one after another; the first whose handshake times out ends them."""
    opened: list[socket.socket] = []
    try:
        for _ in range(count):
            try:
                opened.append(socket.create_connection(("127.0.0.1", port), timeout=HANDSHAKE_SECONDS))
            except TimeoutError:
                break
        yield opened
    finally:
        for connection in opened:
            connection.close()
