// `await using`: a lease and a session are AsyncDisposable. Node.js 20
// cannot parse `await using` itself; test/docs.test.mjs runs the page's
// `await using` sample as TypeScript compiles it, and these call the
// method that the compiled code (or a runtime's own `await using`) calls.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import vm from "node:vm";
import { isLeaseLostError, isLeaseReleasedError, isSessionClosedError } from "@lockapi/client";
import { admin, newClient, recordingFetch, uniqueName } from "./helpers.mjs";

test("await using: the lease is released at the end of the block, once", async () => {
  const rec = recordingFetch();
  const c = newClient({ fetch: rec.fetch });
  const name = uniqueName("using");
  const l = await c.acquire(name, { ttlMs: 10_000 });
  assert.equal(typeof l[Symbol.asyncDispose], "function");
  await l[Symbol.asyncDispose]();
  assert.ok(isLeaseReleasedError(l.error), String(l.error));
  await l[Symbol.asyncDispose](); // a release() before the block's end, then the end
  assert.equal(rec.count("DELETE", l.leaseId), 1);
  await (await c.acquire(name)).release(); // free
});

test("await using: a lease lost meanwhile rejects with its LeaseLostError, with the 410's status and request id", async () => {
  // Without the loss watch, which would tell the loss first (status 0, no
  // request id): this is about the release's own 410.
  const c = newClient({ lossWatch: false });
  const name = uniqueName("using");
  const l = await c.acquire(name, { ttlMs: 60_000 });
  assert.equal(await admin.forceRelease(name), true);
  const err = await l[Symbol.asyncDispose]().then(() => assert.fail("disposed a lost lease without error"), (e) => e);
  assert.ok(isLeaseLostError(err), String(err));
  assert.equal(err.status, 410);
  assert.match(err.requestId ?? "", /\S/, "the 410's request id");
  assert.equal(err.requestId, err.cause.requestId);
});

test("await using: the session is closed at the end of the block, and its leases with it", async (t) => {
  const c = newClient();
  const s = await c.session({ ttlMs: 5000 }).catch((e) => e);
  if (s instanceof Error) {
    // A store without sessions (redlock) answers 501; the memory store and Redis keep them.
    assert.equal(s.status, 501, String(s));
    t.diagnostic("this store answers 501 unsupported to a session");
    return;
  }
  const name = uniqueName("using");
  const l = await s.acquire(name);
  assert.equal(typeof s[Symbol.asyncDispose], "function");
  await s[Symbol.asyncDispose]();
  assert.ok(isSessionClosedError(s.error), String(s.error));
  assert.ok(isLeaseReleasedError(l.error), String(l.error));
  await (await c.acquire(name)).release(); // free
});

test("without Symbol.asyncDispose the key is core-js's, Symbol.for(\"Symbol.asyncDispose\")", () => {
  // A new realm has the engine's symbols but not those Node.js adds: on
  // Node.js 18 and 20, no Symbol.asyncDispose. The registry is shared.
  const code = readFileSync(new URL("../dist/cjs/dispose.js", import.meta.url), "utf8");
  const module = { exports: {} };
  const realm = vm.createContext({ module, exports: module.exports });
  vm.runInContext(code, realm);
  const expected = vm.runInContext("Symbol.asyncDispose", realm) ?? Symbol.for("Symbol.asyncDispose");
  assert.equal(module.exports.asyncDispose, expected);
});
