// Webhook receivers: verifyWebhook, and the Standard Webhooks reference
// library (npm standardwebhooks), both verify lockapi's real deliveries.
// The server under test lets webhooks reach loopback
// (LOCKAPI_WEBHOOKS_ALLOW_PRIVATE, set by tests/sdk_ts_test.go).

import assert from "node:assert/strict";
import http from "node:http";
import { test } from "node:test";
import { Webhook } from "standardwebhooks";
import {
  Client, verifyWebhook, WebhookHeadersError, WebhookSignatureError, WebhookTimestampError,
} from "@lockapi/client";
import { newClient, server, uniqueName } from "./helpers.mjs";

/** A receiver on loopback: each delivery's headers and raw body, in order. */
async function startReceiver() {
  const waiting = [];
  const got = [];
  const srv = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      res.writeHead(204).end();
      const d = { headers: req.headers, body: Buffer.concat(chunks).toString("utf8") };
      const w = waiting.shift();
      w ? w(d) : got.push(d);
    });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${srv.address().port}/hook`,
    next: (ms = 10_000) => got.length > 0 ? Promise.resolve(got.shift()) : new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("no delivery in time")), ms);
      waiting.push((d) => { clearTimeout(timer); resolve(d); });
    }),
    close: () => new Promise((r) => srv.close(r)),
  };
}

async function adminCall(method, path, body) {
  const res = await fetch(server.url + path, {
    method,
    headers: { authorization: `Bearer ${server.adminKey}`, "content-type": "application/json" },
    body: body && JSON.stringify(body),
  });
  const text = await res.text();
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

test("verifyWebhook and the reference library verify real deliveries", async () => {
  const recv = await startReceiver();
  const prefix = uniqueName("hook") + ":";
  const hook = await adminCall("POST", "/v1/webhooks", { url: recv.url, prefix, types: ["granted"] });
  try {
    const ping = await adminCall("POST", `/v1/webhooks/${hook.id}/ping`);
    assert.equal(ping.delivered, true, JSON.stringify(ping));
    let d = await recv.next();
    const p = await verifyWebhook(hook.secret, d.headers, d.body);
    assert.equal(p.type, "ping");
    assert.equal(p.id, ping.event_id);

    const lease = await newClient().acquire(prefix + "job", { owner: "w" });
    d = await recv.next();
    const ev = await verifyWebhook(hook.secret, d.headers, d.body);
    assert.equal(ev.type, "granted");
    assert.equal(ev.lock, prefix + "job");
    assert.equal(ev.fencingToken, lease.fencingToken);
    await lease.release();

    // The reference library verifies the same delivery, and returns its body.
    const ref = new Webhook(hook.secret).verify(d.body, d.headers);
    assert.equal(ref.id, ev.id);
    assert.equal(ref.fencing_token, lease.fencingToken);

    // Typed refusals: another secret, an old timestamp, a missing header.
    await assert.rejects(verifyWebhook("whsec_" + Buffer.alloc(32, 7).toString("base64"), d.headers, d.body), WebhookSignatureError);
    await assert.rejects(verifyWebhook(hook.secret, d.headers, d.body.replace("granted", "released")), WebhookSignatureError);
    await assert.rejects(verifyWebhook(hook.secret, d.headers, d.body, { now: () => Date.now() + 3_600_000 }), WebhookTimestampError);
    const { "webhook-signature": _, ...unsigned } = d.headers;
    await assert.rejects(verifyWebhook(hook.secret, unsigned, d.body), WebhookHeadersError);
    assert.throws(() => new Webhook("whsec_" + Buffer.alloc(32, 7).toString("base64")).verify(d.body, d.headers));
  } finally {
    await adminCall("DELETE", `/v1/webhooks/${hook.id}`);
    await recv.close();
  }
});

test("the default constructor reads LOCKAPI_URL and LOCKAPI_API_KEY", async () => {
  const saved = { url: process.env.LOCKAPI_URL, key: process.env.LOCKAPI_API_KEY };
  process.env.LOCKAPI_API_KEY = server.key;
  try {
    const c = new Client();
    const l = await c.acquire(uniqueName("env"), {});
    await l.release();
  } finally {
    if (saved.key === undefined) delete process.env.LOCKAPI_API_KEY;
    else process.env.LOCKAPI_API_KEY = saved.key;
  }
});
