"""The lock event stream (GET /v1/events, Server-Sent Events; docs/EVENTS.md)."""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Dict, Generator, Iterator, List, Optional, Sequence

from ._errors import APIError, Unavailable, error_from_response
from ._http import Transport
from ._transport import Response
from ._timing import Backoff

# Reconnection pacing, and how long a stream may stay silent: the server
# sends a keep-alive every 15 s, so three missed ones mean the connection is
# dead even if no error said so.
RETRY_BASE = 0.1
RETRY_MAX = 5.0
IDLE_TIMEOUT = 45.0

# The event types (docs/EVENTS.md).
GRANTED = "granted"
REENTERED = "reentered"
RENEWED = "renewed"
RELEASED = "released"
EXPIRED = "expired"
FORCE_RELEASED = "force_released"
UPDATED = "updated"


@dataclass(frozen=True)
class Event:
    """One change of one lease of a lock."""

    id: str  # orders the events: resume after it with events(after=...)
    type: str  # granted, reentered, renewed, released, expired, force_released, updated
    lock: str
    owner: str
    principal: str  # "" on a server without API keys; of a force release, the admin's
    shared: bool  # a shared (read) lease
    fencing_token: int
    hold_count: int  # the holds left after the change: 0 when the lease ended
    queue_length: Optional[int]  # the lock's queued waiters after the change, if the server knew
    time: datetime  # of the change, by the server's store
    lease_id: str  # shown to admins only
    #: The lease's new metadata, on an updated event only (else None).
    metadata: Optional[Dict[str, str]] = None


class EventStream(Iterator[Event]):
    """The events of the selected locks (:meth:`Client.events`), in order,
    until :meth:`close` or the timeout.

    When the connection drops or the server ends the stream (it shuts down),
    it reconnects after a pause (0.1 s doubling to 5 s, or the server's
    Retry-After) and resumes with Last-Event-ID after the last event it
    yielded: every event the server's log keeps, in order, none twice.

    Raises the first request's failure (Unavailable when the server is
    unreachable, or the server's refusal), and on a reconnect any answer
    but one that may pass (such as 410 events-gone, when the resume point is
    older than the log keeps).

    :meth:`close` may be called from any thread: it shuts the connection, and
    the iteration ends (StopIteration) in the thread that waits on it. With
    a timeout, the iteration ends that many seconds after the stream was
    made. ``with client.events(...) as events:`` closes it on the way out.
    """

    def __init__(self, transport: Transport, timeout: float, *, prefix: Optional[str], lock: Optional[str],
                 types: Optional[Sequence[str]], after: Optional[str], until: Optional[float]) -> None:
        query: Dict[str, str] = {}
        if lock:
            query["lock"] = lock
        if prefix:
            query["prefix"] = prefix
        if types:
            query["types"] = ",".join(types)
        self._http = transport
        self._timeout = timeout
        self._query = query
        self._lock = lock or ""
        self._until = until  # time.monotonic() when the iteration ends, or None
        #: The id of the last event yielded: resume after it with events(after=...).
        self.last_id: str = after or ""
        self._mu = threading.Lock()
        self._resp: Optional[Response] = None
        self._closed = threading.Event()
        self._gen: Generator[Event, None, None] = self._run()

    def __iter__(self) -> "EventStream":
        return self

    def __next__(self) -> Event:
        return next(self._gen)

    def close(self) -> None:
        """Hangs up: the iteration ends, also one waiting in another thread
        (its socket is shut). Safe to call twice."""
        self._closed.set()
        with self._mu:
            resp = self._resp
        if resp is not None:
            resp.close()
        try:
            self._gen.close()
        except ValueError:
            pass  # running in another thread: it sees the close and ends

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _left(self) -> float:
        """Seconds until the iteration ends (IDLE_TIMEOUT without one)."""
        if self._until is None:
            return IDLE_TIMEOUT
        return self._until - time.monotonic()

    def _run(self) -> Generator[Event, None, None]:
        connected = False
        backoff = Backoff(RETRY_BASE, RETRY_MAX)
        while not self._closed.is_set() and self._left() > 0:
            headers = {"Accept": "text/event-stream"}
            if self.last_id:
                headers["Last-Event-ID"] = self.last_id
            try:
                resp = self._http.open("GET", "/v1/events", query=self._query, headers=headers,
                                       timeout=min(self._timeout, max(self._left(), 0.001)),
                                       read_timeout=min(IDLE_TIMEOUT, max(self._left(), 0.001)))
            except Unavailable as e:
                if self._closed.is_set() or self._left() <= 0:
                    return
                if not connected:
                    raise
                err: APIError = e
            else:
                with self._mu:
                    self._resp = resp
                if self._closed.is_set():
                    resp.close()
                    return
                try:
                    if resp.status != 200:
                        err = error_from_response(resp.status, resp.headers, _read_some(resp), self._lock)
                        if not connected or not isinstance(err, Unavailable):
                            raise err
                    elif not resp.headers.get("content-type", "").startswith("text/event-stream"):
                        raise APIError("events: the server answered %r, not text/event-stream"
                                       % resp.headers.get("content-type", ""), status=resp.status)
                    else:
                        connected = True
                        try:
                            for ev in _parse(resp):
                                self.last_id = ev.id
                                backoff = Backoff(RETRY_BASE, RETRY_MAX)
                                yield ev
                            err = Unavailable("events: the server ended the stream")
                        except (OSError, ValueError, AttributeError, http.client.HTTPException) as e:
                            # ValueError, AttributeError: read from a response
                            # that close() closed in another thread while
                            # http.client was closing it too (both set its
                            # fp to None; the second finds None).
                            err = Unavailable("events: the stream broke: %s: %s" % (type(e).__name__, e))
                finally:
                    with self._mu:
                        self._resp = None
                    resp.close()
            if self._closed.is_set() or self._left() <= 0:
                return
            self._closed.wait(min(max(backoff.next(), err.retry_after), max(self._left(), 0.0)))


def _read_some(resp: Response) -> bytes:
    try:
        return resp.read(64 << 10)
    except (OSError, http.client.HTTPException):
        return b""


def _parse(resp: Response) -> Iterator[Event]:
    """Reads SSE frames: id and data lines up to a blank line; comments
    (keep-alives) and other fields are skipped."""
    frame_id = ""
    data: List[str] = []
    while True:
        raw = resp.readline(1 << 20)
        if not raw:
            return
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                yield decode_event(frame_id, "\n".join(data))
            frame_id, data = "", []
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "id":
            frame_id = value
        elif field == "data":
            data.append(value)


def decode_event(frame_id: str, data: str) -> Event:
    d: Dict[str, Any] = json.loads(data)
    ql = d.get("queue_length")
    return Event(
        id=str(d.get("id") or frame_id),
        type=str(d.get("type", "")),
        lock=str(d.get("lock", "")),
        owner=str(d.get("owner", "")),
        principal=str(d.get("principal", "")),
        shared=d.get("mode") == "shared",
        fencing_token=int(d.get("fencing_token", 0)),
        hold_count=int(d.get("hold_count", 0)),
        queue_length=int(ql) if ql is not None else None,
        time=parse_time(str(d.get("time", ""))),
        lease_id=str(d.get("lease_id", "")),
        metadata=dict(d["metadata"]) if isinstance(d.get("metadata"), dict) else None,
    )


_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


def parse_time(s: str) -> datetime:
    """Parses an RFC 3339 time as the server writes it (up to nanoseconds,
    Z or an offset), which datetime.fromisoformat takes only from Python 3.11."""
    m = _RFC3339.match(s)
    if not m:
        return datetime.fromtimestamp(0, tz=timezone.utc)
    base, frac, zone = m.groups()
    micro = (frac or "").ljust(6, "0")[:6]
    return datetime.fromisoformat("%s.%s%s" % (base, micro, "+00:00" if zone == "Z" else zone))
