// Type guards for the client's errors. They read the brand every error
// class carries (errors.ts, brand), not the class: `instanceof` fails when
// an error comes from another copy of the package (the ESM and the
// CommonJS build both loaded, or a bundle beside node_modules), and a
// minifier renames the classes. Each guard also holds for the subclasses.

import type {
  ApiError,
  ForbiddenError,
  LeaseLostError,
  LockDelayError,
  LockHeldError,
  SessionLostError,
  SessionNotFoundError,
  UnauthorizedError,
  UnavailableError,
} from "./errors.js";
import { hasKind } from "./errors.js";
import type { LeaseReleasedError } from "./lease.js";
import type { SessionClosedError } from "./session.js";
import type { WebhookVerificationError } from "./webhook.js";

/** Whether e is an ApiError (any error answer of the server), of any copy of the package. */
export function isApiError(e: unknown): e is ApiError {
  return hasKind(e, "ApiError");
}

/** Whether e is a LockHeldError (409 lock-held). */
export function isLockHeldError(e: unknown): e is LockHeldError {
  return hasKind(e, "LockHeldError");
}

/** Whether e is a LockDelayError (409 lock-delay). */
export function isLockDelayError(e: unknown): e is LockDelayError {
  return hasKind(e, "LockDelayError");
}

/** Whether e is a SessionNotFoundError (404 session-not-found). */
export function isSessionNotFoundError(e: unknown): e is SessionNotFoundError {
  return hasKind(e, "SessionNotFoundError");
}

/** Whether e is an UnauthorizedError (401). */
export function isUnauthorizedError(e: unknown): e is UnauthorizedError {
  return hasKind(e, "UnauthorizedError");
}

/** Whether e is a ForbiddenError (403). */
export function isForbiddenError(e: unknown): e is ForbiddenError {
  return hasKind(e, "ForbiddenError");
}

/** Whether e is an UnavailableError (a failure that may pass). */
export function isUnavailableError(e: unknown): e is UnavailableError {
  return hasKind(e, "UnavailableError");
}

/** Whether e is a LeaseLostError. */
export function isLeaseLostError(e: unknown): e is LeaseLostError {
  return hasKind(e, "LeaseLostError");
}

/** Whether e is a SessionLostError. */
export function isSessionLostError(e: unknown): e is SessionLostError {
  return hasKind(e, "SessionLostError");
}

/** Whether e is a LeaseReleasedError. */
export function isLeaseReleasedError(e: unknown): e is LeaseReleasedError {
  return hasKind(e, "LeaseReleasedError");
}

/** Whether e is a SessionClosedError. */
export function isSessionClosedError(e: unknown): e is SessionClosedError {
  return hasKind(e, "SessionClosedError");
}

/** Whether e is a WebhookVerificationError (or one of its three subclasses). */
export function isWebhookVerificationError(e: unknown): e is WebhookVerificationError {
  return hasKind(e, "WebhookVerificationError");
}
