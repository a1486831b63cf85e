"""Leader election on a lock (docs/ELECTIONS.md).

A candidate campaigns by acquiring the election's lock, waiting while
another leads; the leader's value is its lease's metadata, which proclaim
replaces (PATCH /v1/locks/{name}/leases/{id}); its term is the fencing
token, which rises with every new leader; observers follow the lock with
blocking queries. One leader at a time is the lock's promise, with its
limits: a leader can pause past its lease, so whatever it writes to must
fence with the term.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterator, Mapping, Optional, cast

from ._errors import LeaseLost, LockDelay, LockHeld, Unavailable, error_from_response
from ._http import lock_path
from ._lease import Lease
from ._timing import Backoff

if TYPE_CHECKING:
    from ._client import Client

# How long one acquire of a campaign waits before it asks again; the
# campaign itself waits as long as its wait says (None: until elected).
CAMPAIGN_STEP = 3600.0

# How long one blocking query of observe waits; the server answers sooner
# when its maximum wait is shorter (60 s by default).
OBSERVE_WAIT = 55.0


@dataclass(frozen=True)
class LeaderInfo:
    """An election's leader as an observer sees it."""

    #: False when nobody leads (the lock is free); the other fields are then empty.
    elected: bool
    owner: str = ""
    #: The leader's value: its lease's metadata.
    value: Dict[str, str] = field(default_factory=lambda: {})
    #: The leader's term: its fencing token; 0 when nobody leads.
    term: int = 0

    @staticmethod
    def of_state(doc: Mapping[str, Any]) -> "LeaderInfo":
        """The leader of a lock's state (GET /v1/locks/{name}): its exclusive holder."""
        holder: Any = doc.get("holder")
        if not isinstance(holder, dict):
            return LeaderInfo(elected=False)
        h = cast(Dict[str, Any], holder)
        meta = cast(Dict[str, Any], h.get("metadata") or {})
        return LeaderInfo(elected=True, owner=str(h.get("owner", "")),
                          value={str(k): str(v) for k, v in meta.items()}, term=int(h.get("fencing_token", 0)))


class Leadership:
    """A won election: the lease of its lock, kept alive by its watchdog until
    :meth:`resign`, or until it is lost (:attr:`lost` is set).

    Also a context manager: ``with client.campaign(...) as leadership:``
    resigns when the block ends.
    """

    def __init__(self, lease: Lease) -> None:
        #: The lease that holds the election's lock.
        self.lease = lease
        #: The election's name.
        self.name: str = lease.name
        #: The leader's owner, as observers see it.
        self.owner: str = lease.owner
        #: Set when the leadership is lost (not when it is resigned): stop
        #: acting as leader.
        self.lost: threading.Event = lease.lost

    def __repr__(self) -> str:
        return "<lockapi.Leadership %s owner=%s term=%d%s>" % (
            self.name, self.owner, self.term, " lost" if self.lost.is_set() else "")

    @property
    def term(self) -> int:
        """The term: the lease's fencing token, larger than every earlier
        leader's. Pass it to whatever the leader writes to, and have that
        refuse a smaller one than it has seen."""
        return self.lease.fencing_token

    @property
    def value(self) -> Dict[str, str]:
        """The leader's value, as last proclaimed."""
        return dict(self.lease.metadata)

    @property
    def error(self) -> Optional[LeaseLost]:
        """None while this candidate leads or after resigning; why it was lost once :attr:`lost` is set."""
        return self.lease.error

    def proclaim(self, value: Mapping[str, str]) -> None:
        """Announces a new value without giving up leadership: every observer
        sees it. Raises LeaseLost (and sets :attr:`lost`) when the leadership
        is gone."""
        self.lease.update_metadata(value)

    def resign(self) -> None:
        """Gives the leadership up (releases the lease): the next candidate is
        elected. Raises LeaseLost when it had been lost before."""
        self.lease.release()

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.lease.__exit__(exc_type, exc, tb)


def campaign(client: "Client", name: str, value: Optional[Mapping[str, str]], ttl: Optional[float],
             wait: Optional[float], owner: Optional[str]) -> Leadership:
    """Client.campaign: acquire with waits until elected, or until wait ends."""
    deadline = time.monotonic() + wait if wait is not None else None
    while True:
        step = CAMPAIGN_STEP if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            lease = client.acquire(name, ttl=ttl, wait=step, owner=owner, metadata=value)
        except (LockHeld, LockDelay):
            if deadline is None:
                continue  # still led by another after a whole step: wait again
            raise
        return Leadership(lease.keep_alive())


def observe(client: "Client", name: str, wait: float) -> Iterator[LeaderInfo]:
    """Client.observe: blocking queries of the lock, each from the last index,
    yielding the leader when it changed."""
    index = ""
    last: Optional[LeaderInfo] = None
    backoff: Optional[Backoff] = None
    path = lock_path(name)
    wait_ms = str(max(1, int(wait * 1000)))
    while True:
        query = {"index": index, "wait_ms": wait_ms} if index else None
        err: Optional[Unavailable] = None
        resp = None
        try:
            resp = client._http.request("GET", path, query=query, timeout=(wait if index else 0.0) + client.timeout)
        except Unavailable as e:
            err = e
        else:
            if resp.status != 200:
                failure = error_from_response(resp.status, resp.headers, resp.body, name)
                if not isinstance(failure, Unavailable):
                    raise failure
                err = failure
        if err is not None:
            # A failure that may pass: ask again after a pause, from the same index.
            backoff = backoff or Backoff(0.1, 5.0)
            time.sleep(max(backoff.next(), err.retry_after))
            continue
        backoff = None
        assert resp is not None
        doc = resp.json()
        index = str(doc.get("index", ""))
        info = LeaderInfo.of_state(doc)
        if info != last:
            last = info
            yield info
