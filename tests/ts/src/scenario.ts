// A lock hand-off between clients, driven through a client generated from
// openapi.yaml (openapi-typescript types, openapi-fetch calls) against the
// lockapi server at $LOCKAPI_URL.
//
// Every request and every field read below is typed by ./schema.ts, which
// `npm run generate` makes from openapi.yaml, so a spec change that breaks
// this client fails `tsc --noEmit` before the scenario runs: so does a
// closed set of problem types, or a header read that the spec does not
// model on that response. The scenario prints one line per check, then
// "N passed, M failed", and exits non-zero when a check fails.

import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

type Lease = components["schemas"]["Lease"];
type Problem = components["schemas"]["Problem"];
type ProblemType = components["schemas"]["ProblemType"];

// ---- problem types are an open set ----------------------------------------

// A type the server may add later must be a ProblemType: a closed enum in
// the spec would make this line fail to type-check.
const addedLater: ProblemType = "https://lockapi.dev/problems/added-later";

/** What a client does with a problem: known types by name, others by status. */
function problemAction(p: Pick<Problem, "type" | "status">): string {
  switch (p.type) {
    case "https://lockapi.dev/problems/lock-held":
      return "wait and retry";
    case "https://lockapi.dev/problems/lease-lost":
      return "stop the guarded work";
    default:
      return p.status >= 500 || p.status === 429 ? "retry later" : "give up";
  }
}

// ---- headers as the spec models them ----------------------------------------

/** The keys of T without its index signature ([name: string]: unknown). */
type KnownKeys<T> = keyof { [K in keyof T as string extends K ? never : number extends K ? never : K]: T[K] };
/** The headers the spec models on the response R: reading any other fails the type check. */
type ModelledHeader<R> = R extends { headers: infer H } ? KnownKeys<H> & string : never;

type Responses<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends { responses: infer R } ? R : never;
type AcquireResponses = Responses<"/v1/locks/{name}/leases", "post">;
type InspectResponses = Responses<"/v1/locks/{name}", "get">;

/** Reads a header the spec models, and requires, on the response R. */
function requiredHeader<R>(what: string, res: Response, name: ModelledHeader<R>): string {
  const v = res.headers.get(name);
  expect(v !== null && v !== "", `${what}: no ${name} header, which the spec requires`);
  return v;
}

/** Reads a header the spec models on the response R, which may be absent. */
function optionalHeader<R>(res: Response, name: ModelledHeader<R>): string | null {
  return res.headers.get(name);
}

/** Checks a Retry-After: whole seconds, at least 1 (components/headers). */
function expectRetryAfter(what: string, value: string | null): number {
  const secs = Number(value);
  expect(value !== null && /^\d+$/.test(value) && secs >= 1, `${what}: Retry-After ${show(value)}, want whole seconds >= 1`);
  return secs;
}

// The headers this client reads, as [path, method, status, header, required]:
// each must be modelled on its response (else this fails the type check),
// and the served spec must say whether it is always sent.
type HeaderUse<P extends keyof paths, M extends keyof paths[P], S extends keyof Responses<P, M>> = [
  P,
  M,
  S,
  ModelledHeader<Responses<P, M>[S]>,
  boolean,
];
function use<P extends keyof paths, M extends keyof paths[P], S extends keyof Responses<P, M>>(
  ...u: HeaderUse<P, M, S>
): HeaderUse<P, M, S> {
  return u;
}
const headersRead = [
  use("/v1/locks/{name}/leases", "post", 201, "Location", true),
  use("/v1/locks/{name}/leases", "post", 200, "Location", true),
  use("/v1/locks/{name}/leases", "post", 409, "Retry-After", false),
  use("/v1/locks/{name}/leases", "post", 429, "Retry-After", true),
  use("/v1/locks/{name}/leases", "post", 503, "Retry-After", true),
  use("/v1/locks/{name}", "get", 200, "X-Lock-Index", true),
  use("/v1/webhooks", "post", 201, "Location", true),
];

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
  return `https://lockapi.dev/problems/${slug}`;
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
  const location = requiredHeader<AcquireResponses[201]>(what, r.response, "Location");
  expect(location === `/v1/locks/${lockName}/leases/${l.lease_id}`, `${what}: Location ${show(location)}`);
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

  await check("a health checker's HEAD /healthz answers 200 without a body", async () => {
    const res = await fetch(new URL("/healthz", baseUrl), { method: "HEAD", signal: timeout() });
    const body = await res.text();
    expect(res.status === 200 && body === "", `status ${res.status}, body ${show(body)}`);
    expect(!!res.headers.get("X-Request-ID"), "no X-Request-ID header");
  });

  await check("the spec is served as JSON (GET /openapi.json)", async () => {
    const r = await api.GET("/openapi.json", { signal: timeout() });
    expect(r.response.status === 200, `status ${r.response.status}`);
    expect(r.response.headers.get("Content-Type") === "application/json", `Content-Type ${show(r.response.headers.get("Content-Type"))}`);
    expect(r.data?.["openapi"] === "3.0.3", `openapi ${show(r.data?.["openapi"])}`);
  });

  await check("problem types are read as open strings", async () => {
    // A type added after this client was generated is handled by status.
    const later = problemAction({ type: addedLater, status: 503 });
    expect(later === "retry later", `a new 503 type: ${later}`);
    const known = problemAction({ type: problemType("lease-lost"), status: 410 });
    expect(known === "stop the guarded work", `lease-lost: ${known}`);
  });

  await check("the served spec requires the headers this client relies on", async () => {
    const r = await api.GET("/openapi.json", { signal: timeout() });
    const doc = r.data;
    expect(doc !== undefined, `status ${r.response.status}`);
    const at = (v: unknown, key: string | number): unknown =>
      v !== null && typeof v === "object" ? (v as Record<string, unknown>)[String(key)] : undefined;
    const resolve = (v: unknown): unknown => {
      for (let ref = at(v, "$ref"); typeof ref === "string"; ref = at(v, "$ref")) {
        v = ref.slice(2).split("/").reduce(at, doc);
      }
      return v;
    };
    const seen: string[] = [];
    for (const [path, method, status, name, required] of headersRead) {
      const response = resolve(at(at(at(at(doc["paths"], path), method), "responses"), status));
      const h = resolve(at(at(response, "headers"), name));
      const what = `${method.toUpperCase()} ${path} ${status} ${name}`;
      expect(h !== undefined, `${what}: not modelled`);
      expect((at(h, "required") === true) === required, `${what}: required ${show(at(h, "required"))}, want ${required}`);
      seen.push(`${status} ${name}${required ? "" : "?"}`);
    }
    return seen.join(", ");
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
    // Only owner: ttl_ms and wait_ms default on the server, so the generated
    // type must leave them optional.
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
    const retryAfter = expectRetryAfter("acquire C", optionalHeader<AcquireResponses[409]>(r.response, "Retry-After"));
    expect(retryAfter * 1000 >= h.expires_in_ms, `acquire C: Retry-After ${retryAfter} s, before the holder's lease ends in ${h.expires_in_ms} ms`);
    expect(problemAction(p) === "wait and retry", `acquire C: ${problemAction(p)}`);
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

  await check("a session binds a lease and a multi-lock, one renewal keeps them, and DELETE of the session frees them (201, 200, 410 session-lost)", async () => {
    const created = await api.POST("/v1/sessions", { body: { owner: "ts-session", ttl_ms: 10_000 }, signal: timeout() });
    expect(created.response.status === 201, `create session: status ${created.response.status}: ${show(created.data ?? created.error)}`);
    const sess = created.data;
    expect(sess !== undefined && ULID.test(sess.session_id), `create session: ${show(sess)}`);
    const name = `${lockName}.session`;
    const r = await api.POST("/v1/locks/{name}/leases", {
      params: { path: { name } },
      body: { owner: "ts-session", session: sess.session_id },
      signal: timeout(),
    });
    expect(r.response.status === 201, `bound acquire: status ${r.response.status}: ${show(r.data ?? r.error)}`);
    expect(r.data?.session === sess.session_id, `bound acquire: session ${show(r.data?.session)}, want ${show(sess.session_id)}`);
    // A multi-lock bound to the same session, written as naturally: the
    // generated body type sends no ttl_ms the caller did not set.
    const names = [`${name}.a`, `${name}.b`];
    const m = await api.POST("/v1/leases", {
      body: { locks: names, owner: "ts-session", session: sess.session_id },
      signal: timeout(),
    });
    expect(m.response.status === 201, `bound multi-acquire: status ${m.response.status}: ${show(m.data ?? m.error)}`);
    for (const l of m.data?.leases ?? []) {
      expect(l.session === sess.session_id, `bound multi-acquire: ${l.lock}'s session ${show(l.session)}, want ${show(sess.session_id)}`);
    }
    const kept = await api.POST("/v1/sessions/{id}/renew", { params: { path: { id: sess.session_id } }, body: {}, signal: timeout() });
    expect(kept.response.status === 200 && kept.data?.leases.length === 3, `renew session: ${kept.response.status} ${show(kept.data ?? kept.error)}, want its 3 leases`);
    const ended = await api.DELETE("/v1/sessions/{id}", { params: { path: { id: sess.session_id } }, signal: timeout() });
    expect(ended.response.status === 200 && ended.data?.leases.length === 3, `delete session: ${ended.response.status} ${show(ended.data ?? ended.error)}`);
    for (const n of [name, ...names]) {
      const st = await api.GET("/v1/locks/{name}", { params: { path: { name: n } }, signal: timeout() });
      expect(st.data?.held === false, `${n} after the session's end: held ${show(st.data?.held)}, want false`);
    }
    const renewed = await api.POST("/v1/sessions/{id}/renew", { params: { path: { id: sess.session_id } }, body: {}, signal: timeout() });
    expectProblem("renew the ended session", renewed, 410, "session-lost");
    return `session ${sess.session_id}`;
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
    const hdr = requiredHeader<InspectResponses[200]>("inspect", r.response, "X-Lock-Index");
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
