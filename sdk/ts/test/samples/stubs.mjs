// Stand-ins for what the samples of docs/SDK_TS.md take from the
// application around them (globals.d.ts declares them for the
// typecheck): each function records its calls, so that the test can tell
// that a sample did its work and did not end early.

/** Every call of a stand-in, in order: { name, args }. */
export const calls = [];

function recorder(name) {
  return async (...args) => {
    calls.push({ name, args });
  };
}

/** The globals a sample may use; `client` is set by the test. */
export const globals = {
  chunks: ["chunk-1", "chunk-2"],
  batches: [1, 2],
  report: "the daily report",
  upload: recorder("upload"),
  deploy: recorder("deploy"),
  work: recorder("work"),
};
