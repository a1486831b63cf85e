// Client.acquireAll: the multi-lock, all or none (POST /v1/leases;
// docs/LOCK_KINDS.md, client/kinds_test.go).

import assert from "node:assert/strict";
import { test } from "node:test";
import { LockHeldError } from "@lockapi/client";
import { newClient, uniqueName } from "./helpers.mjs";

const c = newClient();

test("acquireAll takes every lock or none, and names the one held", async () => {
  const [a, b, z] = [uniqueName("a"), uniqueName("b"), uniqueName("z")];
  const holder = await c.acquire(b, { owner: "holder" });
  const err = await c.acquireAll([z, a, b], { owner: "w" }).then(() => assert.fail("acquired a held lock"), (e) => e);
  assert.ok(err instanceof LockHeldError, String(err));
  assert.equal(err.lock, b);
  assert.equal(err.holder.owner, "holder");
  // None was kept: the others are free.
  for (const name of [a, z]) {
    await (await c.acquire(name, { owner: "probe" })).release();
  }
  await holder.release();

  const leases = await c.acquireAll([z, a, b], { owner: "w", ttlMs: 3000, metadata: { job: "deploy" } });
  assert.deepEqual(leases.map((l) => l.name), [z, a, b], "in the order of names");
  assert.equal(new Set(leases.map((l) => l.leaseId)).size, 3);
  assert.ok(leases.every((l) => l.owner === "w" && l.sessionId === undefined && l.metadata.job === "deploy"));
  // Each renews itself (every TTL/3): held past its TTL. A TTL of 3 s
  // leaves each renewal 1.4 s (from TTL/3 to the safety margin) on a
  // loaded machine; with 1.5 s, a run at load 15 on two cores once lost a
  // lease with no renewal sent in time.
  await new Promise((r) => setTimeout(r, 3200));
  for (const name of [z, a, b]) {
    await assert.rejects(c.acquire(name, { owner: "other" }), LockHeldError);
  }
  await Promise.all(leases.map((l) => l.release()));
  await (await c.acquire(b, { owner: "other" })).release();
});

test("acquireAll waits for a held lock, shared leases together", async () => {
  const [a, b] = [uniqueName("a"), uniqueName("b")];
  const holder = await c.acquire(a, { owner: "holder" });
  const reader = await c.acquire(b, { owner: "reader", shared: true });
  setTimeout(() => holder.release(), 300);
  const leases = await c.acquireAll([a, b], { shared: true, waitMs: 10_000 });
  assert.ok(leases.every((l) => l.shared));
  await Promise.all([...leases, reader].map((l) => l.release()));
});

test("acquireAll refuses limit and fair", async () => {
  await assert.rejects(c.acquireAll([uniqueName("a")], { limit: 2 }), TypeError);
  await assert.rejects(c.acquireAll([uniqueName("a")], { fair: true }), TypeError);
});
