"""The SDK's logger, ``logging.getLogger("lockapi")``.

DEBUG: one line per request (method, path, status, duration, request id).
WARNING: one line per renewal that failed and will be retried.
ERROR: one line per lease or session lost, and an on_lost callback that
raised (with its traceback). The SDK adds no handler: the application's
logging configuration decides where the lines go.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("lockapi")
