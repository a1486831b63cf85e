"""The errors of the lockapi client: one class per problem a caller handles.

The server answers every error as an RFC 9457 problem (application/problem+json)
with a stable ``type`` URI; :func:`error_from_response` turns an answer into
the matching class, so callers catch :class:`LockHeld` or :class:`LeaseLost`
rather than compare status codes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, cast

PROBLEM_BASE = "https://lockapi.dev/problems/"

# Statuses that may pass when asked again: the store is unreachable, the
# server shuts down, a proxy in between failed, or the caller is rate limited.
TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})


class APIError(Exception):
    """An error answer of the server, or a failure to get one.

    ``type`` is a https://lockapi.dev/problems/ URI ("" when the answer was no
    problem document, e.g. from a proxy), ``status`` the HTTP status (None when
    no answer came), ``title`` and ``detail`` the problem's text. ``errors``
    lists the offending fields of a 400 as dicts with ``field`` and ``detail``.
    """

    def __init__(
        self,
        detail: str = "",
        *,
        type: str = "",
        status: Optional[int] = None,
        title: str = "",
        request_id: str = "",
        retry_after: float = 0.0,
        errors: Optional[List[Dict[str, str]]] = None,
        body: Optional[Mapping[str, Any]] = None,
    ) -> None:
        self.type: str = type
        self.status: Optional[int] = status
        self.title: str = title
        self.detail: str = detail
        self.request_id: str = request_id
        self.retry_after: float = retry_after
        self.errors: List[Dict[str, str]] = errors or []
        self.body: Mapping[str, Any] = body or {}
        super().__init__(self._message())

    @property
    def slug(self) -> str:
        """The last part of the problem type, e.g. "lock-held"."""
        if self.type.startswith(PROBLEM_BASE):
            return self.type[len(PROBLEM_BASE):]
        return ""

    def _message(self) -> str:
        parts: List[str] = []
        if self.status is not None:
            parts.append("server answered %d" % self.status)
        if self.slug:
            parts.append(self.slug)
        elif self.title:
            parts.append(self.title)
        msg = " ".join(parts)
        if self.detail:
            msg = msg + ": " + self.detail if msg else self.detail
        if self.request_id:
            msg += " (request id %s)" % self.request_id
        return msg or type(self).__name__


@dataclass(frozen=True)
class Holder:
    """The lease in the way of an acquire."""

    owner: str
    fencing_token: int
    expires_in: float  # seconds until it ends unless renewed


class LockHeld(APIError):
    """409 lock-held: another owner still holds the lock after the wait.

    ``holder`` describes the lease in the way; it is None when only queued
    waiters come first (a fair queue, or a writer that readers keep out), or
    in redlock mode when the masters do not all name one lease.
    ``queue_length`` counts the queued waiters.
    """

    def __init__(self, detail: str = "", *, lock: str = "", holder: Optional[Holder] = None,
                 queue_length: int = 0, **kw: Any) -> None:
        self.lock: str = lock
        self.holder: Optional[Holder] = holder
        self.queue_length: int = queue_length
        super().__init__(detail, **kw)

    def _message(self) -> str:
        if self.holder is not None:
            return "lock %r is held by %r (fencing token %d, expires in %.3fs unless renewed)" % (
                self.lock, self.holder.owner, self.holder.fencing_token, self.holder.expires_in)
        if self.queue_length:
            return "lock %r is free but %d queued waiters come first" % (self.lock, self.queue_length)
        return "lock %r is not free; the holder is not named" % self.lock


class LeaseLost(APIError):
    """The lease no longer holds its lock: stop the guarded work.

    The server answered 410 lease-lost (the lease expired or was
    force-released), refused to renew it, or no renewal succeeded before the
    lease's expiry less a safety margin, after which another holder may exist
    (``status`` is then None and ``__cause__`` the last failure).
    """


class SessionLost(LeaseLost):
    """The session ended without :meth:`Session.close`: the server answered
    410 session-lost (it was not renewed within its TTL, or someone deleted
    it) or 404 to a renewal, or no renewal succeeded in time. Every lease
    bound to it is lost with it, so it is a :class:`LeaseLost` too: stop the
    guarded work. An acquire naming an ended session raises it as well.
    """


class SessionNotFound(APIError):
    """404 session-not-found: no such session, or another principal's (its
    existence is not disclosed), or one ended long enough ago (an hour) to be
    forgotten."""


class LockDelay(APIError):
    """409 lock-delay: a lease bound to a session ended moments ago by the
    session's expiry or a force release, and the lock is closed to new grants
    for that session's lock-delay. ``retry_after`` is the seconds until it
    opens (whole seconds, rounded up); ``lock`` the lock's name."""

    def __init__(self, detail: str = "", *, lock: str = "", **kw: Any) -> None:
        self.lock: str = lock
        super().__init__(detail, **kw)


class Unauthorized(APIError):
    """401: no API key, or not a valid one (unknown, revoked or expired)."""


class Forbidden(APIError):
    """403: the key lacks the scope, the lock name is outside its patterns, or
    the lease is another principal's."""


class Unavailable(APIError):
    """A failure that may pass: the server could not be reached, or it answered
    503 (store unreachable, shutting down), 429, 502 or 504. ``retry_after`` is
    the server's Retry-After in seconds, 0 if none."""


class LeaseReleased(Exception):
    """A lease was used after its :meth:`~lockapi.Lease.release` (or its
    session's close): renew, keep_alive or check. A mistake of the caller,
    not a loss, so no :class:`LeaseLost`: nothing says another holder has
    the lock."""

    def __init__(self, lock: str, lease_id: str) -> None:
        self.lock: str = lock
        self.lease_id: str = lease_id
        super().__init__("lock %r, lease %s: the lease was released" % (lock, lease_id))


class SessionClosed(Exception):
    """A session was used after its :meth:`~lockapi.Session.close`: acquire,
    acquire_all, renew or check. A mistake of the caller, not a loss, so no
    :class:`SessionLost`."""

    def __init__(self, session_id: str) -> None:
        self.session_id: str = session_id
        super().__init__("session %s: the session was closed" % session_id)


_BY_SLUG = {
    "lease-lost": LeaseLost,
    "session-lost": SessionLost,
    "session-not-found": SessionNotFound,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "unavailable": Unavailable,
    "rate-limited": Unavailable,
}

_BY_STATUS = {401: Unauthorized, 403: Forbidden, 410: LeaseLost}


def error_from_response(status: int, headers: Mapping[str, str], body: bytes, lock: str = "") -> APIError:
    """Turns a non-2xx answer into the APIError subclass for its problem type.

    headers has lower-case names. A body that is no problem document (from a
    proxy, say) still gets a class by its status.
    """
    kw: Dict[str, Any] = {
        "status": status,
        "request_id": headers.get("x-request-id", ""),
        "retry_after": _retry_after(headers.get("retry-after", "")),
    }
    doc: Dict[str, Any] = {}
    if "json" in headers.get("content-type", ""):
        try:
            parsed = json.loads(body.decode("utf-8"))
            if isinstance(parsed, dict):
                doc = cast(Dict[str, Any], parsed)
        except (ValueError, UnicodeDecodeError):
            pass
    raw_type = doc.get("type")
    problem_type = raw_type if isinstance(raw_type, str) else ""
    if problem_type:
        kw.update(type=problem_type, title=str(doc.get("title", "")), body=doc)
        detail = str(doc.get("detail", ""))
        if isinstance(doc.get("errors"), list):
            kw["errors"] = [e for e in doc["errors"] if isinstance(e, dict)]
    else:
        detail = body.decode("utf-8", "replace").strip()
        if len(detail) > 200:
            detail = detail[:200] + "…"

    slug = problem_type[len(PROBLEM_BASE):] if problem_type.startswith(PROBLEM_BASE) else ""
    if slug == "lock-delay":
        return LockDelay(detail, lock=str(doc.get("lock") or lock), **kw)
    if status == 409 and (slug == "lock-held" or "holder" in doc):
        return LockHeld(detail, lock=str(doc.get("lock") or lock), holder=_holder(doc.get("holder")),
                        queue_length=int(doc.get("queue_length") or 0), **kw)
    cls = _BY_SLUG.get(slug)
    if cls is None and not slug:
        # No problem type: classify by status alone.
        cls = Unavailable if status in TRANSIENT_STATUSES else _BY_STATUS.get(status)
    # A quota (429 quota-exceeded) is not transient: asking again fails
    # until the principal ends sessions or webhooks it holds.
    if cls is None and status in TRANSIENT_STATUSES and slug != "quota-exceeded":
        cls = Unavailable
    return (cls or APIError)(detail, **kw)


def _holder(doc: Any) -> Optional[Holder]:
    if not isinstance(doc, dict):
        return None
    d = cast(Dict[str, Any], doc)
    return Holder(owner=str(d.get("owner", "")), fencing_token=int(d.get("fencing_token", 0)),
                  expires_in=int(d.get("expires_in_ms", 0)) / 1000.0)


def _retry_after(value: str) -> float:
    try:
        secs = int(value.strip())
    except ValueError:
        return 0.0
    return float(secs) if secs >= 0 else 0.0
