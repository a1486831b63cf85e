"""lockapi: the Python client of lockapi, the lock-as-a-service with fencing tokens.

    import lockapi

    client = lockapi.Client("http://localhost:8080", api_key="...")
    with client.lock("deploy:prod", ttl=10, wait=30) as lease:
        deploy(fencing_token=lease.fencing_token)

See docs/SDK_PYTHON.md for the whole API.
"""

from ._async import AsyncClient, AsyncEventStream, AsyncLeadership, AsyncLease, AsyncSession
from ._client import DEFAULT_TIMEOUT, DEFAULT_URL, Client
from ._errors import (
    PROBLEM_BASE,
    APIError,
    Forbidden,
    Holder,
    LeaseLost,
    LeaseReleased,
    LockDelay,
    LockHeld,
    SessionClosed,
    SessionLost,
    SessionNotFound,
    Unauthorized,
    Unavailable,
)
from ._election import LeaderInfo, Leadership
from ._events import EXPIRED, FORCE_RELEASED, GRANTED, REENTERED, RELEASED, RENEWED, UPDATED, Event, EventStream
from ._lease import Lease, release_all
from ._session import Session
from ._transport import BaseTransport, HTTPTransport, Request, Response
from ._webhook import (
    DEFAULT_WEBHOOK_TOLERANCE,
    PING,
    WebhookHeadersError,
    WebhookSignatureError,
    WebhookTimestampError,
    WebhookVerificationError,
    verify_webhook,
)

__version__ = "0.1.0"

__all__ = [
    "Client",
    "AsyncClient",
    "AsyncLease",
    "AsyncSession",
    "AsyncEventStream",
    "AsyncLeadership",
    "DEFAULT_TIMEOUT",
    "DEFAULT_URL",
    "Lease",
    "Session",
    "release_all",
    "Event",
    "EventStream",
    "BaseTransport",
    "HTTPTransport",
    "Request",
    "Response",
    "APIError",
    "LockHeld",
    "Holder",
    "LeaseLost",
    "LeaseReleased",
    "LockDelay",
    "SessionLost",
    "SessionClosed",
    "SessionNotFound",
    "Unauthorized",
    "Forbidden",
    "Unavailable",
    "PROBLEM_BASE",
    "GRANTED",
    "REENTERED",
    "RENEWED",
    "RELEASED",
    "EXPIRED",
    "FORCE_RELEASED",
    "UPDATED",
    "Leadership",
    "LeaderInfo",
    "PING",
    "verify_webhook",
    "DEFAULT_WEBHOOK_TOLERANCE",
    "WebhookVerificationError",
    "WebhookHeadersError",
    "WebhookTimestampError",
    "WebhookSignatureError",
]
