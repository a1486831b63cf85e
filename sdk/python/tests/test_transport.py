"""The transport: kept-alive connections, the requests that may be sent
again on a fresh one, proxies, the transport= hook, and the retries of an
acquire that does not wait. A scripted server stands in where the real one
cannot misbehave on cue."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import unittest
from typing import Generator, List, Tuple
from unittest import mock

import lockapi
from support import ADMIN_KEY, BASE_URL, PROMPTLY, Proxy, ServerTestCase

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"held\":true}"
RELEASED = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"released\":true}"
GRANT_DOC = {"lock": "x", "lease_id": "01JD3Z8Q6W9M4T5R2K7X1B0C9S", "owner": "o", "fencing_token": 7, "ttl_ms": 30000}
GRANT = (b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
         % (len(json.dumps(GRANT_DOC)), json.dumps(GRANT_DOC).encode()))

# What the scripted server does with each request it reads on a connection.
ANSWER, ANSWER_AND_CLOSE, DROP = "answer", "answer and close", "drop"


class ScriptedServer:
    """A raw HTTP/1.1 server on loopback. Each connection follows the next
    script: for each request it reads, (ANSWER, bytes) sends bytes and keeps
    the connection, (ANSWER_AND_CLOSE, bytes) sends them and closes it, and
    (DROP, b"") closes it without answering, as a server that timed the
    connection out as the request came. It records each request's head and
    body, and counts connections."""

    def __init__(self, scripts: List[List[Tuple[str, bytes]]]) -> None:
        self._scripts = list(scripts)
        self._ln = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._ln.bind(("127.0.0.1", 0))
        self._ln.listen(8)
        self.url = "http://127.0.0.1:%d" % self._ln.getsockname()[1]
        self.requests: List[bytes] = []
        self.connections = 0
        self.closed = 0  # the connections it closed
        self._mu = threading.Condition()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._ln.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._ln.accept()
            except OSError:
                return
            with self._mu:
                self.connections += 1
                script = self._scripts.pop(0) if self._scripts else []
            threading.Thread(target=self._serve, args=(conn, script), daemon=True).start()

    def _serve(self, conn: socket.socket, script: List[Tuple[str, bytes]]) -> None:
        conn.settimeout(PROMPTLY)
        buf = b""
        try:
            for action, answer in script:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                end = buf.index(b"\r\n\r\n") + 4
                length = 0
                for line in buf[:end].split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                while len(buf) < end + length:
                    buf += conn.recv(65536)
                with self._mu:
                    self.requests.append(buf[:end + length])
                buf = buf[end + length:]
                if action == DROP:
                    return
                conn.sendall(answer)
                if action == ANSWER_AND_CLOSE:
                    return
            conn.recv(1)  # holds the connection until the client closes it
        except OSError:
            pass
        finally:
            conn.close()
            with self._mu:
                self.closed += 1
                self._mu.notify_all()

    def wait_closed(self, n: int) -> None:
        """Waits until it closed n connections: on loopback, the client's
        end has then seen the close."""
        with self._mu:
            if not self._mu.wait_for(lambda: self.closed >= n, PROMPTLY):
                raise AssertionError("the server closed %d connections, not %d" % (self.closed, n))

    def methods(self) -> List[str]:
        with self._mu:
            return [r.split(b" ", 1)[0].decode() for r in self.requests]


class KeepAliveTest(unittest.TestCase):
    def serve(self, *scripts: List[Tuple[str, bytes]]) -> Tuple[ScriptedServer, lockapi.Client]:
        server = ScriptedServer(list(scripts))
        self.addCleanup(server.close)
        client = lockapi.Client(server.url, timeout=PROMPTLY)
        self.addCleanup(client.close)
        return server, client

    def test_one_connection_carries_request_after_request(self) -> None:
        server, client = self.serve([(ANSWER, OK)] * 3)
        for _ in range(3):
            self.assertEqual(client.inspect("x"), {"held": True})
        self.assertEqual(server.connections, 1)

    def test_a_connection_the_server_closed_while_idle_is_not_used(self) -> None:
        # Even a DELETE, which is never sent twice, finds a fresh connection.
        server, client = self.serve([(ANSWER_AND_CLOSE, OK)], [(ANSWER, RELEASED)])
        client.inspect("x")
        server.wait_closed(1)
        self.assertTrue(client.force_release("x"))
        self.assertEqual((server.methods(), server.connections), (["GET", "DELETE"], 2))

    def test_a_safe_request_is_sent_again_when_the_server_drops_it(self) -> None:
        # The server closes the kept-alive connection as the request comes:
        # a GET, and an acquire (its Idempotency-Key makes it safe), go again
        # on a fresh connection.
        server, client = self.serve([(ANSWER, OK), (DROP, b"")], [(ANSWER, GRANT), (DROP, b"")], [(ANSWER, OK)])
        client.inspect("x")
        lease = client.acquire("x", manual=True)
        self.assertEqual(lease.fencing_token, 7)
        client.inspect("x")
        self.assertEqual(server.methods(), ["GET", "POST", "POST", "GET", "GET"])
        keys = [line for r in server.requests for line in r.split(b"\r\n") if line.lower().startswith(b"idempotency-key")]
        self.assertEqual(len(keys), 2)
        self.assertEqual(keys[0], keys[1], "the repeat is the same acquire")

    def test_an_unsafe_request_is_not_sent_again(self) -> None:
        # A release sent twice could read as a loss: it fails instead.
        server, client = self.serve([(ANSWER, OK), (DROP, b"")])
        client.inspect("x")
        with self.assertRaises(lockapi.Unavailable):
            client.force_release("x")
        self.assertEqual((server.methods(), server.connections), (["GET", "DELETE"], 1))


class Canned(lockapi.BaseTransport):
    """A transport that answers from a list and records the requests."""

    def __init__(self, answers: List[lockapi.Response]) -> None:
        self.answers = answers
        self.requests: List[lockapi.Request] = []

    def handle_request(self, request: lockapi.Request) -> lockapi.Response:
        self.requests.append(request)
        return self.answers.pop(0)


def unavailable() -> lockapi.Response:
    body = json.dumps({"type": lockapi.PROBLEM_BASE + "unavailable", "title": "Service Unavailable",
                       "status": 503, "detail": "the store is unreachable"}).encode()
    return lockapi.Response(503, {"Content-Type": "application/problem+json"}, body)


def granted() -> lockapi.Response:
    return lockapi.Response(201, {"Content-Type": "application/json"}, json.dumps(GRANT_DOC).encode())


class TransportHookTest(unittest.TestCase):
    def test_requests_go_through_the_transport(self) -> None:
        t = Canned([lockapi.Response(200, {"Content-Type": "application/json"}, b'{"held": false}')])
        client = lockapi.Client("https://lockapi.example/prefix", api_key="k", transport=t)
        self.assertEqual(client.inspect("a:b"), {"held": False})
        req = t.requests[0]
        self.assertEqual((req.method, req.url), ("GET", "https://lockapi.example/prefix/v1/locks/a:b"))
        self.assertEqual(req.headers["Authorization"], "Bearer k")
        with self.assertRaises(ValueError):
            lockapi.Client("http://x", transport=t, ssl_context=__import__("ssl").create_default_context())

    def test_an_acquire_that_does_not_wait_is_retried_when_it_may_pass(self) -> None:
        t = Canned([unavailable(), unavailable(), granted()])
        client = lockapi.Client("http://lockapi.example", transport=t)
        with self.assertLogs("lockapi", "DEBUG") as logs:
            lease = client.acquire("x", manual=True)
        self.assertEqual(lease.fencing_token, 7)
        self.assertEqual(len(t.requests), 3)
        self.assertEqual(len({r.headers["Idempotency-Key"] for r in t.requests}), 1, "one key: one acquire")
        self.assertEqual(sum("POST /v1/locks/x/leases: 503" in line for line in logs.output), 2, logs.output)
        self.assertEqual(sum("POST /v1/locks/x/leases: 201" in line for line in logs.output), 1, logs.output)

        t = Canned([unavailable() for _ in range(5)])
        with self.assertRaises(lockapi.Unavailable):
            lockapi.Client("http://lockapi.example", transport=t).acquire("x")
        self.assertEqual(len(t.requests), 3, "at most three tries")

        held = json.dumps({"type": lockapi.PROBLEM_BASE + "lock-held", "status": 409, "title": "Conflict",
                           "holder": {"owner": "o", "fencing_token": 1, "expires_in_ms": 1000}}).encode()
        t = Canned([lockapi.Response(409, {"Content-Type": "application/problem+json"}, held)])
        with self.assertRaises(lockapi.LockHeld):
            lockapi.Client("http://lockapi.example", transport=t).acquire("x")
        self.assertEqual(len(t.requests), 1, "a held lock is no failure that may pass")


@contextlib.contextmanager
def proxy_env(**values: str) -> Generator[None, None, None]:
    """The environment with no proxy variable but values."""
    with mock.patch.dict(os.environ):
        for k in list(os.environ):
            if k.lower().endswith("_proxy"):
                del os.environ[k]
        os.environ.update(values)
        yield


class ProxyTest(unittest.TestCase):
    def test_the_environment_names_the_proxy(self) -> None:
        with proxy_env(HTTP_PROXY="http://u:p@proxy.example:3128", HTTPS_PROXY="proxy.example:3129",
                       NO_PROXY="skip.example"):
            t = lockapi.HTTPTransport()
            http_proxy = t._proxy_for("http", "lockapi.example")
            https_proxy = t._proxy_for("https", "lockapi.example")
            assert http_proxy is not None and https_proxy is not None
            self.assertEqual((http_proxy.hostname, http_proxy.port, http_proxy.username), ("proxy.example", 3128, "u"))
            self.assertEqual(https_proxy.port, 3129)
            for host in ("skip.example", "localhost", "127.0.0.1", "::1"):
                self.assertIsNone(t._proxy_for("http", host), host)
            self.assertIsNone(lockapi.HTTPTransport(trust_env=False)._proxy_for("http", "lockapi.example"))

    def test_https_goes_through_a_connect_tunnel(self) -> None:
        proxy = ScriptedServer([[(ANSWER_AND_CLOSE, b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")]])
        self.addCleanup(proxy.close)
        with proxy_env(HTTPS_PROXY=proxy.url.replace("http://", "http://user:secret@")):
            with self.assertRaises(lockapi.Unavailable):
                lockapi.Client("https://lockapi.example", timeout=PROMPTLY).inspect("x")
        head = proxy.requests[0]
        self.assertTrue(head.startswith(b"CONNECT lockapi.example:443 HTTP/1."), head)
        self.assertIn(b"Proxy-Authorization: Basic dXNlcjpzZWNyZXQ=", head)


class ServerTransportTest(ServerTestCase):
    def test_keep_alive_and_a_cut(self) -> None:
        proxy = Proxy(BASE_URL)
        self.addCleanup(proxy.close)
        client = lockapi.Client(proxy.url, api_key=ADMIN_KEY, timeout=5, loss_watch=False)
        self.addCleanup(client.close)
        name = self.name()
        for _ in range(3):
            client.inspect(name)
        with client.lock(name, ttl=5):
            pass
        self.assertEqual((proxy.connections, len(proxy.requests)), (1, 5), "one connection for five requests")
        proxy.cut()  # on loopback, the client's end has seen the close when it returns
        with client.lock(name, ttl=5):
            pass
        self.assertEqual(proxy.connections, 2, "a fresh connection after the cut")

    def test_http_proxy_from_the_environment(self) -> None:
        proxy = Proxy(BASE_URL)  # a TCP relay: to the server, an absolute-form request is a request
        self.addCleanup(proxy.close)
        with proxy_env(HTTP_PROXY=proxy.url):
            client = lockapi.Client("http://lockapi.example:8080", api_key=ADMIN_KEY, timeout=5)
            with client.lock(self.name(), ttl=5) as lease:
                self.assertGreater(lease.fencing_token, 0)
        self.assertTrue(proxy.requests[0].startswith(b"POST http://lockapi.example:8080/v1/locks/"), proxy.requests[0])


if __name__ == "__main__":
    unittest.main()
