// Acquire, release, the watchdog, and the ways a lease is lost: the
// scenarios of the Go client's tests (client/client_test.go).

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ApiError, LeaseLostError, LeaseReleasedError, LockHeldError, UnavailableError,
} from "@lockapi/client";
import { admin, aborted, delay, newClient, recordingFetch, startProxy, uniqueName } from "./helpers.mjs";

test("acquire and release", async () => {
  const c = newClient();
  const name = uniqueName("job");
  const l = await c.acquire(name, { owner: "w", ttlMs: 30_000, metadata: { job: "nightly" } });
  assert.equal(l.name, name);
  assert.equal(l.owner, "w");
  assert.match(l.leaseId, /^[0-9A-Z]{26}$/);
  assert.ok(Number.isSafeInteger(l.fencingToken) && l.fencingToken > 0, `token ${l.fencingToken}`);
  assert.equal(l.holdCount, 1);
  assert.deepEqual(l.metadata, { job: "nightly" });
  assert.ok(l.expiresAt.getTime() > Date.now() && l.expiresAt.getTime() <= Date.now() + 30_000);
  assert.equal(l.signal.aborted, false);

  await l.release();
  assert.ok(l.error instanceof LeaseReleasedError);
  assert.equal(l.signal.aborted, false, "a release is no loss");
  await l.release(); // safe twice
  await assert.rejects(l.renew(), LeaseReleasedError);

  const next = await c.acquire(name, {});
  assert.ok(next.fencingToken > l.fencingToken, "the next grant's token is larger");
  await next.release();
});

test("reentrant acquire: same lease, one more hold", async () => {
  const c = newClient();
  const name = uniqueName("job");
  const first = await c.acquire(name, { owner: "w" });
  const again = await c.acquire(name, { owner: "w" });
  assert.equal(again.leaseId, first.leaseId);
  assert.equal(again.fencingToken, first.fencingToken);
  assert.equal(again.holdCount, 2);
  await again.release();
  await assert.rejects(c.acquire(name, { owner: "someone-else" }), LockHeldError, "one hold is left");
  await first.release();
  (await c.acquire(name, { owner: "someone-else" })).release();
});

test("a held lock rejects with LockHeldError naming the holder", async () => {
  const c = newClient();
  const name = uniqueName("job");
  const holder = await c.acquire(name, { owner: "holder", ttlMs: 20_000 });
  const err = await c.acquire(name, { owner: "other" }).then(() => assert.fail("acquired a held lock"), (e) => e);
  assert.ok(err instanceof LockHeldError, String(err));
  assert.ok(err instanceof ApiError);
  assert.equal(err.status, 409);
  assert.equal(err.type, "https://lockapi.dev/problems/lock-held");
  assert.equal(err.lock, name);
  assert.equal(err.holder.owner, "holder");
  assert.equal(err.holder.fencingToken, holder.fencingToken);
  assert.ok(err.holder.expiresInMs > 0 && err.holder.expiresInMs <= 20_000, `expiresInMs ${err.holder.expiresInMs}`);
  assert.match(err.message, /is held by "holder"/);
  await holder.release();
});

test("an invalid acquire is an ApiError with the fields", async () => {
  const c = newClient();
  const err = await c.acquire(uniqueName("job"), { ttlMs: 5 }).then(() => assert.fail("acquired"), (e) => e);
  assert.ok(err instanceof ApiError && !(err instanceof UnavailableError), String(err));
  assert.equal(err.status, 400);
  assert.equal(err.slug, "invalid-request");
  assert.ok(err.fields.some((f) => f.field === "ttl_ms"), JSON.stringify(err.fields));
});

test("wait: the acquire gets the lock when the holder releases it", async () => {
  const c = newClient();
  const name = uniqueName("job");
  const holder = await c.acquire(name, { owner: "holder" });
  setTimeout(() => holder.release(), 300);
  const started = Date.now();
  const l = await c.acquire(name, { owner: "waiter", waitMs: 10_000 });
  assert.ok(Date.now() - started >= 250, "it waited");
  assert.ok(l.fencingToken > holder.fencingToken);
  await l.release();

  // A wait that ends with the lock still held rejects with the holder.
  const h2 = await c.acquire(name, { owner: "holder" });
  const err = await c.acquire(name, { owner: "waiter", waitMs: 300 }).then(() => assert.fail("acquired"), (e) => e);
  assert.ok(err instanceof LockHeldError && err.holder.owner === "holder", String(err));
  await h2.release();
});

test("an acquire stops when its signal aborts", async () => {
  const c = newClient();
  const name = uniqueName("job");
  const holder = await c.acquire(name, { owner: "holder" });
  const ctl = new AbortController();
  setTimeout(() => ctl.abort(new Error("gave up")), 200);
  await assert.rejects(c.acquire(name, { waitMs: 30_000, signal: ctl.signal }), /gave up/);
  await holder.release();
});

test("the watchdog keeps a short lease through longer work", async () => {
  const rec = recordingFetch();
  const c = newClient({ fetch: rec.fetch });
  const name = uniqueName("job");
  const ttlMs = 1500;
  const l = await c.acquire(name, { ttlMs });
  await delay(3 * ttlMs); // the work
  assert.equal(l.signal.aborted, false, `lost during the work: ${l.error}`);
  assert.ok(rec.count("POST", "/renew") >= 3, `${rec.count("POST", "/renew")} renewals in ${3 * ttlMs}ms with TTL ${ttlMs}ms`);
  await assert.rejects(c.acquire(name, {}), LockHeldError);
  assert.ok(l.expiresAt.getTime() > Date.now(), "expiresAt is ahead");
  await l.release();
  const sent = rec.requests.length;
  await delay(ttlMs);
  assert.equal(rec.requests.length, sent, "nothing is sent after release");
});

test("a force release is noticed within 2s: the signal aborts with LeaseLostError", async () => {
  // The renewal's account of a force release: without the loss watch,
  // which would tell first (losswatch.test.mjs).
  const rec = recordingFetch();
  const c = newClient({ fetch: rec.fetch, lossWatch: false });
  const name = uniqueName("job");
  const l = await c.acquire(name, { ttlMs: 1500 });
  assert.equal(await admin.forceRelease(name), true);
  const reason = await aborted(l.signal, 2000, "the lost signal after a force release");
  assert.ok(reason instanceof LeaseLostError, String(reason));
  assert.equal(l.error, reason);
  assert.equal(reason.fencingToken, l.fencingToken);
  assert.match(reason.message, /force-released/);
  assert.ok(reason.cause instanceof ApiError && reason.cause.status === 410, String(reason.cause));
  const releases = rec.count("DELETE", l.leaseId);
  await assert.rejects(l.release(), LeaseLostError);
  await assert.rejects(l.release(), LeaseLostError, "and again");
  assert.equal(rec.count("DELETE", l.leaseId), releases, "no release is sent for a lease the server said is gone");
});

test("a force release between renewals shows on the release", async () => {
  const c = newClient();
  const name = uniqueName("job");
  const l = await c.acquire(name, { ttlMs: 60_000 });
  await admin.forceRelease(name);
  const err = await l.release().then(() => assert.fail("released"), (e) => e);
  assert.ok(err instanceof LeaseLostError, String(err));
  assert.ok(l.signal.aborted && l.lost);
  assert.equal(await l.release().catch((e) => e), err, "a second release settles as the first");
});

test("with the server unreachable the lease is lost before its expiry", async () => {
  const proxy = await startProxy();
  try {
    const c = newClient({ url: proxy.url });
    const l = await c.acquire(uniqueName("job"), { ttlMs: 1500 });
    const vouched = l.expiresAt.getTime();
    proxy.down();
    const reason = await aborted(l.signal, 1500 + 2000, "the lost signal with the server down");
    assert.ok(Date.now() < vouched + 50, `lost at ${Date.now()}, after the expiry it vouched for, ${vouched}`);
    assert.ok(reason instanceof LeaseLostError, String(reason));
    assert.ok(reason.cause instanceof UnavailableError, `cause ${reason.cause}`);
    await assert.rejects(l.release(), LeaseLostError);
  } finally {
    await proxy.close();
  }
});

test("renewals that fail during a brief outage are retried, and the lease survives", async () => {
  const proxy = await startProxy();
  try {
    const c = newClient({ url: proxy.url });
    const l = await c.acquire(uniqueName("job"), { ttlMs: 3000 });
    proxy.down();
    await delay(1300); // a renewal falls due (1s) and fails
    proxy.up();
    await delay(700);
    assert.equal(l.signal.aborted, false, `lost: ${l.error}`);
    await l.release();
  } finally {
    await proxy.close();
  }
});

test("concurrent releases send one request", async () => {
  const rec = recordingFetch();
  const c = newClient({ fetch: rec.fetch });
  const l = await c.acquire(uniqueName("job"), { ttlMs: 2000 });
  await Promise.all(Array.from({ length: 8 }, () => l.release()));
  assert.equal(rec.count("DELETE", l.leaseId), 1);
});

test("renew and keepAlive", async () => {
  const c = newClient();
  const l = await c.acquire(uniqueName("job"), { ttlMs: 10_000 });
  await l.renew({ ttlMs: 20_000 });
  assert.equal(l.ttlMs, 20_000);
  await l.keepAlive();
  await assert.rejects(l.renew({ ttlMs: 1 }), (e) => e instanceof ApiError && e.status === 400);
  assert.equal(l.lost, false, "a refused TTL does not lose the lease");
  await l.release();
});

test("manual: no watchdog, renewed by hand; releaseAll releases together", async () => {
  const c = newClient();
  const name = uniqueName("manual");
  const l = await c.acquire(name, { ttlMs: 1500, manual: true });
  for (let i = 0; i < 3; i++) {
    await delay(500);
    await l.renew(); // by hand, past its TTL: still held
  }
  assert.equal(l.signal.aborted, false);
  // Left alone, nothing renews it: the server lets it expire.
  await delay(2500);
  await assert.rejects(l.renew(), LeaseLostError);
  assert.equal(l.signal.aborted, true, "the renewal that found it gone lost it");

  const names = [uniqueName("all"), uniqueName("all")];
  const leases = await c.acquireAll(names, { manual: true });
  await c.releaseAll(leases);
  for (const l of leases) {
    assert.ok(l.error instanceof LeaseReleasedError);
  }
});
