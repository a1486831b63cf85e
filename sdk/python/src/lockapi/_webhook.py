"""Verifying a webhook delivery as the Standard Webhooks specification says
(docs/WEBHOOKS.md), as the Go client's VerifyWebhook does (client/verify.go)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from typing import Callable, Mapping, Optional, Sequence, Union

from ._events import Event, decode_event

#: How far from now a delivery's timestamp may be (seconds), as the
#: reference libraries have it.
DEFAULT_WEBHOOK_TOLERANCE = 300.0

#: The type of a test delivery (POST /v1/webhooks/{id}/ping): webhooks only.
PING = "ping"


class WebhookVerificationError(Exception):
    """Why verify_webhook refused a delivery: answer it 401 and drop it."""


class WebhookHeadersError(WebhookVerificationError):
    """The webhook-id, webhook-timestamp or webhook-signature header is missing."""


class WebhookTimestampError(WebhookVerificationError):
    """The timestamp is malformed, or further from now than the tolerance
    (too old: perhaps a replay; or from the future)."""


class WebhookSignatureError(WebhookVerificationError):
    """No signature matches the secret."""


def verify_webhook(secret: Union[str, Sequence[str]], headers: Mapping[str, str], body: Union[bytes, str], *,
                   tolerance: float = DEFAULT_WEBHOOK_TOLERANCE,
                   now: Optional[Callable[[], float]] = None) -> Event:
    """Verifies a webhook delivery and returns its Event (a ping's has type
    PING): headers as received (any mapping; names are matched without
    regard to case), the raw body, secret (one, or several during a
    rotation) as the webhook's creation gave it. Raises WebhookHeadersError,
    WebhookTimestampError or WebhookSignatureError.

    A captured delivery can be replayed within the tolerance: a receiver
    that must not act twice keeps the webhook-ids it handled (the event's
    id, the same on every retry of one event) and ignores repeats.
    """
    lower = {k.lower(): v for k, v in headers.items()}
    msg_id = lower.get("webhook-id", "")
    ts = lower.get("webhook-timestamp", "")
    sigs = lower.get("webhook-signature", "")
    if not msg_id or not ts or not sigs:
        raise WebhookHeadersError("missing webhook-id, webhook-timestamp or webhook-signature")
    if not ts.isdigit() or abs(int(ts) - (now or time.time)()) > tolerance:
        raise WebhookTimestampError("the timestamp is malformed or too far from now")
    raw = body.encode("utf-8") if isinstance(body, str) else body
    given = [s[3:] for s in sigs.split() if s.startswith("v1,")]
    for s in [secret] if isinstance(secret, str) else secret:
        want = _sign(s, msg_id, ts, raw)
        if want is not None and any(hmac.compare_digest(g, want) for g in given):
            try:
                return decode_event("", raw.decode("utf-8"))
            except ValueError as e:
                raise WebhookVerificationError("a signed body that is no event: %s" % e) from e
    raise WebhookSignatureError("no signature matches")


def _sign(secret: str, msg_id: str, ts: str, body: bytes) -> Optional[str]:
    if not secret.startswith("whsec_"):
        return None
    try:
        key = base64.b64decode(secret[len("whsec_"):], validate=True)
    except (binascii.Error, ValueError):
        return None
    mac = hmac.new(key, b"%s.%s." % (msg_id.encode(), ts.encode()) + body, hashlib.sha256)
    return base64.b64encode(mac.digest()).decode("ascii")
