// The client: acquire (one lock, or several at once), withLock, sessions,
// and the entry to the event stream. Mirrors the Go client (client/).

import { acquireMany, acquireOne, type AcquireAllOptions, type AcquireOptions } from "./acquire.js";
import { campaign, leader, observe, type CampaignOptions, type LeaderInfo, type Leadership, type ObserveOptions } from "./election.js";
import { LeaseLostError, SessionLostError } from "./errors.js";
import { events, type EventsOptions, type LockEvent } from "./events.js";
import { Http, pathName, type FetchLike } from "./http.js";
import { inspectLock, type LockState } from "./inspect.js";
import type { Lease } from "./lease.js";
import { Session, type SessionOptions } from "./session.js";

/** Bounds each request that does not wait for a lock, unless ClientOptions.requestTimeoutMs says otherwise. */
export const defaultRequestTimeoutMs = 30_000;

export interface ClientOptions {
  /** Sent as `Authorization: Bearer <apiKey>` with every request, for a server configured with API keys. */
  apiKey?: string | undefined;
  /** Bounds each request (30 s unless set); a waiting acquire may take its wait on top. */
  requestTimeoutMs?: number | undefined;
  /** The fetch to send requests with (a proxy, TLS settings, a test double); the global fetch by default. */
  fetch?: FetchLike | undefined;
  /**
   * false turns off the loss watch of leases and sessions (a blocking query
   * each, which tells a loss within moments of a force release or an
   * expiry): they then learn of a loss at their next renewal. For a client
   * that holds thousands of leases. On Node.js 20.16 or later the watch's
   * queries do not keep the process alive (unless `fetch` is given, which
   * they then use), as the watchdog's timers do not.
   */
  lossWatch?: boolean | undefined;
}

/** The server of a Client given none, when LOCKAPI_URL is not set. */
export const defaultUrl = "http://localhost:8080";

/** The environment variable name, where there is an environment (Node.js, Deno, Bun); undefined in a browser. */
function fromEnv(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return p?.env?.[name] || undefined;
}

/** A lockapi server's client. */
export class Client {
  private readonly http: Http;

  /**
   * A client of the server at baseUrl, e.g. "http://localhost:8080".
   * Without baseUrl, the client is configured by the environment, as every
   * lockapi client is: the server is $LOCKAPI_URL (else defaultUrl) and,
   * unless options.apiKey is set, the key is $LOCKAPI_API_KEY if set. With
   * baseUrl, nothing is read from the environment.
   */
  constructor(baseUrl?: string, options: ClientOptions = {}) {
    const timeout = options.requestTimeoutMs !== undefined && options.requestTimeoutMs > 0 ? options.requestTimeoutMs : defaultRequestTimeoutMs;
    let apiKey = options.apiKey;
    if (baseUrl === undefined) {
      baseUrl = fromEnv("LOCKAPI_URL") ?? defaultUrl;
      apiKey ??= fromEnv("LOCKAPI_API_KEY");
    }
    this.http = new Http(baseUrl, apiKey, timeout, options.fetch);
    this.http.lossWatch = options.lossWatch ?? true;
  }

  /**
   * Acquires the lock name and starts renewing it in the background (see
   * Lease). When another owner still holds the lock after waitMs it
   * rejects with LockHeldError; other failures are an ApiError (such as
   * UnauthorizedError, ForbiddenError, UnavailableError) or the signal's
   * reason.
   */
  acquire(name: string, opts: AcquireOptions = {}): Promise<Lease> {
    return acquireOne(this.http, name, opts);
  }

  /**
   * Acquires every lock in names, or none (the multi-lock, POST
   * /v1/leases): the server takes them one at a time in one global order
   * and never holds some while it waits for the others, so overlapping
   * acquireAll calls cannot deadlock. The leases come in the order of
   * names; each renews itself and is released on its own. When a lock is
   * still held after waitMs it rejects with LockHeldError naming it.
   *
   * Unlike acquire, it does not repeat a request whose answer was lost (a
   * multi-lock takes no Idempotency-Key): it rejects, and the server gives
   * back whatever the lost answer granted when it notices, or the leases
   * end with their TTL.
   */
  acquireAll(names: string[], opts: AcquireAllOptions = {}): Promise<Lease[]> {
    return acquireMany(this.http, names, opts);
  }

  /**
   * Releases leases (from acquireAll, or any others), each as
   * `lease.release()` does, also when one fails; then rejects with the
   * first failure, if any.
   */
  async releaseAll(leases: Lease[]): Promise<void> {
    const results = await Promise.allSettled(leases.map((l) => l.release()));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failed) {
      throw failed.reason;
    }
  }

  /**
   * Starts a session (POST /v1/sessions) and its watchdog, which renews it
   * every TTL/3. Leases acquired through it are bound to it: see Session.
   * A server whose store keeps no sessions rejects with an ApiError 501
   * `unsupported`.
   */
  session(opts: SessionOptions = {}): Promise<Session> {
    return Session.create(this.http, opts);
  }

  /**
   * Starts a session, runs fn with it, and closes it at the end (which
   * releases every lease bound to it), also when fn throws. `session.signal`
   * aborts once the session is known to be lost (its loss watch tells
   * within moments), with the SessionLostError as its reason: pass it to
   * the work, or check it.
   *
   * It resolves with fn's result. It rejects with fn's error when fn
   * throws, except that when the session was lost and fn failed by the
   * abort (or did not fail), it rejects with the SessionLostError; and with
   * close's error when only that failed.
   */
  async withSession<T>(opts: SessionOptions, fn: (session: Session) => Promise<T> | T): Promise<T> {
    const session = await this.session(opts);
    return runThenEnd(session, fn, () => session.close(), SessionLostError);
  }

  /**
   * Acquires the lock name, runs fn while holding it, and releases it at
   * the end, also when fn throws. `lease.signal` aborts once the lease is
   * known to be lost (its loss watch tells within moments of a force
   * release or an expiry), with the LeaseLostError as its reason: pass it
   * to the work (fetch, streams) or check it.
   *
   * It resolves with fn's result. It rejects with fn's error when fn
   * throws, except that when the lease was lost and fn failed by the abort
   * (or did not fail), it rejects with the LeaseLostError; and with the
   * release's error when only that failed.
   */
  async withLock<T>(name: string, opts: AcquireOptions, fn: (lease: Lease) => Promise<T> | T): Promise<T> {
    const lease = await this.acquire(name, opts);
    return runThenEnd(lease, fn, () => lease.release(), LeaseLostError);
  }

  /**
   * The state of the lock name (GET /v1/locks/{name}): its holders
   * (without their lease ids), waiters, last fencing token and lock-delay.
   * A free lock is no error: its `held` is false. Needs read access.
   */
  inspect(name: string, opts: { signal?: AbortSignal | undefined } = {}): Promise<LockState> {
    return inspectLock(this.http, name, opts);
  }

  /**
   * Frees the lock whoever holds it (an admin's operation): the holders'
   * leases are lost. Resolves with whether a lease was ended.
   */
  async forceRelease(name: string, opts: { signal?: AbortSignal | undefined } = {}): Promise<boolean> {
    const a = await this.http.call<{ released?: boolean }>("DELETE", `/v1/locks/${pathName(name)}`, {
      signal: opts.signal,
      timeoutMs: this.http.timeoutMs,
      lockName: name,
    });
    return a.data.released === true;
  }

  /**
   * Runs for leader of the election name (docs/ELECTIONS.md): acquires its
   * lock, waiting while another leads, and resolves with the Leadership
   * (kept alive like a lease) once elected. `value` is announced as the
   * leader's. With waitMs it rejects with LockHeldError once that ran out;
   * without, it waits until elected or `signal` aborts.
   */
  campaign(name: string, opts: CampaignOptions = {}): Promise<Leadership> {
    return campaign(this.http, name, opts);
  }

  /** The election's leader now (GET /v1/locks/{name}); `elected` is false when nobody leads. */
  leader(name: string, opts: { signal?: AbortSignal } = {}): Promise<LeaderInfo> {
    return leader(this.http, name, opts);
  }

  /**
   * The election's leader now, then again on every change (a new leader, a
   * new value, nobody leading), for `for await`; nothing while nothing
   * changes. Each step is one blocking query of the lock (GET
   * /v1/locks/{name}?index=&wait_ms=) from the last answer's index;
   * failures that may pass are retried with backoff, others thrown. The
   * loop ends when opts.signal aborts. An observer may see a leader a
   * moment after it lost its lease: act on the term.
   */
  observe(name: string, opts: ObserveOptions = {}): AsyncGenerator<LeaderInfo, void, undefined> {
    return observe(this.http, name, opts);
  }

  /**
   * The changes of the locks opts selects (GET /v1/events), in the order
   * the server recorded them, for `for await`. When the connection drops or
   * the server ends the stream, it reconnects after a pause and resumes
   * after the last event it yielded (Last-Event-ID): the loop sees every
   * event the server's log keeps, in order, and none twice. See
   * EventsOptions and docs/SDK_TS.md.
   */
  events(opts: EventsOptions = {}): AsyncGenerator<LockEvent, void, undefined> {
    return events(this.http, opts);
  }
}

/**
 * Runs fn with holder (a lease or a session), then ends it, also when fn
 * throws; settles as withLock and withSession say.
 */
async function runThenEnd<H extends { signal: AbortSignal }, T>(
  holder: H,
  fn: (holder: H) => Promise<T> | T,
  endIt: () => Promise<void>,
  LostError: abstract new (...args: never[]) => Error,
): Promise<T> {
  let result: T | undefined;
  let failed = false;
  let fnErr: unknown;
  try {
    result = await fn(holder);
  } catch (e) {
    failed = true;
    fnErr = e;
  }
  let endErr: unknown;
  try {
    await endIt();
  } catch (e) {
    endErr = e;
  }
  if (failed) {
    if (endErr instanceof LostError && isAbortOf(fnErr, holder.signal, LostError)) {
      throw endErr;
    }
    throw fnErr;
  }
  if (endErr !== undefined) {
    throw endErr;
  }
  return result as T;
}

/** Whether err is how work fails when signal aborts with a LostError. */
function isAbortOf(err: unknown, signal: AbortSignal, LostError: abstract new (...args: never[]) => Error): boolean {
  return err === signal.reason || err instanceof LostError || (err instanceof Error && err.name === "AbortError");
}
