"""One HTTP exchange with the server, on the standard library's http.client.

Each request opens its own connection and closes it after the answer: the
client is then safe to share between threads (the watchdogs of many leases
and the caller's own calls) with no pool to guard, and a request stuck on a
dead server never holds up another.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from typing import Any, Callable, Dict, Mapping, Optional, Tuple
from urllib.parse import quote, urlencode, urlsplit

from ._errors import Unavailable

USER_AGENT = "lockapi-python/0.1"


class Response:
    """A whole answer: the status, headers with lower-case names, the body."""

    def __init__(self, status: int, headers: Dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


def lock_path(name: str, *rest: str) -> str:
    """The path /v1/locks/{name}/... with each segment escaped."""
    return "/".join(["/v1/locks", quote(name, safe=":@")] + [quote(p, safe=":@") for p in rest])


class Transport:
    def __init__(self, base_url: str, api_key: Optional[str], ssl_context: Optional[ssl.SSLContext]) -> None:
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("lockapi: server URL %r: want http://host[:port] or https://host[:port]" % base_url)
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port
        self._prefix = u.path.rstrip("/")
        self._ssl = ssl_context
        self._headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = "Bearer " + api_key

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            ctx = self._ssl or ssl.create_default_context()
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=ctx)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def open(self, method: str, path: str, *, query: Optional[Mapping[str, str]] = None,
             body: Any = None, headers: Optional[Mapping[str, str]] = None,
             timeout: float) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Sends a request and returns the open connection and its response,
        whose body the caller reads and whose connection it closes. timeout
        bounds each socket operation. A failure to exchange it raises
        Unavailable."""
        url = self._prefix + path
        if query:
            url += "?" + urlencode(query)
        hdrs = dict(self._headers)
        payload = None
        if body is not None:
            payload = json.dumps(body).encode("utf-8")
            hdrs["Content-Type"] = "application/json"
        if headers:
            hdrs.update(headers)
        conn = self._connect(max(timeout, 0.001))
        try:
            conn.request(method, url, body=payload, headers=hdrs)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise _unavailable(method, path, e) from e
        return conn, resp

    def request(self, method: str, path: str, *, query: Optional[Mapping[str, str]] = None,
                body: Any = None, headers: Optional[Mapping[str, str]] = None,
                timeout: float) -> Response:
        """Sends a request and reads its whole answer."""
        conn, resp = self.open(method, path, query=query, body=body, headers=headers, timeout=timeout)
        try:
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise _unavailable(method, path, e) from e
        finally:
            conn.close()
        return Response(resp.status, lower_headers(resp), data)


    def request_abortable(self, path: str, *, query: Optional[Mapping[str, str]] = None, timeout: float,
                          hold: Callable[[Optional[http.client.HTTPConnection]], bool]) -> Optional[Response]:
        """A GET whose connection hold is given once connected (and None once
        the exchange is over), so that another thread may abort it by
        shutting the connection down (abort): it then raises Unavailable.
        When hold answers False the request is not sent, and None is
        returned. A blocking query (the loss watch) is sent this way."""
        url = self._prefix + path
        if query:
            url += "?" + urlencode(query)
        conn = self._connect(max(timeout, 0.001))
        try:
            try:
                conn.connect()
            except (OSError, http.client.HTTPException) as e:
                raise _unavailable("GET", path, e) from e
            if not hold(conn):
                return None
            try:
                conn.request("GET", url, headers=self._headers)
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException) as e:
                raise _unavailable("GET", path, e) from e
            return Response(resp.status, lower_headers(resp), data)
        finally:
            hold(None)
            conn.close()


def abort(conn: http.client.HTTPConnection) -> None:
    """Aborts the exchange on conn (request_abortable) from another thread."""
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def lower_headers(resp: http.client.HTTPResponse) -> Dict[str, str]:
    return {k.lower(): v for k, v in resp.getheaders()}


def _unavailable(method: str, path: str, e: BaseException) -> Unavailable:
    what = "timed out" if isinstance(e, socket.timeout) else "%s: %s" % (type(e).__name__, e)
    return Unavailable("%s %s: %s" % (method, path, what))
