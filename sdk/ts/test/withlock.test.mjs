// Client.withLock: the scoped lock (client/client_test.go TestWithLock).

import assert from "node:assert/strict";
import { test } from "node:test";
import { LeaseLostError, LockHeldError } from "@lockapi/client";
import { admin, delay, newClient, uniqueName } from "./helpers.mjs";

const c = newClient();

async function isFree(name) {
  const l = await c.acquire(name, { owner: "probe" });
  await l.release();
  return true;
}

test("runs the function under the lock and releases it", async () => {
  const name = uniqueName("job");
  const token = await c.withLock(name, { owner: "w" }, async (lease) => {
    await assert.rejects(c.acquire(name, { owner: "other" }), LockHeldError);
    return lease.fencingToken;
  });
  assert.ok(token > 0);
  assert.ok(await isFree(name));
});

test("releases when the function throws, and passes its error", async () => {
  const name = uniqueName("job");
  const boom = new Error("boom");
  await assert.rejects(c.withLock(name, {}, async () => { throw boom; }), (e) => e === boom);
  assert.ok(await isFree(name));
});

test("a held lock rejects and the function is not called", async () => {
  const name = uniqueName("job");
  const holder = await c.acquire(name, { owner: "holder" });
  let called = false;
  await assert.rejects(c.withLock(name, {}, () => { called = true; }), LockHeldError);
  assert.equal(called, false);
  await holder.release();
});

test("a scoped lock outlives its TTL through the watchdog", async () => {
  const name = uniqueName("job");
  const ttlMs = 1500;
  await c.withLock(name, { ttlMs }, async (lease) => {
    await delay(3 * ttlMs);
    assert.equal(lease.signal.aborted, false, `lost: ${lease.error}`);
    await assert.rejects(c.acquire(name, {}), LockHeldError);
  });
  assert.ok(await isFree(name));
});

test("a force release aborts the work's signal within 2s, and withLock rejects with LeaseLostError", async () => {
  const name = uniqueName("job");
  let abortedIn;
  const err = await c.withLock(name, { ttlMs: 1500 }, async (lease) => {
    const forced = Date.now();
    await admin.forceRelease(name);
    // The work: it waits on the lease's signal as fetch or a stream would.
    await new Promise((resolve, reject) => {
      // The loss watch may have aborted it before forceRelease's answer
      // came back: an abort event fired then reaches no later listener.
      if (lease.signal.aborted) {
        abortedIn = Date.now() - forced;
        reject(lease.signal.reason);
        return;
      }
      const t = setTimeout(() => reject(new Error("the signal did not abort within 2s")), 2000);
      lease.signal.addEventListener("abort", () => {
        clearTimeout(t);
        abortedIn = Date.now() - forced;
        reject(lease.signal.reason);
      }, { once: true });
    });
  }).then(() => assert.fail("withLock resolved"), (e) => e);
  assert.ok(err instanceof LeaseLostError, String(err));
  assert.ok(abortedIn < 2000, `aborted after ${abortedIn}ms`);
});

test("a loss while the function succeeds still rejects with LeaseLostError", async () => {
  const name = uniqueName("job");
  await assert.rejects(c.withLock(name, { ttlMs: 60_000 }, async () => {
    await admin.forceRelease(name);
    return "done";
  }), LeaseLostError);
});
