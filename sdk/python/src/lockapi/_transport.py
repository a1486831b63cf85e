"""How requests reach the server: the ``transport=`` hook and the default
transport, keep-alive connections on the standard library's http.client.

A transport takes a :class:`Request` (an absolute URL, headers, a body) and
returns a :class:`Response` whose body the client reads, or raises OSError
(or :class:`lockapi.Unavailable`) when no answer came. Replace it to test
without a server or to reach the server in a way of your own, as httpx's
transports do::

    class Recorder(lockapi.BaseTransport):
        def handle_request(self, request):
            return lockapi.Response(200, {"content-type": "application/json"}, b"{...}")

    client = lockapi.Client("http://lockapi.test", transport=Recorder())
"""

from __future__ import annotations

import base64
import http.client
import io
import ipaddress
import select
import socket
import ssl
import threading
import time
import urllib.request
from typing import IO, Callable, Dict, List, Mapping, Optional, Tuple, Union
from urllib.parse import SplitResult, unquote, urlsplit

# How long a connection may stay idle in the pool: less than the server's
# own limit (120 s) and than the 60 s many proxies and load balancers keep.
IDLE_LIMIT = 50.0

# The idle connections kept per server.
MAX_IDLE = 8

# The methods that may be sent twice: a request that found its kept-alive
# connection closed by the server is sent again on a fresh one only if it is
# one of these, or carries an Idempotency-Key.
_REPLAYABLE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT"})


class Request:
    """One request: ``method``, ``url`` (absolute, with the query),
    ``headers``, ``body`` (bytes or None). ``timeout`` bounds the connection
    and each read of the answer's head, ``read_timeout`` each read of its body
    (None: timeout): a stream of events waits longer between reads than an
    answer may take to begin."""

    def __init__(self, method: str, url: str, headers: Mapping[str, str], body: Optional[bytes],
                 timeout: float, read_timeout: Optional[float] = None,
                 hold: Optional[Callable[[Callable[[], None]], bool]] = None) -> None:
        self.method: str = method
        self.url: str = url
        self.headers: Dict[str, str] = dict(headers)
        self.body: Optional[bytes] = body
        self.timeout: float = timeout
        self.read_timeout: Optional[float] = read_timeout
        #: For a request another thread may need to stop before its answer
        #: begins (a blocking query): a transport that can calls hold, once
        #: connected and before sending, with a function that aborts the
        #: exchange from any thread; when hold returns False it sends nothing
        #: and raises ConnectionAbortedError. A transport may ignore it.
        self.hold: Optional[Callable[[Callable[[], None]], bool]] = hold

    @property
    def replayable(self) -> bool:
        """Whether sending the request twice does what sending it once does:
        its method says so, or it carries an Idempotency-Key."""
        return self.method in _REPLAYABLE_METHODS or any(k.lower() == "idempotency-key" for k in self.headers)

    def __repr__(self) -> str:
        return "<lockapi.Request %s %s>" % (self.method, self.url)


class Response:
    """An answer: ``status``, ``headers`` (lower-case names) and the body,
    read with :meth:`read` and :meth:`readline` (a stream of events is read a
    line at a time). :meth:`close` ends it, and may be called from another
    thread to stop a read that waits."""

    def __init__(self, status: int, headers: Mapping[str, str], body: Union[bytes, IO[bytes]] = b"") -> None:
        self.status: int = status
        self.headers: Dict[str, str] = {k.lower(): v for k, v in headers.items()}
        self._body: IO[bytes] = io.BytesIO(body) if isinstance(body, bytes) else body

    def read(self, amt: int = -1) -> bytes:
        """The body's next amt bytes, or all that is left when amt < 0."""
        return self._body.read() if amt < 0 else self._body.read(amt)

    def readline(self, limit: int = -1) -> bytes:
        """The body's next line, with its end; b"" at the end of the body."""
        return self._body.readline(limit)

    def close(self) -> None:
        self._body.close()

    def __repr__(self) -> str:
        return "<lockapi.Response %d>" % self.status


class BaseTransport:
    """The ``transport=`` hook of :class:`lockapi.Client`. Subclasses
    implement :meth:`handle_request`; it is called from many threads at
    once (the watchdogs' and the caller's)."""

    def handle_request(self, request: Request) -> Response:
        """Sends request and returns the answer, whatever its status; raises
        OSError (or Unavailable) when none came."""
        raise NotImplementedError

    def close(self) -> None:
        """Closes what the transport keeps open. Client.close calls it."""


class HTTPTransport(BaseTransport):
    """The default transport: HTTP/1.1 on http.client, with keep-alive.

    Connections are kept in a pool per server and reused: a request takes an
    idle one (or opens one) and gives it back once the answer is read, so a
    thread that sends one request after another uses one connection, and
    no connection carries two requests at once. One found closed by the
    server while idle is dropped before use; a request whose kept-alive
    connection the server closed as it was sent is sent again on a fresh one
    only when that is safe (:attr:`Request.replayable`).

    ssl_context replaces ssl.create_default_context() for https URLs. proxy
    is an http:// proxy URL (user:password@ for Basic credentials) for every
    request; without it, and with trust_env, the proxy is the environment's
    (HTTPS_PROXY for https URLs, HTTP_PROXY for http ones, as
    urllib.request.getproxies reads them), except for the hosts NO_PROXY
    names and for loopback hosts (localhost, 127.0.0.0/8, ::1). An https
    server is reached through a CONNECT tunnel.
    """

    def __init__(self, *, ssl_context: Optional[ssl.SSLContext] = None, proxy: Optional[str] = None,
                 trust_env: bool = True, max_idle: int = MAX_IDLE) -> None:
        self._ssl = ssl_context
        try:
            self._proxy = _split_proxy(proxy, "") if proxy else None
        except ConnectionError as e:
            raise ValueError(str(e)) from None
        self._trust_env = trust_env
        self._max_idle = max_idle
        self._mu = threading.Lock()
        self._idle: Dict[Tuple[str, str, str], List[Tuple[http.client.HTTPConnection, float]]] = {}
        self._closed = False

    def handle_request(self, request: Request) -> Response:
        u = urlsplit(request.url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("lockapi: cannot send to %r" % request.url)
        https = u.scheme == "https"
        host = u.hostname
        port = u.port or (443 if https else 80)
        proxy = self._proxy_for(u.scheme, host)
        target = u.path or "/"
        if u.query:
            target += "?" + u.query
        headers = dict(request.headers)
        if proxy is not None and not https:
            target = "http://%s%s" % (u.netloc, target)  # absolute-form, to the proxy
            auth = _proxy_auth(proxy)
            if auth:
                headers["Proxy-Authorization"] = auth
        key = (u.scheme, "%s:%d" % (host, port), proxy.geturl() if proxy is not None else "")
        timeout = max(request.timeout, 0.001)

        if request.hold is not None:
            return self._send_abortable(request, key, target, headers, https, host, port, proxy, timeout)
        conn, reused = self._checkout(key)
        if conn is None:
            conn = self._connect(https, host, port, proxy, timeout)
        while True:
            try:
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
                conn.request(request.method, target, body=request.body, headers=headers)
                sock = conn.sock
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                if reused and request.replayable and _closed_by_peer(e):
                    # The server closed the kept-alive connection as the
                    # request went out: send it again, once, on a fresh one.
                    conn, reused = self._connect(https, host, port, proxy, timeout), False
                    continue
                raise
            if request.read_timeout is not None and sock is not None:
                sock.settimeout(max(request.read_timeout, 0.001))
            return _PooledResponse(self, key, conn, sock, resp)

    def _send_abortable(self, request: Request, key: Tuple[str, str, str], target: str, headers: Dict[str, str],
                        https: bool, host: str, port: int, proxy: Optional[SplitResult],
                        timeout: float) -> Response:
        """Sends request on a connection of its own, never pooled, which
        request.hold may abort from another thread (see Request.hold)."""
        assert request.hold is not None
        conn = self._connect(https, host, port, proxy, timeout)
        try:
            conn.connect()

            def abort() -> None:
                sock = conn.sock
                if sock is not None:
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

            if not request.hold(abort):
                raise ConnectionAbortedError("not sent: the caller withdrew it")
            conn.request(request.method, target, body=request.body, headers=headers)
            sock = conn.sock
            resp = conn.getresponse()
        except BaseException:
            conn.close()
            raise
        answer = _PooledResponse(self, key, conn, sock, resp)
        answer.reuse = False
        return answer

    def close(self) -> None:
        """Closes the idle connections; those in use close when their answer
        is read."""
        with self._mu:
            self._closed = True
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn, _ in conns:
                conn.close()

    def __del__(self) -> None:
        # A transport dropped without close(): its idle connections go
        # with it, as the sockets' own finalizers would close them, but
        # without their ResourceWarnings.
        try:
            self.close()
        except Exception:
            pass

    # The pool.

    def _checkout(self, key: Tuple[str, str, str]) -> Tuple[Optional[http.client.HTTPConnection], bool]:
        """An idle connection to key's server still open, or None."""
        now = time.monotonic()
        while True:
            with self._mu:
                conns = self._idle.get(key)
                if not conns:
                    return None, False
                conn, since = conns.pop()
            if now - since < IDLE_LIMIT and not _dropped(conn):
                return conn, True
            conn.close()

    def _checkin(self, key: Tuple[str, str, str], conn: http.client.HTTPConnection) -> None:
        with self._mu:
            conns = self._idle.setdefault(key, [])
            if not self._closed and len(conns) < self._max_idle:
                conns.append((conn, time.monotonic()))
                return
        conn.close()

    def _connect(self, https: bool, host: str, port: int, proxy: Optional[SplitResult],
                 timeout: float) -> http.client.HTTPConnection:
        if proxy is None:
            if https:
                return http.client.HTTPSConnection(host, port, timeout=timeout, context=self._context())
            return http.client.HTTPConnection(host, port, timeout=timeout)
        phost, pport = proxy.hostname or "", proxy.port or 80
        if not https:
            return http.client.HTTPConnection(phost, pport, timeout=timeout)
        conn = http.client.HTTPSConnection(phost, pport, timeout=timeout, context=self._context())
        auth = _proxy_auth(proxy)
        conn.set_tunnel(host, port, headers={"Proxy-Authorization": auth} if auth else None)
        return conn

    def _context(self) -> ssl.SSLContext:
        with self._mu:
            if self._ssl is None:
                self._ssl = ssl.create_default_context()  # once: it reads the CA certificates
            return self._ssl

    def _proxy_for(self, scheme: str, host: str) -> Optional[SplitResult]:
        if self._proxy is not None:
            return self._proxy
        if not self._trust_env or _loopback(host):
            return None
        url = urllib.request.getproxies().get(scheme)
        if not url or urllib.request.proxy_bypass(host):
            return None
        return _split_proxy(url, " (from the environment)")


class _PooledResponse(Response):
    """An answer on a pooled connection: closing it after the whole body was
    read gives the connection back; closing it earlier (or from another
    thread, to stop a read) shuts the socket."""

    def __init__(self, pool: HTTPTransport, key: Tuple[str, str, str], conn: http.client.HTTPConnection,
                 sock: Optional[socket.socket], resp: http.client.HTTPResponse) -> None:
        super().__init__(resp.status, dict(resp.getheaders()))
        self._pool = pool
        self._key = key
        self._conn = conn
        self._sock = sock
        self._resp = resp
        self._mu = threading.Lock()
        self._done = False
        #: False: the connection closes with the answer, never pooled.
        self.reuse = True

    def read(self, amt: int = -1) -> bytes:
        return self._resp.read() if amt < 0 else self._resp.read(amt)

    def readline(self, limit: int = -1) -> bytes:
        return self._resp.readline(limit)

    def close(self) -> None:
        with self._mu:
            if self._done:
                return
            self._done = True
        if self.reuse and self._resp.isclosed() and not self._resp.will_close and self._conn.sock is not None:
            self._pool._checkin(self._key, self._conn)
            return
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)  # wakes a read waiting in another thread
            except OSError:
                pass
        self._resp.close()
        self._conn.close()


def _closed_by_peer(e: BaseException) -> bool:
    """Whether e says the server closed the connection before answering,
    as it closes an idle kept-alive one: no answer began."""
    return isinstance(e, (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                          ConnectionAbortedError))


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle connection is unusable: closed, or readable (the
    server closed it, or sent what no request asked for)."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        if hasattr(select, "poll"):
            p = select.poll()
            p.register(sock, select.POLLIN)
            return bool(p.poll(0))
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable)
    except (OSError, ValueError):
        return True


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _split_proxy(url: str, where: str) -> SplitResult:
    if "://" not in url:
        url = "http://" + url
    u = urlsplit(url)
    if u.scheme != "http" or not u.hostname:
        # An OSError, so that a request through it fails as one that
        # cannot reach the server does, saying why.
        raise ConnectionError("lockapi: proxy %r%s: want http://host[:port]" % (url, where))
    return u


def _proxy_auth(proxy: SplitResult) -> str:
    if proxy.username is None:
        return ""
    cred = "%s:%s" % (unquote(proxy.username), unquote(proxy.password or ""))
    return "Basic " + base64.b64encode(cred.encode("utf-8")).decode("ascii")
