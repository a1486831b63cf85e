// A check of a JavaScript runtime by hand (Node.js, Bun, Deno), against a
// running lockapi without API keys; not part of the suite (test/ runs on
// Node.js only):
//
//   node scripts/smoke.mjs http://127.0.0.1:8080
//   bun scripts/smoke.mjs http://127.0.0.1:8080
//   deno run --allow-net --allow-env --allow-read scripts/smoke.mjs http://127.0.0.1:8080
//
// It acquires a lease with a short TTL and checks that the watchdog keeps
// it past that TTL, that a second acquire is refused with a named
// LockHeldError, and that the lease releases; then it acquires a lease and
// leaves it held: the process must exit at once, since the watchdog's
// timers are unref'd, rather than renew it forever.

import { Client, isLockHeldError } from "../dist/esm/index.js";

const args = globalThis.Deno ? globalThis.Deno.args : globalThis.process.argv.slice(2);
const url = args[0] ?? "http://127.0.0.1:8080";
const runtime = globalThis.Deno ? `deno ${globalThis.Deno.version.deno}` : globalThis.Bun ? `bun ${globalThis.Bun.version}` : `node ${globalThis.process.version}`;
const client = new Client(url);
const name = `smoke:${Math.random().toString(16).slice(2, 10)}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const lease = await client.acquire(name, { ttlMs: 1500 });
await sleep(2500); // past the TTL: only renewals keep it
if (lease.lost || lease.expiresAt.getTime() <= Date.now()) {
  throw new Error(`${runtime}: the watchdog did not keep the lease: ${lease.error}`);
}
const refused = await client.acquire(name).then(() => undefined, (e) => e);
if (!isLockHeldError(refused) || refused.name !== "LockHeldError") {
  throw new Error(`${runtime}: a held lock was not refused with a LockHeldError: ${refused}`);
}
await lease[Symbol.asyncDispose]();
const again = await client.acquire(name, { ttlMs: 30_000 });
console.log(`${runtime}: renewed past its TTL, refused a second holder, released; now leaving a lease held and exiting`);
void again; // not released: the process must still exit
