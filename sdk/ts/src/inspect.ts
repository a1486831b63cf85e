// Reading a lock's state (GET /v1/locks/{name}), as the Go client's
// Inspect does (client/inspect.go) and Python's Client.inspect.

import { pathName, type Http } from "./http.js";

/** How a lock is held (docs/LOCK_KINDS.md). */
export type LockMode = "exclusive" | "shared" | "semaphore";

/** One live lease of a lock, as anyone with read access sees it: without its lease id. */
export interface LockHolder {
  owner: string;
  /** "shared" for a read lease (a semaphore's permits are "exclusive"). */
  mode: "exclusive" | "shared";
  /** The lease's fencing token. */
  fencingToken: number;
  holdCount: number;
  acquiredAt: Date;
  /** When the lease ends unless renewed, by the server's clock. */
  expiresAt: Date;
  metadata: Record<string, string>;
  /** The session the lease is bound to; undefined for none. */
  sessionId: string | undefined;
}

/** A lock's state (openapi.yaml, LockState). A free lock is no error: its `held` is false. */
export interface LockState {
  lock: string;
  held: boolean;
  /** How the lock is held; undefined when it is free. */
  mode: LockMode | undefined;
  /** The exclusive lease, when there is one; undefined when the lock is free, held by readers only, or a semaphore. */
  holder: LockHolder | undefined;
  /** Every live lease in the order they were granted: the exclusive one, readers' shared ones, or a semaphore's permits. */
  holders: LockHolder[];
  /** The semaphore's number of permits; 0 for a lock. */
  limit: number;
  /** Waiters queued for the lock. */
  queueLength: number;
  /** The last fencing token issued for the lock; 0 if it was never acquired. */
  lastToken: number;
  /** What is left of the lock's lock-delay (docs/SESSIONS.md): until it ends, acquires are refused with LockDelayError. 0 when the lock is not closed. */
  lockDelayMs: number;
  /** Opaque; changes whenever the state changes. */
  index: string;
}

/** A holder as the server sends it (openapi.yaml, Holder). */
interface HolderData {
  owner: string;
  mode: "exclusive" | "shared";
  fencing_token: number;
  hold_count: number;
  acquired_at: string;
  expires_at: string;
  metadata?: Record<string, string> | null;
  session?: string;
}

/** A lock's state as the server sends it. */
interface LockStateData {
  lock: string;
  held: boolean;
  mode: LockMode | null;
  holder: HolderData | null;
  holders?: HolderData[] | null;
  limit?: number;
  queue_length?: number;
  fencing_token?: number;
  lock_delay_remaining_ms?: number;
  index: string;
}

/** Reads the state of the lock name (see Client.inspect). */
export async function inspectLock(http: Http, name: string, opts: { signal?: AbortSignal | undefined }): Promise<LockState> {
  const a = await http.call<LockStateData>("GET", `/v1/locks/${pathName(name)}`, {
    signal: opts.signal,
    timeoutMs: http.timeoutMs,
    lockName: name,
  });
  const d = a.data;
  return {
    lock: d.lock,
    held: d.held,
    mode: d.mode ?? undefined,
    holder: d.holder ? holderFrom(d.holder) : undefined,
    holders: (d.holders ?? []).map(holderFrom),
    limit: d.limit ?? 0,
    queueLength: d.queue_length ?? 0,
    lastToken: d.fencing_token ?? 0,
    lockDelayMs: d.lock_delay_remaining_ms ?? 0,
    index: d.index,
  };
}

function holderFrom(h: HolderData): LockHolder {
  return {
    owner: h.owner,
    mode: h.mode === "shared" ? "shared" : "exclusive",
    fencingToken: h.fencing_token,
    holdCount: h.hold_count,
    acquiredAt: new Date(h.acquired_at),
    expiresAt: new Date(h.expires_at),
    metadata: h.metadata ?? {},
    sessionId: h.session || undefined,
  };
}
