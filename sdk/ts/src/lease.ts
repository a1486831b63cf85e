// A held lock and its watchdog, which renews it every TTL/3 until it is
// released or lost. The rules are those of the Go client (client/lease.go):
// renewals that fail in ways that may pass are retried, but only while the
// lease is surely still held; a 410, a refusal, or no successful renewal
// before a safety margin ahead of the lease's expiry loses it. A lease
// bound to a session has no watchdog of its own: it lives and ends with
// its session (client/session.go, Lease.follow).

import { ApiError, brand, LeaseLostError, UnavailableError, type SessionLostError } from "./errors.js";
import type { Http } from "./http.js";
import { pathName } from "./http.js";
import { abortReason, Backoff, monotonicNow, sleep, unref } from "./internal.js";
import { LossWatch, refused } from "./watch.js";
import { asyncDispose } from "./dispose.js";

/** A lease as the server sends it (openapi.yaml, Lease). */
export interface LeaseData {
  lock: string;
  lease_id: string;
  owner: string;
  mode: "exclusive" | "shared";
  limit: number;
  fencing_token: number;
  hold_count: number;
  ttl_ms: number;
  acquired_at: string;
  expires_at: string;
  metadata: Record<string, string>;
  release_url: string;
  /** The session the lease is bound to; absent for a lease with a TTL of its own. */
  session?: string;
}

/**
 * What a lease bound to a session needs of it (Session implements it;
 * the package does not export it): its expiry stands for the lease's, its
 * renewals renew the lease, and its end ends the lease.
 */
export interface SessionBinding {
  readonly id: string;
  readonly ttlMs: number;
  readonly expiresAt: Date;
  /** When (monotonic ms) the session's watchdog would give it up: its expiry less the safety margin. */
  safeDeadline(): number;
  renew(opts?: { ttlMs?: number | undefined }): Promise<void>;
  keepAlive(): Promise<void>;
  /**
   * Calls fn once when the session ends (at once if it has): with the
   * SessionLostError when it was lost, undefined when it was closed.
   * Returns a function that stops the call.
   */
  onEnd(fn: (lost: SessionLostError | undefined) => void): () => void;
  /**
   * Has the session's loss watch cover a bound lease: lostBy is called if
   * its answer no longer lists the lease. Returns a function that stops it
   * (before the lease's release is sent).
   */
  watchLease(lease: { readonly leaseId: string; lostBy(reason: string): void }): () => void;
}

/** What Lease.renew, keepAlive and release reject with once the lease was released. */
export class LeaseReleasedError extends Error {
  constructor(lock: string, leaseId: string) {
    super(`lockapi: lease ${leaseId} of lock "${lock}" was released`);
  }

  static {
    brand(this, "LeaseReleasedError");
  }
}

/** How often release sends its request at most. */
const releaseAttempts = 3;

/**
 * A held lock. Its watchdog renews it every TTL/3 until `release()`, or
 * until it is lost: then `signal` aborts, with a LeaseLostError as its
 * `reason`. A loss watch (a blocking query on the lock; for a bound lease,
 * its session's one) aborts it within moments of a force release or an
 * expiry, rather than at the next renewal; `lossWatch: false` in
 * ClientOptions turns it off. A watch that fails is retried and never
 * makes a lease lost by itself.
 *
 * Holding is never certain: a process can pause past its lease. Pass
 * `fencingToken` to the resources you guard, and have them refuse tokens
 * smaller than one they have seen.
 */
export class Lease {
  /** The lock's name. */
  readonly name: string;
  /** The lease id: the capability to renew and release the lease. */
  readonly leaseId: string;
  /** The owner the lease was granted to. */
  readonly owner: string;
  /** Larger than that of every earlier grant of the lock; a reentrant acquire gets the same one. */
  readonly fencingToken: number;
  /** "shared" for a read lease, else "exclusive". */
  readonly mode: "exclusive" | "shared";
  /** The semaphore's number of permits, when the lease is a permit; else 0. */
  readonly limit: number;
  /** A URL, relative to the server, that releases every hold when POSTed to (see openapi.yaml). */
  readonly releaseUrl: string;
  /** Aborted when the lease is lost (not when it is released); its reason is the LeaseLostError. */
  readonly signal: AbortSignal;
  /** The id of the session the lease is bound to; undefined for a lease with a TTL (and watchdog) of its own. */
  readonly sessionId: string | undefined;

  private readonly http: Http;
  /** The owner is unique to this lease: release drops every hold. */
  private readonly releaseAll: boolean;
  private ttl: number;
  private holds: number;
  /** When (monotonic ms) the last successful acquire or renewal was sent. */
  private renewedAt: number;
  /** Why the lease ended; undefined while held. */
  private ended: Error | undefined;
  /** The server said the lease is gone (410). */
  private gone = false;
  private readonly lostCtl = new AbortController();
  /** Aborted by release to stop the watchdog and its renewal in flight. */
  private readonly stopCtl = new AbortController();
  private watching: Promise<void> = Promise.resolve();
  /** The watchdog's wait, cut short by a renewal from outside or release. */
  private readonly alarm = new Alarm();
  private releasing: Promise<void> | undefined;
  /** The session the lease is bound to, if any. */
  private readonly session: SessionBinding | undefined;
  /** The labels kept with the lease; updateMetadata replaces them. */
  private meta: Readonly<Record<string, string>>;
  /** Stops following the session (release). */
  private unfollow: (() => void) | undefined;
  /** Takes the lease out of its session's loss watch (release). */
  private unwatch: (() => void) | undefined;
  /** Aborted to stop the loss watch: by release, or the lease's end. */
  private readonly lossStopCtl = new AbortController();
  private lossWatch: LossWatch | undefined;

  /** @internal Leases come from Client.acquire and Session.acquire. */
  constructor(http: Http, g: LeaseData, releaseAll: boolean, sentAt: number, session?: SessionBinding) {
    this.http = http;
    this.name = g.lock;
    this.leaseId = g.lease_id;
    this.owner = g.owner;
    this.fencingToken = g.fencing_token;
    this.mode = g.mode === "shared" ? "shared" : "exclusive";
    this.limit = g.limit ?? 0;
    this.meta = g.metadata ?? {};
    this.releaseUrl = g.release_url;
    this.releaseAll = releaseAll;
    this.ttl = g.ttl_ms;
    this.holds = g.hold_count;
    this.renewedAt = sentAt;
    this.signal = this.lostCtl.signal;
    this.session = session;
    this.sessionId = session?.id;
  }

  /** The labels kept with the lease, as acquired or last updated (updateMetadata). */
  get metadata(): Readonly<Record<string, string>> {
    return this.meta;
  }

  /** Whether the lease is a read lease. */
  get shared(): boolean {
    return this.mode === "shared";
  }

  /** The lease's TTL in milliseconds, as of the last acquire or renewal: its session's for a bound lease. */
  get ttlMs(): number {
    return this.session?.ttlMs ?? this.ttl;
  }

  /** Reentrant holds, as of the last acquire or renewal. */
  get holdCount(): number {
    return this.holds;
  }

  /**
   * When the lease ends unless renewed, as far as this client can vouch
   * for it: from when the last successful acquire or renewal was sent, so
   * never later than the server's own expiry. A bound lease's is its
   * session's.
   */
  get expiresAt(): Date {
    if (this.session) {
      return this.session.expiresAt;
    }
    return new Date(Date.now() + (this.renewedAt + this.ttl - monotonicNow()));
  }

  /** Whether the lease was lost (then `signal.aborted` too). */
  get lost(): boolean {
    return this.lostCtl.signal.aborted;
  }

  /** Why the lease ended: a LeaseLostError, a LeaseReleasedError, or undefined while held. */
  get error(): Error | undefined {
    return this.ended;
  }

  /** @internal Starts the watchdog; Client.acquire calls it once. */
  startWatchdog(): void {
    this.watching = this.watch().catch(() => {
      // watch settles every failure into the lease's end; nothing escapes.
    });
  }

  /** @internal Starts the loss watch of an unbound lease; Client.acquire calls it once, unless turned off. */
  startLossWatch(): void {
    this.lossWatch = new LossWatch(this.http, {
      path: `/v1/locks/${pathName(this.name)}`,
      stop: this.lossStopCtl.signal,
      answer: (doc) => this.judge(doc as LockStateData),
      refusal: refused,
    });
  }

  /**
   * Takes in an answer of the lock's blocking query: a state that saw this
   * lease's grant (its fencing token) and no longer lists it among the
   * holders (by owner and token; a holder's lease id is not shown) means
   * the lease is lost.
   */
  private judge(st: LockStateData): boolean {
    if ((st.fencing_token ?? 0) < this.fencingToken) {
      return false;
    }
    if ((st.holders ?? []).some((h) => h.fencing_token === this.fencingToken && h.owner === this.owner)) {
      return false;
    }
    this.lostBy("the server no longer lists it among the lock's holders: it was force-released or expired");
    return true;
  }

  /** @internal Ends the lease as lost, shown by a loss watch: the server no longer has it. */
  lostBy(reason: string): void {
    this.gone = true;
    this.lose(new LeaseLostError(this.name, this.leaseId, this.fencingToken, reason));
  }

  /**
   * @internal Makes a lease bound to session end with it, in place of a
   * watchdog: lost (signal aborts, with a LeaseLostError whose cause is the
   * SessionLostError) when the session is lost, released when it is
   * closed. Session.acquire calls it once.
   */
  follow(session: SessionBinding): void {
    this.unwatch = session.watchLease(this);
    this.unfollow = session.onEnd((sessionLost) => {
      this.gone = true; // the server dropped it with the session
      if (sessionLost) {
        const reason = "its session was lost: " + sessionLost.reason;
        this.end(new LeaseLostError(this.name, this.leaseId, this.fencingToken, reason, sessionLost), true);
      } else {
        this.end(new LeaseReleasedError(this.name, this.leaseId), false);
      }
    });
  }

  /**
   * @internal Confirms a grant that came long after its acquire was sent
   * with a renewal, which measures the lease afresh; until then the time
   * of the answer stands in, only to bound the confirmation's retries. On
   * failure it gives the grant back and rejects.
   */
  async confirmGrant(receivedAt: number): Promise<void> {
    this.renewedAt = receivedAt;
    try {
      await this.keepAliveUntilSafe(this.stopCtl.signal, false);
    } catch (e) {
      await this.deleteOnce(attemptTimeout(this.ttl, this.http.timeoutMs)).catch(() => undefined);
      throw e;
    }
  }

  /**
   * Renews the lease once, optionally with a new TTL (which then becomes
   * its TTL). A 410 or any refusal but a 400 loses the lease (`signal`
   * aborts) and rejects with LeaseLostError; a failure that may pass
   * rejects with UnavailableError and leaves the lease to its watchdog.
   * A bound lease renews its session (Session.renew), and so every lease
   * bound to it.
   */
  async renew(opts: { ttlMs?: number | undefined } = {}): Promise<void> {
    this.mustBeHeld();
    if (this.session) {
      return this.session.renew(opts);
    }
    try {
      await this.renewOnce(this.stopCtl.signal, this.http.timeoutMs, opts.ttlMs);
    } catch (e) {
      if (this.stopCtl.signal.aborted) {
        throw this.ended ?? new LeaseReleasedError(this.name, this.leaseId);
      }
      if (e instanceof UnavailableError || (e instanceof ApiError && e.status === 400)) {
        throw e;
      }
      throw this.lose(this.lostError(e));
    }
    this.alarm.ring();
  }

  /**
   * Renews the lease as the watchdog does: failures that may pass are
   * retried until the safety margin before the lease's expiry. It rejects
   * with LeaseLostError (and the lease is lost) when that does not succeed.
   * A bound lease keeps its session alive (Session.keepAlive).
   */
  async keepAlive(): Promise<void> {
    this.mustBeHeld();
    if (this.session) {
      return this.session.keepAlive();
    }
    try {
      await this.keepAliveUntilSafe(this.stopCtl.signal, false);
    } catch (e) {
      if (this.stopCtl.signal.aborted) {
        throw this.ended ?? new LeaseReleasedError(this.name, this.leaseId);
      }
      throw this.lose(e as LeaseLostError);
    }
    this.alarm.ring();
  }

  /**
   * Replaces the lease's metadata (PATCH /v1/locks/{name}/leases/{id}),
   * leaving its token and TTL as they are: watchers of the lock see the
   * change (a leader's proclaim, docs/ELECTIONS.md). A 410 loses the lease
   * (`signal` aborts) and rejects with LeaseLostError; a server in redlock
   * mode rejects with an ApiError 501 `unsupported`.
   */
  async updateMetadata(metadata: Record<string, string>, opts: { signal?: AbortSignal } = {}): Promise<void> {
    this.mustBeHeld();
    let a;
    try {
      a = await this.http.call<LeaseData>("PATCH", `/v1/locks/${pathName(this.name)}/leases/${encodeURIComponent(this.leaseId)}`, {
        body: { metadata: { ...metadata } },
        signal: opts.signal,
        timeoutMs: this.http.timeoutMs,
        lockName: this.name,
      });
    } catch (e) {
      if (e instanceof ApiError && e.status === 410) {
        this.gone = true;
        throw this.lose(this.lostError(e));
      }
      throw e;
    }
    this.meta = a.data.metadata ?? {};
  }

  /**
   * Stops the renewals and releases the lease: one hold, or every hold
   * when the acquire named no owner. The watchdog has stopped before
   * release sends anything, and sends nothing after it settles.
   *
   * It resolves when the lease was held until released. When it was lost
   * before, by the watchdog's account or because the server answers 410,
   * it rejects with LeaseLostError: the guarded work may have overlapped
   * with another holder's. Failures that may pass are retried a few times
   * while that is safe, then rejected with; the lease then ends by itself
   * within its TTL. Calling it again sends nothing and settles as the first
   * call did. A bound lease that its session's close() released resolves
   * without sending anything.
   */
  release(): Promise<void> {
    this.releasing ??= this.doRelease();
    return this.releasing;
  }

  /**
   * Releases the lease at the end of an `await using` block: release(),
   * settling as it does (a lease lost meanwhile rejects with its
   * LeaseLostError; when the block threw too, the runtime throws a
   * SuppressedError holding both).
   */
  [asyncDispose](): Promise<void> {
    return this.release();
  }

  private async doRelease(): Promise<void> {
    this.stopCtl.abort();
    this.lossStopCtl.abort();
    this.alarm.ring();
    this.unfollow?.();
    this.unwatch?.(); // its release is no loss
    await this.watching;
    await this.lossWatch?.done;

    const lostBefore = this.ended;
    if (lostBefore instanceof LeaseReleasedError) {
      return; // its session's close() released it
    }
    if (lostBefore) {
      if (!this.gone) {
        // Lost by the watchdog's deadline: the server may still hold the
        // lease, and releasing it frees the lock sooner.
        await this.deleteOnce(attemptTimeout(this.ttl, this.http.timeoutMs)).catch(() => undefined);
      }
      throw lostBefore;
    }
    try {
      await this.deleteWithRetry();
    } catch (e) {
      if (e instanceof ApiError && e.status === 410) {
        this.gone = true;
        throw this.lose(this.lostError(e));
      }
      this.end(new LeaseReleasedError(this.name, this.leaseId), false);
      throw e;
    }
    this.end(new LeaseReleasedError(this.name, this.leaseId), false);
  }

  /** Sends the release, and retries failures that may pass a few times: while the lease may still be held, and a retry cannot drop more holds than this lease has. */
  private async deleteWithRetry(): Promise<void> {
    const idempotent = this.releaseAll || this.holds <= 1;
    const bo = renewBackoff(this.ttl);
    for (let attempt = 1; ; attempt++) {
      try {
        await this.deleteOnce(this.http.timeoutMs);
        return;
      } catch (e) {
        const safe = this.safeDeadline();
        if (!idempotent || !(e instanceof UnavailableError) || attempt === releaseAttempts || monotonicNow() >= safe) {
          throw e;
        }
        await sleep(Math.min(safe - monotonicNow(), bo.next()));
      }
    }
  }

  private async deleteOnce(timeoutMs: number): Promise<void> {
    const q = this.releaseAll ? "?all=true" : "";
    await this.http.call("DELETE", `/v1/locks/${pathName(this.name)}/leases/${encodeURIComponent(this.leaseId)}${q}`, {
      timeoutMs,
      lockName: this.name,
    });
  }

  /** The watchdog: renews every TTL/3 until release stops it or the lease is lost. */
  private watch(): Promise<void> {
    return runWatchdog({
      stop: this.stopCtl.signal,
      alarm: this.alarm,
      ended: () => this.ended !== undefined,
      nextRenewal: () => this.renewedAt + this.ttl / 3,
      keepAlive: (stop) => this.keepAliveUntilSafe(stop, true),
      lose: (e) => this.lose(e as LeaseLostError),
    });
  }

  /**
   * Renews, retrying failures that may pass until the safety margin before
   * the lease's expiry; rejects with a LeaseLostError, or signal's reason.
   * The watchdog's (background) retries do not keep a Node.js process alive.
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
      a = await this.http.call<LeaseData>(
        "POST",
        `/v1/locks/${pathName(this.name)}/leases/${encodeURIComponent(this.leaseId)}/renew`,
        { body: ttlMs === undefined ? {} : { ttl_ms: Math.ceil(ttlMs) }, signal, timeoutMs, lockName: this.name },
      );
    } catch (e) {
      if (e instanceof ApiError && e.status === 410) {
        this.gone = true;
      }
      throw e;
    }
    if (sent > this.renewedAt) {
      this.renewedAt = sent;
    }
    this.ttl = a.data.ttl_ms;
    this.holds = a.data.hold_count;
  }

  /** When the watchdog gives the lease up: its expiry less the safety margin (its session's, for a bound lease). */
  private safeDeadline(): number {
    if (this.session) {
      return this.session.safeDeadline();
    }
    return this.renewedAt + this.ttl - safetyMargin(this.ttl);
  }

  private mustBeHeld(): void {
    if (this.ended) {
      throw this.ended;
    }
    if (this.releasing) {
      throw new LeaseReleasedError(this.name, this.leaseId);
    }
  }

  /** Explains a loss shown by cause, an answer to a renewal or the release. */
  private lostError(cause: unknown): LeaseLostError {
    let reason: string;
    if (cause instanceof ApiError && cause.status === 410) {
      reason = "the server no longer has it: it expired or was force-released";
      if (cause.requestId) {
        reason += ` (request id ${cause.requestId})`;
      }
    } else {
      const msg = cause instanceof Error ? cause.message : String(cause);
      reason = "the server refused to renew it: " + msg.replace(/^lockapi: /, "");
    }
    return new LeaseLostError(this.name, this.leaseId, this.fencingToken, reason, cause);
  }

  /** Explains a loss by the watchdog's deadline; last is the last renewal's failure, if any. */
  private timeoutError(last: unknown): LeaseLostError {
    let reason = `no renewal succeeded until ${Math.round(safetyMargin(this.ttl))}ms before its expiry, after which another holder may exist`;
    if (last instanceof Error) {
      reason += "; last error: " + last.message.replace(/^lockapi: /, "");
    } else {
      reason += "; none could even be sent in time (was this process paused or starved of CPU?)";
    }
    return new LeaseLostError(this.name, this.leaseId, this.fencingToken, reason, last);
  }

  /** Records a loss (once) and returns the error that stands for it. */
  private lose(err: LeaseLostError): Error {
    this.end(err, true);
    return this.ended ?? err;
  }

  /** Records why the lease ended, once. */
  private end(err: Error, lost: boolean): void {
    if (this.ended) {
      return;
    }
    this.ended = err;
    this.alarm.ring();
    this.lossStopCtl.abort();
    if (lost) {
      this.lostCtl.abort(err);
    }
  }
}

/** What the loss watch reads of a lock's state (openapi.yaml, LockState). */
interface LockStateData {
  fencing_token?: number;
  holders?: Array<{ owner: string; fencing_token: number }>;
}

/** How long before a lease's expiry the watchdog gives up renewing: clock drift, and time for the holder to stop its work. */
export function safetyMargin(ttl: number): number {
  return ttl / 5;
}

/** Bounds one renewal so that a request lost in the network leaves time to retry; never below a second, so that a slow answer still counts. */
export function attemptTimeout(ttl: number, limit: number): number {
  return Math.min(Math.max(ttl / 6, 1000), limit);
}

/** Paces renewal retries to the TTL: the retries of one lease fit between TTL/3 and the safety margin. */
export function renewBackoff(ttl: number): Backoff {
  const base = Math.min(Math.max(ttl / 30, 5), 500);
  return new Backoff(base, Math.min(Math.max(ttl / 6, base), 5000));
}

/** What renewUntilSafe keeps alive: a lease, or a session. */
export interface RenewSteps {
  ttl(): number;
  /** The client's limit on one request. */
  callTimeoutMs: number;
  /** When it is given up: its expiry less the safety margin. */
  safeDeadline(): number;
  /** Sends one renewal that must be answered within timeoutMs. */
  renewOnce(signal: AbortSignal, timeoutMs: number): Promise<void>;
  /** Explains a loss by the safe deadline; last is the last renewal's failure. */
  timeoutError(last: unknown): Error;
  /** Explains a loss shown by a renewal's answer. */
  lostError(cause: unknown): Error;
}

/**
 * Renews, retrying failures that may pass (UnavailableError) until the
 * safety margin before the expiry; rejects with steps' loss errors, or
 * signal's reason. The watchdog's (background) retries do not keep a
 * Node.js process alive. Leases and sessions renew by these same rules.
 */
export async function renewUntilSafe(steps: RenewSteps, signal: AbortSignal, background: boolean): Promise<void> {
  const bo = renewBackoff(steps.ttl());
  let last: unknown;
  for (;;) {
    const safe = steps.safeDeadline();
    const now = monotonicNow();
    if (now >= safe) {
      throw steps.timeoutError(last);
    }
    try {
      await steps.renewOnce(signal, Math.min(safe - now, attemptTimeout(steps.ttl(), steps.callTimeoutMs)));
      return;
    } catch (e) {
      if (signal.aborted) {
        throw abortReason(signal);
      }
      if (!(e instanceof UnavailableError)) {
        throw steps.lostError(e);
      }
      last = e;
    }
    if (!(await sleep(Math.min(steps.safeDeadline() - monotonicNow(), bo.next()), signal, background))) {
      throw abortReason(signal);
    }
  }
}

/** A wait that can be cut short: a watchdog's nap until its next renewal. */
export class Alarm {
  private wake: (() => void) | undefined;

  /** Waits ms, or until ring is called. The timer does not keep a Node.js process alive. */
  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        if (this.wake === done) {
          this.wake = undefined;
        }
        resolve();
      };
      const timer = setTimeout(done, Math.max(ms, 0));
      unref(timer);
      this.wake = done;
    });
  }

  /** Ends the current sleep, if any. */
  ring(): void {
    this.wake?.();
  }
}

/** What runWatchdog keeps alive: a lease, or a session. */
export interface WatchdogSteps {
  /** Aborted by release or close. */
  stop: AbortSignal;
  alarm: Alarm;
  ended(): boolean;
  /** When (monotonic ms) the next renewal is due: the last one plus TTL/3. */
  nextRenewal(): number;
  /** Renews until the safe deadline (renewUntilSafe); rejects with the loss. */
  keepAlive(stop: AbortSignal): Promise<void>;
  /** Records the loss. */
  lose(err: unknown): void;
}

/** The watchdog of a lease or a session: renews at nextRenewal until stopped, ended or lost. */
export async function runWatchdog(w: WatchdogSteps): Promise<void> {
  while (!w.stop.aborted && !w.ended()) {
    await w.alarm.sleep(w.nextRenewal() - monotonicNow());
    if (w.stop.aborted || w.ended()) {
      return;
    }
    if (monotonicNow() < w.nextRenewal()) {
      continue; // woken by a renewal from outside: measure afresh
    }
    try {
      await w.keepAlive(w.stop);
    } catch (e) {
      if (!w.stop.aborted) {
        w.lose(e);
      }
      return;
    }
  }
}
