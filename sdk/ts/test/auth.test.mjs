// API keys: a missing or expired key is answered 401, a name outside the
// key's patterns 403, and a lease's renewals carry the key.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, ForbiddenError, UnauthorizedError, UnavailableError } from "@lockapi/client";
import { delay, newClient, recordingFetch, server, uniqueName } from "./helpers.mjs";

test("no key: UnauthorizedError, not retried", async () => {
  const rec = recordingFetch();
  const c = new Client(server.url, { fetch: rec.fetch });
  const err = await c.acquire(uniqueName("job"), { waitMs: 2000 }).then(() => assert.fail("acquired"), (e) => e);
  assert.ok(err instanceof UnauthorizedError && !(err instanceof UnavailableError), String(err));
  assert.equal(err.status, 401);
  assert.equal(err.type, "https://lockapi.dev/problems/unauthorized");
  assert.equal(rec.requests.length, 1, "a 401 is final");
});

test("an expired key: UnauthorizedError, not retried", async () => {
  const rec = recordingFetch();
  const c = new Client(server.url, { apiKey: server.expiredKey, fetch: rec.fetch });
  const err = await c.acquire(uniqueName("job"), { waitMs: 2000 }).then(() => assert.fail("acquired"), (e) => e);
  assert.ok(err instanceof UnauthorizedError && !(err instanceof UnavailableError), String(err));
  assert.equal(err.status, 401);
  assert.equal(err.type, "https://lockapi.dev/problems/unauthorized");
  assert.match(err.detail, /^the API key expired at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  assert.equal(rec.requests.length, 1, "a 401 is final");
  await assert.rejects(async () => {
    for await (const _ of c.events({})) {
      assert.fail("an event with an expired key");
    }
  }, UnauthorizedError);
});

test("a name outside the key's patterns: ForbiddenError", async () => {
  const c = new Client(server.url, { apiKey: server.narrowKey });
  const err = await c.acquire(uniqueName("job")).then(() => assert.fail("acquired"), (e) => e);
  assert.ok(err instanceof ForbiddenError, String(err));
  assert.equal(err.status, 403);
  const l = await c.acquire("other:" + uniqueName("job"));
  await l.release();
});

test("renewals carry the key", async () => {
  const rec = recordingFetch();
  const c = newClient({ fetch: rec.fetch });
  const l = await c.acquire(uniqueName("job"), { ttlMs: 1500 });
  await delay(900);
  assert.equal(l.lost, false, `lost: ${l.error}`);
  const renewals = rec.requests.filter((r) => r.path.endsWith("/renew"));
  assert.ok(renewals.length >= 1);
  assert.ok(renewals.every((r) => r.headers["Authorization"] === "Bearer " + server.key));
  await l.release();
});
