"""The Go SDK's scenarios (client/*_test.go), against the real server."""

from __future__ import annotations

import secrets
import threading
import time
import unittest
from datetime import datetime, timezone
from typing import Optional

import lockapi
from support import ADMIN_KEY, BASE_URL, EXPIRED_KEY, LIMITED_KEY, PROMPTLY, Proxy, ServerTestCase, wait_until


class AcquireTest(ServerTestCase):
    def test_acquire_and_release(self) -> None:
        name = self.name()
        lease = self.client.acquire(name, ttl=10, metadata={"job": "nightly"})
        self.assertEqual(lease.name, name)
        self.assertEqual(len(lease.lease_id), 26)
        self.assertGreater(lease.fencing_token, 0)
        self.assertEqual(lease.metadata, {"job": "nightly"})
        self.assertEqual(lease.hold_count, 1)
        self.assertAlmostEqual(lease.ttl, 10.0)
        self.assertGreater(lease.expires_at, datetime.now(timezone.utc))
        self.assertEqual(self.holder(name), lease.owner)

        lease.release()
        self.assertEqual(self.holder(name), "")
        self.assertFalse(lease.lost.is_set())
        self.assertIsNone(lease.error)
        lease.release()  # safe twice: sends nothing, raises nothing

        again = self.client.acquire(name)
        self.assertGreater(again.fencing_token, lease.fencing_token, "a fresh grant's token rises")
        again.release()

    def test_manual_renewal(self) -> None:
        # A manual lease has no watchdog: it lives while renewed by hand.
        name = self.name()
        lease = self.client.acquire(name, ttl=1.5, manual=True)
        for _ in range(3):
            time.sleep(0.5)
            lease.renew()
        self.assertEqual(self.holder(name), lease.owner, "renewed by hand past its TTL")
        time.sleep(2.5)  # left alone, nothing renews it
        with self.assertRaises(lockapi.LeaseLost):
            lease.renew()
        self.assertTrue(lease.lost.is_set())

    def test_acquire_renews_unless_manual(self) -> None:
        # One sleep for both: past a TTL of 1 s, the lease of a plain
        # acquire is held and renewed by its watchdog; a manual one, renewed
        # by no one, is refused by check() once its vouched expiry passed.
        watched_name, manual_name = self.name(), self.name()
        watched = self.client.acquire(watched_name, ttl=1)
        manual = self.client.acquire(manual_name, ttl=1, manual=True)
        first_expiry = watched.expires_at
        with self.assertLogs("lockapi", "ERROR") as logs:
            time.sleep(1.6)
            with self.assertRaises(lockapi.LeaseLost) as cm:
                manual.check()
        self.assertIn("expiry passed", str(cm.exception))
        self.assertTrue(manual.lost.is_set())
        self.assertIs(manual.error, cm.exception)
        self.assertTrue(any(manual.lease_id in line for line in logs.output), logs.output)

        watched.check()
        self.assertFalse(watched.lost.is_set(), "lost: %s" % watched.error)
        self.assertGreater(watched.expires_at, first_expiry, "renewed")
        self.assertGreater(watched.expires_at, datetime.now(timezone.utc))
        self.assertEqual(self.holder(watched_name), watched.owner)
        watched.release()
        with self.assertRaises(lockapi.LeaseLost):
            manual.release()

    def test_misuse_after_release_raises_lease_released(self) -> None:
        lease = self.client.acquire(self.name(), ttl=10)
        lease.release()
        for call in (lease.renew, lease.check, lease.keep_alive):
            with self.subTest(call=call.__name__):
                with self.assertRaises(lockapi.LeaseReleased) as cm:
                    call()
                self.assertNotIsInstance(cm.exception, lockapi.LeaseLost, "a misuse is no loss")
                self.assertEqual(cm.exception.lease_id, lease.lease_id)
        self.assertFalse(lease.lost.is_set())
        lease.release()  # still safe twice

    def test_reentrant_owner(self) -> None:
        name = self.name()
        first = self.client.acquire(name, owner="worker-7")
        second = self.client.acquire(name, owner="worker-7")
        self.assertEqual((second.lease_id, second.fencing_token), (first.lease_id, first.fencing_token))
        self.assertEqual(second.hold_count, 2)
        second.release()
        self.assertEqual(self.holder(name), "worker-7", "one hold of two is left")
        first.release()
        self.assertEqual(self.holder(name), "")

    def test_held_raises_lock_held_with_the_holder(self) -> None:
        name = self.name()
        lease = self.client.acquire(name, ttl=10)
        try:
            with self.assertRaises(lockapi.LockHeld) as cm:
                self.client.acquire(name)
            err = cm.exception
            self.assertEqual(err.status, 409)
            self.assertEqual(err.type, lockapi.PROBLEM_BASE + "lock-held")
            self.assertEqual(err.lock, name)
            self.assertIsNotNone(err.holder)
            assert err.holder is not None
            self.assertEqual(err.holder.owner, lease.owner)
            self.assertEqual(err.holder.fencing_token, lease.fencing_token)
            self.assertTrue(0 < err.holder.expires_in <= 10, err.holder.expires_in)
            self.assertIn(lease.owner, str(err))
        finally:
            lease.release()

    def test_wait_gets_the_lock_once_released(self) -> None:
        name = self.name()
        holder = self.client.acquire(name, ttl=10)
        timer = threading.Timer(0.3, holder.release)
        timer.start()
        try:
            waiter = self.client.acquire(name, wait=PROMPTLY + 5)
            self.assertGreater(waiter.fencing_token, holder.fencing_token)
            waiter.release()
        finally:
            timer.cancel()
            holder.release()

    def test_wait_runs_out(self) -> None:
        name = self.name()
        holder = self.client.acquire(name, ttl=10)
        try:
            start = time.monotonic()
            with self.assertRaises(lockapi.LockHeld):
                self.client.acquire(name, wait=0.3)
            self.assertGreaterEqual(time.monotonic() - start, 0.25, "gave up before the wait ended")
        finally:
            holder.release()

    def test_invalid_request_is_an_api_error(self) -> None:
        with self.assertRaises(lockapi.APIError) as cm:
            self.client.acquire("bad name!")
        self.assertEqual(cm.exception.status, 400)
        self.assertEqual(cm.exception.slug, "invalid-request")

    def test_idempotent_retry_gets_the_same_grant(self) -> None:
        name = self.name()
        key = secrets.token_hex(16)
        first = self.client.acquire(name, owner="worker-7", idempotency_key=key)
        # The retry of an acquire whose answer was lost: same key, same owner.
        retry = self.client.acquire(name, owner="worker-7", idempotency_key=key)
        self.assertTrue(retry.replayed)
        self.assertFalse(first.replayed)
        self.assertEqual((retry.lease_id, retry.fencing_token), (first.lease_id, first.fencing_token))
        self.assertEqual(retry.hold_count, 1, "a replay adds no hold")
        first.release()
        self.assertEqual(self.holder(name), "", "one release frees the lock: the retry took no second hold")

    def test_shared_leases_hold_together(self) -> None:
        name = self.name()
        r1 = self.client.acquire(name, shared=True, ttl=10)
        r2 = self.client.acquire(name, shared=True, ttl=10)
        self.assertTrue(r1.shared and r2.shared)
        self.assertNotEqual(r1.lease_id, r2.lease_id)
        with self.assertRaises(lockapi.LockHeld):
            self.client.acquire(name)
        r1.release()
        r2.release()
        writer = self.client.acquire(name)
        self.assertFalse(writer.shared)
        writer.release()

    def test_semaphore_permits(self) -> None:
        name = self.name()
        permits = [self.client.acquire(name, limit=2, ttl=10) for _ in range(2)]
        self.assertEqual([p.limit for p in permits], [2, 2])
        with self.assertRaises(lockapi.LockHeld):
            self.client.acquire(name, limit=2)
        with self.assertRaises(lockapi.APIError) as cm:
            self.client.acquire(name, limit=3)
        self.assertNotIsInstance(cm.exception, lockapi.LockHeld)
        self.assertEqual(cm.exception.slug, "limit-mismatch")
        permits[0].release()
        third = self.client.acquire(name, limit=2)
        for p in (permits[1], third):
            p.release()


class LeaseTest(ServerTestCase):
    def test_scoped_lock_outlives_its_ttl(self) -> None:
        name = self.name()
        with self.client.lock(name, ttl=1.0) as lease:
            # The work lasts two and a half TTLs; the watchdog renews.
            self.assertFalse(lease.lost.wait(2.5), "lost during the work: %s" % lease.error)
            with self.assertRaises(lockapi.LockHeld):
                self.client.acquire(name)
            self.assertGreater(lease.expires_at, datetime.now(timezone.utc))
        self.assertEqual(self.holder(name), "", "released on the way out")

    def test_force_release_is_noticed_and_the_work_told(self) -> None:
        # The renewal's account of a force release: without the loss watch,
        # which would tell first (test_losswatch.py).
        name = self.name()
        told = threading.Event()
        lease: Optional[lockapi.Lease] = None
        client = lockapi.Client(BASE_URL, api_key=ADMIN_KEY, timeout=10, loss_watch=False)
        with self.assertRaises(lockapi.LeaseLost) as cm:
            with client.lock(name, ttl=3, on_lost=lambda err: told.set()) as lease:
                self.assertTrue(self.client.force_release(name))
                start = time.monotonic()
                self.assertTrue(lease.lost.wait(PROMPTLY), "the force release went unnoticed")
                self.assertLess(time.monotonic() - start, 2.0, "noticed late")
                self.assertTrue(told.wait(PROMPTLY), "on_lost was not called")
                with self.assertRaises(lockapi.LeaseLost):
                    lease.check()
        # Leaving the block reports the loss: the work may have overlapped.
        self.assertEqual(cm.exception.status, 410)
        self.assertIn("force-released", str(cm.exception))
        assert lease is not None
        self.assertIs(lease.error, cm.exception)

    def test_release_after_a_force_release_raises_lease_lost(self) -> None:
        name = self.name()
        lease = self.client.acquire(name, ttl=60)
        self.client.force_release(name)
        with self.assertRaises(lockapi.LeaseLost):
            lease.release()
        self.assertTrue(lease.lost.is_set())
        lease.release()  # safe twice

    def test_a_raising_on_lost_is_logged(self) -> None:
        name = self.name()

        def on_lost(err: lockapi.LeaseLost) -> None:
            raise RuntimeError("the callback's own bug")

        with self.assertLogs("lockapi", "ERROR") as logs:
            with self.assertRaises(lockapi.LeaseLost):
                with self.client.lock(name, ttl=1.5, on_lost=on_lost) as lease:
                    self.client.force_release(name)
                    self.assertTrue(lease.lost.wait(PROMPTLY), "the force release went unnoticed")
                    wait_until(lambda: len(logs.records) >= 2, what="the loss and the callback's failure logged")
        loss, callback = logs.records[0], logs.records[1]
        self.assertEqual(loss.levelname, "ERROR")
        self.assertIn("force-released", loss.getMessage())
        self.assertIn("on_lost callback raised", callback.getMessage())
        assert callback.exc_info is not None
        self.assertIsInstance(callback.exc_info[1], RuntimeError, "logged with its traceback")

    def test_exception_in_the_block_releases_and_wins(self) -> None:
        name = self.name()
        with self.assertRaises(ZeroDivisionError):
            with self.client.lock(name, ttl=5):
                _ = 1 / 0
        self.assertEqual(self.holder(name), "")

    def test_lost_when_the_server_is_unreachable_before_the_expiry(self) -> None:
        proxy = Proxy(BASE_URL)
        self.addCleanup(proxy.close)
        client = lockapi.Client(proxy.url, api_key=ADMIN_KEY, timeout=5)
        lease = client.acquire(self.name(), ttl=1.5)
        with self.assertLogs("lockapi", "WARNING") as logs:
            proxy.set_mode(Proxy.REFUSE)
            proxy.cut()
            self.assertTrue(lease.lost.wait(1.5 + PROMPTLY), "never gave up the lease")
        levels = [r.levelname for r in logs.records]
        self.assertGreaterEqual(levels.count("WARNING"), 2, "one warning per retried renewal: %s" % logs.output)
        self.assertEqual(levels[-1], "ERROR", "the loss is logged: %s" % logs.output)
        self.assertLess(datetime.now(timezone.utc), lease.expires_at, "lost after the expiry it vouched for")
        err = lease.error
        assert err is not None
        self.assertIsNone(err.status)
        self.assertIsInstance(err.__cause__, lockapi.Unavailable, "retried network errors until the deadline")
        self.assertGreaterEqual(proxy.refused, 2, "renewals that fail on the network are retried")
        with self.assertRaises(lockapi.LeaseLost):
            lease.release()

    def test_survives_a_brief_outage(self) -> None:
        proxy = Proxy(BASE_URL)
        self.addCleanup(proxy.close)
        client = lockapi.Client(proxy.url, api_key=ADMIN_KEY, timeout=5)
        lease = client.acquire(self.name(), ttl=3)
        proxy.set_mode(Proxy.REFUSE)
        proxy.cut()  # and the kept-alive connection with it
        proxy.wait(lambda p: p.refused >= 1, timeout=3 + PROMPTLY, what="a failed renewal")
        before = lease.expires_at
        proxy.set_mode(Proxy.PASS)
        wait_until(lambda: lease.expires_at > before or lease.lost.is_set(), what="a renewal after the outage")
        self.assertFalse(lease.lost.is_set(), "lost: %s" % lease.error)
        lease.release()

    def test_no_renewal_after_release(self) -> None:
        proxy = Proxy(BASE_URL)
        self.addCleanup(proxy.close)
        client = lockapi.Client(proxy.url, api_key=ADMIN_KEY, timeout=5)
        lease = client.acquire(self.name(), ttl=1.5)
        proxy.wait(lambda p: len(p.requests) >= 2, what="a renewal")
        lease.release()
        sent = len(proxy.requests)
        time.sleep(0.3)
        self.assertEqual(len(proxy.requests), sent, "requests after release returned")


class AuthTest(ServerTestCase):
    def setUp(self) -> None:
        super().setUp()
        if not (ADMIN_KEY and LIMITED_KEY):
            raise unittest.SkipTest("the server runs without API keys")

    def test_no_key_is_unauthorized(self) -> None:
        with self.assertRaises(lockapi.Unauthorized) as cm:
            lockapi.Client(BASE_URL).acquire(self.name("ci"), wait=1)
        self.assertEqual(cm.exception.status, 401)
        self.assertEqual(cm.exception.type, lockapi.PROBLEM_BASE + "unauthorized")

    def test_unknown_key_is_unauthorized(self) -> None:
        # A key the server does not have (revoked, or expired and removed
        # from its key lines) is answered 401 and not retried.
        client = lockapi.Client(BASE_URL, api_key="lka_" + secrets.token_urlsafe(32))
        start = time.monotonic()
        with self.assertRaises(lockapi.Unauthorized):
            client.acquire(self.name("ci"), wait=3)
        self.assertLess(time.monotonic() - start, 2.5, "a 401 was retried")
        with self.assertRaises(lockapi.Unauthorized):
            next(iter(client.events(prefix="ci:")))

    def test_expired_key_is_unauthorized(self) -> None:
        # A configured key past its expires= time is answered 401, saying
        # when it expired, and not retried.
        if not EXPIRED_KEY:
            self.fail("LOCKAPI_EXPIRED_KEY is not set: the server has keys, so the test needs one")
        client = lockapi.Client(BASE_URL, api_key=EXPIRED_KEY)
        start = time.monotonic()
        with self.assertRaises(lockapi.Unauthorized) as cm:
            client.acquire(self.name("ci"), wait=3)
        self.assertLess(time.monotonic() - start, 2.5, "a 401 was retried")
        self.assertEqual(cm.exception.status, 401)
        self.assertEqual(cm.exception.type, lockapi.PROBLEM_BASE + "unauthorized")
        self.assertRegex(cm.exception.detail, r"^the API key expired at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        with self.assertRaises(lockapi.Unauthorized):
            next(iter(client.events(prefix="ci:")))

    def test_key_outside_its_patterns_is_forbidden(self) -> None:
        client = lockapi.Client(BASE_URL, api_key=LIMITED_KEY)
        with self.assertRaises(lockapi.Forbidden) as cm:
            client.acquire(self.name("deploy"))
        self.assertEqual(cm.exception.status, 403)

    def test_key_inside_its_patterns_renews_and_releases(self) -> None:
        client = lockapi.Client(BASE_URL, api_key=LIMITED_KEY)
        with client.lock(self.name("ci"), ttl=1.5) as lease:
            # Renewals carry the key too: held past its first TTL.
            self.assertFalse(lease.lost.wait(1.7), "lost: %s" % lease.error)


if __name__ == "__main__":
    unittest.main()
