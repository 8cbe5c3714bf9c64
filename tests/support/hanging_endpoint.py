"""An S3 endpoint that accepts connections and never answers (the UI's worst case).

Everything clients send is kept, so a test can check which credentials reached it
(a fall-back to the server's default identity would show its access key here).
"""

from __future__ import annotations

import socket
import threading
from contextlib import closing, suppress


class HangingEndpoint:
    def __init__(self) -> None:
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(256)
        self._lock = threading.Lock()
        self._received = bytearray()
        self._clients: list[socket.socket] = []
        self.connections = 0
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="hanging-endpoint", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.getsockname()[1])

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def received(self) -> bytes:
        with self._lock:
            return bytes(self._received)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self._clients.append(client)
            threading.Thread(target=self._swallow, args=(client,), daemon=True).start()

    def _swallow(self, client: socket.socket) -> None:
        with closing(client):
            while True:
                try:
                    data = client.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                with self._lock:
                    self._received.extend(data)

    def close(self) -> None:
        self._closed = True
        self._server.close()
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            with suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)
            client.close()
