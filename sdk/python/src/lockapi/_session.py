"""A server-side session: one watchdog keeps every lease bound to it."""

from __future__ import annotations

import math
import threading
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, cast

from ._errors import APIError, SessionClosed, SessionLost, Unavailable, error_from_response
from ._http import Transport
from ._log import logger
from ._lease import Lease, _Renewable, _Stopped
from ._timing import safety_margin
from ._watch import Watch, refused

if TYPE_CHECKING:
    from ._client import Client


def session_path(session_id: str, *rest: str) -> str:
    return "/".join(["/v1/sessions", session_id] + list(rest))


class Session(_Renewable):
    """A session of the server (docs/SESSIONS.md): a TTL of its own that
    leases are bound to. Get one with :meth:`Client.session`.

    One watchdog thread renews the session every TTL/3, and with it every
    lease bound to it (:meth:`acquire`, :meth:`acquire_all`), whatever their
    number; bound leases have no watchdog of their own. It retries failures
    that may pass (:class:`Unavailable`) until a fifth of the TTL is left
    before the last expiry it can vouch for, as a lease's watchdog does.

    When the session ends without :meth:`close` (a renewal answered 410
    session-lost or 404, any other refusal, or no renewal in time),
    :attr:`lost` is set, :attr:`error` says why, and every bound lease is
    lost with it. :meth:`close` ends it and releases every bound lease at
    once. ``with client.session(ttl=10) as s:`` closes it on the way out.

    A loss watch (one blocking query on the session, whatever the number of
    bound leases) sets :attr:`lost` within moments of the session's end, and
    a bound lease's ``lost`` within moments of its force release, rather
    than at the next renewal; a Client made with ``loss_watch=False`` has
    none.
    """

    def __init__(self, client: "Client", doc: Mapping[str, Any], sent: float, sent_wall: float) -> None:
        self._client = client
        self._http: Transport = client._http
        self._timeout = client.timeout
        #: The session's id (a ULID).
        self.session_id: str = doc["session_id"]
        #: The session's owner.
        self.owner: str = doc["owner"]
        #: Seconds a lock stays closed to new grants (409 lock-delay) after
        #: a bound lease ended by the session's expiry or a force release.
        self.lock_delay: float = int(doc.get("lock_delay_ms") or 0) / 1000.0
        #: Set when the session is lost (never by a clean close).
        self.lost: threading.Event = threading.Event()

        self._mu = threading.Lock()
        self._ttl = int(doc["ttl_ms"]) / 1000.0
        self._renewed_at = sent  # time.monotonic() when the last create or renewal was sent
        self._renewed_wall = sent_wall
        self._error: Optional[SessionLost] = None
        self._ended = False
        self._leases: List[Lease] = []  # the bound leases not yet released

        self._stop = threading.Event()  # set by close to stop the watchdog
        self._watchdog = threading.Thread(target=self._watch, name="lockapi-session " + self.session_id, daemon=True)
        self._close_lock = threading.Lock()
        self._close_called = False

        # The loss watch: the bound leases it covers, each with the gen it
        # was bound at (only those bound before a query was sent are judged
        # by its answer).
        self._gen = 0
        self._watched: Dict[Lease, int] = {}
        self._loss_watch: Optional[Watch] = None
        if client.loss_watch:
            self._loss_watch = Watch(self._http, self._timeout, session_path(self.session_id), self.session_id,
                                     self._judge, self._watch_error, self._current_gen)

    def _start(self) -> "Session":
        self._watchdog.start()
        if self._loss_watch is not None:
            self._loss_watch.start()
        return self

    def __repr__(self) -> str:
        return "<lockapi.Session %s owner=%s%s>" % (self.session_id, self.owner, " lost" if self.lost.is_set() else "")

    @property
    def ttl(self) -> float:
        """The session's TTL in seconds, as of its creation or last renewal."""
        with self._mu:
            return self._ttl

    @property
    def expires_at(self) -> datetime:
        """When the session (and every bound lease) ends unless renewed, as
        far as this client can vouch for it: measured from when the last
        creation or renewal was sent."""
        with self._mu:
            return datetime.fromtimestamp(self._renewed_wall + self._ttl, tz=timezone.utc)

    @property
    def error(self) -> Optional[SessionLost]:
        """None while the session lives or after a clean close; the
        SessionLost that explains the loss once :attr:`lost` is set."""
        with self._mu:
            return self._error

    @property
    def leases(self) -> List[Lease]:
        """The bound leases acquired through this object and not released."""
        with self._mu:
            return list(self._leases)

    def check(self) -> None:
        """Raises :class:`SessionLost` if the session was lost, or if the
        expiry this client can vouch for (:attr:`expires_at`) has passed,
        whatever the watchdog did (the session, and every bound lease, is
        then lost); :class:`SessionClosed` after :meth:`close`."""
        self._expire_if_due()
        err = self.error
        if err is not None:
            raise err
        if self._close_called:
            raise SessionClosed(self.session_id)

    def acquire(self, name: str, wait: float = 0, owner: Optional[str] = None, shared: bool = False,
                limit: Optional[int] = None, fair: bool = False, metadata: Optional[Mapping[str, str]] = None,
                idempotency_key: Optional[str] = None) -> Lease:
        """Acquires the lock name bound to the session (the arguments of
        :meth:`Client.acquire` but ttl): the lease has no TTL or watchdog of
        its own, lives as long as the session, and is lost when the session
        is. ``lease.release()`` releases it alone."""
        self._check_usable()
        return self._client._acquire(name, None, wait, owner, shared, limit, fair, metadata, idempotency_key,
                                     session=self)

    def acquire_all(self, names: Sequence[str], wait: float = 0, owner: Optional[str] = None,
                    shared: bool = False, metadata: Optional[Mapping[str, str]] = None) -> List[Lease]:
        """Acquires every lock in names, or none, each bound to the session
        (see :meth:`Client.acquire_all`)."""
        self._check_usable()
        return self._client._acquire_all(names, None, wait, owner, shared, metadata, session=self)

    def renew(self, ttl: Optional[float] = None) -> None:
        """Renews the session now, with a new TTL in seconds if given (it
        then stays the session's TTL), retrying failures that may pass until
        the safety margin. Raises SessionLost, and sets :attr:`lost`, when
        the session is gone, SessionClosed after :meth:`close`."""
        self.check()
        try:
            self._renew_with_retry(self._stop, ttl)
        except _Stopped:
            raise SessionClosed(self.session_id) from None
        except SessionLost as e:
            self._end(e, lost=True)
            raise

    def close(self) -> None:
        """Stops the watchdog and ends the session on the server (DELETE),
        which releases every bound lease at once, with no lock-delay.

        Raises SessionLost when the session was lost before, or the server
        answers that it is gone: the guarded work may have overlapped another
        holder's. Any other failure is raised too, and the session then ends
        by itself within its TTL (it is no longer renewed). Not retried: a
        repeat of a DELETE whose answer was lost would read as a loss. Safe
        to call twice: later calls send nothing and return None.
        """
        with self._close_lock:
            if self._close_called:
                return
            self._close_called = True
            self._stop.set()
            if self._watchdog.is_alive() and self._watchdog is not threading.current_thread():
                self._watchdog.join()
            if self._loss_watch is not None:
                self._loss_watch.stop()
            lost = self.error
            if lost is not None:
                raise lost
            try:
                resp = self._http.request("DELETE", session_path(self.session_id), timeout=self._timeout)
            except Unavailable:
                self._end(None, lost=False)
                raise
            if resp.status == 200:
                self._end(None, lost=False)
                return
            err = error_from_response(resp.status, resp.headers, resp.body)
            if _gone(err):
                lost = self._lost_error(err)
                self._end(lost, lost=True)
                raise lost from err
            self._end(None, lost=False)
            raise err

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # the block's own exception wins
            self.close()
        except APIError:
            pass

    # Bound leases.

    def _bind(self, lease: Lease) -> None:
        with self._mu:
            ended, err, watch = self._ended, self._error, self._loss_watch
            if not ended:
                self._leases.append(lease)
                self._gen += 1
                self._watched[lease] = self._gen
        if ended:
            lease._session_ended(err)  # it ended while the acquire was answered
        elif watch is not None:
            watch.requery()  # so that it covers the new lease's lock too

    def _unbind(self, lease: Lease) -> None:
        with self._mu:
            if lease in self._leases:
                self._leases.remove(lease)
            self._watched.pop(lease, None)

    def _unwatch(self, lease: Lease) -> None:
        with self._mu:
            self._watched.pop(lease, None)

    # The loss watch.

    def _current_gen(self) -> int:
        with self._mu:
            return self._gen

    def _judge(self, doc: Mapping[str, Any], gen: int) -> bool:
        """Takes in an answer of the session's blocking query: a lease bound
        before the query was sent that it no longer lists is lost."""
        leases = cast(List[Dict[str, Any]], doc.get("leases") or [])
        listed = {str(l.get("lease_id")) for l in leases}
        with self._mu:
            lost = [l for l, g in self._watched.items() if g <= gen and l.lease_id not in listed]
            for l in lost:
                del self._watched[l]
        for l in lost:
            l._lost_by("the server no longer lists it in session %s: it was force-released or released elsewhere"
                       % self.session_id)
        return False

    def _watch_error(self, err: APIError) -> bool:
        """Takes in a refusal of the session's blocking query: 410 or 404 is
        the session's end."""
        if _gone(err):
            self._end(self._lost_error(err), lost=True)
            self._stop.set()
            return True
        return refused(err)

    def _check_usable(self) -> None:
        self.check()

    def _expire_if_due(self) -> None:
        """Ends the session as lost once the expiry it can vouch for passed."""
        with self._mu:
            due = not self._ended and time.monotonic() >= self._renewed_at + self._ttl
        if due:
            self._end(SessionLost("session %s: its expiry passed without a renewal, after which its leases may "
                                  "have other holders" % self.session_id), lost=True)

    # The watchdog.

    def _watchdog_failed(self, e: Exception) -> SessionLost:
        return SessionLost("session %s: the watchdog failed: %r" % (self.session_id, e))

    def _renew_once(self, timeout: float, ttl: Optional[float]) -> None:
        body: Dict[str, Any] = {}
        if ttl is not None:
            body["ttl_ms"] = max(1, math.ceil(ttl * 1000))
        sent, sent_wall = time.monotonic(), time.time()
        resp = self._http.request("POST", session_path(self.session_id, "renew"), body=body, timeout=timeout)
        if resp.status != 200:
            raise error_from_response(resp.status, resp.headers, resp.body)
        doc = resp.json()
        with self._mu:
            if sent > self._renewed_at:
                self._renewed_at, self._renewed_wall = sent, sent_wall
            self._ttl = int(doc["ttl_ms"]) / 1000.0

    def _safe_deadline(self) -> float:
        with self._mu:
            return self._renewed_at + self._ttl - safety_margin(self._ttl)

    # The end.

    def _end(self, err: Optional[SessionLost], lost: bool) -> None:
        """Records why the session ended, once, and ends its bound leases:
        lost with it, or released by a clean close."""
        with self._mu:
            if self._ended:
                return
            self._ended = True
            if lost:
                self._error = err
            leases, self._leases = self._leases, []
        if lost:
            logger.error("%s", err)
            self.lost.set()
        for lease in leases:
            lease._session_ended(err if lost else None)

    def _lost_error(self, cause: APIError) -> SessionLost:
        if _gone(cause):
            reason = "the server no longer has it: it expired or was deleted"
        else:
            reason = "the server refused to renew it: %s" % cause
        err = SessionLost("session %s: %s" % (self.session_id, reason), type=cause.type, status=cause.status,
                          title=cause.title, request_id=cause.request_id)
        err.__cause__ = cause
        return err

    def _timeout_error(self, last: Optional[APIError]) -> SessionLost:
        reason = ("no renewal succeeded until %.3fs before its expiry, after which its leases may have other holders"
                  % safety_margin(self.ttl))
        if last is not None:
            reason += "; last error: %s" % last
        err = SessionLost("session %s: %s" % (self.session_id, reason))
        err.__cause__ = last
        return err


def _gone(err: APIError) -> bool:
    """The server's word that the session is no more: 410, or 404 (forgotten)."""
    return err.status in (410, 404)
