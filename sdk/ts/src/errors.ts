// The errors of the client. Every answer of the server that is not a
// success is an ApiError (RFC 9457 problem details with a stable `type`
// URI), or one of its subclasses for the answers a caller treats apart.
// A lease that no longer holds its lock is a LeaseLostError, a session
// that ended without close() a SessionLostError.

/**
 * The brand of lockapi's errors: a key of the global symbol registry, so
 * every copy of the package loaded at once (its ESM and CommonJS builds, a
 * bundle) brands alike and reads the others' brands; `instanceof` knows
 * only the classes of its own copy.
 */
const kindsKey = Symbol.for("@lockapi/client.errorKinds");

/**
 * Names an error class, in a static block: it hard-codes the class's
 * `name` (which a minifier renames along with the class) and brands its
 * instances with that name and its ancestors', for the `is...Error` guards.
 */
export function brand(cls: abstract new (...args: never[]) => Error, name: string): void {
  const proto = cls.prototype as unknown as Record<PropertyKey, unknown>;
  const inherited = (Object.getPrototypeOf(proto) as Record<PropertyKey, unknown>)[kindsKey];
  const kinds = Object.freeze([name, ...(Array.isArray(inherited) ? (inherited as string[]) : [])]);
  Object.defineProperty(proto, kindsKey, { value: kinds });
  Object.defineProperty(proto, "name", { value: name, writable: true, configurable: true });
}

/** Whether e is an error of a class branded name, or of a subclass, from any copy of the package. */
export function hasKind(e: unknown, name: string): boolean {
  if ((typeof e !== "object" && typeof e !== "function") || e === null) {
    return false;
  }
  const kinds = (e as Record<PropertyKey, unknown>)[kindsKey];
  return Array.isArray(kinds) && kinds.includes(name);
}

/** The base of the `type` URIs of lockapi's problems: `${problemTypeBase}lock-held`. */
export const problemTypeBase = "https://lockapi.dev/problems/";

/** One offending input of a 400 `invalid-request`. */
export interface FieldError {
  field: string;
  detail: string;
}

/** What an ApiError is made of; see ApiError for the fields. */
export interface ProblemInit {
  status: number;
  type: string;
  title: string;
  detail: string;
  requestId?: string | undefined;
  retryAfterMs?: number | undefined;
  fields?: FieldError[] | undefined;
  instance?: string | undefined;
  problem?: Readonly<Record<string, unknown>> | undefined;
  cause?: unknown;
}

/**
 * An error answer of the server: a problem detail, or, from something in
 * between that does not speak it, the bare status.
 */
export class ApiError extends Error {
  /** The HTTP status; 0 when no answer came (see UnavailableError). */
  readonly status: number;
  /** A `https://lockapi.dev/problems/<slug>` URI; "" when the body was no problem. */
  readonly type: string;
  /** The short summary of the problem type. */
  readonly title: string;
  /** What went wrong in this occurrence. */
  readonly detail: string;
  /** The server's X-Request-ID, to quote in a report. */
  readonly requestId: string | undefined;
  /** The Retry-After header in milliseconds, when the server sent one. */
  readonly retryAfterMs: number | undefined;
  /** The offending inputs of a 400. */
  readonly fields: FieldError[];
  /** The problem's `instance`: the path of the request that failed; undefined when the body was no problem. */
  readonly instance: string | undefined;
  /** The problem document as the server sent it, members this client does not read included; undefined when the body was no problem. */
  readonly problem: Readonly<Record<string, unknown>> | undefined;

  static {
    brand(this, "ApiError");
  }

  constructor(p: ProblemInit) {
    super(describe(p), p.cause === undefined ? undefined : { cause: p.cause });
    this.status = p.status;
    this.type = p.type;
    this.title = p.title;
    this.detail = p.detail;
    this.requestId = p.requestId;
    this.retryAfterMs = p.retryAfterMs;
    this.fields = p.fields ?? [];
    this.instance = p.instance;
    this.problem = p.problem;
  }

  /** The last part of `type` (`lock-held`), or "" for a bare status. */
  get slug(): string {
    return this.type.startsWith(problemTypeBase) ? this.type.slice(problemTypeBase.length) : "";
  }
}

function describe(p: ProblemInit): string {
  let s = p.status === 0 ? "lockapi: no answer from the server" : `lockapi: server answered ${p.status}`;
  const slug = p.type.startsWith(problemTypeBase) ? p.type.slice(problemTypeBase.length) : p.title;
  if (slug && p.status !== 0) {
    s += " " + slug;
  }
  if (p.detail) {
    s += ": " + p.detail;
  }
  if (p.requestId) {
    s += ` (request id ${p.requestId})`;
  }
  return s;
}

/** The lease in the way of an acquire. */
export interface Holder {
  owner: string;
  /** Until the holder's lease ends unless renewed. */
  expiresInMs: number;
  /** The holder's fencing token. */
  fencingToken: number;
}

/**
 * 409 `lock-held`: another owner still holds the lock after the acquire's
 * wait. `holder` is undefined when only queued waiters are in the way (a
 * fair queue, or a writer that readers keep out), or, in redlock mode, when
 * the masters do not all name one lease.
 */
export class LockHeldError extends ApiError {
  /** The lock in the way. */
  readonly lock: string;
  readonly holder: Holder | undefined;
  /** Waiters queued for the lock. */
  readonly queueLength: number;

  static {
    brand(this, "LockHeldError");
  }

  constructor(p: ProblemInit, lock: string, holder: Holder | undefined, queueLength: number) {
    super(p);
    this.lock = lock;
    this.holder = holder;
    this.queueLength = queueLength;
    if (holder) {
      this.message = `lockapi: lock "${lock}" is held by "${holder.owner}" (fencing token ${holder.fencingToken}, expires in ${holder.expiresInMs}ms unless renewed)`;
    } else if (queueLength > 0) {
      this.message = `lockapi: lock "${lock}" is free but ${queueLength} queued waiters come first`;
    } else {
      this.message = `lockapi: lock "${lock}" is not free; the holder is not named`;
    }
  }
}

/**
 * 409 `lock-delay`: the lock lost a session's lease moments ago (the
 * session expired, or a force release) and stays closed to new grants for
 * the session's lock-delay, so that the lost holder's last writes land
 * first. Try again after `retryAfterMs`.
 */
export class LockDelayError extends ApiError {
  /** The closed lock. */
  readonly lock: string;
  /** How long the delay lasts at most, from the server's Retry-After (whole seconds, rounded up). */
  declare readonly retryAfterMs: number;

  static {
    brand(this, "LockDelayError");
  }

  constructor(p: ProblemInit, lock: string) {
    super({ ...p, retryAfterMs: p.retryAfterMs ?? 1000 });
    this.lock = lock;
  }
}

/** 404 `session-not-found`: no such session, or another principal's (whose existence is not disclosed). */
export class SessionNotFoundError extends ApiError {
  static {
    brand(this, "SessionNotFoundError");
  }
}

/** 401 `unauthorized`: no API key, or one the server does not (or no longer) accept. */
export class UnauthorizedError extends ApiError {
  static {
    brand(this, "UnauthorizedError");
  }
}

/** 403 `forbidden`: the key lacks the scope, or the lock name is outside its patterns. */
export class ForbiddenError extends ApiError {
  static {
    brand(this, "ForbiddenError");
  }
}

/**
 * A failure that may pass: the server answered 503 (its store is
 * unreachable, it shuts down), 429, 502 or 504, or it could not be reached
 * at all, or did not answer in time (then `status` is 0 and `cause` is the
 * network failure). The client retries these where that is safe.
 */
export class UnavailableError extends ApiError {
  static {
    brand(this, "UnavailableError");
  }
}

/**
 * The lease no longer holds its lock: the server answered 410 `lease-lost`
 * (it expired or was force-released), refused a renewal, or no renewal
 * succeeded before a safety margin ahead of the lease's expiry, after which
 * another holder may exist. Stop the guarded work. `cause` is the answer or
 * failure that showed the loss, if any.
 */
export class LeaseLostError extends Error {
  readonly lock: string;
  readonly leaseId: string;
  readonly fencingToken: number;
  /** Why, in words. */
  readonly reason: string;
  /**
   * The HTTP status of the answer that showed the loss (410, or a
   * refusal's); of a bound lease, its session's. 0 when no answer did: no
   * renewal succeeded in time.
   */
  readonly status: number;
  /** The X-Request-ID of that answer, to quote in a report. */
  readonly requestId: string | undefined;

  static {
    brand(this, "LeaseLostError");
  }

  constructor(lock: string, leaseId: string, fencingToken: number, reason: string, cause?: unknown) {
    super(`lockapi: lease lost: lock "${lock}", lease ${leaseId}, fencing token ${fencingToken}: ${reason}`,
      cause === undefined ? undefined : { cause });
    this.lock = lock;
    this.leaseId = leaseId;
    this.fencingToken = fencingToken;
    this.reason = reason;
    const a = lossAnswer(cause);
    this.status = a.status;
    this.requestId = a.requestId;
  }
}

/**
 * The session ended without `close()`: the server answered a renewal (or an
 * acquire bound to it) 410 `session-lost` (it expired, or someone deleted
 * it) or 404 `session-not-found` (it was forgotten), refused a renewal, or
 * no renewal succeeded before a safety margin ahead of its expiry. Every
 * lease bound to it is lost too; stop the guarded work. `cause` is the
 * answer or failure that showed the loss, if any.
 */
export class SessionLostError extends Error {
  readonly sessionId: string;
  /** Why, in words. */
  readonly reason: string;
  /** The HTTP status of the answer that showed the loss (410, 404, or a refusal's); 0 when no renewal succeeded in time. */
  readonly status: number;
  /** The X-Request-ID of that answer, to quote in a report. */
  readonly requestId: string | undefined;

  static {
    brand(this, "SessionLostError");
  }

  constructor(sessionId: string, reason: string, cause?: unknown) {
    super(`lockapi: session lost: ${sessionId}: ${reason}`, cause === undefined ? undefined : { cause });
    this.sessionId = sessionId;
    this.reason = reason;
    const a = lossAnswer(cause);
    this.status = a.status;
    this.requestId = a.requestId;
  }
}

/**
 * The answer that showed a loss, from the loss's cause: a refusal (an
 * ApiError that is no UnavailableError), or the loss of a bound lease's
 * session. A failure that may pass, the last before the deadline, is no
 * such answer.
 */
function lossAnswer(cause: unknown): { status: number; requestId: string | undefined } {
  if ((hasKind(cause, "ApiError") && !hasKind(cause, "UnavailableError")) || hasKind(cause, "SessionLostError")) {
    const c = cause as { status: number; requestId: string | undefined };
    return { status: c.status, requestId: c.requestId };
  }
  return { status: 0, requestId: undefined };
}

/** Whether an answer with this status may succeed when asked again. */
export function isTransientStatus(status: number): boolean {
  return status === 429 || status === 502 || status === 503 || status === 504;
}

/** The JSON of a problem, as far as the client reads it. */
interface ProblemDoc {
  type?: unknown;
  instance?: unknown;
  title?: unknown;
  detail?: unknown;
  lock?: unknown;
  holder?: { owner?: unknown; fencing_token?: unknown; expires_in_ms?: unknown } | null;
  queue_length?: unknown;
  errors?: Array<{ field?: unknown; detail?: unknown }> | null;
}

const maxDetail = 200;

/**
 * Turns a non-2xx answer into the matching error. `lockName` names the
 * lock the request was about, for a 409 whose body does not.
 */
export async function responseError(res: Response, lockName: string): Promise<ApiError> {
  let text = "";
  try {
    text = await res.text();
  } catch {
    // The body broke off: the status still says what happened.
  }
  const retryAfter = Number.parseInt(res.headers.get("Retry-After") ?? "", 10);
  const p: ProblemInit = {
    status: res.status,
    type: "",
    title: res.statusText,
    detail: "",
    requestId: res.headers.get("X-Request-ID") ?? undefined,
    retryAfterMs: Number.isFinite(retryAfter) && retryAfter >= 0 ? retryAfter * 1000 : undefined,
  };
  let doc: ProblemDoc | undefined;
  if (/json/i.test(res.headers.get("Content-Type") ?? "")) {
    try {
      const parsed: unknown = JSON.parse(text);
      if (parsed && typeof parsed === "object" && typeof (parsed as ProblemDoc).type === "string") {
        doc = parsed as ProblemDoc;
      }
    } catch {
      // Not JSON after all: kept as text below.
    }
  }
  if (doc) {
    p.type = String(doc.type);
    p.title = typeof doc.title === "string" ? doc.title : p.title;
    p.detail = typeof doc.detail === "string" ? doc.detail : "";
    p.instance = typeof doc.instance === "string" ? doc.instance : undefined;
    p.problem = doc as Readonly<Record<string, unknown>>;
    if (Array.isArray(doc.errors)) {
      p.fields = doc.errors.map((f) => ({ field: String(f.field ?? ""), detail: String(f.detail ?? "") }));
    }
  } else if (text.trim()) {
    const t = text.trim();
    p.detail = t.length > maxDetail ? t.slice(0, maxDetail) + "…" : t;
  }

  if (res.status === 409 && doc && (doc.holder || p.type === problemTypeBase + "lock-held")) {
    const h = doc.holder;
    const holder = h
      ? { owner: String(h.owner ?? ""), fencingToken: Number(h.fencing_token ?? 0), expiresInMs: Number(h.expires_in_ms ?? 0) }
      : undefined;
    const lock = typeof doc.lock === "string" ? doc.lock : lockName;
    return new LockHeldError(p, lock, holder, typeof doc.queue_length === "number" ? doc.queue_length : 0);
  }
  if (p.type === problemTypeBase + "lock-delay") {
    return new LockDelayError(p, typeof doc?.lock === "string" ? doc.lock : lockName);
  }
  if (p.type === problemTypeBase + "session-not-found") {
    return new SessionNotFoundError(p);
  }
  switch (res.status) {
    case 401:
      return new UnauthorizedError(p);
    case 403:
      return new ForbiddenError(p);
  }
  // A quota (429 quota-exceeded) is not transient: asking again fails
  // until the principal ends sessions or webhooks it holds.
  if (isTransientStatus(res.status) && p.type !== problemTypeBase + "quota-exceeded") {
    return new UnavailableError(p);
  }
  return new ApiError(p);
}

/** Wraps a failure to exchange a request with the server. */
export function networkError(err: unknown): UnavailableError {
  const msg = err instanceof Error ? err.message : String(err);
  const timedOut = err instanceof Error && (err.name === "TimeoutError" || err.name === "AbortError");
  return new UnavailableError({
    status: 0,
    type: "",
    title: timedOut ? "Timeout" : "Network error",
    detail: timedOut ? "the server did not answer in time" : msg,
    cause: err,
  });
}
