"""What needs no server: reading problems, times and event frames."""

from __future__ import annotations

import io
import json
import unittest
from typing import Dict
from datetime import datetime, timezone

import lockapi
from lockapi._errors import error_from_response
from lockapi._events import _parse, parse_time
from lockapi._timing import attempt_timeout, renew_backoff, safety_margin

PROBLEM = {"content-type": "application/problem+json", "x-request-id": "req-1"}


def problem(status: int, slug: str, **extra: object) -> bytes:
    doc: Dict[str, object] = {"type": lockapi.PROBLEM_BASE + slug, "title": slug, "status": status, "detail": "d"}
    doc.update(extra)
    return json.dumps(doc).encode()


class ErrorFromResponseTest(unittest.TestCase):
    def test_lock_held_with_holder(self) -> None:
        body = problem(409, "lock-held", holder={"owner": "w7", "fencing_token": 42, "expires_in_ms": 1500},
                       queue_length=2)
        err = error_from_response(409, PROBLEM, body, "deploy:prod")
        self.assertIsInstance(err, lockapi.LockHeld)
        assert isinstance(err, lockapi.LockHeld)
        self.assertEqual(err.holder, lockapi.Holder("w7", 42, 1.5))
        self.assertEqual((err.lock, err.queue_length, err.request_id), ("deploy:prod", 2, "req-1"))

    def test_lock_held_by_queued_waiters_only(self) -> None:
        err = error_from_response(409, PROBLEM, problem(409, "lock-held", queue_length=3), "x")
        assert isinstance(err, lockapi.LockHeld)
        self.assertIsNone(err.holder)
        self.assertIn("3 queued waiters", str(err))

    def test_classes_by_type(self) -> None:
        cases = [
            (410, "lease-lost", lockapi.LeaseLost),
            (410, "events-gone", lockapi.APIError),  # not a lost lease
            (401, "unauthorized", lockapi.Unauthorized),
            (403, "forbidden", lockapi.Forbidden),
            (503, "unavailable", lockapi.Unavailable),
            (429, "rate-limited", lockapi.Unavailable),
            (429, "quota-exceeded", lockapi.APIError),  # waiting does not help
            (409, "limit-mismatch", lockapi.APIError),
            (400, "invalid-request", lockapi.APIError),
            (410, "session-lost", lockapi.SessionLost),
            (404, "session-not-found", lockapi.SessionNotFound),
            (501, "unsupported", lockapi.APIError),
        ]
        for status, slug, cls in cases:
            with self.subTest(slug=slug):
                err = error_from_response(status, PROBLEM, problem(status, slug), "x")
                self.assertIs(type(err), cls)
                self.assertEqual((err.status, err.slug, err.detail), (status, slug, "d"))

    def test_lock_delay_with_retry_after(self) -> None:
        headers = dict(PROBLEM, **{"retry-after": "5"})
        err = error_from_response(409, headers, problem(409, "lock-delay", lock="deploy:prod"), "x")
        self.assertIs(type(err), lockapi.LockDelay)
        assert isinstance(err, lockapi.LockDelay)
        self.assertEqual((err.lock, err.retry_after, err.status), ("deploy:prod", 5.0, 409))

    def test_a_lost_session_is_a_lost_lease(self) -> None:
        err = error_from_response(410, PROBLEM, problem(410, "session-lost"))
        self.assertIsInstance(err, lockapi.LeaseLost, "except LeaseLost catches a session's loss too")

    def test_no_problem_document_is_classified_by_status(self) -> None:
        err = error_from_response(502, {"content-type": "text/html", "retry-after": "3"}, b"<h1>Bad gateway</h1>")
        self.assertIs(type(err), lockapi.Unavailable)
        self.assertEqual((err.type, err.retry_after, err.detail), ("", 3.0, "<h1>Bad gateway</h1>"))
        self.assertIs(type(error_from_response(401, {}, b"")), lockapi.Unauthorized)

    def test_field_errors(self) -> None:
        body = problem(400, "invalid-request", errors=[{"field": "ttl_ms", "detail": "must be at least 10"}])
        err = error_from_response(400, PROBLEM, body)
        self.assertEqual(err.errors, [{"field": "ttl_ms", "detail": "must be at least 10"}])


class ParseTest(unittest.TestCase):
    def test_times(self) -> None:
        utc = timezone.utc
        self.assertEqual(parse_time("2026-11-23T17:00:00Z"), datetime(2026, 11, 23, 17, tzinfo=utc))
        self.assertEqual(parse_time("2026-11-23T17:00:00.123456789Z"),
                         datetime(2026, 11, 23, 17, 0, 0, 123456, tzinfo=utc))
        self.assertEqual(parse_time("2026-11-23T18:00:00.5+01:00"), datetime(2026, 11, 23, 17, 0, 0, 500000, tzinfo=utc))

    def test_sse_frames(self) -> None:
        data = {"id": "7-1", "type": "granted", "lock": "a", "owner": "o", "mode": "shared",
                "fencing_token": 9, "hold_count": 1, "time": "2026-11-23T17:00:00.000Z"}
        stream = (b": keep-alive\n\n"
                  b"id: 7-1\nevent: granted\ndata: " + json.dumps(data).encode() + b"\n\n"
                  b"id: 7-2\r\nevent: released\r\ndata: {\"type\":\"released\",\r\ndata: \"lock\":\"a\"}\r\n\r\n"
                  b"id: 7-3\ndata: {\"type\":\"granted\"}\n")  # cut before its blank line
        events = list(_parse(io.BytesIO(stream)))  # type: ignore[arg-type]
        self.assertEqual([(e.id, e.type) for e in events], [("7-1", "granted"), ("7-2", "released")])
        self.assertTrue(events[0].shared)
        self.assertEqual(events[0].fencing_token, 9)
        self.assertIsNone(events[0].queue_length)


class TimingTest(unittest.TestCase):
    def test_the_retries_fit_before_the_safety_margin(self) -> None:
        ttl = 3.0
        self.assertAlmostEqual(safety_margin(ttl), 0.6)
        self.assertEqual(attempt_timeout(ttl, 30), 1.0)
        self.assertEqual(attempt_timeout(60, 5), 5)
        b = renew_backoff(ttl)
        pauses = [b.next() for _ in range(10)]
        self.assertTrue(all(0 < p <= ttl / 6 for p in pauses), pauses)


if __name__ == "__main__":
    unittest.main()
