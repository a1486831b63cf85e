// Idempotency keys: an acquire repeated with the same key gets the same
// grant back instead of a second hold, whether the repeat is the client's
// own retry or the caller's.

import assert from "node:assert/strict";
import { test } from "node:test";
import { randomUUID } from "node:crypto";
import { newClient, uniqueName } from "./helpers.mjs";

test("an acquire repeated with the same key and owner gets the same lease, one hold", async () => {
  const c = newClient();
  const name = uniqueName("job");
  const key = randomUUID();
  const first = await c.acquire(name, { owner: "w", idempotencyKey: key });
  const again = await c.acquire(name, { owner: "w", idempotencyKey: key });
  assert.equal(again.leaseId, first.leaseId);
  assert.equal(again.fencingToken, first.fencingToken);
  assert.equal(again.holdCount, 1, "the repeat added no hold");
  await first.release();
});

test("the client's retry of an acquire whose answer was lost carries the same key and gets the grant back", async () => {
  const name = uniqueName("job");
  const sent = [];
  let dropped = false;
  // Delivers the first acquire to the server but loses its answer, as a
  // connection that breaks after the grant would.
  const losingFetch = async (input, init) => {
    const res = await globalThis.fetch(input, init);
    if (init.method === "POST" && new URL(input).pathname.endsWith("/leases")) {
      sent.push(init.headers["Idempotency-Key"]);
      if (!dropped) {
        dropped = true;
        await res.arrayBuffer();
        throw new TypeError("fetch failed: the connection broke");
      }
    }
    return res;
  };
  const c = newClient({ fetch: losingFetch });
  const l = await c.acquire(name, { owner: "w", waitMs: 5000 });
  assert.equal(sent.length, 2, "one retry");
  assert.ok(sent[0] && sent[0] === sent[1], `keys ${sent}`);
  assert.equal(l.holdCount, 1, "the retry added no hold");
  await l.release();
  const probe = await newClient().acquire(name, { owner: "other" });
  await probe.release(); // one release freed the lock: there was one hold
});

test("an acquire without a wait repeats a lost answer a few times, with its key, then gives up", async () => {
  const name = uniqueName("job");
  const sent = [];
  let drops = 2;
  // Delivers each acquire but loses the first two answers, as a failover
  // or a broken connection would: the third try gets the grant back.
  const losingFetch = async (input, init) => {
    const res = await globalThis.fetch(input, init);
    if (init.method === "POST" && new URL(input).pathname.endsWith("/leases")) {
      sent.push(init.headers["Idempotency-Key"]);
      if (drops > 0) {
        drops--;
        await res.arrayBuffer();
        throw new TypeError("fetch failed: the connection broke");
      }
    }
    return res;
  };
  const c = newClient({ fetch: losingFetch });
  const l = await c.acquire(name, { owner: "w" });
  assert.equal(sent.length, 3, "two repeats");
  assert.ok(sent.every((k) => k && k === sent[0]), `keys ${sent}`);
  assert.equal(l.holdCount, 1, "the repeats added no hold");
  await l.release();

  // Three lost answers in a row: the third failure is the caller's.
  const name2 = uniqueName("job");
  let tries = 0;
  const deadFetch = async (input, init) => {
    if (init.method === "POST" && new URL(input).pathname.endsWith("/leases")) {
      tries++;
      throw new TypeError("fetch failed: connection refused");
    }
    return globalThis.fetch(input, init);
  };
  await assert.rejects(newClient({ fetch: deadFetch }).acquire(name2, { owner: "w" }), (e) => e.name === "UnavailableError");
  assert.equal(tries, 3, "three tries, then the error");
});
