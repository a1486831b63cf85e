// Runs the tests (test/*.test.mjs, node:test) against the built package.
// The files run side by side: most of their time is spent waiting on
// leases, not on the CPU. Node.js before 20.10 has no --test-concurrency
// and picks its own.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";

const dir = new URL("../test/", import.meta.url);
const files = readdirSync(dir).filter((f) => f.endsWith(".test.mjs")).sort().map((f) => new URL(f, dir).pathname);
const [major, minor] = process.versions.node.split(".").map(Number);
const args = ["--test"];
if (major > 20 || (major === 20 && minor >= 10)) {
  args.push("--test-concurrency=4");
}
const r = spawnSync(process.execPath, [...args, ...files], { stdio: "inherit" });
process.exit(r.status ?? 1);
