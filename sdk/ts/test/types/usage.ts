// Typechecked by scripts/check-types.mjs (npm run check) against the built
// declarations, under strict and exactOptionalPropertyTypes; never run.
// Each @ts-expect-error asserts that something does not compile.

import {
  Client,
  isApiError,
  isLeaseLostError,
  isLockHeldError,
  isSessionLostError,
  Lease,
  Session,
  type AcquireOptions,
  type ClientOptions,
  type LockState,
  type SessionOptions,
} from "@lockapi/client";

declare const env: Record<string, string | undefined>;

// Options take `undefined` for "unset", as an environment variable gives it.
const opts: ClientOptions = { apiKey: env["LOCKAPI_API_KEY"], requestTimeoutMs: undefined, fetch: undefined };
const client = new Client(env["LOCKAPI_URL"], opts);
const acquireOpts: AcquireOptions = { owner: env["OWNER"], ttlMs: undefined, waitMs: undefined, signal: undefined, metadata: undefined };
const sessionOpts: SessionOptions = { owner: env["OWNER"], ttlMs: undefined, lockDelayMs: undefined };

export async function disposables(): Promise<void> {
  {
    await using lease = await client.acquire("x", acquireOpts);
    const token: number = lease.fencingToken;
    void token;
  }
  {
    await using session = await client.session(sessionOpts);
    await using bound = await session.acquire("y", { owner: undefined });
    void bound;
  }
}

export async function guards(e: unknown): Promise<string> {
  if (isLockHeldError(e)) {
    return `${e.lock} ${e.holder?.owner ?? ""} ${e.instance ?? ""} ${String(e.problem?.["type"])}`;
  }
  if (isLeaseLostError(e)) {
    const status: number = e.status;
    const requestId: string | undefined = e.requestId;
    return `${e.lock} ${status} ${requestId ?? ""}`;
  }
  if (isSessionLostError(e)) {
    return `${e.sessionId} ${e.status}`;
  }
  if (isApiError(e)) {
    return e.slug;
  }
  return "";
}

export async function inspected(): Promise<number> {
  const s: LockState = await client.inspect("x", { signal: undefined });
  return s.held ? (s.holders[0]?.fencingToken ?? 0) : s.lastToken;
}

// The internals are not in the declarations.
export function internals(lease: Lease, session: Session): void {
  // @ts-expect-error startWatchdog is internal (Client.acquire calls it once)
  lease.startWatchdog();
  // @ts-expect-error confirmGrant is internal
  void lease.confirmGrant(0);
  // @ts-expect-error follow is internal
  lease.follow(session);
  // @ts-expect-error onEnd is internal
  session.onEnd(() => undefined);
  // @ts-expect-error safeDeadline is internal
  session.safeDeadline();
  // @ts-expect-error Session.create is internal (Client.session calls it)
  void Session.create();
}
