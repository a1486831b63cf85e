// Leader election on a lock (docs/ELECTIONS.md). A candidate campaigns by
// acquiring the election's lock, waiting while another leads; the leader's
// value is its lease's metadata, which proclaim replaces (PATCH
// /v1/locks/{name}/leases/{id}); its term is the fencing token, which
// rises with every new leader; observers follow the lock with blocking
// queries. Mirrors the Go client (client/election.go).

import { acquireOne, type AcquireOptions } from "./acquire.js";
import { LockDelayError, LockHeldError, UnavailableError } from "./errors.js";
import { pathName, type Http } from "./http.js";
import type { Lease } from "./lease.js";
import { Backoff, monotonicNow, sleep } from "./internal.js";

/** Tunes a campaign. Every field is optional. */
export interface CampaignOptions {
  /** The leader's value, announced the moment it is elected (the lease's metadata: at most 16 labels). */
  value?: Record<string, string>;
  /** The leadership's lease TTL; the server's default (30 s) unless set. It is kept alive every TTL/3, as a lease is. */
  ttlMs?: number;
  /** How long to campaign at most, then reject with LockHeldError; unset waits until elected. */
  waitMs?: number;
  /** Names the candidate (the lock's owner); a unique one unless set. Give each candidate its own. */
  owner?: string;
  /** Aborts the campaign (its reason is the rejection). */
  signal?: AbortSignal;
}

/** An election's leader as an observer sees it. */
export interface LeaderInfo {
  /** False when nobody leads (the lock is free); the other fields are then empty. */
  elected: boolean;
  owner: string;
  /** The leader's value: its lease's metadata. */
  value: Record<string, string>;
  /** The leader's term: its fencing token; 0 when nobody leads. */
  term: number;
}

/**
 * A won election: the lease of its lock, renewed by its watchdog until
 * `resign()`, or until it is lost (then `signal` aborts).
 */
export class Leadership {
  /** The lease that holds the election's lock. */
  readonly lease: Lease;

  /** @internal Leaderships come from Client.campaign. */
  constructor(lease: Lease) {
    this.lease = lease;
  }

  /** The election's name. */
  get name(): string {
    return this.lease.name;
  }

  /** The leader's owner, as observers see it. */
  get owner(): string {
    return this.lease.owner;
  }

  /**
   * The term: the lease's fencing token, larger than every earlier
   * leader's. Pass it to whatever the leader writes to, and have that
   * refuse a smaller one than it has seen.
   */
  get term(): number {
    return this.lease.fencingToken;
  }

  /** The leader's value, as last proclaimed. */
  get value(): Readonly<Record<string, string>> {
    return this.lease.metadata;
  }

  /** Aborts when the leadership is lost (not when it is resigned), with the LeaseLostError as its reason: stop acting as leader. */
  get signal(): AbortSignal {
    return this.lease.signal;
  }

  /**
   * Announces a new value without giving up leadership: every observer
   * sees it. Rejects with LeaseLostError (and `signal` aborts) when the
   * leadership is gone.
   */
  proclaim(value: Record<string, string>, opts: { signal?: AbortSignal } = {}): Promise<void> {
    return this.lease.updateMetadata(value, opts);
  }

  /** Gives the leadership up (releases the lease): the next candidate is elected. Rejects with LeaseLostError when it had been lost before. */
  resign(): Promise<void> {
    return this.lease.release();
  }
}

/** How long one acquire of a campaign waits before it asks again. */
const campaignStepMs = 3_600_000;

/** Client.campaign: acquires with waits until elected, or until waitMs ends. */
export async function campaign(http: Http, name: string, opts: CampaignOptions): Promise<Leadership> {
  const deadline = opts.waitMs === undefined ? undefined : monotonicNow() + opts.waitMs;
  for (;;) {
    const step = deadline === undefined ? campaignStepMs : Math.max(0, deadline - monotonicNow());
    const acquire: AcquireOptions = { waitMs: step };
    if (opts.owner !== undefined) {
      acquire.owner = opts.owner;
    }
    if (opts.ttlMs !== undefined) {
      acquire.ttlMs = opts.ttlMs;
    }
    if (opts.value !== undefined) {
      acquire.metadata = opts.value;
    }
    if (opts.signal !== undefined) {
      acquire.signal = opts.signal;
    }
    try {
      return new Leadership(await acquireOne(http, name, acquire));
    } catch (e) {
      if (deadline === undefined && (e instanceof LockHeldError || e instanceof LockDelayError)) {
        continue; // still led by another after a whole step: wait again
      }
      throw e;
    }
  }
}

/** The leader of a lock's state (GET /v1/locks/{name}): its exclusive holder. */
export function leaderOf(state: { holder?: { owner: string; metadata?: Record<string, string>; fencing_token: number } | null }): LeaderInfo {
  const h = state.holder;
  if (!h) {
    return { elected: false, owner: "", value: {}, term: 0 };
  }
  return { elected: true, owner: h.owner, value: { ...(h.metadata ?? {}) }, term: h.fencing_token };
}

/** Client.leader: the election's leader now. */
export async function leader(http: Http, name: string, opts: { signal?: AbortSignal } = {}): Promise<LeaderInfo> {
  const a = await http.call<LockStateData>("GET", `/v1/locks/${pathName(name)}`, {
    signal: opts.signal,
    timeoutMs: http.timeoutMs,
    lockName: name,
  });
  return leaderOf(a.data);
}

/** What observe reads of a lock's state. */
interface LockStateData {
  index: string;
  holder?: { owner: string; metadata?: Record<string, string>; fencing_token: number } | null;
}

/** Tunes observe. */
export interface ObserveOptions {
  /** Ends the observation: the loop then ends (no rejection). */
  signal?: AbortSignal;
  /** How long one blocking query waits (55 s unless set); the server answers sooner when its maximum wait is shorter. */
  waitMs?: number;
}

/** Whether a and b show the same leader with the same value. */
function same(a: LeaderInfo, b: LeaderInfo): boolean {
  if (a.elected !== b.elected || a.owner !== b.owner || a.term !== b.term) {
    return false;
  }
  const ka = Object.keys(a.value);
  return ka.length === Object.keys(b.value).length && ka.every((k) => a.value[k] === b.value[k]);
}

/**
 * Client.observe: blocking queries of the lock, each from the last index,
 * yielding the leader when it changed. Failures that may pass are retried
 * with backoff; any other failure is thrown.
 */
export async function* observe(http: Http, name: string, opts: ObserveOptions = {}): AsyncGenerator<LeaderInfo, void, undefined> {
  const waitMs = opts.waitMs ?? 55_000;
  const signal = opts.signal;
  let index = "";
  let last: LeaderInfo | undefined;
  let bo: Backoff | undefined;
  while (!signal?.aborted) {
    const q = index ? `?index=${encodeURIComponent(index)}&wait_ms=${Math.max(1, Math.ceil(waitMs))}` : "";
    let state: LockStateData;
    try {
      const a = await http.call<LockStateData>("GET", `/v1/locks/${pathName(name)}${q}`, {
        signal,
        timeoutMs: (index ? waitMs : 0) + http.timeoutMs,
        lockName: name,
      });
      state = a.data;
    } catch (e) {
      if (signal?.aborted) {
        return;
      }
      if (!(e instanceof UnavailableError)) {
        throw e;
      }
      // A failure that may pass: ask again after a pause, from the same index.
      bo ??= new Backoff(100, 5000);
      if (!(await sleep(Math.max(bo.next(), e.retryAfterMs ?? 0), signal))) {
        return;
      }
      continue;
    }
    bo = undefined;
    index = state.index;
    const info = leaderOf(state);
    if (last === undefined || !same(info, last)) {
      last = info;
      yield info;
    }
  }
}
