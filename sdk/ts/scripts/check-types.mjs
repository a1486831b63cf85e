// Typechecks what users compile against the built declarations (dist/):
// every `ts` sample of docs/SDK_TS.md and the README, and test/types/usage.ts, as strict
// as a user may be (exactOptionalPropertyTypes included); and
// test/types/bare.cts as a CommonJS consumer without esnext.disposable and
// without skipLibCheck, so that every declaration file stands on its own
// (an internal stripped from one but named by another would not). Run it
// after `npm run build`.

import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { docBlocks } from "./doc-samples.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
const samplesDir = fileURLToPath(new URL("../.samples/", import.meta.url));

const strict = {
  strict: true,
  exactOptionalPropertyTypes: true,
  noEmit: true,
  skipLibCheck: false,
  types: [],
  target: ts.ScriptTarget.ES2022,
};

/** Parsed files, shared by the two programs: the lib files (DOM's above all) are most of the work. */
const parsed = new Map();

/** Typechecks files under options; returns the diagnostics as text, "" when clean. */
function check(files, options) {
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (fileName, languageVersion, ...rest) => {
    const key = `${fileName}\0${JSON.stringify(languageVersion)}`;
    if (!parsed.has(key)) {
      parsed.set(key, getSourceFile(fileName, languageVersion, ...rest));
    }
    return parsed.get(key);
  };
  const program = ts.createProgram(files, options, host);
  const diags = ts.getPreEmitDiagnostics(program);
  return ts.formatDiagnostics(diags, {
    getCanonicalFileName: (f) => f,
    getCurrentDirectory: () => root,
    getNewLine: () => "\n",
  });
}

// The samples go into .samples/ inside the package, where "@lockapi/client"
// resolves to the package itself (its exports), as it would in a user's
// project with the package installed.
rmSync(samplesDir, { recursive: true, force: true });
mkdirSync(samplesDir, { recursive: true });
const files = [fileURLToPath(new URL("../test/samples/globals.d.ts", import.meta.url)), fileURLToPath(new URL("../test/types/usage.ts", import.meta.url))];
let samples = 0;
for (const b of docBlocks()) {
  if (b.kind === undefined) {
    console.error(`${b.page}:${b.line}: a \`\`\`${b.info} block: every block must be a ts sample, a js sample or a ts signature (scripts/doc-samples.mjs)`);
    process.exit(1);
  }
  if (b.kind !== "sample") {
    continue;
  }
  // A line comment maps errors back to the page; `export {}` makes each sample a module of its own.
  const f = `${samplesDir}${b.page.replace(/\W/g, "_")}_line_${b.line}.ts`;
  writeFileSync(f, `// ${b.page}:${b.line}\n${b.code}export {};\n`);
  files.push(f);
  samples++;
}

const failures = [];
const esm = check(files, {
  ...strict,
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  lib: ["lib.es2022.d.ts", "lib.esnext.disposable.d.ts", "lib.dom.d.ts"],
});
if (esm) {
  failures.push("the samples and test/types/usage.ts (ESM, exactOptionalPropertyTypes):\n" + esm);
}
const cjs = check([fileURLToPath(new URL("../test/types/bare.cts", import.meta.url))], {
  ...strict,
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  lib: ["lib.es2022.d.ts", "lib.dom.d.ts"],
});
if (cjs) {
  failures.push("test/types/bare.cts (CommonJS, no esnext.disposable, no skipLibCheck):\n" + cjs);
}
rmSync(samplesDir, { recursive: true, force: true });
if (failures.length > 0) {
  console.error(failures.join("\n"));
  process.exit(1);
}
console.log(`check-types: ${samples} samples of docs/SDK_TS.md and the README, test/types/usage.ts and test/types/bare.cts typecheck`);
