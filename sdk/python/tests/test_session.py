"""Sessions and multi-locks (docs/SESSIONS.md), the Go SDK's scenarios
(client/session_test.go) against the real server.

A store that keeps no sessions (redlock, or Redis Cluster with events off)
answers 501 unsupported to every session route. The tests find out once, by
a POST /v1/sessions, and then each session test either runs its scenario
or, on such a store, asserts that typed 501: none is skipped. The memory
store and Redis keep sessions, so the scenarios run in full on both.
"""

from __future__ import annotations

import sys
import threading
import time
import unittest
from datetime import datetime, timezone
from typing import Any, Optional

import lockapi
from lockapi._errors import error_from_response
from support import ADMIN_KEY, BASE_URL, PROMPTLY, Proxy, ServerTestCase, wait_until

UNSUPPORTED = lockapi.PROBLEM_BASE + "unsupported"


def probe_sessions() -> bool:
    """Whether the server under test keeps sessions: a session comes back,
    or the typed 501 unsupported (anything else fails the tests)."""
    client = lockapi.Client(BASE_URL, api_key=ADMIN_KEY, timeout=10)
    try:
        s = client.session(ttl=5)
    except lockapi.APIError as e:
        if e.status == 501 and e.type == UNSUPPORTED:
            print("\ntest_session: the server answers 501 unsupported for sessions: each session test asserts that",
                  file=sys.stderr)
            return False
        raise
    s.close()
    print("\ntest_session: the server keeps sessions: the session scenarios run", file=sys.stderr)
    return True


class SessionTestCase(ServerTestCase):
    supported: Optional[bool] = None  # found once for every test

    def setUp(self) -> None:
        super().setUp()
        if SessionTestCase.supported is None:
            SessionTestCase.supported = probe_sessions()

    def session(self, client: Optional[lockapi.Client] = None, **kw: Any) -> Optional[lockapi.Session]:
        """A session, or None after asserting the store's typed 501."""
        client = client or self.client
        if SessionTestCase.supported:
            s = client.session(**kw)
            self.addCleanup(s.close)  # safe twice
            return s
        with self.assertRaises(lockapi.APIError) as cm:
            client.session(**kw)
        err = cm.exception
        self.assertIs(type(err), lockapi.APIError)
        self.assertEqual((err.status, err.type, err.slug), (501, UNSUPPORTED, "unsupported"))
        return None

    def assert_held(self, name: str) -> None:
        self.assertTrue(self.client.inspect(name).get("held"), "%s is not held" % name)

    def assert_free(self, name: str) -> None:
        self.assertFalse(self.client.inspect(name).get("held"), "%s is held" % name)


class SessionTest(SessionTestCase):
    def test_binds_every_kind(self) -> None:
        s = self.session(ttl=10)
        if s is None:
            return  # the store keeps no sessions: its 501 was asserted
        excl, shared, sem = self.name(), self.name(), self.name()
        multi = [self.name(), self.name()]
        leases = [
            s.acquire(excl, metadata={"job": "x"}),
            s.acquire(shared, shared=True),
            s.acquire(sem, limit=2),
        ] + s.acquire_all(multi)
        for lease in leases:
            self.assertIs(lease.session, s)
            self.assertEqual(lease.session_id, s.session_id, "the server names the session on the lease")
            self.assertEqual(lease.ttl, s.ttl)
            self.assert_held(lease.name)
        self.assertTrue(leases[1].shared)
        self.assertEqual(leases[2].limit, 2)
        self.assertEqual([lease.name for lease in leases[3:]], multi)
        self.assertEqual(len(s.leases), 5)

        # A bound lease's release releases it alone.
        leases[0].release()
        self.assert_free(excl)
        self.assert_held(shared)
        self.assertEqual(len(s.leases), 4)

    def test_one_renewal_keeps_every_lease(self) -> None:
        proxy = Proxy(BASE_URL)
        self.addCleanup(proxy.close)
        client = lockapi.Client(proxy.url, api_key=ADMIN_KEY, timeout=5)
        s = self.session(client, ttl=1.0)
        if s is None:
            return
        names = [self.name() for _ in range(4)]
        leases = [s.acquire(names[0]), s.acquire(names[1], shared=True)] + s.acquire_all(names[2:])
        for lease in leases:
            lease.keep_alive()  # starts no watchdog of its own
        def renewals(p: Proxy) -> int:
            return sum(b" /v1/sessions/%s/renew " % s.session_id.encode() in h for h in p.requests)

        # Three TTLs pass: the session's one watchdog keeps all of them.
        proxy.wait(lambda p: renewals(p) >= 9, timeout=3.0 + PROMPTLY, what="nine renewals of the session")
        self.assertFalse(s.lost.is_set(), "lost: %s" % s.error)
        for name in names:
            self.assert_held(name)
        lease_renewals = [h for h in proxy.requests if b"/v1/locks/" in h and b"/renew " in h]
        self.assertEqual(lease_renewals, [], "bound leases are renewed by their session only")

    def test_close_releases_every_lease_at_once(self) -> None:
        s = self.session(ttl=10)
        if s is None:
            return
        with s:
            names = [self.name(), self.name(), self.name()]
            one = s.acquire(names[0])
            rest = s.acquire_all(names[1:], shared=True)
        for name in names:
            self.assert_free(name)
        for lease in [one] + rest:
            self.assertFalse(lease.lost.is_set())
            self.assertIsNone(lease.error)
            lease.release()  # released by the close: sends nothing, raises nothing
        s.close()  # safe twice
        self.assertFalse(s.lost.is_set())
        for misuse in (lambda: s.acquire(self.name()), s.renew, s.check, one.renew):
            with self.assertRaises((lockapi.SessionClosed, lockapi.LeaseReleased)) as cm:
                misuse()
            self.assertNotIsInstance(cm.exception, lockapi.LeaseLost, "a misuse is no loss")
        again = self.client.acquire(names[0])
        self.assertGreater(again.fencing_token, one.fencing_token)
        again.release()

    def test_a_session_not_renewed_ends_and_frees_its_leases(self) -> None:
        proxy = Proxy(BASE_URL)
        self.addCleanup(proxy.close)
        client = lockapi.Client(proxy.url, api_key=ADMIN_KEY, timeout=5)
        s = self.session(client, ttl=1.5)
        if s is None:
            return
        name, multi = self.name(), [self.name(), self.name()]
        told = threading.Event()
        lease = s.acquire(name).keep_alive(on_lost=lambda err: told.set())
        bound = s.acquire_all(multi)
        proxy.set_mode(Proxy.REFUSE)  # no renewal reaches the server
        proxy.cut()

        self.assertTrue(s.lost.wait(1.5 + PROMPTLY), "never gave the session up")
        self.assertLess(datetime.now(timezone.utc), s.expires_at, "lost after the expiry it vouched for")
        err = s.error
        assert err is not None
        self.assertIsInstance(err.__cause__, lockapi.Unavailable, "retried network errors until the deadline")
        for each in [lease] + bound:
            self.assertTrue(each.lost.is_set())
            self.assertIsInstance(each.error, lockapi.SessionLost)
        self.assertTrue(told.is_set(), "on_lost was called")

        # The server ends it within its TTL (and 1 s), and every lease with it.
        for n in [name] + multi:
            wait_until(lambda: not self.client.inspect(n).get("held"), timeout=2.0 + PROMPTLY,
                       what="%s freed by the session's expiry" % n)
        with self.assertRaises(lockapi.SessionLost):
            lease.release()  # lost before: raises, sends nothing
        with self.assertRaises(lockapi.SessionLost):
            s.close()
        s.close()  # safe twice

    def test_lost_when_the_server_ends_it(self) -> None:
        s = self.session(ttl=1.5)
        if s is None:
            return
        lease = s.acquire(self.name())
        # Someone else ends it (an admin, say): the next renewal finds it gone.
        resp = self.client._http.request("DELETE", "/v1/sessions/" + s.session_id, timeout=5)
        self.assertEqual(resp.status, 200)
        self.assertTrue(s.lost.wait(1.5 + PROMPTLY), "not lost")
        err = s.error
        assert err is not None
        self.assertEqual(err.status, 410)
        self.assertEqual(err.slug, "session-lost")
        self.assertTrue(lease.lost.is_set())
        with self.assertRaises(lockapi.SessionLost):
            s.close()

    def test_an_acquire_naming_an_unknown_session(self) -> None:
        err = self.acquire_raw({"owner": "o", "session": "01JD3Z8Q6W9M4T5R2K7X1B0C9S"})
        if not SessionTestCase.supported:
            self.assertEqual((type(err), err.status, err.type), (lockapi.APIError, 501, UNSUPPORTED))
            return
        self.assertIs(type(err), lockapi.SessionNotFound)
        self.assertEqual((err.status, err.slug), (404, "session-not-found"))

    def acquire_raw(self, body: Any) -> lockapi.APIError:
        """The error of an acquire sent as it is (a session id no Session holds)."""
        name = self.name()
        resp = self.client._http.request("POST", "/v1/locks/%s/leases" % name, body=body, timeout=5)
        self.assertGreaterEqual(resp.status, 400)
        return error_from_response(resp.status, resp.headers, resp.body, name)

    def test_lock_delay_after_a_force_release(self) -> None:
        s = self.session(ttl=10, lock_delay=1.5)
        if s is None:
            return
        self.assertEqual(s.lock_delay, 1.5)
        name = self.name()
        lease = s.acquire(name)
        self.assertTrue(self.client.force_release(name))

        with self.assertRaises(lockapi.LockDelay) as cm:
            self.client.acquire(name)
        err = cm.exception
        self.assertEqual((err.status, err.slug, err.lock), (409, "lock-delay", name))
        self.assertGreaterEqual(err.retry_after, 1.0)
        # A waiting acquire waits through the delay.
        after = self.client.acquire(name, wait=1.5 + PROMPTLY)
        self.assertGreater(after.fencing_token, lease.fencing_token)
        after.release()
        with self.assertRaises(lockapi.LeaseLost):
            lease.release()  # the force release took it
        self.assertFalse(s.lost.is_set(), "the session outlives its lease")


class MultiLockTest(ServerTestCase):
    def test_acquire_all_and_release_all(self) -> None:
        names = [self.name("zz"), self.name("aa"), self.name("mm")]
        leases = self.client.acquire_all(names, ttl=10, metadata={"job": "multi"})
        self.assertEqual([lease.name for lease in leases], names, "in the order asked")
        self.assertEqual(len({lease.owner for lease in leases}), 1)
        for lease in leases:
            self.assertEqual(lease.metadata, {"job": "multi"})
            self.assertAlmostEqual(lease.ttl, 10.0)
            self.assertIsNone(lease.session)
            self.assertEqual(self.holder(lease.name), lease.owner)
        self.client.release_all(leases)
        for name in names:
            self.assertEqual(self.holder(name), "")
        self.client.release_all(leases)  # each release is safe twice

    def test_all_or_none(self) -> None:
        taken, free = self.name(), self.name()
        holder = self.client.acquire(taken, ttl=10)
        try:
            with self.assertRaises(lockapi.LockHeld) as cm:
                self.client.acquire_all([free, taken])
            self.assertEqual(cm.exception.lock, taken)
            assert cm.exception.holder is not None
            self.assertEqual(cm.exception.holder.owner, holder.owner)
            self.assertEqual(self.holder(free), "", "none is held when one is not free")
        finally:
            holder.release()

    def test_waits_for_every_lock_and_keeps_them_alive(self) -> None:
        a, b = self.name(), self.name()
        holder = self.client.acquire(b, ttl=10)
        timer = threading.Timer(0.3, holder.release)
        timer.start()
        try:
            leases = self.client.acquire_all([a, b], ttl=1.5, wait=PROMPTLY + 5)
        finally:
            timer.cancel()
        for lease in leases:
            lease.keep_alive()
        # Two TTLs: each lease's watchdog renews it (every TTL/3; a TTL of
        # 1.5 s lets a renewal be a second late on a loaded machine).
        time.sleep(3.1)
        for lease in leases:
            self.assertFalse(lease.lost.is_set(), "lost: %s" % lease.error)
            self.assertEqual(self.holder(lease.name), lease.owner)
        self.client.release_all(leases)


if __name__ == "__main__":
    unittest.main()
