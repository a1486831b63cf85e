// The package loads both ways, ESM and CommonJS, from its exports.

import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { test } from "node:test";
import * as esm from "@lockapi/client";

test("the CommonJS build exports what the ESM build does", () => {
  const cjs = createRequire(import.meta.url)("@lockapi/client");
  assert.deepEqual(Object.keys(cjs).filter((k) => k !== "__esModule").sort(), Object.keys(esm).sort());
  assert.equal(typeof cjs.Client, "function");
  assert.ok(new cjs.LockHeldError({ status: 409, type: "", title: "", detail: "" }, "x", undefined, 0) instanceof cjs.ApiError);
});

test("a bad base URL is refused at once", () => {
  assert.throws(() => new esm.Client("localhost:8080"), TypeError);
  assert.throws(() => new esm.Client("ftp://localhost"), TypeError);
});
