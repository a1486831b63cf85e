// The loss watch (client/losswatch_test.go's scenarios): a force release,
// or a session's end, aborts the holder's signal within moments, not at
// its next renewal (10 s away with the 30 s TTL used here); a watch that
// fails marks nothing lost; lossWatch: false sends no blocking query.
//
// The target is 250 ms from the loss to the abort; each test logs what it
// measured and fails past lossBound, which leaves a loaded machine room
// and still proves the watch.

import assert from "node:assert/strict";
import { test } from "node:test";
import { LeaseLostError, SessionLostError } from "@lockapi/client";
import { admin, aborted, newClient, recordingFetch, server, uniqueName } from "./helpers.mjs";

const ttlMs = 30_000;
const lossBound = 1000;

// The admin's first request loads fetch's machinery, which takes hundreds
// of ms on a loaded machine: not what is measured here.
await admin.forceRelease(uniqueName("warm-up"));

/** Waits for signal to abort, logs how long after since (ms, performance.now) it did, and asserts the bound. */
async function told(t, signal, since, what) {
  await aborted(signal, 5000, what);
  const took = performance.now() - since;
  t.diagnostic(`${what}: told ${Math.round(took)} ms after the loss (target 250 ms, bound ${lossBound} ms)`);
  assert.ok(took <= lossBound, `${what}: told ${Math.round(took)} ms after the loss`);
}

test("loss watch: a force release aborts withLock's signal", async (t) => {
  const c = newClient();
  const name = uniqueName("lw");
  const err = await c
    .withLock(name, { ttlMs }, async (lease) => {
      const forced = performance.now();
      assert.equal(await admin.forceRelease(name), true);
      await told(t, lease.signal, forced, "a force-released lease");
      assert.match(String(lease.signal.reason), /no longer lists it/);
    })
    .then(() => assert.fail("withLock resolved after a loss"), (e) => e);
  assert.ok(err instanceof LeaseLostError, String(err));
  const next = await c.acquire(name, { ttlMs });
  await next.release();
});

test("loss watch: a session's bound leases and its end", async (t) => {
  const c = newClient();
  const s = await c.session({ ttlMs });
  const a = await s.acquire(uniqueName("lws-a"));
  const b = await s.acquire(uniqueName("lws-b"));
  let since = performance.now();
  assert.equal(await admin.forceRelease(a.name), true);
  await told(t, a.signal, since, "a force-released bound lease");
  assert.equal(b.lost || s.lost, false, "the session or its other lease was lost with it");
  const later = await s.acquire(uniqueName("lws-c")); // bound after the watch began: watched too
  since = performance.now();
  assert.equal(await admin.forceRelease(later.name), true);
  await told(t, later.signal, since, "a lease bound later, force-released");
  await b.release();
  const d = await s.acquire(uniqueName("lws-d"));
  since = performance.now();
  const res = await fetch(`${server.url}/v1/sessions/${s.id}`, { method: "DELETE", headers: { Authorization: `Bearer ${server.key}` } });
  assert.equal(res.status, 200);
  await told(t, s.signal, since, "a session deleted elsewhere");
  await aborted(d.signal, 5000, "its bound lease");
  assert.ok(s.error instanceof SessionLostError, String(s.error));
  await assert.rejects(s.close(), SessionLostError);
});

/** A fetch whose GETs fail while failing is set; until(pred) waits for a GET that fails or gets through to make pred true. */
function failingGets() {
  const g = { failing: true, fails: 0, passed: 0 };
  const subs = new Set();
  const notify = () => [...subs].forEach((f) => f());
  g.until = (pred, what) =>
    new Promise((resolve, reject) => {
      const check = () => {
        if (pred()) {
          clearTimeout(timer);
          subs.delete(check);
          resolve();
        }
      };
      const timer = setTimeout(() => {
        subs.delete(check);
        reject(new Error(`${what}: not within 5 s`));
      }, 5000);
      subs.add(check);
      check();
    });
  g.fetch = async (input, init) => {
    if ((init.method ?? "GET") !== "GET") {
      return globalThis.fetch(input, init);
    }
    if (g.failing) {
      g.fails++;
      notify();
      throw new TypeError("fetch failed (by the test)");
    }
    const res = await globalThis.fetch(input, init);
    g.passed++;
    notify();
    return res;
  };
  return g;
}

test("loss watch: a failing watch is no loss", async (t) => {
  const gets = failingGets();
  const c = newClient({ fetch: gets.fetch });
  const name = uniqueName("lwf");
  const lease = await c.acquire(name, { ttlMs });
  const s = await c.session({ ttlMs });
  const bound = await s.acquire(uniqueName("lwf-bound"));
  await gets.until(() => gets.fails >= 6, "both watches retried (after 100, 200, 400 ms)");
  assert.equal(lease.lost || bound.lost || s.lost, false, `a failing watch lost something: ${lease.error} ${bound.error} ${s.error}`);
  gets.failing = false;
  await gets.until(() => gets.passed >= 2, "both watches through again"); // their first, immediate, answers
  let since = performance.now();
  assert.equal(await admin.forceRelease(name), true);
  await told(t, lease.signal, since, "a lease whose watch failed for a while");
  since = performance.now();
  assert.equal(await admin.forceRelease(bound.name), true);
  await told(t, bound.signal, since, "a bound lease whose session watch failed for a while");
  await assert.rejects(lease.release(), LeaseLostError);
  await s.close();
});

test("loss watch: lossWatch false sends no blocking query", async () => {
  const rec = recordingFetch();
  const c = newClient({ fetch: rec.fetch, lossWatch: false });
  const lease = await c.acquire(uniqueName("lwo"), { ttlMs: 300 });
  const s = await c.session({ ttlMs: 300 });
  await s.acquire(uniqueName("lwo-b"));
  while (rec.count("POST", "/renew") < 4) {
    await new Promise((r) => setTimeout(r, 20));
  }
  await lease.release();
  await s.close();
  assert.deepEqual(rec.requests.filter((r) => r.method === "GET"), [], "blocking queries sent");
});
