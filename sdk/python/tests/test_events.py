"""The event iterator against the real server, through a proxy that cuts."""

from __future__ import annotations

import queue
import sys
import threading
import time
import unittest
from typing import Union

import lockapi
from support import ADMIN_KEY, BASE_URL, PROMPTLY, Proxy, ServerTestCase


class EventsTest(ServerTestCase):
    def test_resumes_after_a_cut_with_last_event_id(self) -> None:
        name = self.name()
        proxy = Proxy(BASE_URL)
        self.addCleanup(proxy.close)
        watcher = lockapi.Client(proxy.url, api_key=ADMIN_KEY, timeout=5)
        got: "queue.Queue[Union[lockapi.Event, BaseException]]" = queue.Queue()

        def consume() -> None:
            events = watcher.events(lock=name)
            try:
                for ev in events:
                    got.put(ev)
            except BaseException as e:  # the end the test arranges: a 400
                got.put(e)
            finally:
                events.close()

        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        self.addCleanup(consumer.join, PROMPTLY)
        # At teardown the proxy answers 400, which ends the iterator.
        self.addCleanup(proxy.cut)
        self.addCleanup(proxy.set_mode, Proxy.ANSWER_400)

        # The server subscribes before it answers: events from now on count.
        proxy.wait(lambda p: len(p.answers) == 1 and b"\r\n\r\n" in p.answers[0], what="the stream's answer")
        self.client.acquire(name).release()
        before = [self._next(got), self._next(got)]
        self.assertEqual([e.type for e in before], [lockapi.GRANTED, lockapi.RELEASED])

        # The connection breaks, and the server stays away while the lock
        # changes: the iterator must catch up on what it missed.
        proxy.set_mode(Proxy.REFUSE)
        proxy.cut()
        proxy.wait(lambda p: p.refused >= 1, what="a reconnect attempt")
        lease = self.client.acquire(name, owner="after-the-cut")
        lease.release()
        proxy.set_mode(Proxy.PASS)
        after = [self._next(got), self._next(got)]

        self.assertEqual([(e.type, e.owner) for e in after],
                         [(lockapi.GRANTED, "after-the-cut"), (lockapi.RELEASED, "after-the-cut")])
        self.assertEqual(after[0].fencing_token, lease.fencing_token)
        ids = [e.id for e in before + after]
        self.assertEqual(len(set(ids)), 4, "an event came twice: %s" % ids)
        self.assertEqual(len(proxy.requests), 2, "one reconnect got through")
        self.assertIn(("last-event-id: %s" % before[-1].id).encode(), proxy.requests[1].lower(),
                      "the reconnect did not resume after the last event")
        for ev in before + after:
            self.assertEqual(ev.lock, name)
            self.assertIsNotNone(ev.time.tzinfo)

    def test_types_and_after_select_events(self) -> None:
        name = self.name()
        lease = self.client.acquire(name, ttl=5)
        lease.renew()
        lease.release()
        # Everything after the grant, that was no renewal: from the log.
        events = self.client.events(lock=name, types=[lockapi.GRANTED, lockapi.RELEASED], after="0-0")
        try:
            first, second = next(events), next(events)
        finally:
            events.close()
        self.assertEqual([first.type, second.type], [lockapi.GRANTED, lockapi.RELEASED])
        self.assertEqual(first.fencing_token, lease.fencing_token)
        self.assertEqual(second.hold_count, 0)
        self.assertEqual(first.lease_id, lease.lease_id, "an admin sees lease ids")

    def test_refusal_of_the_first_request_raises(self) -> None:
        with self.assertRaises(lockapi.APIError) as cm:
            next(iter(self.client.events(lock="a", prefix="b")))
        self.assertEqual(cm.exception.status, 400)

    def test_close_from_another_thread_ends_the_iteration(self) -> None:
        proxy = Proxy(BASE_URL)
        self.addCleanup(proxy.close)
        events = lockapi.Client(proxy.url, api_key=ADMIN_KEY, timeout=5).events(lock=self.name())
        ended: "queue.Queue[object]" = queue.Queue()

        def consume() -> None:
            try:
                ended.put(list(events))  # waits: no event comes
            except BaseException as e:
                ended.put(e)

        threading.Thread(target=consume, daemon=True).start()
        proxy.wait(lambda p: len(p.answers) == 1 and b"\r\n\r\n" in p.answers[0], what="the stream's answer")
        start = time.monotonic()
        events.close()
        self.assertEqual(ended.get(timeout=PROMPTLY), [], "the iteration ended, raising nothing")
        took = time.monotonic() - start
        print("\nevents: close() from another thread ended the iteration in %.3fs" % took, file=sys.stderr)
        self.assertEqual(proxy.connections, 1, "no reconnect after close()")
        events.close()  # safe twice
        self.assertEqual(list(events), [])

    def test_timeout_ends_the_iteration(self) -> None:
        name = self.name()
        start = time.monotonic()
        with self.client.events(lock=name, timeout=0.5) as events:
            got = list(events)
        took = time.monotonic() - start
        self.assertEqual(got, [])
        # 0.5 s asked; asserted within [0.45, 0.5 + PROMPTLY] on a loaded machine.
        print("\nevents: a timeout of 0.5s ended the iteration in %.3fs" % took, file=sys.stderr)
        self.assertGreaterEqual(took, 0.45)
        self.assertLess(took, 0.5 + PROMPTLY)

    def _next(self, got: "queue.Queue[Union[lockapi.Event, BaseException]]") -> lockapi.Event:
        try:
            item = got.get(timeout=PROMPTLY)
        except queue.Empty:
            raise AssertionError("no event within %.1fs" % PROMPTLY) from None
        if isinstance(item, BaseException):
            raise AssertionError("the iterator ended: %r" % item)
        return item


if __name__ == "__main__":
    unittest.main()
