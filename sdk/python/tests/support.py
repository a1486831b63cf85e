"""What the tests share: the server under test, and a TCP proxy that cuts.

The server is the real lockapi binary, started by tests/sdk_python_test.go on
the memory store and on Redis, with three API keys:

- LOCKAPI_URL: its base URL;
- LOCKAPI_API_KEY: an admin key for every name (force release needs admin);
- LOCKAPI_LIMITED_KEY: a key with locks:read and locks:write on "ci:*" only.
- LOCKAPI_EXPIRED_KEY: a configured key whose expires= time has passed.

Without LOCKAPI_URL the tests that need a server are skipped.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
import unittest
from typing import Callable, List
from urllib.parse import urlsplit

import lockapi

BASE_URL = os.environ.get("LOCKAPI_URL", "")
ADMIN_KEY = os.environ.get("LOCKAPI_API_KEY") or None
LIMITED_KEY = os.environ.get("LOCKAPI_LIMITED_KEY") or None
EXPIRED_KEY = os.environ.get("LOCKAPI_EXPIRED_KEY") or None

# Generous bounds for things that happen on time on a loaded machine.
PROMPTLY = 5.0

# The SDK's warnings and errors (a lease lost on purpose, a retried renewal)
# are what many tests arrange: keep them out of the output, where Python's
# last-resort handler would print them. assertLogs still sees them.
logging.getLogger("lockapi").addHandler(logging.NullHandler())


class ServerTestCase(unittest.TestCase):
    """A test against the server: self.client is an admin client."""

    def setUp(self) -> None:
        if not BASE_URL:
            raise unittest.SkipTest("LOCKAPI_URL is not set: run through go test ./tests -run TestPythonSDK")
        self.client = lockapi.Client(BASE_URL, api_key=ADMIN_KEY, timeout=10)

    def name(self, prefix: str = "sdkpy") -> str:
        """A lock name no other test uses."""
        return "%s:%s:%s" % (prefix, self._testMethodName, secrets.token_hex(4))

    def holder(self, name: str) -> str:
        """The owner holding name, or "" when it is free."""
        st = self.client.inspect(name)
        if not st.get("held") or not st.get("holder"):
            return ""
        return str(st["holder"]["owner"])


def wait_until(cond: Callable[[], bool], timeout: float = PROMPTLY, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("%s did not hold within %.1fs" % (what, timeout))
        time.sleep(0.01)


class Proxy:
    """A TCP proxy in front of the server that can cut its connections and
    refuse new ones, as a network or a restarting server would. It records
    the head of every request that went through (connections are kept
    alive: one carries many requests), and the first bytes of each
    connection's answers."""

    PASS, REFUSE, ANSWER_400 = "pass", "refuse", "answer-400"

    def __init__(self, upstream_url: str) -> None:
        u = urlsplit(upstream_url)
        self._upstream = (u.hostname or "127.0.0.1", u.port or 80)
        self._ln = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._ln.bind(("127.0.0.1", 0))
        self._ln.listen(64)
        self.url = "http://127.0.0.1:%d" % self._ln.getsockname()[1]
        self._cond = threading.Condition()
        self._mode = self.PASS
        self._socks: List[socket.socket] = []
        self.requests: List[bytes] = []  # the head of each request, in the order they came
        self.connections = 0  # the connections proxied
        self.answers: List[bytes] = []  # each proxied connection's first bytes from the server
        self.refused = 0
        self._closed = False
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def set_mode(self, mode: str) -> None:
        """PASS forwards; REFUSE closes new connections at once; ANSWER_400
        answers them with a problem that no client retries."""
        with self._cond:
            self._mode = mode

    def cut(self) -> None:
        """Closes every proxied connection."""
        with self._cond:
            socks, self._socks = self._socks, []
        for s in socks:
            _close(s)

    def wait(self, cond: Callable[["Proxy"], bool], timeout: float = PROMPTLY, what: str = "the proxy") -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not cond(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("%s: not within %.1fs" % (what, timeout))
                self._cond.wait(left)

    def close(self) -> None:
        with self._cond:
            self._closed = True
        self.cut()
        _close(self._ln)
        self._acceptor.join(PROMPTLY)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._ln.accept()
            except OSError:
                return
            with self._cond:
                mode, closed = self._mode, self._closed
                if mode == self.REFUSE:
                    self.refused += 1
                    self._cond.notify_all()
            if closed or mode == self.REFUSE:
                _close(client)
                continue
            if mode == self.ANSWER_400:
                threading.Thread(target=_answer_400, args=(client,), daemon=True).start()
                continue
            try:
                upstream = socket.create_connection(self._upstream, timeout=PROMPTLY)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._cond:
                self._socks += [client, upstream]
                index = self.connections
                self.connections += 1
                self.answers.append(b"")
            threading.Thread(target=self._pump, args=(client, upstream, self._record_requests(), -1),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, self._record_answer, index),
                             daemon=True).start()

    def _record_requests(self) -> Callable[[bytes, int], None]:
        """Splits a connection's bytes from the client into requests (a head,
        and a body of its Content-Length) and records each head."""
        buf = [b""]

        def record(data: bytes, _: int) -> None:
            buf[0] += data
            while True:
                end = buf[0].find(b"\r\n\r\n")
                if end < 0:
                    return
                head = buf[0][:end + 4]
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                if len(buf[0]) < end + 4 + length:
                    return
                buf[0] = buf[0][end + 4 + length:]
                self.requests.append(head)
                self._cond.notify_all()

        return record

    def _record_answer(self, data: bytes, index: int) -> None:
        if len(self.answers[index]) < 8192:
            self.answers[index] += data
            self._cond.notify_all()

    def _pump(self, src: socket.socket, dst: socket.socket, record: Callable[[bytes, int], None], index: int) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self._cond:
                    record(data, index)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close(src)
            _close(dst)


def _answer_400(s: socket.socket) -> None:
    body = b'{"type":"https://lockapi.dev/problems/invalid-request","title":"Bad Request","status":400,"detail":"the test is over"}'
    try:
        s.settimeout(PROMPTLY)
        s.recv(65536)
        s.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/problem+json\r\nContent-Length: %d\r\n"
                  b"Connection: close\r\n\r\n%s" % (len(body), body))
    except OSError:
        pass
    finally:
        _close(s)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
