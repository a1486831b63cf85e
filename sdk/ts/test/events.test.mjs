// The event iterator: the events of the SDK's own acquires, in order, and
// a cut connection that the loop does not notice but for the pause.

import assert from "node:assert/strict";
import { test } from "node:test";
import { ApiError } from "@lockapi/client";
import { delay, newClient, startProxy, uniqueName } from "./helpers.mjs";

/** Pulls events from it into a queue that next() reads with a deadline. */
function reader(iterable) {
  const it = iterable[Symbol.asyncIterator]();
  return {
    async next(ms = 5000) {
      let t;
      const timeout = new Promise((_, reject) => { t = setTimeout(() => reject(new Error(`no event within ${ms}ms`)), ms); });
      try {
        const r = await Promise.race([it.next(), timeout]);
        assert.equal(r.done, false, "the loop ended");
        return r.value;
      } finally {
        clearTimeout(t);
      }
    },
    stop: () => it.return(),
  };
}

test("events resume after a cut connection, in order and none twice", async () => {
  const proxy = await startProxy();
  const c = newClient(); // acquires straight to the server
  let prefix = uniqueName("ev") + ":";
  const ctl = new AbortController();
  try {
    // The loop resumes after an event of its own, rather than starting
    // with the next, which could come before its request reaches the
    // server. A marker stream finds such an event: it starts with the next
    // event, so marks are made until it sees one.
    const marker = c.events({ prefix: prefix + "m:", types: ["released"], signal: ctl.signal })[Symbol.asyncIterator]();
    const marked = marker.next();
    let mark;
    for (let i = 0; !mark && i < 50; i++) {
      await (await c.acquire(prefix + "m:" + i, {})).release();
      mark = await Promise.race([marked, delay(100).then(() => undefined)]);
    }
    assert.ok(mark && !mark.done, "the marker stream saw no release");
    await marker.return();

    prefix += "n:";
    const loop = reader(newClient({ url: proxy.url }).events({ prefix, types: ["granted", "released"], after: mark.value.id, signal: ctl.signal }));
    const l1 = await c.acquire(prefix + "1", { owner: "w", shared: true, ttlMs: 60_000 });
    const ev = await loop.next();
    assert.equal(ev.type, "granted");
    assert.equal(ev.lock, prefix + "1");
    assert.equal(ev.owner, "w");
    assert.equal(ev.shared, true);
    assert.equal(ev.fencingToken, l1.fencingToken);
    assert.ok(ev.time instanceof Date && !Number.isNaN(ev.time.getTime()));
    const seen = [ev];

    // Changes while the connection is down reach the loop once it is back.
    proxy.down();
    const more = [];
    for (let i = 2; i <= 4; i++) {
      more.push(await c.acquire(prefix + i, { ttlMs: 60_000 }));
    }
    await delay(300); // a failed reconnect or two
    proxy.up();
    await l1.release();
    for (let i = 0; i < 4; i++) {
      seen.push(await loop.next());
    }
    assert.deepEqual(seen.map((e) => `${e.type} ${e.lock.slice(prefix.length)}`),
      ["granted 1", "granted 2", "granted 3", "granted 4", "released 1"]);
    const ids = seen.map((e) => e.id);
    assert.equal(new Set(ids).size, ids.length, "no event twice");

    // And a plain cut of the open connection.
    proxy.cut();
    await more[0].release();
    const after = await loop.next();
    assert.equal(`${after.type} ${after.lock.slice(prefix.length)}`, "released 2");
    await loop.stop();
    await Promise.all(more.slice(1).map((l) => l.release()));
  } finally {
    ctl.abort();
    await proxy.close();
  }
});

test("the first request's failure ends the loop", async () => {
  const c = newClient();
  await assert.rejects(async () => {
    for await (const _ of c.events({ lock: "a", prefix: "b" })) {
      assert.fail("an event");
    }
  }, (e) => e instanceof ApiError && e.status === 400);
});

test("the loop ends when its signal aborts", async () => {
  const c = newClient();
  const ctl = new AbortController();
  setTimeout(() => ctl.abort(new Error("enough")), 200);
  await assert.rejects(async () => {
    for await (const _ of c.events({ prefix: uniqueName("quiet"), signal: ctl.signal })) {
      assert.fail("an event");
    }
  }, /enough/);
});
