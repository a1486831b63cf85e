// The fenced code blocks of docs/SDK_TS.md, which the suite checks every
// one of (scripts/check-types.mjs typechecks them, test/docs.test.mjs runs
// them against the server), and the `ts` samples of this package's README.
// A block's info string says what it is:
//
//   ```ts            a sample: typechecked, and run as an ES module
//   ```js            a CommonJS sample: run with require()
//   ```ts signature  a call's signature: its functions must exist
//
// On docs/SDK_TS.md any other block fails both, so that none goes
// unchecked; the README's shell block is the developer's commands, which
// tests/sdk_ts_test.go runs.

import { readFileSync } from "node:fs";

/** The pages whose samples are checked; `every`: each block must be of a known kind. */
export const pages = [
  { name: "docs/SDK_TS.md", url: new URL("../../../docs/SDK_TS.md", import.meta.url), every: true },
  { name: "sdk/ts/README.md", url: new URL("../README.md", import.meta.url), every: false },
];

/** The kinds of block, by info string. */
export const kinds = { ts: "sample", js: "commonjs", "ts signature": "signature" };

/**
 * The checked fenced blocks of every page: { page, info, kind, code, line }
 * (line: of the opening fence, 1-based); kind is undefined for a block of
 * no known kind on a page where every block must be known.
 */
export function docBlocks() {
  return pages.flatMap((p) => {
    const all = blocksOf(p.name, readFileSync(p.url, "utf8"));
    return p.every ? all : all.filter((b) => b.kind === "sample");
  });
}

function blocksOf(page, text) {
  const blocks = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const open = /^ {0,3}(`{3,})(.*)$/.exec(lines[i]);
    if (!open) {
      continue;
    }
    const info = open[2].trim();
    const body = [];
    let j = i + 1;
    for (; j < lines.length && !lines[j].trimStart().startsWith(open[1]); j++) {
      body.push(lines[j]);
    }
    if (j === lines.length) {
      throw new Error(`${page}:${i + 1}: a fence that is never closed`);
    }
    blocks.push({ page, info, kind: kinds[info], code: body.join("\n") + "\n", line: i + 1 });
    i = j;
  }
  return blocks;
}

/**
 * The functions a signature block names, one per line that starts with a
 * call: `new Client(` is { on: "new", name: "Client" }, `client.acquire(`
 * { on: "client", name: "acquire" }, `verifyWebhook(` { on: "", name:
 * "verifyWebhook" }.
 */
export function signatureCalls(code) {
  const calls = [];
  for (const line of code.split("\n")) {
    const m = /^(?:(new) +)?(?:(\w+)\.)?(\w+)(?:<[^>(]*>)?\(/.exec(line);
    if (m) {
      calls.push({ on: m[1] ?? m[2] ?? "", name: m[3] });
    }
  }
  return calls;
}
