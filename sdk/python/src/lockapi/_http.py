"""The client's requests to the server: JSON bodies, the API key, errors
turned into Unavailable, and a DEBUG log line each; sent by a transport
(_transport.py: keep-alive connections by default, or the caller's)."""

from __future__ import annotations

import http.client
import json
import socket
import time
from typing import Any, Callable, Dict, Mapping, Optional
from urllib.parse import quote, urlencode, urlsplit

from ._errors import Unavailable
from ._log import logger
from ._transport import BaseTransport, Request, Response

USER_AGENT = "lockapi-python/0.1"


class Answer:
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
    """Sends the API's requests to one server through a BaseTransport."""

    def __init__(self, base_url: str, api_key: Optional[str], transport: BaseTransport) -> None:
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("lockapi: server URL %r: want http://host[:port] or https://host[:port]" % base_url)
        self._base = "%s://%s%s" % (u.scheme, u.netloc, u.path.rstrip("/"))
        self._transport = transport
        self._headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = "Bearer " + api_key

    def close(self) -> None:
        self._transport.close()

    def open(self, method: str, path: str, *, query: Optional[Mapping[str, str]] = None,
             body: Any = None, headers: Optional[Mapping[str, str]] = None,
             timeout: float, read_timeout: Optional[float] = None,
             hold: Optional[Callable[[Callable[[], None]], bool]] = None) -> Response:
        """Sends a request and returns its answer, whose body the caller
        reads and closes. timeout bounds each socket operation until the
        answer's head, read_timeout (default timeout) each read of its body.
        hold: see Request.hold. A failure to exchange it raises Unavailable."""
        url = self._base + path
        if query:
            url += "?" + urlencode(query)
        hdrs = dict(self._headers)
        payload = None
        if body is not None:
            payload = json.dumps(body).encode("utf-8")
            hdrs["Content-Type"] = "application/json"
        if headers:
            hdrs.update(headers)
        start = time.monotonic()
        try:
            resp = self._transport.handle_request(Request(method, url, hdrs, payload, timeout, read_timeout, hold))
        except Unavailable as e:
            _log_failure(method, path, start, e)
            raise
        except (OSError, http.client.HTTPException) as e:
            _log_failure(method, path, start, e)
            raise unavailable(method, path, e) from e
        logger.debug("%s %s: %d in %.1f ms%s", method, path, resp.status, (time.monotonic() - start) * 1000,
                     _request_id(resp.headers))
        return resp

    def request(self, method: str, path: str, *, query: Optional[Mapping[str, str]] = None,
                body: Any = None, headers: Optional[Mapping[str, str]] = None,
                timeout: float) -> Answer:
        """Sends a request and reads its whole answer."""
        resp = self.open(method, path, query=query, body=body, headers=headers, timeout=timeout)
        try:
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise unavailable(method, path, e) from e
        finally:
            resp.close()
        return Answer(resp.status, resp.headers, data)


    def request_abortable(self, path: str, *, query: Optional[Mapping[str, str]] = None, timeout: float,
                          hold: Callable[[Optional[Callable[[], None]]], bool]) -> Optional[Answer]:
        """A GET that another thread may stop before its answer: hold gets a
        function that aborts the exchange once connected (the request then
        raises Unavailable), and None once the exchange is over. When hold
        answers False the request is not sent, and None is returned. A
        blocking query (the loss watch) is sent this way. A transport of the
        caller's may not offer the abort (BaseTransport may ignore
        Request.hold): the query then runs to its answer."""
        withdrawn = False

        def on_connect(abort: Callable[[], None]) -> bool:
            nonlocal withdrawn
            if hold(abort):
                return True
            withdrawn = True
            return False

        try:
            try:
                resp = self.open("GET", path, query=query, timeout=timeout, hold=on_connect)
            except Unavailable:
                if withdrawn:
                    return None
                raise
            try:
                data = resp.read()
            except (OSError, http.client.HTTPException) as e:
                raise unavailable("GET", path, e) from e
            finally:
                resp.close()
            return Answer(resp.status, resp.headers, data)
        finally:
            hold(None)


def unavailable(method: str, path: str, e: BaseException) -> Unavailable:
    what = "timed out" if isinstance(e, socket.timeout) else "%s: %s" % (type(e).__name__, e)
    return Unavailable("%s %s: %s" % (method, path, what))


def _log_failure(method: str, path: str, start: float, e: BaseException) -> None:
    logger.debug("%s %s: no answer after %.1f ms: %s", method, path, (time.monotonic() - start) * 1000, e)


def _request_id(headers: Mapping[str, str]) -> str:
    rid = headers.get("x-request-id", "")
    return " (request id %s)" % rid if rid else ""
