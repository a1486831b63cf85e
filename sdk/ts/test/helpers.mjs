// What the tests share: the server under test (from the environment that
// tests/sdk_ts_test.go sets), unique lock names, a fetch that counts
// requests, and a TCP proxy that can cut the connections to the server.

import net from "node:net";
import { randomBytes } from "node:crypto";
import { Client } from "@lockapi/client";

function env(name) {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set: run these tests through tests/sdk_ts_test.go (go test -run TestTypeScriptSDK ./tests/)`);
  }
  return v;
}

/** The lockapi under test, and its API keys. */
export const server = {
  url: env("LOCKAPI_URL"),
  /** locks:read and locks:write on every name. */
  key: env("LOCKAPI_KEY"),
  /** admin on every name. */
  adminKey: env("LOCKAPI_ADMIN_KEY"),
  /** A key configured with an expires= time that has passed. */
  expiredKey: env("LOCKAPI_EXPIRED_KEY"),
  /** locks:read and locks:write on names matching "other:*" only. */
  narrowKey: env("LOCKAPI_NARROW_KEY"),
  /** The store behind the server ("memory", "redis"), where the runner says; "" when it does not. */
  store: process.env.LOCKAPI_STORE ?? "",
};

/** A lock name no other test (or run) uses. */
export function uniqueName(what) {
  return `ts:${randomBytes(4).toString("hex")}:${what}`;
}

/** A client with the read-write key, sending through fetch when given. */
export function newClient(opts = {}) {
  return new Client(opts.url ?? server.url, { apiKey: server.key, ...opts });
}

/** The admin's client: force releases. */
export const admin = new Client(server.url, { apiKey: server.adminKey });

/** A fetch that records each request: method, path and headers. */
export function recordingFetch() {
  const requests = [];
  const fetchImpl = (input, init) => {
    const u = new URL(input);
    requests.push({ method: init.method ?? "GET", path: u.pathname, search: u.search, headers: { ...init.headers } });
    return globalThis.fetch(input, init);
  };
  return {
    fetch: fetchImpl,
    requests,
    count: (method, suffix) => requests.filter((r) => r.method === method && r.path.endsWith(suffix)).length,
  };
}

/** Resolves after ms. */
export const delay = (ms) => new Promise((r) => setTimeout(r, ms));

/** Resolves when signal aborts; rejects after ms. */
export function aborted(signal, ms, what) {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      return resolve(signal.reason);
    }
    const t = setTimeout(() => reject(new Error(`${what}: not within ${ms}ms`)), ms);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve(signal.reason);
    }, { once: true });
  });
}

/**
 * A TCP proxy to the server: cut() drops every open connection, down()
 * also refuses new ones until up().
 */
export async function startProxy(target = server.url) {
  const t = new URL(target);
  const sockets = new Set();
  let refusing = false;
  const srv = net.createServer((downstream) => {
    if (refusing) {
      downstream.destroy();
      return;
    }
    const upstream = net.connect(Number(t.port), t.hostname);
    sockets.add(downstream);
    sockets.add(upstream);
    const drop = () => {
      downstream.destroy();
      upstream.destroy();
      sockets.delete(downstream);
      sockets.delete(upstream);
    };
    downstream.on("error", drop).on("close", drop);
    upstream.on("error", drop).on("close", drop);
    downstream.pipe(upstream);
    upstream.pipe(downstream);
  });
  await new Promise((resolve) => srv.listen(0, "127.0.0.1", resolve));
  const cut = () => {
    for (const s of sockets) {
      s.destroy();
    }
    sockets.clear();
  };
  return {
    url: `http://127.0.0.1:${srv.address().port}`,
    cut,
    down() {
      refusing = true;
      cut();
    },
    up() {
      refusing = false;
    },
    close() {
      cut();
      return new Promise((resolve) => srv.close(resolve));
    },
  };
}
