"""verify_webhook: the Standard Webhooks test vector, typed refusals, and
lockapi's real deliveries (the server lets webhooks reach loopback:
LOCKAPI_WEBHOOKS_ALLOW_PRIVATE, set by tests/sdk_python_test.go)."""

from __future__ import annotations

import base64
import http.server
import json
import queue
import threading
import unittest
import urllib.request
from typing import Any, Dict, Optional, Tuple

import lockapi
from support import ADMIN_KEY, BASE_URL, PROMPTLY, ServerTestCase

SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_HEADERS = {
    "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
    "webhook-timestamp": "1614265330",
    "webhook-signature": "v1,bm9wZQ== v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
}
SPEC_BODY = b'{"test": 2432232314}'


def spec_now() -> float:
    return 1614265330 + 10


class VerifyUnitTest(unittest.TestCase):
    def test_spec_vector(self) -> None:
        lockapi.verify_webhook(SPEC_SECRET, SPEC_HEADERS, SPEC_BODY, now=spec_now)
        upper = {k.upper(): v for k, v in SPEC_HEADERS.items()}
        lockapi.verify_webhook(["whsec_" + base64.b64encode(b"x" * 32).decode(), SPEC_SECRET], upper, SPEC_BODY, now=spec_now)

    def test_refusals(self) -> None:
        with self.assertRaises(lockapi.WebhookSignatureError):
            lockapi.verify_webhook(SPEC_SECRET, SPEC_HEADERS, b'{"test": 1}', now=spec_now)
        with self.assertRaises(lockapi.WebhookSignatureError):
            lockapi.verify_webhook("not-a-secret", SPEC_HEADERS, SPEC_BODY, now=spec_now)
        with self.assertRaises(lockapi.WebhookTimestampError):
            lockapi.verify_webhook(SPEC_SECRET, SPEC_HEADERS, SPEC_BODY, now=lambda: spec_now() + 3600)
        for name in SPEC_HEADERS:
            h = {k: v for k, v in SPEC_HEADERS.items() if k != name}
            with self.assertRaises(lockapi.WebhookHeadersError):
                lockapi.verify_webhook(SPEC_SECRET, h, SPEC_BODY, now=spec_now)


def _admin(method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
    req = urllib.request.Request(BASE_URL + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": "Bearer %s" % ADMIN_KEY, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        text = resp.read()
    return json.loads(text) if text else None


class WebhookServerTest(ServerTestCase):
    def test_verifies_real_deliveries(self) -> None:
        got: "queue.Queue[Tuple[Dict[str, str], bytes]]" = queue.Queue()

        class Receiver(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(204)
                self.end_headers()
                got.put((dict(self.headers.items()), body))

            def log_message(self, format: str, *args: Any) -> None:
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        prefix = self.name("hook") + ":"
        hook = _admin("POST", "/v1/webhooks", {"url": "http://127.0.0.1:%d/hook" % srv.server_address[1],
                                               "prefix": prefix, "types": ["granted"]})
        self.addCleanup(_admin, "DELETE", "/v1/webhooks/" + hook["id"])

        ping = _admin("POST", "/v1/webhooks/%s/ping" % hook["id"])
        headers, body = got.get(timeout=PROMPTLY)
        ev = lockapi.verify_webhook(hook["secret"], headers, body)
        self.assertEqual((ev.type, ev.id), (lockapi.PING, ping["event_id"]))

        lease = lockapi.Client().acquire(prefix + "job")  # LOCKAPI_URL, LOCKAPI_API_KEY
        self.addCleanup(lease.release)
        headers, body = got.get(timeout=PROMPTLY)
        ev = lockapi.verify_webhook(hook["secret"], headers, body)
        self.assertEqual((ev.type, ev.lock, ev.fencing_token), (lockapi.GRANTED, prefix + "job", lease.fencing_token))
        with self.assertRaises(lockapi.WebhookSignatureError):
            lockapi.verify_webhook(hook["secret"], headers, body.replace(b"granted", b"released"))


if __name__ == "__main__":
    unittest.main()
