// Shared (read) leases, semaphores and the refusals that go with them
// (docs/LOCK_KINDS.md, client/kinds_test.go).

import assert from "node:assert/strict";
import { test } from "node:test";
import { ApiError, LockHeldError } from "@lockapi/client";
import { newClient, uniqueName } from "./helpers.mjs";

const c = newClient();

test("shared leases hold together; an exclusive one waits for them", async () => {
  const name = uniqueName("doc");
  const r1 = await c.acquire(name, { owner: "r1", shared: true });
  const r2 = await c.acquire(name, { owner: "r2", shared: true });
  assert.ok(r1.shared && r2.shared && r1.mode === "shared");
  assert.notEqual(r1.leaseId, r2.leaseId);
  const err = await c.acquire(name, { owner: "w" }).then(() => assert.fail("a writer got in"), (e) => e);
  assert.ok(err instanceof LockHeldError, String(err));
  await r1.release();
  await r2.release();
  const w = await c.acquire(name, { owner: "w" });
  assert.equal(w.shared, false);
  await assert.rejects(c.acquire(name, { owner: "r3", shared: true }), LockHeldError);
  await w.release();
});

test("a reader may not become the writer: upgrade-refused", async () => {
  const name = uniqueName("doc");
  const r = await c.acquire(name, { owner: "same", shared: true });
  const err = await c.acquire(name, { owner: "same" }).then(() => assert.fail("upgraded"), (e) => e);
  assert.ok(err instanceof ApiError && !(err instanceof LockHeldError), String(err));
  assert.equal(err.status, 409);
  assert.equal(err.slug, "upgrade-refused");
  await r.release();
});

test("a semaphore grants limit permits, then is held", async () => {
  const name = uniqueName("pool");
  const permits = [];
  for (let i = 0; i < 3; i++) {
    permits.push(await c.acquire(name, { owner: "worker", limit: 3 }));
  }
  assert.equal(new Set(permits.map((p) => p.leaseId)).size, 3, "each acquire takes another permit");
  assert.ok(permits.every((p) => p.limit === 3));
  await assert.rejects(c.acquire(name, { limit: 3 }), LockHeldError);
  const mismatch = await c.acquire(name, { limit: 5 }).then(() => assert.fail("acquired"), (e) => e);
  assert.equal(mismatch.slug, "limit-mismatch", String(mismatch));

  // A waiting acquire gets the permit one holder gives back.
  setTimeout(() => permits[0].release(), 200);
  const fourth = await c.acquire(name, { limit: 3, waitMs: 10_000, fair: true });
  await Promise.all([fourth, ...permits.slice(1)].map((p) => p.release()));
});
