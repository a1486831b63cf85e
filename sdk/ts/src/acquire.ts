// Acquiring: one lock (with waiting and idempotent retries) or several at
// once (the multi-lock), with a TTL of their own or bound to a session.
// Client and Session both acquire through here. Mirrors the Go client's
// acquire and acquireAll (client/client.go).

import { LeaseLostError, LockDelayError, LockHeldError, UnavailableError } from "./errors.js";
import { pathName, type Http } from "./http.js";
import { Lease, type LeaseData, type SessionBinding } from "./lease.js";
import { abortReason, Backoff, monotonicNow, randomHex, sleep } from "./internal.js";

/** Tunes an acquire. Every field is optional. */
export interface AcquireOptions {
  /**
   * Names the holder. The same owner acquiring a lock it holds is
   * reentrant: it gets the same lease (id and token) with one more hold,
   * and each release drops one. Unset means a fresh owner unique to this
   * acquire, whose release drops every hold.
   */
  owner?: string | undefined;
  /** How long the lease lasts unless renewed; the server's default (30 s) unless set. The lease renews itself every TTL/3 while held. */
  ttlMs?: number | undefined;
  /**
   * How long to wait for the lock while another owner holds it; unset or 0
   * tries once. A wait longer than the server's maximum (60 s by default)
   * takes several requests, and failures that may pass are retried with
   * backoff while the wait lasts.
   */
  waitMs?: number | undefined;
  /** Asks for a read lease: any number of shared leases hold the lock together, an exclusive one holds it alone. */
  shared?: boolean | undefined;
  /** Makes the name a semaphore with this many permits (1 to 10,000); each acquire takes one. */
  limit?: number | undefined;
  /** Waits in arrival order: while others queued first, the lock goes to them. Matters only with waitMs. */
  fair?: boolean | undefined;
  /** Labels kept with the lease and shown to anyone who looks at the lock: at most 16. */
  metadata?: Record<string, string> | undefined;
  /**
   * The Idempotency-Key of the acquire's requests (a random one unless
   * set). Every request of one acquire carries the same key, so a retry
   * that finds a grant whose answer was lost gets that grant back instead
   * of a second hold. Setting it, with an owner, makes acquires of
   * separate calls (or processes) repeats of one another while the lease
   * lives.
   */
  idempotencyKey?: string | undefined;
  /** Aborts the acquire (its reason is the rejection). */
  signal?: AbortSignal | undefined;
  /**
   * Takes the lease without its watchdog: the caller renews it with
   * `lease.renew()`, more often than its TTL (the watchdog renews every
   * TTL/3). A renewal or the release that finds the lease gone rejects
   * with LeaseLostError and aborts `signal`; nothing else watches it. It
   * does not apply to a lease bound to a session, which its session renews.
   */
  manual?: boolean | undefined;
}

/** Tunes a multi-lock (acquireAll): limit, fair and idempotencyKey do not apply to several locks at once. */
export type AcquireAllOptions = Omit<AcquireOptions, "limit" | "fair" | "idempotencyKey">;

/** Acquires the lock name, bound to session unless that is undefined (see Client.acquire). */
export async function acquireOne(http: Http, name: string, opts: AcquireOptions, session?: SessionBinding): Promise<Lease> {
  const unique = !opts.owner;
  const body = acquireBody(opts, opts.owner || uniqueOwner(), session);
  const deadline = waitDeadline(opts);
  // One key for every request of this acquire: its retries are repeats.
  const key = opts.idempotencyKey || randomHex(16);
  const bo = new Backoff(100, 5000);
  for (let attempt = 1; ; attempt++) {
    const wait = setWait(body, deadline);
    const sent = monotonicNow();
    let err: unknown;
    try {
      const a = await http.call<LeaseData>("POST", `/v1/locks/${pathName(name)}/leases`, {
        body,
        headers: { "Idempotency-Key": key },
        signal: opts.signal,
        timeoutMs: Math.max(wait, 0) + http.timeoutMs,
        lockName: name,
      });
      return await grant(http, a.data, unique, opts.manual === true, wait > 0, sent, monotonicNow(), session);
    } catch (e) {
      if (opts.signal?.aborted || e instanceof LeaseLostError) {
        throw e;
      }
      err = e;
    }
    if (deadline === undefined) {
      await pauseOrThrowNoWait(err, attempt, bo, opts.signal);
      continue;
    }
    await pauseOrThrow(err, deadline, sent, bo, opts.signal, true);
  }
}

/**
 * How often an acquire that does not wait sends its request at most when
 * the answer is one that may pass (UnavailableError): its Idempotency-Key
 * makes a repeat safe, and a blip of the network or a failover should not
 * fail it. As the Python SDK's NO_WAIT_ATTEMPTS.
 */
const NO_WAIT_ATTEMPTS = 3;

/** The longest pause (ms) before such a repeat: a longer Retry-After is the caller's to wait for. */
const NO_WAIT_MAX_PAUSE_MS = 1000;

/**
 * Decides whether an acquire without a wait that failed with err on its
 * attempt-th try is sent again: a failure that may pass, a few times,
 * promptly. It pauses as long as that takes, or throws.
 */
async function pauseOrThrowNoWait(err: unknown, attempt: number, bo: Backoff, signal: AbortSignal | undefined): Promise<void> {
  if (!(err instanceof UnavailableError) || attempt >= NO_WAIT_ATTEMPTS) {
    throw err;
  }
  const pause = Math.max(bo.next(), err.retryAfterMs ?? 0);
  if (pause > NO_WAIT_MAX_PAUSE_MS) {
    throw err;
  }
  if (!(await sleep(pause, signal))) {
    throw abortReason(signal!);
  }
}

/**
 * Acquires every lock in names, or none, bound to session unless that is
 * undefined (see Client.acquireAll). The leases come in the order of names.
 */
export async function acquireMany(http: Http, names: string[], opts: AcquireAllOptions, session?: SessionBinding): Promise<Lease[]> {
  const o = opts as AcquireOptions;
  if ((o.limit !== undefined && o.limit > 0) || o.fair) {
    throw new TypeError("lockapi: acquireAll: limit and fair do not apply to a multi-lock");
  }
  const unique = !opts.owner;
  const one = acquireBody(opts, opts.owner || uniqueOwner(), session);
  const body: Record<string, unknown> = { locks: names, ...one };
  const what = names.join(", ");
  const deadline = waitDeadline(opts);
  const bo = new Backoff(100, 5000);
  for (;;) {
    const wait = setWait(body, deadline);
    const sent = monotonicNow();
    let err: unknown;
    try {
      // No Idempotency-Key: a multi-lock takes none, so a lost answer is
      // not asked again (see pauseOrThrow): the server gives back what it
      // granted when it notices, or the leases end with their TTL.
      const a = await http.call<{ leases: LeaseData[] }>("POST", "/v1/leases", {
        body,
        signal: opts.signal,
        timeoutMs: Math.max(wait, 0) + http.timeoutMs,
        lockName: what,
      });
      return await grantAll(http, a.data.leases, unique, opts.manual === true, wait > 0, sent, monotonicNow(), session);
    } catch (e) {
      if (opts.signal?.aborted || e instanceof LeaseLostError) {
        throw e;
      }
      err = e;
    }
    await pauseOrThrow(err, deadline, sent, bo, opts.signal, false);
  }
}

/**
 * Decides whether an acquire that failed with err is asked again: only
 * while its wait lasts, for a lock still held (or closed by a lock-delay)
 * after the server's longest wait, and, when retryUnavailable, a failure
 * that may pass. It pauses as long as that takes, or throws.
 */
async function pauseOrThrow(err: unknown, deadline: number | undefined, sent: number, bo: Backoff, signal: AbortSignal | undefined, retryUnavailable: boolean): Promise<void> {
  const received = monotonicNow();
  if (deadline === undefined || deadline - received < 1) {
    throw err;
  }
  let pause = 0;
  if (err instanceof LockHeldError || err instanceof LockDelayError) {
    if (received - sent < 100) {
      pause = bo.next(); // the server hardly waited: do not spin
    }
  } else if (retryUnavailable && err instanceof UnavailableError) {
    pause = Math.max(bo.next(), err.retryAfterMs ?? 0);
  } else {
    throw err;
  }
  if (pause > 0 && !(await sleep(Math.min(pause, deadline - monotonicNow()), signal))) {
    throw abortReason(signal!);
  }
}

/** When (monotonic ms) an acquire's wait ends; undefined: it tries once. */
function waitDeadline(opts: { waitMs?: number | undefined }): number | undefined {
  return opts.waitMs !== undefined && opts.waitMs > 0 ? monotonicNow() + opts.waitMs : undefined;
}

/** Puts what is left of the wait into body's wait_ms, and returns it (ms; 0 or less: none). */
function setWait(body: Record<string, unknown>, deadline: number | undefined): number {
  const wait = deadline === undefined ? 0 : deadline - monotonicNow();
  if (wait >= 1) {
    body["wait_ms"] = Math.floor(wait);
  } else {
    delete body["wait_ms"];
  }
  return wait;
}

/**
 * Makes the lease of a granted acquire. A lease bound to a session follows
 * the session's watchdog; any other starts its own.
 */
async function grant(http: Http, g: LeaseData, unique: boolean, manual: boolean, waited: boolean, sent: number, received: number, session?: SessionBinding): Promise<Lease> {
  const l = new Lease(http, g, unique, sent, session);
  if (session) {
    l.follow(session);
    return l;
  }
  // The lease can only be vouched for from when the request was sent. An
  // acquire that waited may have been granted long after that, so confirm
  // the grant with a renewal, which measures afresh.
  if (waited && received - sent > l.ttlMs / 10) {
    await l.confirmGrant(received);
  }
  if (http.lossWatch) {
    l.startLossWatch();
  }
  if (!manual) {
    l.startWatchdog();
  }
  return l;
}

/** Makes the leases of a granted multi-lock, all or none: when one cannot be confirmed, the others are given back. */
async function grantAll(http: Http, gs: LeaseData[], unique: boolean, manual: boolean, waited: boolean, sent: number, received: number, session?: SessionBinding): Promise<Lease[]> {
  const leases: Lease[] = [];
  for (let i = 0; i < gs.length; i++) {
    try {
      leases.push(await grant(http, gs[i]!, unique, manual, waited, sent, received, session));
    } catch (e) {
      const rest = gs.slice(i + 1).map((g) => new Lease(http, g, unique, sent, session));
      await Promise.allSettled([...leases, ...rest].map((l) => l.release()));
      throw e;
    }
  }
  return leases;
}

/** The acquire request that opts describe (openapi.yaml, AcquireRequest): bound to session, it has no TTL. */
function acquireBody(opts: AcquireOptions, owner: string, session: SessionBinding | undefined): Record<string, unknown> {
  const body: Record<string, unknown> = { owner };
  if (session) {
    body["session"] = session.id;
  } else if (opts.ttlMs !== undefined && opts.ttlMs > 0) {
    body["ttl_ms"] = Math.ceil(opts.ttlMs);
  }
  if (opts.metadata && Object.keys(opts.metadata).length > 0) {
    body["metadata"] = opts.metadata;
  }
  if (opts.shared) {
    body["mode"] = "shared";
  }
  if (opts.limit !== undefined && opts.limit > 0) {
    body["limit"] = opts.limit;
  }
  if (opts.fair) {
    body["fair"] = true;
  }
  return body;
}

/** An owner nobody else uses: the process id where there is one, and 48 random bits. */
export function uniqueOwner(): string {
  const pid = (globalThis as { process?: { pid?: number } }).process?.pid;
  return `${pid !== undefined ? "node:" + pid : "js"}:${randomHex(6)}`;
}
