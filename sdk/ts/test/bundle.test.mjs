// Errors that survive a bundler: esbuild --minify renames every class, and
// an application may load several copies of the package at once (this
// bundle, the ESM build, the CommonJS build). Each error's name is written
// out, and the is...Error guards read a brand that every copy shares.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { build } from "esbuild";
import * as esm from "@lockapi/client";
import { server, uniqueName } from "./helpers.mjs";

const cjs = createRequire(import.meta.url)("@lockapi/client");

const dir = mkdtempSync(join(tmpdir(), "lockapi-bundle-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** The package bundled and minified by esbuild, as an application's bundle would hold it. */
async function minified() {
  const out = await build({
    entryPoints: [fileURLToPath(new URL("../dist/esm/index.js", import.meta.url))],
    bundle: true,
    minify: true,
    format: "esm",
    platform: "neutral",
    write: false,
    logLevel: "silent",
  });
  const file = join(dir, "lockapi.min.mjs");
  writeFileSync(file, out.outputFiles[0].text);
  return import(pathToFileURL(file).href);
}

const min = await minified();

/** The exported error classes, by name. */
const errorClasses = Object.keys(esm).filter((k) => typeof esm[k] === "function" && esm[k].prototype instanceof Error);

test("the minified bundle renames the classes, yet every error keeps its name", () => {
  assert.ok(errorClasses.length >= 15, `error classes: ${errorClasses}`);
  assert.notEqual(min.LockHeldError.name, "LockHeldError", "esbuild --minify renamed the class (else this test shows nothing)");
  for (const k of errorClasses) {
    assert.equal(min[k].prototype.name, k, `${k} in the bundle`);
    assert.equal(esm[k].prototype.name, k, `${k} in the ESM build`);
    assert.equal(cjs[k].prototype.name, k, `${k} in the CommonJS build`);
  }
  const e = new min.LockHeldError({ status: 409, type: "", title: "", detail: "" }, "x", undefined, 0);
  assert.equal(e.name, "LockHeldError");
  assert.match(String(e), /^LockHeldError: /);
  assert.equal(new min.LeaseLostError("x", "id", 1, "why").name, "LeaseLostError");
});

/** A guard for each error class: isLockHeldError for LockHeldError. */
const guards = errorClasses
  .filter((k) => typeof esm[`is${k}`] === "function")
  .map((k) => [k, `is${k}`]);

test("a guard of one copy knows the errors of every copy, subclasses included", () => {
  const withGuard = guards.map(([k]) => k);
  for (const k of ["ApiError", "LockHeldError", "LockDelayError", "SessionNotFoundError", "UnauthorizedError", "ForbiddenError",
    "UnavailableError", "LeaseLostError", "SessionLostError", "LeaseReleasedError", "SessionClosedError", "WebhookVerificationError"]) {
    assert.ok(withGuard.includes(k), `no guard is${k}`);
  }
  const p = { status: 409, type: "", title: "", detail: "" };
  const made = {
    bundle: new min.LockHeldError(p, "x", undefined, 0),
    esm: new esm.LockHeldError(p, "x", undefined, 0),
    cjs: new cjs.LockHeldError(p, "x", undefined, 0),
  };
  for (const [from, e] of Object.entries(made)) {
    for (const [copy, m] of Object.entries({ bundle: min, esm, cjs })) {
      assert.equal(m.isLockHeldError(e), true, `${copy}'s isLockHeldError of a ${from} error`);
      assert.equal(m.isApiError(e), true, `${copy}'s isApiError of a ${from} LockHeldError`);
      assert.equal(m.isLeaseLostError(e), false, `${copy}'s isLeaseLostError of a ${from} LockHeldError`);
    }
  }
  assert.equal(made.cjs instanceof esm.LockHeldError, false, "instanceof fails across copies: the reason for the guards");
  for (const [, g] of guards) {
    for (const x of [undefined, null, 0, "LockHeldError", new Error("x"), { name: "LockHeldError" }]) {
      assert.equal(esm[g](x), false, `${g}(${String(x)})`);
    }
  }
  assert.equal(esm.isLeaseReleasedError(new min.LeaseReleasedError("x", "id")), true);
  assert.equal(esm.isSessionClosedError(new cjs.SessionClosedError("s")), true);
  assert.equal(esm.isWebhookVerificationError(new min.WebhookSignatureError("no")), true);
});

test("a refusal through the minified bundle: named, guarded, with instance and the problem", async () => {
  const name = uniqueName("bundle");
  const c = new min.Client(server.url, { apiKey: server.key });
  const holder = await c.acquire(name, { owner: "holder" });
  try {
    const err = await c.acquire(name, { owner: "other" }).then(() => assert.fail("acquired a held lock"), (e) => e);
    assert.equal(err.name, "LockHeldError");
    assert.ok(esm.isLockHeldError(err) && cjs.isApiError(err) && min.isLockHeldError(err));
    assert.equal(err.holder.owner, "holder");
    assert.equal(err.instance, `/v1/locks/${name}/leases`);
    assert.equal(err.problem.type, "https://lockapi.dev/problems/lock-held");
    assert.equal(err.problem.holder.owner, "holder", "the problem as sent, in the server's own members");
  } finally {
    await holder.release();
  }
});
