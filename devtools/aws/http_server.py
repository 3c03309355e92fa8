"""A stdlib HTTP server on a localhost port, served from a daemon thread: what the local servers share."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer
from typing import Self

HOST = "127.0.0.1"


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
