// Client.inspect: a lock's state (GET /v1/locks/{name}), as Go's Inspect
// and Python's inspect read it.

import assert from "node:assert/strict";
import { test } from "node:test";
import { ApiError } from "@lockapi/client";
import { newClient, uniqueName } from "./helpers.mjs";

test("inspect: a free lock, an exclusive holder, then readers", async () => {
  const c = newClient();
  const name = uniqueName("inspect");
  const free = await c.inspect(name);
  assert.equal(free.lock, name);
  assert.equal(free.held, false);
  assert.equal(free.mode, undefined);
  assert.equal(free.holder, undefined);
  assert.deepEqual(free.holders, []);
  assert.equal(free.lastToken, 0);
  assert.equal(free.lockDelayMs, 0);
  assert.equal(typeof free.index, "string");

  const l = await c.acquire(name, { owner: "w", ttlMs: 10_000, metadata: { job: "nightly" } });
  const held = await c.inspect(name);
  assert.equal(held.held, true);
  assert.equal(held.mode, "exclusive");
  assert.equal(held.holder.owner, "w");
  assert.equal(held.holder.fencingToken, l.fencingToken);
  assert.equal(held.holder.holdCount, 1);
  assert.deepEqual(held.holder.metadata, { job: "nightly" });
  assert.equal(held.holder.sessionId, undefined);
  assert.ok(held.holder.expiresAt > held.holder.acquiredAt, `${held.holder.acquiredAt} .. ${held.holder.expiresAt}`);
  assert.equal(held.holders.length, 1);
  assert.equal(held.lastToken, l.fencingToken);
  assert.equal(held.queueLength, 0);
  assert.notEqual(held.index, free.index, "the index changes with the state");
  assert.equal("leaseId" in held.holder, false, "no lease id");
  await l.release();

  const r1 = await c.acquire(name, { shared: true });
  const r2 = await c.acquire(name, { shared: true });
  const read = await c.inspect(name);
  assert.equal(read.mode, "shared");
  assert.equal(read.holder, undefined, "readers have no exclusive holder");
  assert.deepEqual(read.holders.map((h) => h.fencingToken), [r1.fencingToken, r2.fencingToken]);
  assert.ok(read.holders.every((h) => h.mode === "shared"));
  await c.releaseAll([r1, r2]);
});

test("inspect: a name the server refuses is an ApiError 400", async () => {
  const err = await newClient().inspect("orders/7").then(() => assert.fail("inspected"), (e) => e);
  assert.ok(err instanceof ApiError, String(err));
  assert.equal(err.status, 400);
});
