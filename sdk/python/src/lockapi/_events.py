"""The lock event stream (GET /v1/events, Server-Sent Events; docs/EVENTS.md)."""

from __future__ import annotations

import http.client
import json
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Dict, Iterator, Optional, Sequence

from ._errors import APIError, Unavailable, error_from_response
from ._http import Transport, lower_headers
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


def stream_events(transport: Transport, timeout: float, *, prefix: Optional[str], lock: Optional[str],
                  types: Optional[Sequence[str]], after: Optional[str]) -> Iterator[Event]:
    """Yields the events of the selected locks until the caller stops.

    When the connection drops or the server ends the stream (it shuts down),
    it reconnects after a pause (0.1 s doubling to 5 s, or the server's
    Retry-After) and resumes with Last-Event-ID after the last event it
    yielded: every event the server's log keeps, in order, none twice.

    Raises the first request's failure (Unavailable when the server is
    unreachable, or the server's refusal), and on a reconnect any answer
    but one that may pass (such as 410 events-gone, when the resume point is
    older than the log keeps).
    """
    query: Dict[str, str] = {}
    if lock:
        query["lock"] = lock
    if prefix:
        query["prefix"] = prefix
    if types:
        query["types"] = ",".join(types)
    last = after or ""
    connected = False
    backoff = Backoff(RETRY_BASE, RETRY_MAX)
    while True:
        headers = {"Accept": "text/event-stream"}
        if last:
            headers["Last-Event-ID"] = last
        try:
            conn, resp = transport.open("GET", "/v1/events", query=query, headers=headers, timeout=timeout)
        except Unavailable as e:
            if not connected:
                raise
            err: APIError = e
        else:
            try:
                if resp.status != 200:
                    err = error_from_response(resp.status, lower_headers(resp), _read_some(resp), lock or "")
                    if not connected or not isinstance(err, Unavailable):
                        raise err
                elif not resp.getheader("Content-Type", "").startswith("text/event-stream"):
                    raise APIError("events: the server answered %r, not text/event-stream"
                                   % resp.getheader("Content-Type", ""), status=resp.status)
                else:
                    connected = True
                    if conn.sock is not None:
                        conn.sock.settimeout(IDLE_TIMEOUT)
                    try:
                        for ev in _parse(resp):
                            last = ev.id
                            backoff = Backoff(RETRY_BASE, RETRY_MAX)
                            yield ev
                        err = Unavailable("events: the server ended the stream")
                    except (OSError, http.client.HTTPException) as e:
                        err = Unavailable("events: the stream broke: %s: %s" % (type(e).__name__, e))
            finally:
                conn.close()
        time.sleep(max(backoff.next(), err.retry_after))


def _read_some(resp: http.client.HTTPResponse) -> bytes:
    try:
        return resp.read(64 << 10)
    except (OSError, http.client.HTTPException):
        return b""


def _parse(resp: http.client.HTTPResponse) -> Iterator[Event]:
    """Reads SSE frames: id and data lines up to a blank line; comments
    (keep-alives) and other fields are skipped."""
    frame_id, data = "", []
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
