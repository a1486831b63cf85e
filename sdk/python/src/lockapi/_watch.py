"""The loss watch (Consul's monitorLock): while a lease is held, one
blocking query on its lock (GET /v1/locks/{name}?index=) answers as soon as
the lock changes, and a lease no longer among its holders is lost at once
rather than at its next renewal. A session's bound leases are watched
together, with one blocking query on the session. The watch is an early
warning only: renewal stays the source of truth, and a watch that fails is
retried with backoff and never marks anything lost by itself. The same as
the Go SDK's (client/losswatch.go)."""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from ._errors import APIError, Unavailable, error_from_response
from ._http import Transport
from ._timing import Backoff

#: How long one blocking query asks to wait, in ms; the server clamps it to
#: its maximum wait (60 s by default).
WATCH_WAIT_MS = 300000


def _loss_backoff() -> Backoff:
    return Backoff(0.1, 5.0)


def refused(err: APIError) -> bool:
    """An answer that asking again will not change (a key without read
    access, say): the watch then stops, and renewal alone tells a loss."""
    status = err.status or 0
    return 400 <= status < 500 and status not in (408, 429)


class Watch:
    """One thread of blocking queries on path. on_answer(doc, gen) takes in
    each 200 answer (gen: the value of current_gen() when the query was
    sent) and returns True once the watch has nothing left to do; on_error
    takes in every other answer and returns True likewise (the watch then
    stops). stop() ends it, and requery() makes it ask afresh (without an
    index) at once."""

    def __init__(self, transport: Transport, timeout: float, path: str, name: str,
                 on_answer: Callable[[Any, int], bool], on_error: Callable[[APIError], bool],
                 current_gen: Callable[[], int] = lambda: 0) -> None:
        self._http = transport
        self._timeout = timeout
        self._path = path
        self._on_answer = on_answer
        self._on_error = on_error
        self._current_gen = current_gen
        self._mu = threading.Lock()
        self._stopped = threading.Event()
        self._requery = False
        self._abort: Optional[Callable[[], None]] = None
        self._thread = threading.Thread(target=self._run, name="lockapi-watch " + name, daemon=True)

    def start(self) -> "Watch":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops the watch and waits for its thread: no answer is taken in
        after it returns."""
        with self._mu:
            self._stopped.set()
            abort = self._abort
        if abort is not None:
            abort()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            # A query on a transport that cannot abort it runs to its
            # answer, up to the server's wait: not waited for, and it takes
            # nothing in (_run looks at the stop first).
            self._thread.join(timeout=1.0)

    def requery(self) -> None:
        with self._mu:
            self._requery = True
            abort = self._abort
        if abort is not None:
            abort()

    def _hold(self, abort: Optional[Callable[[], None]]) -> bool:
        with self._mu:
            if abort is not None and (self._stopped.is_set() or self._requery):
                return False
            self._abort = abort
            return True

    def _take_requery(self) -> bool:
        with self._mu:
            requery, self._requery = self._requery, False
            return requery

    def _run(self) -> None:
        index: Optional[str] = None
        backoff = _loss_backoff()
        while not self._stopped.is_set():
            query = {"wait_ms": str(WATCH_WAIT_MS)}
            if index:
                query["index"] = index
            gen = self._current_gen()
            try:
                resp = self._http.request_abortable(self._path, query=query, hold=self._hold,
                                                    timeout=WATCH_WAIT_MS / 1000.0 + self._timeout)
            except Unavailable:
                resp = None
                if not self._take_requery() and self._stopped.wait(backoff.next()):
                    return
                index = None
                continue
            # A lease was bound (requery): ask afresh. None: the request
            # was not sent, for that or a stop.
            if self._take_requery() or resp is None:
                index = None
                continue
            if self._stopped.is_set():
                return
            if resp.status != 200:
                err = error_from_response(resp.status, resp.headers, resp.body)
                if self._on_error(err):
                    return
                index = None
                if self._stopped.wait(backoff.next()):
                    return
                continue
            backoff = _loss_backoff()
            doc = resp.json()
            if self._on_answer(doc, gen):
                return
            index = doc.get("index") or None
