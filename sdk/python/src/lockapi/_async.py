"""asyncio: AsyncClient, the Client's API for coroutines.

The requests are the sync client's own (request building, retries, error
mapping, the timing of renewals), each sent from a thread of its own, so
that no wait (a waiting acquire, a blocking query, the event stream) ever
blocks the event loop. What keeps a lease alive is asyncio's: the watchdog
and the loss watch are Tasks, ``lost`` is an :class:`asyncio.Event`, and a
lost lease cancels the task running its ``async with`` block, as
``asyncio.timeout`` cancels its block (the block sees CancelledError, and
``async with`` raises LeaseLost).
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from datetime import datetime
from typing import (Any, AsyncIterator, Awaitable, Callable, Dict, Iterator, List, Mapping, Optional, Sequence,
                    Type, TypeVar, cast)

from . import _election
from ._client import DEFAULT_TIMEOUT, Client
from ._election import LeaderInfo
from ._errors import APIError, LeaseLost, LeaseReleased, LockDelay, LockHeld, SessionLost, Unavailable, \
    error_from_response
from ._events import Event, EventStream
from ._http import Answer, Transport, lock_path
from ._lease import Lease, _Renewable, _Stopped, release_all
from ._session import Session, session_path
from ._timing import Backoff
from ._transport import BaseTransport
from ._watch import WATCH_WAIT_MS, Watch, refused

T = TypeVar("T")


def _in_thread(fn: Callable[[], T]) -> "asyncio.Future[T]":
    """Runs fn in a thread of its own (a waiting request may take a minute:
    a shared pool would run out) and returns a future of its result."""
    loop = asyncio.get_running_loop()
    fut: "asyncio.Future[T]" = loop.create_future()

    def settle(result: Any, exc: Optional[BaseException]) -> None:
        if fut.cancelled():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)

    def target() -> None:
        result: Any = None
        exc: Optional[BaseException] = None
        try:
            result = fn()
        except BaseException as e:  # handed to the awaiting coroutine
            exc = e
        try:
            loop.call_soon_threadsafe(settle, result, exc)
        except RuntimeError:
            pass  # the loop is closed: nobody awaits the answer any more

    # A future nobody awaits any more (its awaiter was cancelled) must not
    # log "exception was never retrieved".
    fut.add_done_callback(lambda f: f.cancelled() or f.exception())
    threading.Thread(target=target, name="lockapi-async", daemon=True).start()
    return fut


class _Keeper:
    """What AsyncLease and AsyncSession share: a watchdog Task, a loss watch
    Task, and the loop they report to."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._watchdog: Optional["asyncio.Task[None]"] = None
        self._watch: Optional[_LossWatch] = None
        self._renewing: Optional["asyncio.Future[None]"] = None

    def _in_loop(self, fn: Callable[[], None]) -> None:
        """Calls fn in the loop's thread: now when that is this one."""
        if threading.get_ident() == self._loop_thread:
            fn()
            return
        try:
            self._loop.call_soon_threadsafe(fn)
        except RuntimeError:
            pass  # the loop is closed

    async def _keep(self, r: _Renewable) -> None:
        """The watchdog Task: renews r every TTL/3 (each renewal, with its
        retries, in a thread) until r._stop is set or r is lost."""
        try:
            while not r._ended:
                with r._mu:
                    next_at = r._renewed_at + r._ttl / 3
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                if r._stop.is_set():
                    return
                fut = _in_thread(lambda: r._renew_with_retry(r._stop))
                self._renewing = fut
                try:
                    # Shielded: a stop cancels this Task, and waits for the
                    # renewal in flight (r._stop ends its retries).
                    await asyncio.shield(fut)
                except _Stopped:
                    return
                except LeaseLost as e:  # a SessionLost is one too
                    if not r._stop.is_set():
                        r._end(e, lost=True)
                    return
                finally:
                    self._renewing = None
        except Exception as e:  # a bug or a garbled answer: never renew blindly
            err = r._watchdog_failed(e)
            err.__cause__ = e
            r._end(err, lost=True)

    async def _stop_tasks(self, r: _Renewable) -> None:
        """Stops the watchdog and the loss watch; returns once no renewal is
        in flight any more."""
        r._stop.set()
        renewing = self._renewing
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._watch is not None:
            self._watch.stop()
        if renewing is not None:
            await asyncio.wait({renewing})


class AsyncLease(_Keeper):
    """A held lock, as :class:`Lease` is, for coroutines: get one with
    :meth:`AsyncClient.acquire` or :meth:`AsyncClient.lock`.

    Its watchdog is an asyncio Task that renews it every TTL/3 (by the same
    rules as a Lease's), and its loss watch a Task too. :attr:`lost` is an
    :class:`asyncio.Event`. Used as ``async with lease:`` (or through
    :meth:`AsyncClient.lock`), a loss cancels the task running the block,
    and the ``async with`` raises :class:`LeaseLost`.
    """

    def __init__(self, lease: Lease, session: Optional["AsyncSession"] = None) -> None:
        super().__init__()
        self._lease = lease
        #: The lock's name.
        self.name: str = lease.name
        #: The lease id.
        self.lease_id: str = lease.lease_id
        #: The owner the lease was granted to.
        self.owner: str = lease.owner
        #: The fencing token: pass it to what the lock guards.
        self.fencing_token: int = lease.fencing_token
        #: True for a shared (read) lease.
        self.shared: bool = lease.shared
        #: The semaphore's number of permits, or 0 for a lock.
        self.limit: int = lease.limit
        #: True when the server answered a repeated acquire with its earlier grant.
        self.replayed: bool = lease.replayed
        #: The session the lease is bound to, or None.
        self.session: Optional[AsyncSession] = session
        #: The id of the session the lease is bound to, or None.
        self.session_id: Optional[str] = lease.session_id
        #: Set when the lease is lost (never by a clean release).
        self.lost: asyncio.Event = asyncio.Event()
        self._on_lost: Optional[Callable[[LeaseLost], None]] = None
        self._block: Optional["asyncio.Task[Any]"] = None  # the task running `async with lease:`
        self._block_cancelling = 0
        self._cancelled_block = False
        with lease._mu:
            lease._on_lost = self._lost_in_any_thread
            ended, err = lease._ended, lease._error
        if ended and err is not None:
            self._lost_in_any_thread(err)

    def __repr__(self) -> str:
        return "<lockapi.AsyncLease %s lease_id=%s owner=%s fencing_token=%d%s>" % (
            self.name, self.lease_id, self.owner, self.fencing_token, " lost" if self.lost.is_set() else "")

    @property
    def metadata(self) -> Dict[str, str]:
        """The lease's metadata, as granted or last updated."""
        return self._lease.metadata

    @property
    def ttl(self) -> float:
        """The lease's TTL in seconds (a bound lease's is its session's)."""
        return self._lease.ttl

    @property
    def hold_count(self) -> int:
        """The reentrant holds, as of the last acquire or renewal."""
        return self._lease.hold_count

    @property
    def expires_at(self) -> datetime:
        """When the lease ends unless renewed, as far as this client can vouch for it."""
        return self._lease.expires_at

    @property
    def error(self) -> Optional[LeaseLost]:
        """None while held or after a clean release; why it was lost once :attr:`lost` is set."""
        return self._lease.error

    def check(self) -> None:
        """Raises LeaseLost if the lease was lost or its vouched expiry has
        passed, LeaseReleased after :meth:`release` (see :meth:`Lease.check`)."""
        self._lease.check()

    def keep_alive(self, on_lost: Optional[Callable[[LeaseLost], None]] = None) -> "AsyncLease":
        """Starts the watchdog Task and the loss watch's (once) and returns
        the lease. on_lost, if given, is called in the event loop's thread
        when the lease is lost. Raises LeaseReleased after :meth:`release`."""
        lease = self._lease
        if lease._release_called or lease._closed_by_session:
            raise LeaseReleased(self.name, self.lease_id)
        if on_lost is not None and self._on_lost is None:
            self._on_lost = on_lost
        if lease.session is not None or self._watchdog is not None or lease._ended:
            return self
        self._watchdog = self._loop.create_task(self._keep(lease))
        if lease._loss_watch_on:
            self._watch = _LossWatch(lease._http, lease._timeout, lock_path(self.name), lease._judge, refused).start()
        return self

    async def renew(self, ttl: Optional[float] = None) -> None:
        """Renews the lease now (see :meth:`Lease.renew`)."""
        await _in_thread(lambda: self._lease.renew(ttl))

    async def update_metadata(self, metadata: Optional[Mapping[str, str]]) -> None:
        """Replaces the lease's metadata (see :meth:`Lease.update_metadata`)."""
        await _in_thread(lambda: self._lease.update_metadata(metadata))

    async def release(self) -> None:
        """Stops the watchdog and releases the lease (see :meth:`Lease.release`)."""
        await self._stop_tasks(self._lease)
        await _in_thread(self._lease.release)

    async def __aenter__(self) -> "AsyncLease":
        self.keep_alive()
        task = asyncio.current_task()
        self._block = task
        uncancel = getattr(task, "cancelling", None)
        self._block_cancelling = uncancel() if uncancel is not None else 0
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Any) -> None:
        task, self._block = self._block, None  # no cancel after this
        ours = False  # the block's CancelledError is the loss's alone
        if self._cancelled_block:
            # Undo the loss's cancel (3.11+), whatever the block did with
            # it; one from outside as well leaves the task cancelling.
            uncancel = getattr(task, "uncancel", None)
            left = uncancel() if uncancel is not None else 0
            ours = exc_type is not None and issubclass(exc_type, asyncio.CancelledError) \
                and left <= self._block_cancelling
        if ours:
            await self._release_quietly()
            raise (self.error or LeaseLost("lock %r: lost" % self.name)) from exc
        if exc_type is None:
            await self.release()
            return
        await self._release_quietly()  # the block's own exception wins

    async def _release_quietly(self) -> None:
        try:
            await self.release()
        except APIError:
            pass

    def _lost_in_any_thread(self, err: LeaseLost) -> None:
        """The sync lease's on_lost: it may come from a renewal's thread."""
        self._in_loop(lambda: self._lost(err))

    def _lost(self, err: LeaseLost) -> None:
        self.lost.set()
        if self._watchdog is not None and self._renewing is None and self._watchdog is not asyncio.current_task():
            self._watchdog.cancel()
        block = self._block
        if block is not None and block is not asyncio.current_task() and not block.done():
            self._cancelled_block = True
            block.cancel()
        if self._watch is not None:
            self._watch.stop()
        if self._on_lost is not None:
            try:
                self._on_lost(err)
            except Exception:  # the callback's failure is not the lease's: log it, go on
                from ._log import logger
                logger.exception("lock %r, lease %s: the on_lost callback raised", self.name, self.lease_id)


class _LoopSession(Session):
    """A Session whose end is told to its AsyncSession."""

    _told: Optional[Callable[[], None]] = None

    def _end(self, err: Optional[SessionLost], lost: bool) -> None:
        super()._end(err, lost)
        told = self._told
        if lost and told is not None:
            told()


class AsyncSession(_Keeper):
    """A session of the server, as :class:`Session` is, for coroutines: get
    one with :meth:`AsyncClient.session`. Its watchdog and loss watch are
    Tasks; :attr:`lost` is an :class:`asyncio.Event`. ``async with
    client.session(...) as s:`` closes it on the way out (``await
    client.session(...)`` gives it without the block)."""

    def __init__(self, session: _LoopSession, loss_watch: bool) -> None:
        super().__init__()
        self._session = session
        #: The session's id.
        self.session_id: str = session.session_id
        #: The session's owner.
        self.owner: str = session.owner
        #: Seconds a lock stays closed after a bound lease's loss.
        self.lock_delay: float = session.lock_delay
        #: Set when the session is lost (never by a clean close).
        self.lost: asyncio.Event = asyncio.Event()
        session._told = lambda: self._in_loop(self.lost.set)
        if session.lost.is_set():
            self.lost.set()
        self._watchdog = self._loop.create_task(self._keep(session))
        if loss_watch:
            self._watch = _LossWatch(session._http, session._timeout, session_path(self.session_id),
                                     session._judge, session._watch_error, session._current_gen).start()

    def __repr__(self) -> str:
        return "<lockapi.AsyncSession %s owner=%s%s>" % (self.session_id, self.owner,
                                                         " lost" if self.lost.is_set() else "")

    @property
    def ttl(self) -> float:
        """The session's TTL in seconds."""
        return self._session.ttl

    @property
    def expires_at(self) -> datetime:
        """When the session ends unless renewed, as far as this client can vouch for it."""
        return self._session.expires_at

    @property
    def error(self) -> Optional[SessionLost]:
        """None while the session lives or after a clean close; why it was lost once :attr:`lost` is set."""
        return self._session.error

    def check(self) -> None:
        """Raises SessionLost or SessionClosed (see :meth:`Session.check`)."""
        self._session.check()

    async def acquire(self, name: str, wait: float = 0, owner: Optional[str] = None, shared: bool = False,
                      limit: Optional[int] = None, fair: bool = False, metadata: Optional[Mapping[str, str]] = None,
                      idempotency_key: Optional[str] = None) -> AsyncLease:
        """Acquires the lock name bound to the session (see :meth:`Session.acquire`)."""
        s = self._session
        s._check_usable()
        lease = await _granted(_in_thread(lambda: s._client._acquire(
            name, None, wait, owner, shared, limit, fair, metadata, idempotency_key, session=s)))
        return self._bound(lease)

    async def acquire_all(self, names: Sequence[str], wait: float = 0, owner: Optional[str] = None,
                          shared: bool = False, metadata: Optional[Mapping[str, str]] = None) -> List[AsyncLease]:
        """Acquires every lock in names, or none, each bound to the session."""
        s = self._session
        s._check_usable()
        leases = await _granted(_in_thread(lambda: s._client._acquire_all(names, None, wait, owner, shared,
                                                                          metadata, session=s)))
        return [self._bound(lease) for lease in leases]

    def _bound(self, lease: Lease) -> AsyncLease:
        if self._watch is not None:
            self._watch.requery()  # so that it covers the new lease's lock too
        return AsyncLease(lease, self)

    async def renew(self, ttl: Optional[float] = None) -> None:
        """Renews the session now (see :meth:`Session.renew`)."""
        await _in_thread(lambda: self._session.renew(ttl))

    async def close(self) -> None:
        """Stops the watchdog and ends the session, releasing every bound
        lease (see :meth:`Session.close`)."""
        await self._stop_tasks(self._session)
        await _in_thread(self._session.close)

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Any) -> None:
        if exc_type is None:
            await self.close()
            return
        try:  # the block's own exception wins
            await self.close()
        except APIError:
            pass


class _SessionStart:
    """client.session(...): awaitable, or an async context manager."""

    def __init__(self, start: Callable[[], Awaitable[AsyncSession]]) -> None:
        self._start = start
        self._session: Optional[AsyncSession] = None

    def __await__(self) -> Any:
        return self._start().__await__()

    async def __aenter__(self) -> AsyncSession:
        self._session = await self._start()
        return self._session

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Any) -> None:
        if self._session is not None:
            await self._session.__aexit__(exc_type, exc, tb)


class _LossWatch(Watch):
    """The loss watch (:class:`_watch.Watch`) as a Task: each blocking
    query in a thread, aborted by stop or requery; the answers taken in by
    the same callbacks."""

    def __init__(self, transport: Transport, timeout: float, path: str,
                 on_answer: Callable[[Any, int], bool], on_error: Callable[[APIError], bool],
                 current_gen: Callable[[], int] = lambda: 0) -> None:
        super().__init__(transport, timeout, path, path, on_answer, on_error, current_gen)
        self._task: Optional["asyncio.Task[None]"] = None

    def start(self) -> "_LossWatch":
        self._task = asyncio.get_running_loop().create_task(self._run_task())
        return self

    def stop(self) -> None:
        """Stops the watch (in the loop's thread): no answer is taken in after it returns."""
        with self._mu:
            self._stopped.set()
            abort = self._abort
        if abort is not None:
            abort()
        if self._task is not None:
            self._task.cancel()

    async def _run_task(self) -> None:
        index: Optional[str] = None
        backoff = Backoff(0.1, 5.0)
        while not self._stopped.is_set():
            query = {"wait_ms": str(WATCH_WAIT_MS)}
            if index:
                query["index"] = index
            gen = self._current_gen()
            q = dict(query)
            try:
                resp: Optional[Answer] = await _in_thread(lambda: self._http.request_abortable(
                    self._path, query=q, hold=self._hold, timeout=WATCH_WAIT_MS / 1000.0 + self._timeout))
            except Unavailable:
                if not self._take_requery():
                    await asyncio.sleep(backoff.next())
                index = None
                continue
            if self._take_requery() or resp is None:
                index = None
                continue
            if self._stopped.is_set():
                return
            if resp.status != 200:
                if self._on_error(error_from_response(resp.status, resp.headers, resp.body)):
                    return
                index = None
                await asyncio.sleep(backoff.next())
                continue
            backoff = Backoff(0.1, 5.0)
            doc = resp.json()
            if self._on_answer(doc, gen):
                return
            index = doc.get("index") or None


class AsyncEventStream:
    """The event stream (see :class:`EventStream`) for ``async for``: each
    step waits in a thread. Cancelling a step closes the stream."""

    def __init__(self, stream: EventStream) -> None:
        self._stream = stream

    def __aiter__(self) -> "AsyncEventStream":
        return self

    async def __anext__(self) -> Event:
        stream = self._stream
        try:
            ev = await _in_thread(lambda: next(stream, None))
        except asyncio.CancelledError:
            stream.close()
            raise
        if ev is None:
            raise StopAsyncIteration
        return ev

    async def aclose(self) -> None:
        """Hangs up: a step waiting ends (StopAsyncIteration)."""
        self._stream.close()

    async def __aenter__(self) -> "AsyncEventStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncLeadership:
    """A won election (see :class:`Leadership`), for coroutines. ``async
    with`` resigns on the way out, and a loss cancels the block as
    :class:`AsyncLease`'s does."""

    def __init__(self, lease: AsyncLease) -> None:
        #: The lease that holds the election's lock.
        self.lease: AsyncLease = lease
        #: The election's name.
        self.name: str = lease.name
        #: The leader's owner, as observers see it.
        self.owner: str = lease.owner
        #: Set when the leadership is lost (not when resigned).
        self.lost: asyncio.Event = lease.lost

    def __repr__(self) -> str:
        return "<lockapi.AsyncLeadership %s owner=%s term=%d%s>" % (
            self.name, self.owner, self.term, " lost" if self.lost.is_set() else "")

    @property
    def term(self) -> int:
        """The term: the lease's fencing token."""
        return self.lease.fencing_token

    @property
    def value(self) -> Dict[str, str]:
        """The leader's value, as last proclaimed."""
        return dict(self.lease.metadata)

    @property
    def error(self) -> Optional[LeaseLost]:
        """None while leading or after resigning; why it was lost once :attr:`lost` is set."""
        return self.lease.error

    async def proclaim(self, value: Mapping[str, str]) -> None:
        """Announces a new value without giving up leadership."""
        await self.lease.update_metadata(value)

    async def resign(self) -> None:
        """Gives the leadership up (releases the lease)."""
        await self.lease.release()

    async def __aenter__(self) -> "AsyncLeadership":
        await self.lease.__aenter__()
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Any) -> None:
        await self.lease.__aexit__(exc_type, exc, tb)


class _LockBlock:
    """client.lock(...): acquires on entering, releases on the way out."""

    def __init__(self, acquire: Callable[[], Awaitable[AsyncLease]]) -> None:
        self._acquire = acquire
        self._lease: Optional[AsyncLease] = None

    async def __aenter__(self) -> AsyncLease:
        self._lease = await self._acquire()
        return await self._lease.__aenter__()

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Any) -> None:
        if self._lease is not None:
            await self._lease.__aexit__(exc_type, exc, tb)


class AsyncClient:
    """The :class:`Client` for asyncio, with the same arguments and calls,
    awaited: ``await client.acquire(...)``, ``async with client.lock(...) as
    lease:``, ``async for ev in client.events(...)``, sessions and elections.

    Each request runs in a thread of its own through the sync client's
    transport, so that no wait blocks the event loop; watchdogs and loss
    watches are Tasks of the loop that acquired. A waiting call that is
    cancelled stops waiting at once; its request runs to its answer in its
    thread, and a lease it grants then is released.
    """

    def __init__(self, base_url: Optional[str] = None, api_key: Optional[str] = None,
                 timeout: float = DEFAULT_TIMEOUT, ssl_context: Optional[ssl.SSLContext] = None,
                 transport: Optional[BaseTransport] = None, loss_watch: bool = True) -> None:
        #: The sync client whose requests this one sends.
        self.sync: Client = Client(base_url, api_key, timeout, ssl_context, transport, loss_watch)

    @property
    def timeout(self) -> float:
        """Seconds each request may take (each socket operation)."""
        return self.sync.timeout

    @property
    def loss_watch(self) -> bool:
        """Whether held leases and sessions are watched (a blocking query Task each)."""
        return self.sync.loss_watch

    async def close(self) -> None:
        """Closes the transport's idle connections."""
        self.sync.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def acquire(self, name: str, ttl: Optional[float] = 30.0, wait: float = 0, owner: Optional[str] = None,
                      shared: bool = False, limit: Optional[int] = None, fair: bool = False,
                      metadata: Optional[Mapping[str, str]] = None, idempotency_key: Optional[str] = None,
                      manual: bool = False) -> AsyncLease:
        """Acquires the lock name (see :meth:`Client.acquire`) and returns
        its lease, renewed by its watchdog Task unless manual."""
        c = self.sync
        lease = await _granted(_in_thread(lambda: c._acquire(name, ttl, wait, owner, shared, limit, fair, metadata,
                                                              idempotency_key, manual=True)))
        alease = AsyncLease(lease)
        return alease if manual else alease.keep_alive()

    def lock(self, name: str, ttl: Optional[float] = 30.0, wait: float = 0, owner: Optional[str] = None,
             shared: bool = False, limit: Optional[int] = None, fair: bool = False,
             metadata: Optional[Mapping[str, str]] = None, idempotency_key: Optional[str] = None,
             on_lost: Optional[Callable[[LeaseLost], None]] = None) -> _LockBlock:
        """``async with client.lock(...) as lease:`` acquires (the arguments
        of :meth:`acquire`), keeps the lease alive while the block runs and
        releases it on the way out. A loss sets ``lease.lost``, calls
        on_lost (in the loop's thread), cancels the block's task, and the
        ``async with`` raises LeaseLost."""
        async def acquire() -> AsyncLease:
            lease = await self.acquire(name, ttl, wait, owner, shared, limit, fair, metadata, idempotency_key,
                                       manual=True)
            return lease.keep_alive(on_lost)
        return _LockBlock(acquire)

    async def acquire_all(self, names: Sequence[str], ttl: Optional[float] = 30.0, wait: float = 0,
                          owner: Optional[str] = None, shared: bool = False,
                          metadata: Optional[Mapping[str, str]] = None, manual: bool = False) -> List[AsyncLease]:
        """Acquires every lock in names, or none (see :meth:`Client.acquire_all`)."""
        c = self.sync
        leases = await _granted(_in_thread(lambda: c._acquire_all(names, ttl, wait, owner, shared, metadata, True)))
        return [AsyncLease(lease) if manual else AsyncLease(lease).keep_alive() for lease in leases]

    async def release_all(self, leases: Sequence[AsyncLease]) -> None:
        """Releases every lease, also when one fails; then raises the first failure."""
        errors: List[APIError] = []
        for lease in leases:
            try:
                await lease.release()
            except APIError as e:
                errors.append(e)
        if errors:
            raise errors[0]

    def session(self, ttl: Optional[float] = 10.0, lock_delay: float = 0.0,
                owner: Optional[str] = None) -> _SessionStart:
        """Starts a session (see :meth:`Client.session`): ``s = await
        client.session(...)``, or ``async with client.session(...) as s:``,
        which closes it on the way out."""
        c = self.sync

        async def start() -> AsyncSession:
            doc, sent, sent_wall = await _in_thread(lambda: c._open_session(ttl, lock_delay, owner))
            s = _LoopSession(c, doc, sent, sent_wall)
            s._loss_watch = None  # the AsyncSession's Task watches it
            return AsyncSession(s, c.loss_watch)
        return _SessionStart(start)

    def events(self, prefix: Optional[str] = None, lock: Optional[str] = None,
               types: Optional[Sequence[str]] = None, after: Optional[str] = None,
               timeout: Optional[float] = None) -> AsyncEventStream:
        """``async for ev in client.events(...)``: the event stream (see
        :meth:`Client.events`); ``aclose()`` hangs up."""
        return AsyncEventStream(self.sync.events(prefix, lock, types, after, timeout))

    async def inspect(self, name: str) -> Dict[str, Any]:
        """The lock's state (see :meth:`Client.inspect`)."""
        return await _in_thread(lambda: self.sync.inspect(name))

    async def force_release(self, name: str) -> bool:
        """Frees the lock whoever holds it (see :meth:`Client.force_release`)."""
        return await _in_thread(lambda: self.sync.force_release(name))

    async def campaign(self, name: str, value: Optional[Mapping[str, str]] = None, ttl: Optional[float] = 30.0,
                       wait: Optional[float] = None, owner: Optional[str] = None) -> AsyncLeadership:
        """Runs for leader of the election name (see :meth:`Client.campaign`)."""
        deadline = time.monotonic() + wait if wait is not None else None
        while True:
            step = _election.CAMPAIGN_STEP if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                lease = await self.acquire(name, ttl=ttl, wait=step, owner=owner, metadata=value)
            except (LockHeld, LockDelay):
                if deadline is None:
                    continue  # still led by another after a whole step: wait again
                raise
            return AsyncLeadership(lease)

    async def leader(self, name: str) -> LeaderInfo:
        """The election's leader now (see :meth:`Client.leader`)."""
        return LeaderInfo.of_state(await self.inspect(name))

    async def observe(self, name: str, wait: float = _election.OBSERVE_WAIT) -> AsyncIterator[LeaderInfo]:
        """Yields the election's leader now, then on every change (see
        :meth:`Client.observe`). A blocking query in flight when the loop
        is left runs to its answer in its thread."""
        it: Iterator[LeaderInfo] = _election.observe(self.sync, name, wait)
        while True:
            yield await _in_thread(lambda: next(it))


L = TypeVar("L", Lease, List[Lease])


async def _granted(fut: "asyncio.Future[L]") -> L:
    """Awaits an acquire's thread. Cancelled, it stops waiting at once, and
    what the acquire grants after all is released in a thread."""
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        fut.add_done_callback(_release_orphan)
        raise


def _release_orphan(fut: "asyncio.Future[Any]") -> None:
    """A cancelled acquire's grant, come after all: released in a thread."""
    if fut.cancelled() or fut.exception() is not None:
        return
    got: Any = fut.result()
    leases: List[Lease] = cast(List[Lease], got) if isinstance(got, list) else [got]

    def release() -> None:
        try:
            release_all(leases)
        except APIError:
            pass
    threading.Thread(target=release, name="lockapi-orphan", daemon=True).start()
