// Every fenced block of docs/SDK_TS.md runs, and the README's samples
// (scripts/doc-samples.mjs says how each kind is checked;
// scripts/check-types.mjs typechecks the same samples). A sample runs as written against the server under test: its
// "http://localhost:8080" is the server's URL, LOCKAPI_API_KEY its key,
// and what it takes from the application around it (client, upload,
// deploy, work, node-postgres) are stand-ins that record their calls
// (test/samples/). A sample must settle within its time, and call every
// stand-in it names: one that ended early, in a catch, fails here.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import ts from "typescript";
import * as lockapi from "@lockapi/client";
import { docBlocks, signatureCalls } from "../scripts/doc-samples.mjs";
import { newClient, server, uniqueName } from "./helpers.mjs";
import { calls, globals } from "./samples/stubs.mjs";
import { queries } from "./samples/pg.mjs";

const esmEntry = pathToFileURL(fileURLToPath(new URL("../dist/esm/index.js", import.meta.url))).href;
const pgStub = new URL("./samples/pg.mjs", import.meta.url).href;
const dir = mkdtempSync(join(tmpdir(), "lockapi-docs-"));
after(() => rmSync(dir, { recursive: true, force: true }));

process.env.LOCKAPI_API_KEY = server.key;
Object.assign(globalThis, globals, { client: newClient() });

const blocks = docBlocks();

test("docs/SDK_TS.md: every block is a ts sample, a js sample or a ts signature", () => {
  const unknown = blocks.filter((b) => b.kind === undefined).map((b) => `${b.page}:${b.line}: \`\`\`${b.info}`);
  assert.deepEqual(unknown, []);
  assert.ok(blocks.filter((b) => b.page === "docs/SDK_TS.md" && b.kind === "sample").length >= 8, "the page has its samples");
});

/** The sample as an ES module that runs against the server under test. */
function runnable(code) {
  const js = ts.transpileModule(code, {
    compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext },
  }).outputText;
  return js
    .replaceAll('"http://localhost:8080"', JSON.stringify(server.url))
    .replaceAll('from "@lockapi/client"', `from ${JSON.stringify(esmEntry)}`)
    .replaceAll('from "pg"', `from ${JSON.stringify(pgStub)}`);
}

/** Settles with p, or rejects after ms. */
function within(p, ms, what) {
  let timer;
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not settled within ${ms}ms`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

/** Acquires and releases locks under prefix until stop() resolves: events for a sample that waits for them. */
function churn(prefix) {
  let stopped = false;
  const c = newClient();
  const done = (async () => {
    while (!stopped) {
      const l = await c.acquire(prefix + uniqueName("churn"));
      await l.release();
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  return async () => {
    stopped = true;
    await done;
  };
}

for (const b of blocks.filter((b) => b.kind === "sample")) {
  test(`${b.page}:${b.line}: the sample runs`, async () => {
    const file = join(dir, `${b.page.replace(/\W/g, "_")}-${b.line}.mjs`);
    writeFileSync(file, runnable(b.code));
    const callsBefore = calls.length;
    const queriesBefore = queries.length;
    const logged = [];
    const log = console.log;
    console.log = (...args) => logged.push(args);
    const events = /\.events\(\{ prefix: "([^"]+)"/.exec(b.code);
    const stop = events ? churn(events[1]) : async () => undefined;
    try {
      await within(import(pathToFileURL(file).href), 20_000, `the sample at ${b.page}:${b.line}`);
    } finally {
      console.log = log;
      await stop();
    }

    const made = calls.slice(callsBefore);
    for (const name of ["upload", "deploy", "work"]) {
      if (new RegExp(`\\b${name}\\(`).test(b.code)) {
        assert.ok(made.some((c) => c.name === name), `the sample did not call ${name}: it ended early (logged: ${JSON.stringify(logged)})`);
      }
    }
    for (const c of made) {
      const token = c.args.at(-1)?.fencingToken;
      assert.ok(Number.isSafeInteger(token) && token > 0, `${c.name} got fencing token ${token}`);
    }
    if (b.code.includes('from "pg"')) {
      const sqls = queries.slice(queriesBefore);
      const check = sqls.find((q) => q.sql.includes("lockapi_fence_check"));
      assert.ok(check, `no fence check among ${JSON.stringify(sqls)}`);
      assert.ok(Number.isSafeInteger(check.params[1]) && check.params[1] > 0, `fence check with ${JSON.stringify(check.params)}`);
      assert.deepEqual(sqls.map((q) => q.sql.split(" ")[0]), ["BEGIN", "SELECT", "UPDATE", "COMMIT", "(released)"]);
    }
    if (events) {
      assert.ok(logged.length > 0, "the events sample logged no event");
    }
  });
}

for (const b of blocks.filter((b) => b.kind === "commonjs")) {
  test(`${b.page}:${b.line}: the CommonJS sample runs`, () => {
    const file = join(dir, `${b.page.replace(/\W/g, "_")}-${b.line}.cjs`);
    const cjsEntry = fileURLToPath(new URL("../dist/cjs/index.js", import.meta.url));
    writeFileSync(file, `${b.code.replaceAll('require("@lockapi/client")', `require(${JSON.stringify(cjsEntry)})`)}module.exports = { Client };\n`);
    const m = createRequire(import.meta.url)(file);
    assert.equal(typeof m.Client, "function");
    assert.equal(typeof new m.Client(server.url).acquire, "function");
  });
}

/** What a signature block's receiver names. */
const receivers = {
  new: lockapi,
  "": lockapi,
  client: lockapi.Client.prototype,
  lease: lockapi.Lease.prototype,
  session: lockapi.Session.prototype,
};

for (const b of blocks.filter((b) => b.kind === "signature")) {
  test(`${b.page}:${b.line}: the signature's functions exist`, () => {
    const named = signatureCalls(b.code);
    assert.ok(named.length > 0, "the block names no call");
    for (const { on, name } of named) {
      assert.ok(on in receivers, `unknown receiver ${on}`);
      assert.equal(typeof receivers[on][name], "function", `${on ? on + " " : ""}${name}`);
    }
  });
}
