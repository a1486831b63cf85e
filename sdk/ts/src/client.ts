// The client: acquire (with waiting and idempotent retries), withLock, and
// the entry to the event stream. Mirrors the Go client (client/client.go).

import { LeaseLostError, LockHeldError, UnavailableError } from "./errors.js";
import { events, type EventsOptions, type LockEvent } from "./events.js";
import { Http, pathName, type FetchLike } from "./http.js";
import { Lease, type LeaseData } from "./lease.js";
import { abortReason, Backoff, monotonicNow, randomHex, sleep } from "./internal.js";

/** Bounds each request that does not wait for a lock, unless ClientOptions.requestTimeoutMs says otherwise. */
export const defaultRequestTimeoutMs = 30_000;

export interface ClientOptions {
  /** Sent as `Authorization: Bearer <apiKey>` with every request, for a server configured with API keys. */
  apiKey?: string;
  /** Bounds each request (30 s unless set); a waiting acquire may take its wait on top. */
  requestTimeoutMs?: number;
  /** The fetch to send requests with (a proxy, TLS settings, a test double); the global fetch by default. */
  fetch?: FetchLike;
}

/** Tunes an acquire. Every field is optional. */
export interface AcquireOptions {
  /**
   * Names the holder. The same owner acquiring a lock it holds is
   * reentrant: it gets the same lease (id and token) with one more hold,
   * and each release drops one. Unset means a fresh owner unique to this
   * acquire, whose release drops every hold.
   */
  owner?: string;
  /** How long the lease lasts unless renewed; the server's default (30 s) unless set. The lease renews itself every TTL/3 while held. */
  ttlMs?: number;
  /**
   * How long to wait for the lock while another owner holds it; unset or 0
   * tries once. A wait longer than the server's maximum (60 s by default)
   * takes several requests, and failures that may pass are retried with
   * backoff while the wait lasts.
   */
  waitMs?: number;
  /** Asks for a read lease: any number of shared leases hold the lock together, an exclusive one holds it alone. */
  shared?: boolean;
  /** Makes the name a semaphore with this many permits (1 to 10,000); each acquire takes one. */
  limit?: number;
  /** Waits in arrival order: while others queued first, the lock goes to them. Matters only with waitMs. */
  fair?: boolean;
  /** Labels kept with the lease and shown to anyone who looks at the lock: at most 16. */
  metadata?: Record<string, string>;
  /**
   * The Idempotency-Key of the acquire's requests (a random one unless
   * set). Every request of one acquire carries the same key, so a retry
   * that finds a grant whose answer was lost gets that grant back instead
   * of a second hold. Setting it, with an owner, makes acquires of
   * separate calls (or processes) repeats of one another while the lease
   * lives.
   */
  idempotencyKey?: string;
  /** Aborts the acquire (its reason is the rejection). */
  signal?: AbortSignal;
}

/** A lockapi server's client. */
export class Client {
  private readonly http: Http;

  /** A client of the server at baseUrl, e.g. "http://localhost:8080". */
  constructor(baseUrl: string, options: ClientOptions = {}) {
    const timeout = options.requestTimeoutMs !== undefined && options.requestTimeoutMs > 0 ? options.requestTimeoutMs : defaultRequestTimeoutMs;
    this.http = new Http(baseUrl, options.apiKey, timeout, options.fetch);
  }

  /**
   * Acquires the lock name and starts renewing it in the background (see
   * Lease). When another owner still holds the lock after waitMs it
   * rejects with LockHeldError; other failures are an ApiError (such as
   * UnauthorizedError, ForbiddenError, UnavailableError) or the signal's
   * reason.
   */
  async acquire(name: string, opts: AcquireOptions = {}): Promise<Lease> {
    const unique = !opts.owner;
    const body = acquireBody(opts, opts.owner || uniqueOwner());
    const waitMs = opts.waitMs !== undefined && opts.waitMs > 0 ? opts.waitMs : 0;
    const deadline = waitMs > 0 ? monotonicNow() + waitMs : undefined;
    // One key for every request of this acquire: its retries are repeats.
    const key = opts.idempotencyKey || randomHex(16);
    const bo = new Backoff(100, 5000);
    for (;;) {
      const wait = deadline === undefined ? 0 : deadline - monotonicNow();
      if (wait >= 1) {
        body["wait_ms"] = Math.floor(wait);
      } else {
        delete body["wait_ms"];
      }
      const sent = monotonicNow();
      let err: unknown;
      try {
        const a = await this.http.call<LeaseData>("POST", `/v1/locks/${pathName(name)}/leases`, {
          body,
          headers: { "Idempotency-Key": key },
          signal: opts.signal,
          timeoutMs: Math.max(wait, 0) + this.http.timeoutMs,
          lockName: name,
        });
        return await this.grant(a.data, unique, wait > 0, sent, monotonicNow());
      } catch (e) {
        if (opts.signal?.aborted || e instanceof LeaseLostError) {
          throw e;
        }
        err = e;
      }
      const received = monotonicNow();

      // Asked again only while the wait lasts: a lock still held after the
      // server's longest wait, or a failure that may pass.
      if (deadline === undefined || deadline - monotonicNow() < 1) {
        throw err;
      }
      let pause = 0;
      if (err instanceof LockHeldError) {
        if (received - sent < 100) {
          pause = bo.next(); // the server hardly waited: do not spin
        }
      } else if (err instanceof UnavailableError) {
        pause = Math.max(bo.next(), err.retryAfterMs ?? 0);
      } else {
        throw err;
      }
      if (pause > 0 && !(await sleep(Math.min(pause, deadline - monotonicNow()), opts.signal))) {
        throw abortReason(opts.signal!);
      }
    }
  }

  /** Makes the lease of a granted acquire and starts its watchdog. */
  private async grant(g: LeaseData, unique: boolean, waited: boolean, sent: number, received: number): Promise<Lease> {
    const l = new Lease(this.http, g, unique, sent);
    // The lease can only be vouched for from when the request was sent. An
    // acquire that waited may have been granted long after that, so confirm
    // the grant with a renewal, which measures afresh.
    if (waited && received - sent > l.ttlMs / 10) {
      await l.confirmGrant(received);
    }
    l.startWatchdog();
    return l;
  }

  /**
   * Acquires the lock name, runs fn while holding it, and releases it at
   * the end, also when fn throws. `lease.signal` aborts the moment the
   * lease is lost, with the LeaseLostError as its reason: pass it to the
   * work (fetch, streams) or check it.
   *
   * It resolves with fn's result. It rejects with fn's error when fn
   * throws, except that when the lease was lost and fn failed by the abort
   * (or did not fail), it rejects with the LeaseLostError; and with the
   * release's error when only that failed.
   */
  async withLock<T>(name: string, opts: AcquireOptions, fn: (lease: Lease) => Promise<T> | T): Promise<T> {
    const lease = await this.acquire(name, opts);
    let result: T | undefined;
    let failed = false;
    let fnErr: unknown;
    try {
      result = await fn(lease);
    } catch (e) {
      failed = true;
      fnErr = e;
    }
    let relErr: unknown;
    try {
      await lease.release();
    } catch (e) {
      relErr = e;
    }
    if (failed) {
      if (relErr instanceof LeaseLostError && isAbortOf(fnErr, lease)) {
        throw relErr;
      }
      throw fnErr;
    }
    if (relErr !== undefined) {
      throw relErr;
    }
    return result as T;
  }

  /**
   * Frees the lock whoever holds it (an admin's operation): the holders'
   * leases are lost. Resolves with whether a lease was ended.
   */
  async forceRelease(name: string, opts: { signal?: AbortSignal } = {}): Promise<boolean> {
    const a = await this.http.call<{ released?: boolean }>("DELETE", `/v1/locks/${pathName(name)}`, {
      signal: opts.signal,
      timeoutMs: this.http.timeoutMs,
      lockName: name,
    });
    return a.data.released === true;
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

/** Whether err is how work fails when the lease's signal aborts. */
function isAbortOf(err: unknown, lease: Lease): boolean {
  return err === lease.signal.reason || err instanceof LeaseLostError || (err instanceof Error && err.name === "AbortError");
}

/** The acquire request that opts describe (openapi.yaml, AcquireRequest). */
function acquireBody(opts: AcquireOptions, owner: string): Record<string, unknown> {
  const body: Record<string, unknown> = { owner };
  if (opts.ttlMs !== undefined && opts.ttlMs > 0) {
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
function uniqueOwner(): string {
  const pid = (globalThis as { process?: { pid?: number } }).process?.pid;
  return `${pid !== undefined ? "node:" + pid : "js"}:${randomHex(6)}`;
}

