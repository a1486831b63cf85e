// @lockapi/client: the TypeScript/JavaScript client of lockapi.
// See README.md, and docs/SDK_TS.md in the lockapi repository.

export { Client, defaultRequestTimeoutMs, defaultUrl } from "./client.js";
export type { ClientOptions } from "./client.js";
export type { AcquireAllOptions, AcquireOptions } from "./acquire.js";
export { Lease, LeaseReleasedError } from "./lease.js";
export { Session, SessionClosedError } from "./session.js";
export { Leadership } from "./election.js";
export type { CampaignOptions, LeaderInfo, ObserveOptions } from "./election.js";
export type { SessionAcquireAllOptions, SessionAcquireOptions, SessionOptions } from "./session.js";
export {
  ApiError,
  ForbiddenError,
  LeaseLostError,
  LockDelayError,
  LockHeldError,
  SessionLostError,
  SessionNotFoundError,
  UnauthorizedError,
  UnavailableError,
  problemTypeBase,
} from "./errors.js";
export type { FieldError, Holder } from "./errors.js";
export {
  isApiError,
  isForbiddenError,
  isLeaseLostError,
  isLeaseReleasedError,
  isLockDelayError,
  isLockHeldError,
  isSessionClosedError,
  isSessionLostError,
  isSessionNotFoundError,
  isUnauthorizedError,
  isUnavailableError,
  isWebhookVerificationError,
} from "./guards.js";
export type { LockHolder, LockMode, LockState } from "./inspect.js";
export type { EventsOptions, EventType, LockEvent } from "./events.js";
export type { FetchLike } from "./http.js";
export {
  defaultWebhookToleranceMs,
  verifyWebhook,
  WebhookHeadersError,
  WebhookSignatureError,
  WebhookTimestampError,
  WebhookVerificationError,
} from "./webhook.js";
export type { VerifyWebhookOptions, WebhookHeaders, WebhookPing } from "./webhook.js";
