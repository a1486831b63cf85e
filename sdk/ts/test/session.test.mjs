// Sessions (docs/SESSIONS.md, client/session_test.go): one watchdog keeps
// every bound lease, close releases them all, a lost session loses them,
// and a lock-delay closes a lock after a force release.
//
// Whether the server's store keeps sessions is asked once, with POST
// /v1/sessions. Where it does not (it answers 501 unsupported: redlock, or
// Redis Cluster with events off), every scenario below asserts that typed answer
// instead, under a name that says so; where it does, every scenario runs in
// full. The memory store and Redis must keep them.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ApiError, LeaseLostError, LeaseReleasedError, LockDelayError, LockHeldError,
  SessionClosedError, SessionLostError, problemTypeBase,
} from "@lockapi/client";
import { admin, aborted, newClient, recordingFetch, server, startProxy, uniqueName } from "./helpers.mjs";

const c = newClient();
const other = newClient();

/** Whether the server keeps sessions: POST /v1/sessions succeeds, or answers 501 unsupported. */
const sessionsSupported = await c.session({ ttlMs: 1000 }).then(
  async (s) => {
    await s.close();
    return true;
  },
  (e) => {
    assertUnsupported(e);
    return false;
  },
);
if (server.store === "memory") {
  assert.ok(sessionsSupported, "the memory store keeps sessions");
}

/** Asserts that e is the typed answer of a store without sessions: ApiError 501 unsupported. */
function assertUnsupported(e) {
  assert.ok(e instanceof ApiError, String(e));
  assert.equal(e.status, 501, String(e));
  assert.equal(e.type, problemTypeBase + "unsupported", String(e));
}

/**
 * A session scenario: run in full where the store keeps sessions; where it
 * does not, asserts that starting the scenario's session (client.session,
 * and client.withSession without calling its function) answers 501
 * unsupported.
 */
function sessionTest(title, fn) {
  if (sessionsSupported) {
    test(`session: ${title}`, fn);
    return;
  }
  test(`session: ${title}: this store answers 501 unsupported`, async () => {
    await c.session({ ttlMs: 1000, lockDelayMs: 1000 }).then(() => assert.fail("a session was created"), assertUnsupported);
    let called = false;
    await c.withSession({}, () => { called = true; }).then(() => assert.fail("withSession resolved"), assertUnsupported);
    assert.equal(called, false, "withSession called its function without a session");
  });
}

/** Rejects unless another owner's acquire of name is refused because it is held. */
async function assertHeld(name, opts = {}) {
  await assert.rejects(other.acquire(name, { owner: "other", ...opts }), LockHeldError, `${name} is not held`);
}

/** Rejects unless another owner can take name at once (and gives it back). */
async function assertFree(name, opts = {}) {
  const l = await other.acquire(name, { owner: "other", ...opts });
  await l.release();
  return l;
}

/** The session as the server shows it (GET /v1/sessions/{id}). */
async function serverView(id) {
  const res = await fetch(`${server.url}/v1/sessions/${id}`, { headers: { Authorization: `Bearer ${server.key}` } });
  return { status: res.status, body: await res.json() };
}

/** Ends a session behind its client's back, as an admin would. */
async function deleteElsewhere(id) {
  const res = await fetch(`${server.url}/v1/sessions/${id}`, { method: "DELETE", headers: { Authorization: `Bearer ${server.adminKey}` } });
  assert.equal(res.status, 200, await res.text());
}

sessionTest("every kind binds: exclusive, shared, semaphore permits, a multi-lock", async () => {
  const s = await c.session({ ttlMs: 5000, owner: "worker-7" });
  assert.match(s.id, /^[0-9A-Z]{26}$/);
  assert.equal(s.owner, "worker-7");
  assert.equal(s.ttlMs, 5000);
  const [x, r, p, a, b] = [uniqueName("x"), uniqueName("r"), uniqueName("pool"), uniqueName("a"), uniqueName("b")];
  const exclusive = await s.acquire(x, { ttlMs: 99_999 }); // a bound lease ignores ttlMs
  const shared = await s.acquire(r, { shared: true });
  const permits = [await s.acquire(p, { limit: 2 }), await s.acquire(p, { limit: 2 })];
  const multi = await s.acquireAll([a, b], {});
  const all = [exclusive, shared, ...permits, ...multi];
  for (const l of all) {
    assert.equal(l.sessionId, s.id, l.name);
    assert.equal(l.ttlMs, s.ttlMs, l.name);
    assert.ok(Math.abs(l.expiresAt.getTime() - s.expiresAt.getTime()) < 50, `${l.name} expires with its session`);
  }
  assert.equal(shared.mode, "shared");
  assert.equal(permits[0].limit, 2);
  assert.deepEqual(multi.map((l) => l.name), [a, b]);

  await assertHeld(x);
  await assertHeld(r);
  await assertHeld(p, { limit: 2 });
  await assertHeld(a);
  await assertHeld(b);
  const v = await serverView(s.id);
  assert.equal(v.status, 200);
  assert.deepEqual(v.body.leases.map((l) => l.lease_id).sort(), all.map((l) => l.leaseId).sort());

  // A bound lease's release releases it alone.
  await exclusive.release();
  await assertFree(x);
  await assertHeld(r);
  await s.close();
});

sessionTest("one renewal keeps every bound lease: the session's watchdog, no lease renewals", async () => {
  const rec = recordingFetch();
  const rc = newClient({ fetch: rec.fetch });
  const s = await rc.session({ ttlMs: 1500 });
  const [x, a, b] = [uniqueName("x"), uniqueName("a"), uniqueName("b")];
  const leases = [await s.acquire(x), ...(await s.acquireAll([a, b]))];
  assert.equal((await serverView(s.id)).body.leases.length, 3, "the server holds them bound to the session");
  // Two TTLs pass: only the session is renewed (every TTL/3), and that
  // keeps all. A TTL of 1.5 s lets a renewal be a second late under load.
  await new Promise((r) => setTimeout(r, 3200));
  for (const name of [x, a, b]) {
    await assertHeld(name);
  }
  assert.ok(leases.every((l) => !l.signal.aborted && l.error === undefined));
  const sessionRenewals = rec.count("POST", `/v1/sessions/${s.id}/renew`);
  assert.ok(sessionRenewals >= 3, `${sessionRenewals} session renewals in two TTLs`);
  const leaseRenewals = rec.requests.filter((q) => q.path.startsWith("/v1/locks/") && q.path.endsWith("/renew")).length;
  assert.equal(leaseRenewals, 0, "a bound lease has no watchdog of its own");

  // Renewing a bound lease renews its session.
  const before = rec.count("POST", `/v1/sessions/${s.id}/renew`);
  await leases[0].renew();
  await leases[1].keepAlive();
  assert.ok(rec.count("POST", `/v1/sessions/${s.id}/renew`) >= before + 2);
  await s.close();
});

sessionTest("close releases every bound lease at once; twice is safe", async () => {
  const rec = recordingFetch();
  const rc = newClient({ fetch: rec.fetch });
  const s = await rc.session({ ttlMs: 30_000, lockDelayMs: 5000 });
  const [x, a, b] = [uniqueName("x"), uniqueName("a"), uniqueName("b")];
  const leases = [await s.acquire(x), ...(await s.acquireAll([a, b], { shared: true }))];
  await Promise.all([s.close(), s.close()]);
  await s.close();
  assert.equal(rec.count("DELETE", `/v1/sessions/${s.id}`), 1, "close sends one DELETE");
  assert.ok(s.error instanceof SessionClosedError);
  assert.equal(s.signal.aborted, false, "a close is no loss");

  // Free at once, with no lock-delay: a close is a clean release.
  for (const name of [x, a, b]) {
    await assertFree(name);
  }
  for (const l of leases) {
    assert.ok(l.error instanceof LeaseReleasedError, `${l.name}: ${l.error}`);
    assert.equal(l.signal.aborted, false);
    await l.release(); // released by the close: sends nothing
  }
  assert.equal(rec.requests.filter((q) => q.method === "DELETE" && q.path.startsWith("/v1/locks/")).length, 0);
  await assert.rejects(s.acquire(uniqueName("late")), SessionClosedError);
  const v = await serverView(s.id);
  assert.equal(v.status, 410, JSON.stringify(v.body));
});

sessionTest("a session not renewed ends: its signal aborts and its leases are freed", async () => {
  const proxy = await startProxy();
  try {
    const pc = newClient({ url: proxy.url });
    const s = await pc.session({ ttlMs: 1000 });
    const name = uniqueName("x");
    const lease = await s.acquire(name);
    proxy.down(); // no renewal reaches the server from now on

    const why = await aborted(s.signal, 3000, "the session's signal");
    assert.ok(why instanceof SessionLostError, String(why));
    assert.equal(why.sessionId, s.id);
    assert.match(why.reason, /no renewal succeeded/);
    assert.ok(s.lost);
    const leaseWhy = await aborted(lease.signal, 1000, "the bound lease's signal");
    assert.ok(leaseWhy instanceof LeaseLostError, String(leaseWhy));
    assert.equal(leaseWhy.cause, why);

    // The server ends it by its TTL, and the lock goes to the next owner.
    const next = await other.acquire(name, { owner: "next", waitMs: 10_000 });
    assert.ok(next.fencingToken > lease.fencingToken);
    await next.release();
    assert.equal((await serverView(s.id)).status, 410);
    await assert.rejects(lease.release(), (e) => e === leaseWhy);
    await assert.rejects(s.close(), (e) => e === why);
  } finally {
    await proxy.close();
  }
});

sessionTest("a session ended elsewhere is lost at its next renewal (410), and its acquires refused", async () => {
  const s = await c.session({ ttlMs: 1500 });
  const lease = await s.acquire(uniqueName("x"));
  await deleteElsewhere(s.id);
  const why = await aborted(s.signal, 3000, "the session's signal");
  assert.ok(why instanceof SessionLostError, String(why));
  assert.ok(why.cause instanceof ApiError && why.cause.status === 410 && why.cause.slug === "session-lost", String(why.cause));
  assert.ok(lease.lost);
  await assert.rejects(s.acquire(uniqueName("y")), (e) => e === why);
  await assert.rejects(s.close(), (e) => e === why);

  // An acquire is the first to hear of it: rejects with the loss, and the signal aborts.
  const t = await c.session({ ttlMs: 30_000 });
  await deleteElsewhere(t.id);
  const err = await t.acquire(uniqueName("z")).then(() => assert.fail("acquired"), (e) => e);
  assert.ok(err instanceof SessionLostError, String(err));
  assert.ok(t.signal.aborted);
});

sessionTest("after a force release, lock-delay refuses the lock with LockDelayError", async () => {
  const s = await c.session({ ttlMs: 30_000, lockDelayMs: 2000 });
  assert.equal(s.lockDelayMs, 2000);
  const name = uniqueName("x");
  const lease = await s.acquire(name);
  assert.equal(await admin.forceRelease(name), true);

  const err = await other.acquire(name, { owner: "other" }).then(() => assert.fail("acquired in the lock-delay"), (e) => e);
  assert.ok(err instanceof LockDelayError, String(err));
  assert.ok(err instanceof ApiError && !(err instanceof LockHeldError));
  assert.equal(err.status, 409);
  assert.equal(err.type, problemTypeBase + "lock-delay");
  assert.equal(err.lock, name);
  assert.ok(err.retryAfterMs >= 1000 && err.retryAfterMs <= 2000, `retryAfterMs ${err.retryAfterMs}`);

  // A waiting acquire waits through the delay.
  const next = await other.acquire(name, { owner: "other", waitMs: 10_000 });
  assert.ok(next.fencingToken > lease.fencingToken);
  await next.release();
  await assert.rejects(lease.release(), LeaseLostError, "the force release took the bound lease");
  await s.close();
});

sessionTest("withSession closes the session at the end, also when the function throws", async () => {
  const [x, a] = [uniqueName("x"), uniqueName("a")];
  const token = await c.withSession({ ttlMs: 5000 }, async (s) => {
    const l = await s.acquire(x);
    await s.acquireAll([a]);
    await assertHeld(x);
    return l.fencingToken;
  });
  assert.ok(token > 0);
  await assertFree(x);
  await assertFree(a);

  const boom = new Error("boom");
  let id;
  await assert.rejects(c.withSession({}, async (s) => {
    id = s.id;
    await s.acquire(x);
    throw boom;
  }), (e) => e === boom);
  await assertFree(x);
  assert.equal((await serverView(id)).status, 410);
});
