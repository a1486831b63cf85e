// Verifying a webhook delivery as the Standard Webhooks specification says
// (docs/WEBHOOKS.md), as the Go client's VerifyWebhook does
// (client/verify.go). It uses WebCrypto: globalThis.crypto.subtle (Node.js
// 20 or later, browsers, Deno, Bun), or node:crypto's on Node.js 18.

import { brand } from "./errors.js";
import { eventFrom, type LockEvent } from "./events.js";

/** A test delivery (Client's pingWebhook, POST /v1/webhooks/{id}/ping): webhooks only. */
export interface WebhookPing {
  id: string;
  type: "ping";
  /** The webhook's id. */
  webhook: string;
  time: Date;
}

/** Why verifyWebhook refused a delivery: answer it 401 and drop it. */
export class WebhookVerificationError extends Error {
  static {
    brand(this, "WebhookVerificationError");
  }
}

/** The webhook-id, webhook-timestamp or webhook-signature header is missing. */
export class WebhookHeadersError extends WebhookVerificationError {
  static {
    brand(this, "WebhookHeadersError");
  }
}

/** The timestamp is malformed, or further from now than the tolerance (too old: perhaps a replay). */
export class WebhookTimestampError extends WebhookVerificationError {
  static {
    brand(this, "WebhookTimestampError");
  }
}

/** No signature matches the secret. */
export class WebhookSignatureError extends WebhookVerificationError {
  static {
    brand(this, "WebhookSignatureError");
  }
}

/** How far from now a delivery's timestamp may be, as the reference libraries have it: five minutes. */
export const defaultWebhookToleranceMs = 5 * 60_000;

/** Headers as fetch (Headers) or Node.js (IncomingHttpHeaders) give them. */
export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

export interface VerifyWebhookOptions {
  /** defaultWebhookToleranceMs unless set. */
  toleranceMs?: number | undefined;
  /** The receiver's clock, in ms since the epoch; Date.now unless set. */
  now?: (() => number) | undefined;
}

/**
 * Verifies a webhook delivery and returns its event (or a ping): headers
 * and the raw body as received, secret (one, or several during a
 * rotation) as createWebhook gave it. Rejects with WebhookHeadersError,
 * WebhookTimestampError or WebhookSignatureError.
 *
 * A captured delivery can be replayed within the tolerance: a receiver
 * that must not act twice keeps the webhook-ids it handled (the event's
 * id, the same on every retry of one event) and ignores repeats.
 */
export async function verifyWebhook(
  secret: string | string[],
  headers: WebhookHeaders,
  body: string | Uint8Array,
  opts: VerifyWebhookOptions = {},
): Promise<LockEvent | WebhookPing> {
  const id = header(headers, "webhook-id");
  const ts = header(headers, "webhook-timestamp");
  const sigs = header(headers, "webhook-signature");
  if (!id || !ts || !sigs) {
    throw new WebhookHeadersError("missing webhook-id, webhook-timestamp or webhook-signature");
  }
  const seconds = /^[0-9]+$/.test(ts) ? Number(ts) : NaN;
  const now = (opts.now ?? Date.now)();
  const tolerance = opts.toleranceMs !== undefined && opts.toleranceMs > 0 ? opts.toleranceMs : defaultWebhookToleranceMs;
  if (!Number.isFinite(seconds) || Math.abs(seconds * 1000 - now) > tolerance) {
    throw new WebhookTimestampError("the timestamp is malformed or too far from now");
  }
  const bytes = typeof body === "string" ? new TextEncoder().encode(body) : body;
  const given = sigs.split(" ").filter((s) => s.startsWith("v1,")).map((s) => s.slice(3));
  for (const s of Array.isArray(secret) ? secret : [secret]) {
    const want = await sign(s, id, ts, bytes);
    if (want !== undefined && given.some((g) => equal(g, want))) {
      return decode(bytes);
    }
  }
  throw new WebhookSignatureError("no signature matches");
}

function header(h: WebhookHeaders, name: string): string {
  if (typeof (h as Headers).get === "function") {
    return (h as Headers).get(name) ?? "";
  }
  const rec = h as Record<string, string | string[] | undefined>;
  const v = rec[name] ?? Object.entries(rec).find(([k]) => k.toLowerCase() === name)?.[1];
  return (Array.isArray(v) ? v.join(" ") : v) ?? "";
}

/** The base64 HMAC-SHA256 of "id.timestamp.body" under the secret's key; undefined for a secret that is not whsec_ base64. */
async function sign(secret: string, id: string, ts: string, body: Uint8Array): Promise<string | undefined> {
  if (!secret.startsWith("whsec_")) {
    return undefined;
  }
  let key: Uint8Array;
  try {
    key = Uint8Array.from(atob(secret.slice(6)), (c) => c.charCodeAt(0));
  } catch {
    return undefined;
  }
  const subtle = await webCrypto();
  const k = await subtle.importKey("raw", key as BufferSource, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const prefix = new TextEncoder().encode(`${id}.${ts}.`);
  const msg = new Uint8Array(prefix.length + body.length);
  msg.set(prefix);
  msg.set(body, prefix.length);
  const mac = new Uint8Array(await subtle.sign("HMAC", k, msg as BufferSource));
  return btoa(String.fromCharCode(...mac));
}

/**
 * WebCrypto's SubtleCrypto: the global one (Node.js 20 or later, browsers,
 * Deno, Bun), or node:crypto's on Node.js 18, which has no global crypto.
 */
async function webCrypto(): Promise<SubtleCrypto> {
  const subtle = (globalThis as { crypto?: { subtle?: SubtleCrypto } }).crypto?.subtle;
  if (subtle) {
    return subtle;
  }
  const nodeCrypto = "node:crypto"; // not a literal, so that a bundler for browsers leaves it alone
  const m = (await import(nodeCrypto).catch(() => undefined)) as { webcrypto?: { subtle?: SubtleCrypto } } | undefined;
  if (!m?.webcrypto?.subtle) {
    throw new Error("lockapi: verifyWebhook needs WebCrypto (globalThis.crypto.subtle)");
  }
  return m.webcrypto.subtle;
}

/** Compares two strings in time that depends on their length only. */
function equal(a: string, b: string): boolean {
  if (a.length !== b.length) {
    return false;
  }
  let diff = 0;
  for (let i = 0; i < a.length; i++) {
    diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  }
  return diff === 0;
}

function decode(body: Uint8Array): LockEvent | WebhookPing {
  let d: Record<string, unknown>;
  try {
    d = JSON.parse(new TextDecoder().decode(body)) as Record<string, unknown>;
  } catch (e) {
    throw new WebhookVerificationError("a signed body that is no event: " + (e as Error).message);
  }
  if (d["type"] === "ping") {
    const str = (v: unknown) => (typeof v === "string" ? v : "");
    return { id: str(d["id"]), type: "ping", webhook: str(d["webhook"]), time: new Date(str(d["time"])) };
  }
  return eventFrom(d);
}
