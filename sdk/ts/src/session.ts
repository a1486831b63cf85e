// A server-side session (docs/SESSIONS.md): one watchdog renews it every
// TTL/3, and with it every lease bound to it, whatever their number. The
// rules are the lease watchdog's, and those of the Go client
// (client/session.go): renewals that fail in ways that may pass are
// retried, but only while the session is surely alive; a 410 or 404, a
// refusal, or no successful renewal before a safety margin ahead of its
// expiry loses it, and every bound lease with it.

import { acquireMany, acquireOne, type AcquireAllOptions, type AcquireOptions } from "./acquire.js";
import { ApiError, brand, SessionLostError, SessionNotFoundError, UnavailableError } from "./errors.js";
import type { Http } from "./http.js";
import { Alarm, attemptTimeout, renewUntilSafe, runWatchdog, safetyMargin, type Lease } from "./lease.js";
import { monotonicNow } from "./internal.js";
import { LossWatch, refused } from "./watch.js";
import { asyncDispose } from "./dispose.js";

/** Tunes a session. Every field is optional. */
export interface SessionOptions {
  /** How long the session, and every lease bound to it, lasts unless renewed; the server's default (10 s) unless set. It renews itself every TTL/3. */
  ttlMs?: number | undefined;
  /**
   * How long a lock stays closed to new grants (409 `lock-delay`) after a
   * lease bound to the session ended by the session's expiry or a force
   * release, so that the lost holder's last writes land first. 0: none.
   */
  lockDelayMs?: number | undefined;
  /** Names the session's holder; unset: a unique one. */
  owner?: string | undefined;
  /** Aborts the creation (its reason is the rejection). */
  signal?: AbortSignal | undefined;
}

/** Tunes an acquire bound to a session: as AcquireOptions, without ttlMs (a bound lease lives as long as its session). */
export type SessionAcquireOptions = Omit<AcquireOptions, "ttlMs">;

/** Tunes a multi-lock bound to a session. */
export type SessionAcquireAllOptions = Omit<AcquireAllOptions, "ttlMs">;

/** A session as the server sends it (openapi.yaml, Session). */
export interface SessionData {
  session_id: string;
  owner: string;
  ttl_ms: number;
  lock_delay_ms: number;
  expires_at: string;
  leases: Array<{ lock: string; lease_id: string; mode: "exclusive" | "shared"; fencing_token: number }>;
  /** Changes when a lease is bound or ends; for blocking queries. */
  index?: string;
}

/** What Session's methods reject with once it was closed. */
export class SessionClosedError extends Error {
  readonly sessionId: string;

  constructor(sessionId: string) {
    super(`lockapi: session ${sessionId} was closed`);
    this.sessionId = sessionId;
  }

  static {
    brand(this, "SessionClosedError");
  }
}

/**
 * A session on the server. Leases acquired through it (`acquire`,
 * `acquireAll`) have no TTL or watchdog of their own: the session's one
 * watchdog keeps them all. When the session is lost, `signal` aborts with a
 * SessionLostError, and every bound lease is lost with it. `close()` ends
 * it and releases every bound lease at once.
 */
export class Session {
  /** The session's id. */
  readonly id: string;
  /** The session's owner. */
  readonly owner: string;
  /** How long a lock stays closed after a bound lease of it ended by the session's expiry or a force release. */
  readonly lockDelayMs: number;
  /** Aborted when the session is lost (not when it is closed); its reason is the SessionLostError. */
  readonly signal: AbortSignal;

  private readonly http: Http;
  private ttl: number;
  /** When (monotonic ms) the last successful create or renewal was sent. */
  private renewedAt: number;
  /** Why the session ended; undefined while it lives. */
  private ended: Error | undefined;
  /** The server said the session is gone (410 or 404). */
  private gone = false;
  private readonly lostCtl = new AbortController();
  /** Aborted by close to stop the watchdog and its renewal in flight. */
  private readonly stopCtl = new AbortController();
  private watching: Promise<void> = Promise.resolve();
  /** The watchdog's wait, cut short by a renewal from outside or close. */
  private readonly alarm = new Alarm();
  private closing: Promise<void> | undefined;
  /** Called once when the session ends: its bound leases (Lease.follow). */
  private readonly followers = new Set<(lost: SessionLostError | undefined) => void>();
  /**
   * The loss watch (one blocking query on the session): the bound leases
   * it covers, each with the gen it was bound at (only those bound before
   * a query was sent are judged by its answer).
   */
  private lossWatch: LossWatch | undefined;
  private readonly lossStopCtl = new AbortController();
  private gen = 0;
  private readonly watched = new Map<{ readonly leaseId: string; lostBy(reason: string): void }, number>();

  /** @internal Sessions come from Client.session. */
  constructor(http: Http, d: SessionData, sentAt: number) {
    this.http = http;
    this.id = d.session_id;
    this.owner = d.owner;
    this.lockDelayMs = d.lock_delay_ms;
    this.ttl = d.ttl_ms;
    this.renewedAt = sentAt;
    this.signal = this.lostCtl.signal;
  }

  /** @internal Starts a session on the server (POST /v1/sessions) and its watchdog. */
  static async create(http: Http, opts: SessionOptions): Promise<Session> {
    const body: Record<string, unknown> = {};
    if (opts.ttlMs !== undefined && opts.ttlMs > 0) {
      body["ttl_ms"] = Math.ceil(opts.ttlMs);
    }
    if (opts.lockDelayMs !== undefined && opts.lockDelayMs > 0) {
      body["lock_delay_ms"] = Math.ceil(opts.lockDelayMs);
    }
    if (opts.owner) {
      body["owner"] = opts.owner;
    }
    const sent = monotonicNow();
    const a = await http.call<SessionData>("POST", "/v1/sessions", { body, signal: opts.signal, timeoutMs: http.timeoutMs });
    const s = new Session(http, a.data, sent);
    s.watching = s.watch().catch(() => {
      // watch settles every failure into the session's end; nothing escapes.
    });
    if (http.lossWatch) {
      s.lossWatch = new LossWatch(http, {
        path: `/v1/sessions/${encodeURIComponent(s.id)}`,
        stop: s.lossStopCtl.signal,
        answer: (doc, gen) => s.judge(doc as SessionData, gen),
        refusal: (e) => s.watchRefused(e),
        gen: () => s.gen,
      });
    }
    return s;
  }

  /** The session's TTL in milliseconds, as of its creation or last renewal. */
  get ttlMs(): number {
    return this.ttl;
  }

  /**
   * When the session, and every lease bound to it, ends unless renewed, as
   * far as this client can vouch for it: from when the last successful
   * creation or renewal was sent.
   */
  get expiresAt(): Date {
    return new Date(Date.now() + (this.renewedAt + this.ttl - monotonicNow()));
  }

  /** Whether the session was lost (then `signal.aborted` too). */
  get lost(): boolean {
    return this.lostCtl.signal.aborted;
  }

  /** Why the session ended: a SessionLostError, a SessionClosedError, or undefined while it lives. */
  get error(): Error | undefined {
    return this.ended;
  }

  /**
   * Acquires the lock name bound to the session: the lease has no TTL or
   * watchdog of its own, lives as long as the session, and is lost with it
   * (its `signal` aborts). Its release() releases it alone. Rejects as
   * Client.acquire does, and with the SessionLostError when the server
   * answers that the session is gone (410, or 404).
   */
  async acquire(name: string, opts: SessionAcquireOptions = {}): Promise<Lease> {
    this.mustLive();
    const { ttlMs: _ignored, ...o } = opts as AcquireOptions;
    try {
      return await acquireOne(this.http, name, o, this);
    } catch (e) {
      throw this.refusal(e);
    }
  }

  /**
   * Acquires every lock in names, or none, each bound to the session (see
   * Client.acquireAll and Session.acquire). The leases come in the order of
   * names.
   */
  async acquireAll(names: string[], opts: SessionAcquireAllOptions = {}): Promise<Lease[]> {
    this.mustLive();
    const { ttlMs: _ignored, ...o } = opts as AcquireAllOptions;
    try {
      return await acquireMany(this.http, names, o, this);
    } catch (e) {
      throw this.refusal(e);
    }
  }

  /**
   * Renews the session once, and so every bound lease, optionally with a
   * new TTL (which then becomes its TTL). A 410, 404, or any refusal but a
   * 400 loses the session (`signal` aborts) and rejects with
   * SessionLostError; a failure that may pass rejects with UnavailableError
   * and leaves the session to its watchdog.
   */
  async renew(opts: { ttlMs?: number | undefined } = {}): Promise<void> {
    this.mustLive();
    try {
      await this.renewOnce(this.stopCtl.signal, this.http.timeoutMs, opts.ttlMs);
    } catch (e) {
      if (this.stopCtl.signal.aborted) {
        throw this.ended ?? new SessionClosedError(this.id);
      }
      if (e instanceof UnavailableError || (e instanceof ApiError && e.status === 400)) {
        throw e;
      }
      throw this.lose(this.lostError(e));
    }
    this.alarm.ring();
  }

  /**
   * Renews the session as the watchdog does: failures that may pass are
   * retried until the safety margin before its expiry. Rejects with
   * SessionLostError (and the session is lost) when that does not succeed.
   */
  async keepAlive(): Promise<void> {
    this.mustLive();
    try {
      await this.keepAliveUntilSafe(this.stopCtl.signal, false);
    } catch (e) {
      if (this.stopCtl.signal.aborted) {
        throw this.ended ?? new SessionClosedError(this.id);
      }
      throw this.lose(e as SessionLostError);
    }
    this.alarm.ring();
  }

  /**
   * Stops the watchdog and ends the session on the server (DELETE), which
   * releases every bound lease at once, as clean releases (no lock-delay);
   * their release() then resolves without sending anything. When the
   * session was lost before, it rejects with the SessionLostError. Calling
   * it again sends nothing and settles as the first call did.
   */
  close(): Promise<void> {
    this.closing ??= this.doClose();
    return this.closing;
  }

  /**
   * Closes the session at the end of an `await using` block: close(),
   * settling as it does (a session lost meanwhile rejects with its
   * SessionLostError).
   */
  [asyncDispose](): Promise<void> {
    return this.close();
  }

  private async doClose(): Promise<void> {
    this.stopCtl.abort();
    this.lossStopCtl.abort();
    this.alarm.ring();
    await this.watching;
    await this.lossWatch?.done;
    if (this.ended) {
      if (!this.gone) {
        // Lost by the watchdog's deadline: the server may still keep the
        // session, and ending it frees its locks sooner.
        await this.deleteOnce(attemptTimeout(this.ttl, this.http.timeoutMs)).catch(() => undefined);
      }
      throw this.ended;
    }
    try {
      await this.deleteOnce(this.http.timeoutMs);
    } catch (e) {
      if (isGone(e)) {
        this.gone = true;
        throw this.lose(this.lostError(e));
      }
      this.end(new SessionClosedError(this.id), undefined);
      throw e; // it ends by itself within its TTL
    }
    this.end(new SessionClosedError(this.id), undefined);
  }

  private async deleteOnce(timeoutMs: number): Promise<void> {
    await this.http.call("DELETE", `/v1/sessions/${encodeURIComponent(this.id)}`, { timeoutMs });
  }

  /** @internal See SessionBinding.onEnd. */
  onEnd(fn: (lost: SessionLostError | undefined) => void): () => void {
    if (this.ended) {
      fn(this.ended instanceof SessionLostError ? this.ended : undefined);
      return () => undefined;
    }
    this.followers.add(fn);
    return () => this.followers.delete(fn);
  }

  /** @internal See SessionBinding.watchLease. */
  watchLease(lease: { readonly leaseId: string; lostBy(reason: string): void }): () => void {
    if (!this.lossWatch) {
      return () => undefined;
    }
    this.watched.set(lease, ++this.gen);
    this.lossWatch.requery(); // so that it covers the new lease's lock too
    return () => this.watched.delete(lease);
  }

  /** Takes in an answer of the session's blocking query: a lease bound before the query was sent that it no longer lists is lost. */
  private judge(d: SessionData, gen: number): boolean {
    const listed = new Set((d.leases ?? []).map((l) => l.lease_id));
    for (const [lease, g] of [...this.watched]) {
      if (g <= gen && !listed.has(lease.leaseId)) {
        this.watched.delete(lease);
        lease.lostBy(`the server no longer lists it in session ${this.id}: it was force-released or released elsewhere`);
      }
    }
    return false;
  }

  /** Takes in a refusal of the session's blocking query: 410 or 404 is the session's end. */
  private watchRefused(e: ApiError): boolean {
    if (isGone(e)) {
      this.gone = true;
      this.lose(this.lostError(e));
      return true;
    }
    return refused(e);
  }

  /** @internal When the watchdog gives the session up: its expiry less the safety margin. */
  safeDeadline(): number {
    return this.renewedAt + this.ttl - safetyMargin(this.ttl);
  }

  /** The watchdog: renews every TTL/3 until close stops it or the session is lost. */
  private watch(): Promise<void> {
    return runWatchdog({
      stop: this.stopCtl.signal,
      alarm: this.alarm,
      ended: () => this.ended !== undefined,
      nextRenewal: () => this.renewedAt + this.ttl / 3,
      keepAlive: (stop) => this.keepAliveUntilSafe(stop, true),
      lose: (e) => this.lose(e as SessionLostError),
    });
  }

  /**
   * Renews, retrying failures that may pass until the safety margin before
   * the session's expiry; rejects with a SessionLostError, or signal's
   * reason. The watchdog's (background) retries do not keep a Node.js
   * process alive.
   */
  private async keepAliveUntilSafe(signal: AbortSignal, background: boolean): Promise<void> {
    return renewUntilSafe(
      {
        ttl: () => this.ttl,
        callTimeoutMs: this.http.timeoutMs,
        safeDeadline: () => this.safeDeadline(),
        renewOnce: (s, timeoutMs) => this.renewOnce(s, timeoutMs),
        timeoutError: (last) => this.timeoutError(last),
        lostError: (e) => this.lostError(e),
      },
      signal,
      background,
    );
  }

  /** Sends one renewal that must be answered within timeoutMs. */
  private async renewOnce(signal: AbortSignal, timeoutMs: number, ttlMs?: number): Promise<void> {
    const sent = monotonicNow();
    let a;
    try {
      a = await this.http.call<SessionData>("POST", `/v1/sessions/${encodeURIComponent(this.id)}/renew`, {
        body: ttlMs === undefined ? {} : { ttl_ms: Math.ceil(ttlMs) },
        signal,
        timeoutMs,
      });
    } catch (e) {
      if (isGone(e)) {
        this.gone = true;
      }
      throw e;
    }
    if (sent > this.renewedAt) {
      this.renewedAt = sent;
    }
    this.ttl = a.data.ttl_ms;
  }

  /**
   * What an acquire bound to the session rejects with for e: the session's
   * loss when the server says it is gone, else e.
   */
  private refusal(e: unknown): unknown {
    if (isGone(e)) {
      this.gone = true;
      return this.lose(this.lostError(e));
    }
    return e;
  }

  private mustLive(): void {
    if (this.ended) {
      throw this.ended;
    }
    if (this.closing) {
      throw new SessionClosedError(this.id);
    }
  }

  /** Explains a loss shown by cause, an answer to a renewal, an acquire or close. */
  private lostError(cause: unknown): SessionLostError {
    let reason: string;
    if (isGone(cause)) {
      reason = "the server no longer has it: it expired or was deleted";
      if (cause instanceof ApiError && cause.requestId) {
        reason += ` (request id ${cause.requestId})`;
      }
    } else {
      const msg = cause instanceof Error ? cause.message : String(cause);
      reason = "the server refused to renew it: " + msg.replace(/^lockapi: /, "");
    }
    return new SessionLostError(this.id, reason, cause);
  }

  /** Explains a loss by the watchdog's deadline; last is the last renewal's failure, if any. */
  private timeoutError(last: unknown): SessionLostError {
    let reason = `no renewal succeeded until ${Math.round(safetyMargin(this.ttl))}ms before its expiry, after which its leases may have other holders`;
    if (last instanceof Error) {
      reason += "; last error: " + last.message.replace(/^lockapi: /, "");
    } else {
      reason += "; none could even be sent in time (was this process paused or starved of CPU?)";
    }
    return new SessionLostError(this.id, reason, last);
  }

  /** Records a loss (once) and returns the error that stands for it. */
  private lose(err: SessionLostError): Error {
    this.end(err, err);
    return this.ended ?? err;
  }

  /** Records why the session ended, once, and ends its bound leases. */
  private end(err: Error, lost: SessionLostError | undefined): void {
    if (this.ended) {
      return;
    }
    this.ended = err;
    this.alarm.ring();
    this.lossStopCtl.abort();
    if (lost) {
      this.lostCtl.abort(lost);
    }
    const followers = [...this.followers];
    this.followers.clear();
    for (const fn of followers) {
      fn(lost);
    }
  }
}

/** Whether e is the server's word that the session is no more: 410 session-lost, or 404 session-not-found (it was forgotten). */
function isGone(e: unknown): boolean {
  return e instanceof SessionNotFoundError || (e instanceof ApiError && e.status === 410 && e.slug === "session-lost");
}
