// A lock hand-off between clients, driven through a client generated from
// openapi.yaml (openapi-typescript types, openapi-fetch calls) against the
// lockapi server at $LOCKAPI_URL.
//
// Every request and every field read below is typed by ./schema.ts, which
// `npm run generate` makes from openapi.yaml, so a spec change that breaks
// this client fails `tsc --noEmit` before the scenario runs. The scenario prints one line per check, then
// "N passed, M failed", and exits non-zero when a check fails.

import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

type Lease = components["schemas"]["Lease"];
type Problem = components["schemas"]["Problem"];
type ProblemType = components["schemas"]["ProblemType"];

const REQUEST_TIMEOUT_MS = 20_000;
/** How long the second client may wait for the lock. */
const WAIT_MS = 15_000;
/** How long the holder keeps the lock while the second client waits. */
const HOLD_WHILE_WAITING_MS = 300;
/** The longest acceptable delay between a release and the waiter's grant. */
const MAX_HANDOFF_MS = 2_000;
const MAX_TOKEN = Number.MAX_SAFE_INTEGER; // 2^53 - 1, the spec's maximum
const ULID = /^[0-9A-HJKMNP-TV-Z]{26}$/;

const baseUrl = process.env["LOCKAPI_URL"];
if (!baseUrl) {
  console.error("scenario: set LOCKAPI_URL to the base URL of a running lockapi, e.g. http://127.0.0.1:8080");
  process.exit(2);
}

const api = createClient<paths>({ baseUrl });

// One lock per run, so the scenario also works against a shared server.
// openapi-fetch percent-encodes path parameters (encodeURIComponent), so the
// ':' in this name reaches the server as "%3A", as from most generated clients.
const lockName = `ts:scenario.${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;

/** A failed expectation: its message is the whole report. */
class CheckError extends Error {}
/** Thrown by check() after a failure: the checks after it are skipped. */
class Aborted extends Error {}

function fail(message: string): never {
  throw new CheckError(message);
}

function expect(cond: boolean, message: string): asserts cond {
  if (!cond) fail(message);
}

function show(v: unknown): string {
  return JSON.stringify(v);
}

function timeout(ms = REQUEST_TIMEOUT_MS): AbortSignal {
  return AbortSignal.timeout(ms);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function problemType(slug: string): ProblemType {
  return `https://lockapi.dev/problems/${slug}` as ProblemType;
}

/** Checks that a fresh grant answered 201 with a well-formed lease. */
function expectFreshLease(
  what: string,
  r: { data?: Lease | undefined; error?: unknown; response: Response },
  owner: string,
): Lease {
  expect(r.response.status === 201, `${what}: status ${r.response.status}, want 201: ${show(r.data ?? r.error)}`);
  const l = r.data;
  expect(l !== undefined, `${what}: 201 without a body`);
  expect(l.lock === lockName, `${what}: lock ${show(l.lock)}, want ${show(lockName)}`);
  expect(l.owner === owner, `${what}: owner ${show(l.owner)}, want ${show(owner)}`);
  expect(ULID.test(l.lease_id), `${what}: lease_id ${show(l.lease_id)} is not a ULID`);
  expect(
    Number.isSafeInteger(l.fencing_token) && l.fencing_token >= 1 && l.fencing_token <= MAX_TOKEN,
    `${what}: fencing_token ${show(l.fencing_token)} is not an integer in [1, 2^53-1]`,
  );
  expect(l.hold_count === 1, `${what}: hold_count ${l.hold_count}, want 1`);
  expect(
    Date.parse(l.expires_at) > Date.parse(l.acquired_at),
    `${what}: expires_at ${l.expires_at} is not after acquired_at ${l.acquired_at}`,
  );
  const location = r.response.headers.get("Location");
  expect(location !== null && location.endsWith(`/leases/${l.lease_id}`), `${what}: Location ${show(location)}`);
  return l;
}

/** Checks an error answer: status, application/problem+json and its type. */
function expectProblem(
  what: string,
  r: { data?: unknown; error?: Problem | undefined; response: Response },
  status: number,
  slug: string,
): Problem {
  const got = r.data ?? r.error;
  expect(r.response.status === status, `${what}: status ${r.response.status}, want ${status}: ${show(got)}`);
  const ct = r.response.headers.get("Content-Type") ?? "";
  expect(ct.startsWith("application/problem+json"), `${what}: Content-Type ${show(ct)}, want application/problem+json`);
  const p = r.error;
  expect(p !== undefined && typeof p === "object", `${what}: no problem body: ${show(got)}`);
  expect(p.type === problemType(slug), `${what}: type ${show(p.type)}, want ${show(problemType(slug))}`);
  expect(p.status === status, `${what}: problem status ${p.status}, want ${status}`);
  expect(typeof p.title === "string" && typeof p.detail === "string", `${what}: title/detail missing: ${show(p)}`);
  return p;
}

// ---- the checks ------------------------------------------------------------

let passed = 0;
let failed = 0;

async function check(name: string, fn: () => Promise<string | void>): Promise<void> {
  const n = passed + failed + 1;
  try {
    const note = await fn();
    passed++;
    console.log(`ok   ${n} ${name}${note ? `: ${note}` : ""}`);
  } catch (err) {
    failed++;
    const msg = err instanceof CheckError ? err.message : err instanceof Error ? (err.stack ?? err.message) : String(err);
    console.log(`FAIL ${n} ${name}: ${msg}`);
    throw new Aborted();
  }
}

async function main(): Promise<void> {
  console.log(`lockapi TypeScript client scenario against ${baseUrl}, lock ${lockName}`);

  const ownerA = "ts-client-a";
  const ownerB = "ts-client-b";
  const ownerC = "ts-client-c";
  let a!: Lease;
  let b!: Lease;

  await check("server is alive (GET /healthz)", async () => {
    const r = await api.GET("/healthz", { signal: timeout() });
    expect(r.response.status === 200 && r.data?.status === "ok", `status ${r.response.status}: ${show(r.data ?? r.error)}`);
  });

  await check("client A acquires the lock (201)", async () => {
    const r = await api.POST("/v1/locks/{name}/leases", {
      params: { path: { name: lockName } },
      body: { owner: ownerA, ttl_ms: 30_000, wait_ms: 0, metadata: { client: "openapi-fetch" } },
      signal: timeout(),
    });
    a = expectFreshLease("acquire A", r, ownerA);
    expect(a.ttl_ms === 30_000, `acquire A: ttl_ms ${a.ttl_ms}, want 30000`);
    expect(a.metadata["client"] === "openapi-fetch", `acquire A: metadata ${show(a.metadata)}`);
    expect(!!r.response.headers.get("X-Request-ID"), "acquire A: no X-Request-ID header");
    return `fencing_token=${a.fencing_token} lease_id=${a.lease_id} hold_count=${a.hold_count}`;
  });

  await check("client C is refused while A holds it (409 lock-held with holder)", async () => {
    // Only owner: ttl_ms and wait_ms have defaults, so the generated type
    // must leave them optional (see --default-non-nullable in package.json).
    const r = await api.POST("/v1/locks/{name}/leases", {
      params: { path: { name: lockName } },
      body: { owner: ownerC },
      signal: timeout(),
    });
    const p = expectProblem("acquire C", r, 409, "lock-held");
    const h = p.holder;
    expect(h !== undefined, `acquire C: no holder in ${show(p)}`);
    expect(h.owner === ownerA, `acquire C: holder.owner ${show(h.owner)}, want ${show(ownerA)}`);
    expect(h.fencing_token === a.fencing_token, `acquire C: holder.fencing_token ${h.fencing_token}, want ${a.fencing_token}`);
    expect(
      Number.isInteger(h.expires_in_ms) && h.expires_in_ms > 0 && h.expires_in_ms <= 30_000,
      `acquire C: holder.expires_in_ms ${h.expires_in_ms}, want in (0, 30000]`,
    );
    const retryAfter = r.response.headers.get("Retry-After");
    expect(retryAfter !== null && /^\d+$/.test(retryAfter), `acquire C: Retry-After ${show(retryAfter)}`);
    return `holder ${h.owner} token ${h.fencing_token}, expires in ${h.expires_in_ms} ms, Retry-After ${retryAfter}`;
  });

  // Client B asks with wait_ms while A holds the lock; its answer must come
  // only after A's release.
  const waitAbort = new AbortController();
  const waitTimer = setTimeout(() => waitAbort.abort(new Error("timed out")), WAIT_MS + REQUEST_TIMEOUT_MS);
  let releaseSentAt = Number.POSITIVE_INFINITY;
  let waiterDoneAt = 0;
  const waiterStartedAt = performance.now();
  const waiter = api
    .POST("/v1/locks/{name}/leases", {
      params: { path: { name: lockName } },
      body: { owner: ownerB, ttl_ms: 30_000, wait_ms: WAIT_MS },
      signal: waitAbort.signal,
    })
    .then(
      (r) => ({ ok: true as const, r }),
      (err: unknown) => ({ ok: false as const, err }),
    )
    .finally(() => {
      waiterDoneAt = performance.now();
    });

  try {
    await check("client A renews while B waits (200, same lease and token)", async () => {
      await sleep(HOLD_WHILE_WAITING_MS);
      const r = await api.POST("/v1/locks/{name}/leases/{lease_id}/renew", {
        params: { path: { name: lockName, lease_id: a.lease_id } },
        body: { ttl_ms: 45_000 },
        signal: timeout(),
      });
      expect(r.response.status === 200, `renew A: status ${r.response.status}, want 200: ${show(r.data ?? r.error)}`);
      const l = r.data;
      expect(l !== undefined, "renew A: 200 without a body");
      expect(l.lease_id === a.lease_id, `renew A: lease_id ${l.lease_id}, want ${a.lease_id}`);
      expect(l.fencing_token === a.fencing_token, `renew A: fencing_token ${l.fencing_token}, want ${a.fencing_token}`);
      expect(l.hold_count === 1, `renew A: hold_count ${l.hold_count}, want 1`);
      expect(l.ttl_ms === 45_000, `renew A: ttl_ms ${l.ttl_ms}, want 45000`);
      expect(
        Date.parse(l.expires_at) > Date.parse(a.expires_at),
        `renew A: expires_at ${l.expires_at} is not after the first ${a.expires_at}`,
      );
      expect(waiterDoneAt === 0, "renew A: B's waiting acquire was answered while A still held the lock");
      return `expires_at ${a.expires_at} -> ${l.expires_at}`;
    });

    await check("client A releases (200 released:true)", async () => {
      expect(waiterDoneAt === 0, "release A: B's waiting acquire was answered before A released");
      releaseSentAt = performance.now();
      const r = await api.DELETE("/v1/locks/{name}/leases/{lease_id}", {
        params: { path: { name: lockName, lease_id: a.lease_id } },
        signal: timeout(),
      });
      expect(r.response.status === 200, `release A: status ${r.response.status}, want 200: ${show(r.data ?? r.error)}`);
      const rel = r.data;
      expect(rel !== undefined, "release A: 200 without a body");
      expect(rel.released === true, `release A: released ${show(rel.released)}, want true`);
      expect(rel.hold_count === 0, `release A: hold_count ${rel.hold_count}, want 0`);
      expect(rel.lease_id === a.lease_id && rel.lock === lockName, `release A: ${show(rel)}`);
      return `answered in ${(performance.now() - releaseSentAt).toFixed(1)} ms`;
    });

    await check("waiting client B is granted only after the release (201, larger token)", async () => {
      const w = await waiter;
      if (!w.ok) fail(`acquire B failed: ${w.err instanceof Error ? w.err.message : String(w.err)}`);
      b = expectFreshLease("acquire B", w.r, ownerB);
      expect(b.lease_id !== a.lease_id, `acquire B: same lease_id as A (${b.lease_id})`);
      expect(b.fencing_token > a.fencing_token, `acquire B: fencing_token ${b.fencing_token} is not above A's ${a.fencing_token}`);
      expect(waiterDoneAt >= releaseSentAt, "acquire B: answered before A's release was sent");
      const handoff = waiterDoneAt - releaseSentAt;
      const waited = waiterDoneAt - waiterStartedAt;
      expect(waited >= HOLD_WHILE_WAITING_MS, `acquire B: answered after ${waited.toFixed(1)} ms, before A released`);
      expect(handoff <= MAX_HANDOFF_MS, `acquire B: hand-off took ${handoff.toFixed(1)} ms, want at most ${MAX_HANDOFF_MS} ms`);
      return `hand-off ${handoff.toFixed(1)} ms after the release was sent (B waited ${waited.toFixed(1)} ms); token ${a.fencing_token} -> ${b.fencing_token}`;
    });
  } finally {
    clearTimeout(waitTimer);
    waitAbort.abort(new Error("the scenario stopped waiting"));
    await waiter;
  }

  await check("A's stale lease cannot be renewed (410 lease-lost)", async () => {
    const r = await api.POST("/v1/locks/{name}/leases/{lease_id}/renew", {
      params: { path: { name: lockName, lease_id: a.lease_id } },
      signal: timeout(),
    });
    expectProblem("renew stale A", r, 410, "lease-lost");
  });

  await check("client B releases (200 released:true)", async () => {
    const r = await api.DELETE("/v1/locks/{name}/leases/{lease_id}", {
      params: { path: { name: lockName, lease_id: b.lease_id } },
      signal: timeout(),
    });
    expect(r.response.status === 200, `release B: status ${r.response.status}, want 200: ${show(r.data ?? r.error)}`);
    expect(r.data?.released === true, `release B: ${show(r.data)}`);
  });

  await check("the lock is free at the end (GET: held:false, holder null)", async () => {
    const r = await api.GET("/v1/locks/{name}", { params: { path: { name: lockName } }, signal: timeout() });
    expect(r.response.status === 200, `inspect: status ${r.response.status}, want 200: ${show(r.data ?? r.error)}`);
    const st = r.data;
    expect(st !== undefined, "inspect: 200 without a body");
    expect(st.lock === lockName, `inspect: lock ${show(st.lock)}`);
    expect(st.held === false, `inspect: held ${show(st.held)}, want false`);
    expect(st.holder === null, `inspect: holder ${show(st.holder)}, want null`);
    expect(st.fencing_token === b.fencing_token, `inspect: fencing_token ${st.fencing_token}, want B's ${b.fencing_token}`);
    expect(typeof st.index === "string" && st.index !== "", `inspect: index ${show(st.index)}`);
    const hdr = r.response.headers.get("X-Lock-Index");
    expect(hdr === st.index, `inspect: X-Lock-Index ${show(hdr)}, body index ${show(st.index)}`);
    return `fencing_token ${st.fencing_token}, index ${st.index}`;
  });
}

try {
  await main();
} catch (err) {
  if (!(err instanceof Aborted)) {
    failed++;
    console.log(`FAIL ${passed + failed} scenario: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  } else {
    console.log("the remaining checks were not run");
  }
}
console.log(`${passed} passed, ${failed} failed`);
process.exitCode = failed === 0 ? 0 : 1;
