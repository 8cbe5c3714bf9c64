"""A TCP proxy on loopback between a client and a server, with faults switched at run time.

Tests point a client (``endpoint_url=proxy.endpoint_url``) at the proxy, which
forwards to the real server until told otherwise:

* :meth:`FaultProxy.pass_through` — forward bytes both ways (the default);
* :meth:`FaultProxy.reset` — answer every request with a TCP RST (``SO_LINGER`` 0);
* :meth:`FaultProxy.stall` — accept and read, never answer (the client times out);
* :meth:`FaultProxy.http_error` — answer every request with a canned HTTP 500/503;
* :meth:`FaultProxy.drop_responses` — forward the next ``count`` requests, so the server
  acts on them, then reset instead of returning the answer (a lost acknowledgement).

Modes apply to the next request on every connection, pooled ones included. The
proxy runs on daemon threads, polls its stop flag every 0.2 s and closes every
socket in :meth:`FaultProxy.stop` (the ``fault_proxy`` fixture calls it when the
test ends), so nothing outlives the test.
"""

from __future__ import annotations

import contextlib
import enum
import select
import socket
import struct
import threading
from collections.abc import Callable, Iterator

_POLL = 0.2
_METHODS = {b"GET", b"HEAD", b"PUT", b"POST", b"DELETE"}
_HTTP_REASONS = {500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}
_S3_CODES = {500: "InternalError", 503: "ServiceUnavailable", 502: "BadGateway", 504: "GatewayTimeout"}


class Mode(enum.Enum):
    PASS = "pass"
    RESET = "reset"
    STALL = "stall"
    HTTP_ERROR = "http_error"
    DROP_RESPONSES = "drop_responses"


def _reset(sock: socket.socket) -> None:
    """Close with RST instead of FIN: the peer sees 'connection reset by peer'."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


def _split_interim(data: bytes) -> tuple[bytes, bytes]:
    """Split complete leading ``HTTP/1.1 1xx`` interim responses from the rest."""
    interim = b""
    while data.startswith(b"HTTP/1.1 1") and b"\r\n\r\n" in data:
        head, _, data = data.partition(b"\r\n\r\n")
        interim += head + b"\r\n\r\n"
    return interim, data


class FaultProxy:
    """Proxy ``127.0.0.1:<port>`` → ``upstream_host:upstream_port`` (loopback only)."""

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        if upstream_host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the fault proxy only forwards to loopback")
        self.upstream = (upstream_host, upstream_port)
        self._mode = Mode.PASS
        self._status = 503
        self._drops_left = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._sockets: set[socket.socket] = set()
        #: Counters for assertions: connections accepted, requests answered by each fault.
        self.connections = 0
        self.resets = 0
        self.error_responses = 0
        self.dropped_responses = 0
        self.stalled_requests = 0

    # -- control -------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._listener is None:
            raise RuntimeError("the proxy is not started")
        return int(self._listener.getsockname()[1])

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mode(self) -> Mode:
        return self._mode

    def _set(self, mode: Mode, *, status: int = 503, drops: int = 0) -> None:
        with self._lock:
            self._mode, self._status, self._drops_left = mode, status, drops

    def pass_through(self) -> None:
        self._set(Mode.PASS)

    def reset(self) -> None:
        self._set(Mode.RESET)

    def stall(self) -> None:
        self._set(Mode.STALL)

    def http_error(self, status: int = 503) -> None:
        if status not in _HTTP_REASONS:
            raise ValueError(f"status must be one of {sorted(_HTTP_REASONS)}")
        self._set(Mode.HTTP_ERROR, status=status)

    def drop_responses(self, count: int = 1) -> None:
        """The next ``count`` requests reach the server; their answers are replaced by a reset.
        Afterwards the proxy passes traffic through again."""
        self._set(Mode.DROP_RESPONSES, drops=count)

    @contextlib.contextmanager
    def fault(self, mode: str, **kwargs: int) -> Iterator[FaultProxy]:
        """``with proxy.fault("stall"): ...`` — the fault for the block, then pass-through."""
        getattr(self, mode)(**kwargs)
        try:
            yield self
        finally:
            self.pass_through()

    # -- life cycle ----------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self._listener = listener
        self._spawn(self._accept_loop, "faultproxy-accept")
        return self

    def stop(self) -> None:
        """Close the listener and every connection; join the threads (bounded wait)."""
        self._stopping.set()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        for thread in list(self._threads):
            thread.join(timeout=2)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- internals -----------------------------------------------------------------------------

    def _spawn(self, target: Callable[..., None], name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)
        thread.start()

    def _bump(self, counter: str) -> None:
        with self._lock:
            setattr(self, counter, getattr(self, counter) + 1)

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)

    def _untrack(self, *socks: socket.socket | None) -> None:
        with self._lock:
            for sock in socks:
                if sock is not None:
                    self._sockets.discard(sock)

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                ready, _, _ = select.select([self._listener], [], [], _POLL)
                if not ready:
                    continue
                client, _ = self._listener.accept()
            except OSError:
                return
            self._bump("connections")
            self._track(client)
            self._spawn(self._serve, "faultproxy-conn", client)

    def _take_drop(self) -> bool:
        with self._lock:
            if self._mode is Mode.DROP_RESPONSES and self._drops_left > 0:
                self._drops_left -= 1
                if self._drops_left == 0:
                    self._mode = Mode.PASS
                return True
            return False

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        drop_answer = False
        held = b""  # an incomplete interim response, while an answer is to be dropped
        try:
            while not self._stopping.is_set():
                watched = [client] if upstream is None else [client, upstream]
                readable, _, _ = select.select(watched, [], [], _POLL)
                if client in readable:
                    data = client.recv(65536)
                    if not data:
                        return
                    mode = self._mode
                    if mode is Mode.RESET:
                        self._bump("resets")
                        _reset(client)
                        return
                    if mode is Mode.STALL:
                        if data.split(b" ", 1)[0] in _METHODS:  # count requests, not body chunks
                            self._bump("stalled_requests")
                        continue  # swallow: the client waits for an answer that never comes
                    if mode is Mode.HTTP_ERROR:
                        self._answer_error(client, data, self._status)
                        return
                    if self._take_drop():
                        drop_answer = True
                    if upstream is None:
                        upstream = socket.create_connection(self.upstream, timeout=10)
                        self._track(upstream)
                    upstream.sendall(data)
                if upstream is not None and upstream in readable:
                    answer = upstream.recv(65536)
                    if not answer:
                        return
                    if drop_answer:
                        # "100 Continue" is not the answer: the client needs it to send the body.
                        interim, answer = _split_interim(held + answer)
                        client.sendall(interim)
                        held = answer if answer.startswith(b"HTTP/1.1 1") else b""
                        if answer and not held:
                            self._bump("dropped_responses")
                            _reset(client)
                            return
                        continue
                    client.sendall(answer)
        except OSError:
            return
        finally:
            self._untrack(client, upstream)
            for sock in (client, upstream):
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.close()

    def _answer_error(self, client: socket.socket, data: bytes, status: int) -> None:
        """Read the whole request (so the client is not reset mid-send), answer, close."""
        client.settimeout(5)
        while b"\r\n\r\n" not in data:
            more = client.recv(65536)
            if not more:
                return
            data += more
        head, _, body = data.partition(b"\r\n\r\n")
        headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(b":") for line in head.split(b"\r\n")[1:])
        }
        # With "Expect: 100-continue" the client waits for us before sending the body.
        if headers.get(b"expect", b"").lower() != b"100-continue":
            remaining = int(headers.get(b"content-length", b"0") or 0) - len(body)
            while remaining > 0:
                more = client.recv(min(remaining, 65536))
                if not more:
                    return
                remaining -= len(more)
        payload = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{_S3_CODES[status]}</Code>'
            f"<Message>injected by the fault proxy</Message></Error>"
        ).encode()
        response = (
            f"HTTP/1.1 {status} {_HTTP_REASONS[status]}\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
        ).encode() + payload
        self._bump("error_responses")
        client.sendall(response)
