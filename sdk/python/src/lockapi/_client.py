"""The client of one lockapi server."""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import socket
import ssl
import time
from typing import Any, Callable, Dict, Generator, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from . import _election
from ._election import LeaderInfo, Leadership
from ._errors import APIError, LeaseLost, LockDelay, LockHeld, Unavailable, error_from_response
from ._events import EventStream
from ._http import Transport, lock_path
from ._lease import Lease, release_all
from ._session import Session
from ._timing import Backoff, attempt_timeout
from ._transport import BaseTransport, HTTPTransport

DEFAULT_TIMEOUT = 30.0

#: The server of a Client given none, when LOCKAPI_URL is not set.
DEFAULT_URL = "http://localhost:8080"

# How often an acquire that does not wait (wait=0) sends its request at most
# when the answer is one that may pass (Unavailable): its Idempotency-Key
# makes a repeat safe, and a blip of the network or a failover should not
# fail it.
NO_WAIT_ATTEMPTS = 3

# The longest pause before such a repeat: a longer Retry-After is the
# caller's to wait for.
NO_WAIT_MAX_PAUSE = 1.0


class Client:
    """A client of the lockapi server at base_url, e.g. "http://localhost:8080".

    Without base_url, the client is configured by the environment, as every
    lockapi client is: the server is $LOCKAPI_URL (else DEFAULT_URL), and,
    unless api_key is given, the key is $LOCKAPI_API_KEY if set. With
    base_url, nothing is read from the environment. api_key is sent as a
    bearer token with every request, for a server configured with API keys.
    timeout (seconds) bounds each request that does not wait for a lock; a
    waiting acquire may take its wait on top of it. loss_watch=False turns
    off the loss watch of leases and sessions (a blocking query each, which
    tells a loss within moments): they then learn of a loss at their next
    renewal, for a client that holds thousands of leases.

    Requests go through transport, by default an :class:`HTTPTransport`:
    kept-alive connections, the proxy of HTTPS_PROXY / HTTP_PROXY unless
    NO_PROXY names the host, and ssl_context (which replaces the default one
    for https URLs; give it to your own transport instead). A Client is safe
    to share between threads. :meth:`close` (or ``with lockapi.Client(...)
    as client:``) closes its idle connections.
    """

    def __init__(self, base_url: Optional[str] = None, api_key: Optional[str] = None,
                 timeout: float = DEFAULT_TIMEOUT, ssl_context: Optional[ssl.SSLContext] = None,
                 transport: Optional[BaseTransport] = None, loss_watch: bool = True) -> None:
        if base_url is None:  # configured by the environment, as every client is
            base_url = os.environ.get("LOCKAPI_URL") or DEFAULT_URL
            if api_key is None:
                api_key = os.environ.get("LOCKAPI_API_KEY") or None
        if transport is not None and ssl_context is not None:
            raise ValueError("lockapi: give ssl_context to the transport, not to Client")
        self._http = Transport(base_url, api_key, transport or HTTPTransport(ssl_context=ssl_context))
        #: Seconds each request may take (each socket operation).
        self.timeout: float = timeout if timeout > 0 else DEFAULT_TIMEOUT
        #: Whether held leases and sessions are watched (a blocking query
        #: each) to learn of a loss at once.
        self.loss_watch: bool = loss_watch

    def close(self) -> None:
        """Closes the transport's idle connections. Leases and sessions keep
        working (a request opens a connection again); release them first."""
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def acquire(self, name: str, ttl: Optional[float] = 30.0, wait: float = 0, owner: Optional[str] = None,
                shared: bool = False, limit: Optional[int] = None, fair: bool = False,
                metadata: Optional[Mapping[str, str]] = None,
                idempotency_key: Optional[str] = None, manual: bool = False) -> Lease:
        """Acquires the lock name and returns its Lease, renewed by its
        watchdog thread every TTL/3 until ``lease.release()`` (or use
        :meth:`lock`, which releases on the way out).

        ttl: seconds the lease lasts unless renewed (None: the server's
        default). wait: seconds to wait while another owner holds the lock; 0
        tries once. A wait longer than the server's maximum (60 s by default)
        takes several requests, and failures that may pass (Unavailable) are
        retried with backoff while the wait lasts. owner: the holder's name;
        the same owner acquiring a lock it holds is reentrant (same lease and
        token, one more hold; each release drops one). None means a fresh
        owner unique to this acquire, whose release drops every hold.
        shared: a read lease. limit: take one permit of a semaphore with that
        many. fair: wait in arrival order. metadata: labels kept with the
        lease (at most 16).

        manual: start no watchdog: renew the lease with ``lease.renew()``
        more often than its TTL (or start one later with ``keep_alive()``).

        Every request of one acquire carries the same Idempotency-Key
        (idempotency_key, or a random one), so a retry that finds a grant
        whose answer was lost gets that grant back instead of a second hold.
        An acquire that does not wait is sent up to three times when the
        answer is one that may pass (Unavailable).

        Raises LockHeld when the lock is still held after the wait, LockDelay
        when it is closed for a session's lock-delay, or another APIError.
        """
        return self._acquire(name, ttl, wait, owner, shared, limit, fair, metadata, idempotency_key, manual)

    def _acquire(self, name: str, ttl: Optional[float], wait: float, owner: Optional[str], shared: bool,
                 limit: Optional[int], fair: bool, metadata: Optional[Mapping[str, str]],
                 idempotency_key: Optional[str], manual: bool = False, session: Optional[Session] = None,
                 on_lost: Optional[Callable[[LeaseLost], None]] = None) -> Lease:
        """acquire, of a lease bound to session unless that is None; on_lost
        is given to the watchdog as it starts."""
        release_all = owner is None
        if owner is None:
            owner = unique_owner()
        body: Dict[str, Any] = {"owner": owner}
        if session is not None:
            body["session"] = session.session_id  # and no ttl_ms: the session's is the lease's
        elif ttl is not None and ttl > 0:
            body["ttl_ms"] = max(1, math.ceil(ttl * 1000))
        if metadata:
            body["metadata"] = dict(metadata)
        if shared:
            body["mode"] = "shared"
        if limit:
            body["limit"] = limit
        if fair:
            body["fair"] = True
        headers = {"Idempotency-Key": idempotency_key or secrets.token_urlsafe(18)}

        deadline = time.monotonic() + wait if wait and wait > 0 else None
        backoff = Backoff(0.1, 5.0)
        path = lock_path(name, "leases")
        attempt = 0
        while True:
            attempt += 1
            left = _set_wait(body, deadline)
            sent, sent_wall = time.monotonic(), time.time()
            err: APIError
            try:
                resp = self._http.request("POST", path, body=body, headers=headers, timeout=left + self.timeout)
            except Unavailable as e:
                err, received = e, time.monotonic()
            else:
                received = time.monotonic()
                if resp.status in (200, 201):
                    replayed = resp.headers.get("idempotent-replayed", "") == "true"
                    return self._grant(resp.json(), release_all, "wait_ms" in body, sent, sent_wall, received,
                                       replayed, session, manual, on_lost)
                err = error_from_response(resp.status, resp.headers, resp.body, name)

            # Asked again only while the wait lasts: a lock still held after
            # the server's longest wait, or a failure that may pass; without
            # a wait, a failure that may pass a few times, promptly.
            if deadline is None:
                if not isinstance(err, Unavailable) or attempt >= NO_WAIT_ATTEMPTS:
                    raise err
                pause = max(backoff.next(), err.retry_after)
                if pause > NO_WAIT_MAX_PAUSE:
                    raise err
                time.sleep(pause)
                continue
            if deadline - time.monotonic() < 0.001:
                raise err
            if isinstance(err, (LockHeld, LockDelay)):
                pause = backoff.next() if received - sent < 0.1 else 0.0  # the server hardly waited: do not spin
            elif isinstance(err, Unavailable):
                pause = max(backoff.next(), err.retry_after)
            else:
                raise err
            time.sleep(max(0.0, min(pause, deadline - time.monotonic())))

    def _grant(self, doc: Mapping[str, Any], release_all: bool, waited: bool, sent: float, sent_wall: float,
               received: float, replayed: bool = False, session: Optional[Session] = None, manual: bool = False,
               on_lost: Optional[Callable[[LeaseLost], None]] = None) -> Lease:
        lease = Lease(self._http, self.timeout, doc, release_all, sent, sent_wall, replayed=replayed,
                      session=session, loss_watch=self.loss_watch)
        if session is not None:
            return lease  # kept by its session's watchdog, which measures its own renewals
        # The lease can only be vouched for from when the request was sent.
        # An acquire that waited may have been granted long after that, so
        # confirm the grant with a renewal, which measures afresh. Until then
        # the time of the answer stands in, only to bound the confirmation.
        if waited and received - sent > lease.ttl / 10:
            lease._renewed_at, lease._renewed_wall = received, sent_wall + (received - sent)
            try:
                lease.renew()
            except LeaseLost:
                try:
                    lease._delete(attempt_timeout(lease.ttl, self.timeout))
                except APIError:
                    pass
                raise
        if not manual:
            lease.keep_alive(on_lost)
        return lease

    @contextlib.contextmanager
    def lock(self, name: str, ttl: Optional[float] = 30.0, wait: float = 0, owner: Optional[str] = None,
             shared: bool = False, limit: Optional[int] = None, fair: bool = False,
             metadata: Optional[Mapping[str, str]] = None, idempotency_key: Optional[str] = None,
             on_lost: Optional[Callable[[LeaseLost], None]] = None) -> Generator[Lease, None, None]:
        """Acquires the lock (the arguments of :meth:`acquire`), keeps the
        lease alive while the block runs, and releases it on the way out,
        also on an exception::

            with client.lock("deploy:prod", ttl=10, wait=30) as lease:
                for step in steps:
                    lease.check()  # raises LeaseLost once the lease is lost
                    step(lease.fencing_token)

        When the lease is lost, ``lease.lost`` is set and on_lost (if given)
        is called from the watchdog's (or the loss watch's) thread. A block
        that ends normally after a loss raises LeaseLost on the way out: its
        work may have overlapped another holder's. An exception of the block wins over the
        release's errors.
        """
        lease = self._acquire(name, ttl, wait, owner, shared, limit, fair, metadata, idempotency_key,
                              on_lost=on_lost)
        with lease:
            yield lease

    def acquire_all(self, names: Sequence[str], ttl: Optional[float] = 30.0, wait: float = 0,
                    owner: Optional[str] = None, shared: bool = False,
                    metadata: Optional[Mapping[str, str]] = None, manual: bool = False) -> List[Lease]:
        """Acquires every lock in names, or none (POST /v1/leases): the server
        takes them one at a time in one global order and never holds some
        while it waits for the others, so overlapping calls cannot deadlock.
        Returns the leases in the order of names; each is renewed by its
        watchdog (unless manual) and released on its own, or all together
        with :func:`lockapi.release_all`. The arguments are :meth:`acquire`'s;
        limit and fair do not apply to several locks.

        Raises LockHeld naming the lock still held after the wait, or another
        APIError. Unlike acquire, a request whose answer was lost is not
        repeated (a multi-lock takes no Idempotency-Key): it raises
        Unavailable, and whatever the lost answer granted ends with its TTL.
        """
        return self._acquire_all(names, ttl, wait, owner, shared, metadata, manual)

    def _acquire_all(self, names: Sequence[str], ttl: Optional[float], wait: float, owner: Optional[str],
                     shared: bool, metadata: Optional[Mapping[str, str]], manual: bool = False,
                     session: Optional[Session] = None) -> List[Lease]:
        """acquire_all, of leases bound to session unless that is None."""
        names = list(names)
        release_all_holds = owner is None
        if owner is None:
            owner = unique_owner()
        body: Dict[str, Any] = {"locks": names, "owner": owner}
        if session is not None:
            body["session"] = session.session_id
        elif ttl is not None and ttl > 0:
            body["ttl_ms"] = max(1, math.ceil(ttl * 1000))
        if metadata:
            body["metadata"] = dict(metadata)
        if shared:
            body["mode"] = "shared"
        what = ", ".join(names)

        deadline = time.monotonic() + wait if wait and wait > 0 else None
        backoff = Backoff(0.1, 5.0)
        while True:
            left = _set_wait(body, deadline)
            sent, sent_wall = time.monotonic(), time.time()
            resp = self._http.request("POST", "/v1/leases", body=body, timeout=left + self.timeout)
            received = time.monotonic()
            if resp.status == 201:
                return self._grant_all(resp.json()["leases"], release_all_holds, "wait_ms" in body, sent, sent_wall,
                                       received, session, manual)
            err = error_from_response(resp.status, resp.headers, resp.body, what)
            if not isinstance(err, (LockHeld, LockDelay)) or deadline is None or deadline - time.monotonic() < 0.001:
                raise err
            if received - sent < 0.1:  # the server hardly waited: do not spin
                time.sleep(max(0.0, min(backoff.next(), deadline - time.monotonic())))

    def _grant_all(self, docs: Sequence[Mapping[str, Any]], release_all_holds: bool, waited: bool, sent: float,
                   sent_wall: float, received: float, session: Optional[Session], manual: bool) -> List[Lease]:
        """The leases of a granted multi-lock, all or none."""
        leases: List[Lease] = []
        for i, doc in enumerate(docs):
            try:
                leases.append(self._grant(doc, release_all_holds, waited, sent, sent_wall, received,
                                          session=session, manual=manual))
            except APIError:
                for rest in docs[i + 1:]:
                    try:
                        Lease(self._http, self.timeout, rest, release_all_holds, sent, sent_wall)._delete(self.timeout)
                    except APIError:
                        pass
                try:
                    release_all(leases)
                except APIError:
                    pass
                raise
        return leases

    def release_all(self, leases: Iterable[Lease]) -> None:
        """Releases every lease (from :meth:`acquire_all`, or any others),
        each as :meth:`Lease.release` does, also when one fails; then raises
        the first failure, if any."""
        release_all(leases)

    def session(self, ttl: Optional[float] = 10.0, lock_delay: float = 0.0,
                owner: Optional[str] = None) -> Session:
        """Starts a session (POST /v1/sessions; docs/SESSIONS.md) and its
        watchdog, which renews it every TTL/3, and with it every lease bound
        to it by ``session.acquire`` or ``session.acquire_all``::

            with client.session(ttl=10, lock_delay=5) as s:
                a = s.acquire("orders:7")
                b, c = s.acquire_all(["stock:1", "stock:2"])
                ...  # s.lost is set if the session ends; every bound lease is lost with it
            # closed here: every bound lease released at once

        ttl: seconds the session and its leases last unless renewed (None:
        the server's default, 10 s). lock_delay: seconds a lock stays closed
        to new grants (409 LockDelay) after a bound lease ended by the
        session's expiry or a force release. owner: the session's holder
        (None: a unique one). Raises APIError (``status`` 501, slug
        ``unsupported``) on a server whose store keeps no sessions.
        """
        return Session(self, *self._open_session(ttl, lock_delay, owner))._start()

    def _open_session(self, ttl: Optional[float], lock_delay: float,
                      owner: Optional[str]) -> Tuple[Dict[str, Any], float, float]:
        """Creates a session on the server: its document, and when the
        request was sent (time.monotonic(), time.time())."""
        body: Dict[str, Any] = {"owner": owner or unique_owner()}
        if ttl is not None and ttl > 0:
            body["ttl_ms"] = max(1, math.ceil(ttl * 1000))
        if lock_delay and lock_delay > 0:
            body["lock_delay_ms"] = max(1, math.ceil(lock_delay * 1000))
        sent, sent_wall = time.monotonic(), time.time()
        resp = self._http.request("POST", "/v1/sessions", body=body, timeout=self.timeout)
        if resp.status != 201:
            raise error_from_response(resp.status, resp.headers, resp.body)
        doc: Dict[str, Any] = resp.json()
        return doc, sent, sent_wall

    def events(self, prefix: Optional[str] = None, lock: Optional[str] = None,
               types: Optional[Sequence[str]] = None, after: Optional[str] = None,
               timeout: Optional[float] = None) -> EventStream:
        """Iterates over the changes of the locks selected (GET /v1/events):
        one lock, or the locks whose names start with prefix, or all the API
        key may read; only the given types (e.g. ["granted", "released"]);
        starting after the event with id after, or with the next event.

        The iterator reconnects when the connection drops or the server ends
        the stream, and resumes with Last-Event-ID after the last event it
        yielded: it sees every event the server's log keeps, in order, and
        none twice. It raises the first request's failure, and on a reconnect
        any answer but one that may pass (e.g. 410 events-gone).

        timeout: seconds after which the iteration ends (StopIteration), if
        given. ``close()`` hangs up, from any thread: the iteration ends in
        the thread that waits on it. ``with client.events(...) as events:``
        closes it on the way out.
        """
        until = time.monotonic() + timeout if timeout is not None else None
        return EventStream(self._http, self.timeout, prefix=prefix, lock=lock, types=types, after=after,
                           until=until)

    def inspect(self, name: str) -> Dict[str, Any]:
        """The lock's state (GET /v1/locks/{name}) as the server's JSON:
        held, holder or holders, fencing_token, queue_length, ..."""
        resp = self._http.request("GET", lock_path(name), timeout=self.timeout)
        if resp.status != 200:
            raise error_from_response(resp.status, resp.headers, resp.body, name)
        result: Dict[str, Any] = resp.json()
        return result

    def campaign(self, name: str, value: Optional[Mapping[str, str]] = None, ttl: Optional[float] = 30.0,
                 wait: Optional[float] = None, owner: Optional[str] = None) -> Leadership:
        """Runs for leader of the election name (docs/ELECTIONS.md): acquires
        its lock, waiting while another leads, and returns the Leadership
        with its watchdog running. value is announced as the leader's (the
        lease's metadata, at most 16 labels). wait: seconds to campaign at
        most, then LockHeld is raised; None waits until elected. ttl and
        owner are :meth:`acquire`'s: give each candidate its own owner (None:
        a unique one). Also a context manager, which resigns::

            with client.campaign("reports:leader", {"addr": addr}, ttl=10) as leadership:
                serve(leadership.term)  # until done, or leadership.lost is set
        """
        return _election.campaign(self, name, value, ttl, wait, owner)

    def leader(self, name: str) -> LeaderInfo:
        """The election's leader now (GET /v1/locks/{name}); its ``elected``
        is False when nobody leads."""
        return LeaderInfo.of_state(self.inspect(name))

    def observe(self, name: str, wait: float = _election.OBSERVE_WAIT) -> Iterator[LeaderInfo]:
        """Yields the election's leader now, then again on every change (a
        new leader, a new value, nobody leading), and nothing while nothing
        changes. Each step is one blocking query of the lock (GET
        /v1/locks/{name}?index=&wait_ms=), resuming from the last answer's
        index, waiting up to wait seconds; failures that may pass are retried
        with backoff, others raised. Leave the loop to stop: nothing is sent
        between steps. An observer may see a leader a moment after it lost
        its lease: act on the term."""
        return _election.observe(self, name, wait)

    def force_release(self, name: str) -> bool:
        """Frees the lock whoever holds it (needs the admin scope): the
        holders' leases are lost. Returns whether anything was held."""
        resp = self._http.request("DELETE", lock_path(name), timeout=self.timeout)
        if resp.status != 200:
            raise error_from_response(resp.status, resp.headers, resp.body, name)
        return bool(resp.json().get("released"))


def unique_owner() -> str:
    """An owner nobody else uses: host, process id and 48 random bits."""
    host = (socket.gethostname() or "unknown")[:64]
    return "%s:%d:%s" % (host, os.getpid(), secrets.token_hex(6))


def _set_wait(body: Dict[str, Any], deadline: Optional[float]) -> float:
    """Sets the request's wait_ms to what is left until deadline (a
    monotonic time; none when nothing is left or there is no deadline), and
    returns the seconds left."""
    left = max(0.0, deadline - time.monotonic()) if deadline is not None else 0.0
    wait_ms = int(left * 1000)
    if wait_ms > 0:
        body["wait_ms"] = wait_ms
    else:
        body.pop("wait_ms", None)
    return left
