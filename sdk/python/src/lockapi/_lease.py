"""A held lock, and the watchdog that keeps it alive."""

from __future__ import annotations

import math
import threading
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, Optional, cast

from ._errors import APIError, LeaseLost, LeaseReleased, SessionLost, Unavailable, error_from_response
from ._http import Transport, lock_path
from ._log import logger
from ._timing import attempt_timeout, renew_backoff, safety_margin
from ._watch import Watch, refused

if TYPE_CHECKING:
    from ._session import Session

# How often release sends its request at most.
RELEASE_ATTEMPTS = 3


class _Stopped(Exception):
    """Release stopped the watchdog while it was renewing."""


class _Renewable:
    """What a watchdog keeps alive: a Lease, or a Session. Both renew by the
    same rules; each supplies its renewal request (_renew_once), its safe
    deadline and its loss errors."""

    _mu: threading.Lock
    _stop: threading.Event
    _renewed_at: float
    _ttl: float
    _timeout: float
    _ended: bool

    @property
    def ttl(self) -> float:
        raise NotImplementedError

    def _renew_once(self, timeout: float, ttl: Optional[float]) -> None:
        raise NotImplementedError

    def _safe_deadline(self) -> float:
        raise NotImplementedError

    def _end(self, err: Any, lost: bool) -> None:
        raise NotImplementedError

    def _watchdog_failed(self, e: Exception) -> LeaseLost:
        raise NotImplementedError

    def _lost_error(self, cause: APIError) -> LeaseLost:
        raise NotImplementedError

    def _timeout_error(self, last: Optional[APIError]) -> LeaseLost:
        raise NotImplementedError

    def _watch(self) -> None:
        """The watchdog thread: renews every TTL/3 until _stop is set (a
        release or a close) or the lease or session is lost."""
        try:
            while not self._ended:  # check() may have found it expired
                with self._mu:
                    next_at = self._renewed_at + self._ttl / 3
                if self._stop.wait(max(0.0, next_at - time.monotonic())):
                    return
                try:
                    self._renew_with_retry(self._stop)
                except _Stopped:
                    return
                except LeaseLost as e:  # a SessionLost is one too
                    if not self._stop.is_set():  # else release or close reports it
                        self._end(e, lost=True)
                    return
        except Exception as e:  # a bug or a garbled answer: never renew blindly
            err = self._watchdog_failed(e)
            err.__cause__ = e
            self._end(err, lost=True)

    def _renew_with_retry(self, stop: threading.Event, ttl: Optional[float] = None) -> None:
        """Renews, retrying failures that may pass until the safety margin
        before its expiry. Raises the loss error (LeaseLost or SessionLost),
        or _Stopped once stop is set."""
        backoff = renew_backoff(self.ttl)
        last: Optional[APIError] = None
        while True:
            safe = self._safe_deadline()
            now = time.monotonic()
            if now >= safe:
                raise self._timeout_error(last)
            try:
                self._renew_once(min(safe - now, attempt_timeout(self.ttl, self._timeout)), ttl)
                return
            except Unavailable as e:
                last = e
            except APIError as e:
                raise self._lost_error(e) from e
            now = time.monotonic()
            pause = max(0.0, min(safe, now + backoff.next()) - now)
            logger.warning("%r: a renewal failed, retried in %.3fs (%.3fs left before it is given up): %s",
                           self, pause, safe - now, last)
            if stop.wait(pause):
                raise _Stopped()


class Lease(_Renewable):
    """A held lock.

    A watchdog thread, started by :meth:`Client.acquire` (unless
    ``manual=True``; then :meth:`keep_alive` starts it), renews the lease
    every TTL/3 until :meth:`release`, or until it is lost: then :attr:`lost`
    is set and :attr:`error` says why.

    With the watchdog runs a loss watch (a blocking query on the lock; for a
    bound lease, its session's one) that sets :attr:`lost` within moments of
    a force release or an expiry, rather than at the next renewal; a Client
    made with ``loss_watch=False`` has none. A watch that fails is retried
    and never makes a lease lost by itself.

    The watchdog retries renewals that fail in ways that may pass (network
    errors, 503, 429: :class:`Unavailable`) with exponential backoff and
    jitter, but only while the lease is surely still held: it declares the
    lease lost once less than a safety margin (a fifth of the TTL) is left
    before the last expiry it can vouch for, since after that another holder
    may exist. Any other refusal (410 lease-lost, 404, 403) is final at once.

    A lease bound to a session (:meth:`Session.acquire`) has no watchdog of
    its own: the session's renews it, its TTL and expiry are the session's,
    and it is lost when the session is (:attr:`error` is then a
    :class:`SessionLost`). A clean :meth:`Session.close` releases it.

    Holding is never certain: a process can pause past its lease. Pass
    :attr:`fencing_token` to the resources you guard, and have them refuse
    tokens smaller than one they have seen.
    """

    def __init__(self, transport: Transport, timeout: float, doc: Mapping[str, Any],
                 release_all: bool, sent: float, sent_wall: float, replayed: bool = False,
                 session: Optional["Session"] = None, loss_watch: bool = False) -> None:
        self._http = transport
        self._timeout = timeout
        #: The lock's name.
        self.name: str = doc["lock"]
        #: The lease id: the capability to renew and release the lease.
        self.lease_id: str = doc["lease_id"]
        #: The owner the lease was granted to.
        self.owner: str = doc["owner"]
        #: Larger than that of every earlier grant of the lock; a reentrant
        #: acquire returns the same token.
        self.fencing_token: int = int(doc["fencing_token"])
        self.metadata: Dict[str, str] = dict(doc.get("metadata") or {})
        #: True for a shared (read) lease.
        self.shared: bool = doc.get("mode") == "shared"
        #: The semaphore's number of permits, or 0 for a lock.
        self.limit: int = int(doc.get("limit") or 0)
        #: True when the server answered a repeat of an earlier acquire
        #: (same idempotency key) with the lease it granted then.
        self.replayed: bool = replayed
        #: The session the lease is bound to, or None.
        self.session: Optional["Session"] = session
        #: The id of the session the lease is bound to, as the server said, or None.
        self.session_id: Optional[str] = doc.get("session") or None
        #: Set when the lease is lost: the loss watch saw the lock no longer
        #: held by it (force-released, expired, its session lost), a renewal
        #: or the release was refused (410 lease-lost), or no renewal
        #: succeeded in time. Not set by a successful release.
        self.lost: threading.Event = threading.Event()

        # release_all: the owner is unique to this lease, so release drops
        # every hold.
        self._release_all = release_all
        self._mu = threading.Lock()
        self._ttl = int(doc["ttl_ms"]) / 1000.0
        self._hold_count = int(doc.get("hold_count") or 1)
        self._renewed_at = sent  # time.monotonic() when the last acquire or renewal was sent
        self._renewed_wall = sent_wall  # the same moment on the wall clock
        self._error: Optional[LeaseLost] = None
        self._gone = False  # the server said the lease is gone (410)
        self._ended = False

        self._stop = threading.Event()  # set by release to stop the watchdog
        self._watchdog: Optional[threading.Thread] = None
        self._loss_watch_on = loss_watch
        self._loss_watch: Optional[Watch] = None
        self._on_lost: Optional[Callable[[LeaseLost], None]] = None
        self._release_lock = threading.Lock()
        self._release_called = False
        self._closed_by_session = False  # a clean Session.close released it
        if session is not None:
            session._bind(self)

    def __repr__(self) -> str:
        return "<lockapi.Lease %s lease_id=%s owner=%s fencing_token=%d%s>" % (
            self.name, self.lease_id, self.owner, self.fencing_token, " lost" if self.lost.is_set() else "")

    @property
    def ttl(self) -> float:
        """The lease's TTL in seconds, as of the last acquire or renewal (a
        bound lease's is its session's)."""
        if self.session is not None:
            return self.session.ttl
        with self._mu:
            return self._ttl

    @property
    def hold_count(self) -> int:
        """The reentrant holds, as of the last acquire or renewal."""
        with self._mu:
            return self._hold_count

    @property
    def expires_at(self) -> datetime:
        """When the lease ends unless renewed, as far as this client can
        vouch for it: measured from when the last successful acquire or
        renewal was sent, so never later than the server's own expiry. A
        bound lease's is its session's."""
        if self.session is not None:
            return self.session.expires_at
        with self._mu:
            return datetime.fromtimestamp(self._renewed_wall + self._ttl, tz=timezone.utc)

    @property
    def error(self) -> Optional[LeaseLost]:
        """None while the lease is held or after a clean release; the
        LeaseLost that explains the loss once :attr:`lost` is set."""
        with self._mu:
            return self._error

    def check(self) -> None:
        """Raises :class:`LeaseLost` if the lease was lost, or if the expiry
        this client can vouch for (:attr:`expires_at`) has passed, whatever
        the watchdog did (none runs in manual mode; a paused process may
        find its watchdog late): call it between steps of the guarded work.
        The lease is then lost. Raises :class:`LeaseReleased` after
        :meth:`release`."""
        if self.session is not None:
            self.session._expire_if_due()  # and so every bound lease
        elif not self._ended and time.monotonic() >= self._vouched_until():
            self._end(self._expired_error(), lost=True)
        err = self.error
        if err is not None:
            raise err
        if self._release_called or self._closed_by_session:
            raise LeaseReleased(self.name, self.lease_id)

    def keep_alive(self, on_lost: Optional[Callable[[LeaseLost], None]] = None) -> "Lease":
        """Starts the watchdog thread and the loss watch's (once; later
        calls do nothing) and returns the lease. on_lost, if given, is
        called once from either thread with the LeaseLost error when the
        lease is lost, e.g. to stop a child process. A bound lease starts no
        thread (its session's watchdog and loss watch keep it), and on_lost
        is called when it is lost. Raises :class:`LeaseReleased` after
        :meth:`release`."""
        if self._release_called or self._closed_by_session:
            raise LeaseReleased(self.name, self.lease_id)
        with self._mu:
            if on_lost is not None and self._on_lost is None:
                self._on_lost = on_lost
            if self.session is not None or self._watchdog is not None or self._ended or self._release_called:
                return self
            self._watchdog = threading.Thread(target=self._watch, name="lockapi-watchdog " + self.name, daemon=True)
            self._watchdog.start()
            if self._loss_watch_on:
                self._loss_watch = Watch(self._http, self._timeout, lock_path(self.name), self.name,
                                         self._judge, refused).start()
        return self

    def renew(self, ttl: Optional[float] = None) -> None:
        """Renews the lease now, with a new TTL in seconds if given (it then
        stays the lease's TTL). Failures that may pass are retried until the
        safety margin before the expiry. Raises LeaseLost, and sets
        :attr:`lost`, when the lease is gone. A bound lease renews its
        session (:meth:`Session.renew`). Raises :class:`LeaseReleased` after
        :meth:`release`."""
        err = self.error
        if err is not None:
            raise err
        if self._release_called or self._closed_by_session:
            raise LeaseReleased(self.name, self.lease_id)
        if self.session is not None:
            try:
                self.session.renew(ttl)
            except SessionLost as e:
                raise (self.error or e) from e
            return
        try:
            self._renew_with_retry(self._stop, ttl)
        except _Stopped:
            raise LeaseReleased(self.name, self.lease_id) from None
        except LeaseLost as e:
            self._end(e, lost=True)
            raise

    def update_metadata(self, metadata: Optional[Mapping[str, str]]) -> None:
        """Replaces the lease's metadata (PATCH /v1/locks/{name}/leases/{id}),
        leaving its token and TTL as they are: watchers of the lock see the
        change (a leader's proclaim, docs/ELECTIONS.md). Raises LeaseLost,
        and sets :attr:`lost`, when the lease is gone (410)."""
        self.check()
        resp = self._http.request("PATCH", lock_path(self.name, "leases", self.lease_id),
                                  body={"metadata": dict(metadata or {})}, timeout=self._timeout)
        if resp.status != 200:
            err = error_from_response(resp.status, resp.headers, resp.body, self.name)
            if isinstance(err, LeaseLost):
                with self._mu:
                    self._gone = True
                lost = self._lost_error(err)
                self._end(lost, lost=True)
                raise lost from err
            raise err
        self.metadata = dict(resp.json().get("metadata") or {})

    def release(self) -> None:
        """Stops the watchdog and releases the lease: one hold, or every hold
        when the acquire named no owner. No renewal is sent after it returns.

        Raises LeaseLost when the lease was lost before (by the watchdog's
        account, or the server answers 410): the guarded work may have
        overlapped another holder's. Failures that may pass are retried a few
        times while that is safe, then raised; the lease then ends by itself
        within its TTL. Safe to call twice: later calls send nothing and
        return None.
        """
        with self._release_lock:
            if self._release_called:
                return
            self._release_called = True
            self._stop.set()
            watchdog = self._watchdog
            if watchdog is not None and watchdog is not threading.current_thread():
                watchdog.join()
            if self._loss_watch is not None:
                self._loss_watch.stop()
            if self.session is not None:
                self.session._unwatch(self)  # its release is no loss

            with self._mu:
                lost, gone, closed = self._error, self._gone, self._closed_by_session
            if closed:
                return  # its session's close released it
            if lost is not None:
                if not gone:
                    # Lost by the watchdog's deadline: the server may still
                    # hold the lease, and releasing it frees the lock sooner.
                    try:
                        self._delete(attempt_timeout(self.ttl, self._timeout))
                    except APIError:
                        pass
                raise lost
            try:
                self._delete_with_retry()
            except LeaseLost as e:
                err = self._lost_error(e)
                self._end(err, lost=True)
                raise err from e
            finally:
                self._end(None, lost=False)  # no-op once ended above
                if self.session is not None:
                    self.session._unbind(self)

    def __enter__(self) -> "Lease":
        return self.keep_alive()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.release()
            return
        # The block's own exception wins; a loss stays readable on the lease.
        try:
            self.release()
        except APIError:
            pass

    # The watchdog.

    def _watchdog_failed(self, e: Exception) -> LeaseLost:
        return LeaseLost("lock %r, lease %s: the watchdog failed: %r" % (self.name, self.lease_id, e))

    def _renew_once(self, timeout: float, ttl: Optional[float]) -> None:
        body: Dict[str, Any] = {}
        if ttl is not None:
            body["ttl_ms"] = max(1, math.ceil(ttl * 1000))
        sent, sent_wall = time.monotonic(), time.time()
        resp = self._http.request("POST", lock_path(self.name, "leases", self.lease_id, "renew"),
                                  body=body, timeout=timeout)
        if resp.status != 200:
            err = error_from_response(resp.status, resp.headers, resp.body, self.name)
            if isinstance(err, LeaseLost):
                with self._mu:
                    self._gone = True
            raise err
        doc = resp.json()
        with self._mu:
            if sent > self._renewed_at:
                self._renewed_at, self._renewed_wall = sent, sent_wall
            self._ttl = int(doc["ttl_ms"]) / 1000.0
            self._hold_count = int(doc.get("hold_count") or self._hold_count)

    def _vouched_until(self) -> float:
        """The expiry this client can vouch for, as a time.monotonic()."""
        with self._mu:
            return self._renewed_at + self._ttl

    def _safe_deadline(self) -> float:
        """When the watchdog gives the lease up: its expiry less the margin."""
        if self.session is not None:
            return self.session._safe_deadline()
        with self._mu:
            return self._renewed_at + self._ttl - safety_margin(self._ttl)

    # Release.

    def _delete_with_retry(self) -> None:
        """Sends the release, and retries failures that may pass a few times,
        while the lease may still be held and a retry cannot drop more holds
        than this lease has."""
        idempotent = self._release_all or self.hold_count <= 1
        backoff = renew_backoff(self.ttl)
        attempt = 1
        while True:
            try:
                self._delete(self._timeout)
                return
            except Unavailable:
                safe = self._safe_deadline()
                now = time.monotonic()
                if not idempotent or attempt >= RELEASE_ATTEMPTS or now >= safe:
                    raise
            attempt += 1
            time.sleep(max(0.0, min(safe, now + backoff.next()) - now))

    def _delete(self, timeout: float) -> None:
        query = {"all": "true"} if self._release_all else None
        resp = self._http.request("DELETE", lock_path(self.name, "leases", self.lease_id),
                                  query=query, timeout=timeout)
        if resp.status != 200:
            raise error_from_response(resp.status, resp.headers, resp.body, self.name)

    # The loss watch.

    def _judge(self, doc: Mapping[str, Any], gen: int) -> bool:
        """Takes in an answer of the lock's blocking query: a state that saw
        this lease's grant (its fencing token) and no longer lists it among
        the holders means the lease is lost."""
        if int(doc.get("fencing_token") or 0) < self.fencing_token:
            return False
        holders = cast(List[Dict[str, Any]], doc.get("holders") or [])
        for h in holders:
            if int(h.get("fencing_token") or 0) == self.fencing_token and h.get("owner") == self.owner:
                return False
        self._lost_by("the server no longer lists it among the lock's holders: it was force-released or expired")
        return True

    def _lost_by(self, reason: str) -> None:
        """Ends the lease as lost, shown by a watch: the server no longer has
        it. Its watchdog stops, having nothing left to renew."""
        with self._mu:
            self._gone = True
        self._end(LeaseLost("lock %r, lease %s, fencing token %d: %s"
                            % (self.name, self.lease_id, self.fencing_token, reason)), lost=True)
        self._stop.set()

    # The end.

    def _end(self, err: Optional[LeaseLost], lost: bool) -> None:
        """Records why the lease ended, once; sets lost and calls on_lost."""
        with self._mu:
            if self._ended:
                return
            self._ended = True
            if lost:
                self._error = err
            on_lost = self._on_lost
        if lost:
            logger.error("%s", err)
            self.lost.set()
            if on_lost is not None and err is not None:
                try:
                    on_lost(err)
                except Exception:  # the callback's failure is not the lease's: log it, go on
                    logger.exception("lock %r, lease %s: the on_lost callback raised", self.name, self.lease_id)

    def _session_ended(self, err: Optional[SessionLost]) -> None:
        """Its session ended: lost with err, or released by a clean close
        (err None). Either way the server no longer holds the lease."""
        with self._mu:
            self._gone = True
            if err is None:
                self._closed_by_session = True
        if err is None:
            self._end(None, lost=False)
            return
        lost = SessionLost("lock %r, lease %s, fencing token %d: its session was lost: %s"
                           % (self.name, self.lease_id, self.fencing_token, err),
                           type=err.type, status=err.status, title=err.title, request_id=err.request_id)
        lost.__cause__ = err
        self._end(lost, lost=True)

    def _lost_error(self, cause: APIError) -> LeaseLost:
        if cause.status == 410:
            reason = "the server no longer has it: it expired or was force-released"
        else:
            reason = "the server refused to renew it: %s" % cause
        err = LeaseLost("lock %r, lease %s, fencing token %d: %s" % (self.name, self.lease_id, self.fencing_token, reason),
                        type=cause.type, status=cause.status, title=cause.title, request_id=cause.request_id)
        err.__cause__ = cause
        return err

    def _expired_error(self) -> LeaseLost:
        return LeaseLost("lock %r, lease %s, fencing token %d: its expiry passed without a renewal, after which "
                         "another holder may exist" % (self.name, self.lease_id, self.fencing_token))

    def _timeout_error(self, last: Optional[APIError]) -> LeaseLost:
        reason = ("no renewal succeeded until %.3fs before its expiry, after which another holder may exist"
                  % safety_margin(self.ttl))
        if last is not None:
            reason += "; last error: %s" % last
        else:
            reason += "; none could even be sent in time (was this process paused or starved of CPU?)"
        err = LeaseLost("lock %r, lease %s, fencing token %d: %s" % (self.name, self.lease_id, self.fencing_token, reason))
        err.__cause__ = last
        return err


def release_all(leases: Iterable[Lease]) -> None:
    """Releases every lease (from :meth:`Client.acquire_all`, or any
    others), each as :meth:`Lease.release` does, also when one fails; then
    raises the first failure, if any."""
    errors: List[APIError] = []
    for lease in leases:
        try:
            lease.release()
        except APIError as e:
            errors.append(e)
    if errors:
        raise errors[0]
