// The event stream (GET /v1/events, Server-Sent Events) as an async
// iterator that reconnects and resumes after the last event it yielded,
// as the Go client's Events does (client/events.go).

import { ApiError, networkError, responseError, UnavailableError } from "./errors.js";
import type { Http } from "./http.js";
import { abortReason, Backoff, sleep, unref } from "./internal.js";

/** A change of a lock (docs/EVENTS.md). */
export type EventType = "granted" | "reentered" | "renewed" | "released" | "expired" | "force_released" | "updated";

/** One change of one lease of a lock. */
export interface LockEvent {
  /** Orders the events: resume after an event with EventsOptions.after. */
  id: string;
  type: EventType;
  lock: string;
  /** The lease's owner. */
  owner: string;
  /** The lease's principal; of a force release, the admin's who did it. "" on a server without API keys. */
  principal: string;
  /** A shared (read) lease. */
  shared: boolean;
  /** The lease's fencing token. */
  fencingToken: number;
  /** The holds left after the change: 0 when the lease ended. */
  holdCount: number;
  /** The lock's queued waiters after the change; -1 when the server did not know it. */
  queueLength: number;
  /** When the change happened, by the server's store. */
  time: Date;
  /** The lease's id, which the server shows to admins only (else ""). */
  leaseId: string;
  /** The lease's new metadata, on an "updated" event only. */
  metadata?: Record<string, string>;
}

/** Selects the events of Client.events. None set: every event of every lock the API key may read, from the next. */
export interface EventsOptions {
  /** The events of this lock only. Not with prefix. */
  lock?: string | undefined;
  /** The events of the locks whose names start with this. Not with lock. */
  prefix?: string | undefined;
  /** Events of these types; none set selects all. */
  types?: EventType[] | undefined;
  /** Resume after the event with this id, as an earlier run left off. */
  after?: string | undefined;
  /** Ends the iteration: the loop then rejects with the signal's reason. */
  signal?: AbortSignal | undefined;
}

/** Reconnection pacing, and how long a stream may stay silent: the server sends a keep-alive every 15 s, so three missed ones mean the connection is dead. */
const retryBaseMs = 100;
const retryMaxMs = 5000;
const idleTimeoutMs = 45_000;

/**
 * The event loop of Client.events. An error ends it: the first request's
 * failure (the server is unreachable, or refused: an ApiError); on a
 * reconnect, any answer but one that may pass, such as 410 events-gone when
 * the resume point is older than the log keeps; or the signal's reason.
 */
export async function* events(http: Http, opts: EventsOptions): AsyncGenerator<LockEvent, void, undefined> {
  let after = opts.after ?? "";
  let connected = false;
  let bo = new Backoff(retryBaseMs, retryMaxMs);
  for (;;) {
    let got = 0;
    let err: unknown;
    try {
      for await (const ev of stream(http, opts, after, () => (connected = true))) {
        after = ev.id;
        got++;
        yield ev;
      }
    } catch (e) {
      err = e;
    }
    if (opts.signal?.aborted) {
      throw abortReason(opts.signal);
    }
    if (!connected || !(err instanceof UnavailableError)) {
      throw err;
    }
    if (got > 0) {
      bo = new Backoff(retryBaseMs, retryMaxMs);
    }
    const pause = Math.max(bo.next(), err.retryAfterMs ?? 0);
    if (!(await sleep(pause, opts.signal))) {
      throw abortReason(opts.signal!);
    }
  }
}

/**
 * One request of the stream: yields its events until the consumer stops,
 * the signal aborts, or the stream ends, which it always reports by
 * throwing (an UnavailableError when it broke or the server ended it).
 */
async function* stream(http: Http, opts: EventsOptions, after: string, opened: () => void): AsyncGenerator<LockEvent, void, undefined> {
  const ctl = new AbortController();
  const onAbort = () => ctl.abort(opts.signal?.reason);
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  // A silent connection is cut: first after the request timeout without
  // an answer, then after idleTimeoutMs without a byte.
  let idle: ReturnType<typeof setTimeout> | undefined;
  const arm = (ms: number) => {
    clearTimeout(idle);
    idle = setTimeout(() => ctl.abort(silentError()), ms);
    unref(idle);
  };
  arm(http.timeoutMs);
  try {
    const q = new URLSearchParams();
    if (opts.lock) {
      q.set("lock", opts.lock);
    }
    if (opts.prefix) {
      q.set("prefix", opts.prefix);
    }
    if (opts.types && opts.types.length > 0) {
      q.set("types", opts.types.join(","));
    }
    const headers = http.headers({ Accept: "text/event-stream" });
    if (after) {
      headers["Last-Event-ID"] = after;
    }
    const qs = q.toString();
    let res: Response;
    try {
      res = await http.fetch("/v1/events" + (qs ? "?" + qs : ""), { headers, signal: ctl.signal });
    } catch (e) {
      throw networkError(ctl.signal.aborted ? ctl.signal.reason : e);
    }
    if (!res.ok) {
      throw await responseError(res, opts.lock ?? "");
    }
    const ct = res.headers.get("Content-Type") ?? "";
    if (!/^text\/event-stream\b/i.test(ct) || !res.body) {
      await res.body?.cancel().catch(() => undefined);
      throw new ApiError({ status: res.status, type: "", title: "Not an event stream", detail: `the server answered "${ct}", not text/event-stream` });
    }
    opened();
    arm(idleTimeoutMs);

    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    let id = "";
    let data: string[] = [];
    try {
      for (;;) {
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await reader.read();
        } catch (e) {
          throw brokeError(ctl.signal.aborted ? ctl.signal.reason : e);
        }
        if (chunk.done) {
          throw brokeError(new Error("the server ended the stream"));
        }
        arm(idleTimeoutMs);
        buf += decoder.decode(chunk.value, { stream: true });
        // Lines end with \n, \r\n or \r; a \r at the end of buf may be
        // the first half of a \r\n, so it waits for the next chunk.
        for (;;) {
          const m = /\r\n|\n|\r(?!$)/.exec(buf);
          if (!m) {
            break;
          }
          const line = buf.slice(0, m.index);
          buf = buf.slice(m.index + m[0].length);
          if (line === "") {
            if (data.length > 0) {
              yield decodeEvent(id, data.join("\n"));
            }
            id = "";
            data = [];
            continue;
          }
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let value = colon < 0 ? "" : line.slice(colon + 1);
          if (value.startsWith(" ")) {
            value = value.slice(1);
          }
          if (field === "id") {
            id = value;
          } else if (field === "data") {
            data.push(value);
          }
        }
      }
    } finally {
      reader.cancel().catch(() => undefined);
    }
  } finally {
    clearTimeout(idle);
    opts.signal?.removeEventListener("abort", onAbort);
    ctl.abort();
  }
}

function silentError(): Error {
  const e = new Error("the event stream stayed silent too long");
  e.name = "TimeoutError";
  return e;
}

function brokeError(cause: unknown): UnavailableError {
  const msg = cause instanceof Error ? cause.message : String(cause);
  return new UnavailableError({ status: 0, type: "", title: "Stream broke", detail: "the event stream broke: " + msg, cause });
}

/** Reads the data of an event, whose frame had id. */
function decodeEvent(id: string, data: string): LockEvent {
  let d: Record<string, unknown>;
  try {
    d = JSON.parse(data) as Record<string, unknown>;
  } catch (e) {
    throw new ApiError({ status: 200, type: "", title: "Malformed event", detail: `event "${id}": ${(e as Error).message}` });
  }
  return eventFrom(d, id);
}

/** The LockEvent of a decoded event's JSON object; id stands in for a missing "id". */
export function eventFrom(d: Record<string, unknown>, id = ""): LockEvent {
  const str = (v: unknown) => (typeof v === "string" ? v : "");
  const num = (v: unknown, dflt: number) => (typeof v === "number" ? v : dflt);
  const md = d["metadata"];
  return {
    id: str(d["id"]) || id,
    type: str(d["type"]) as EventType,
    lock: str(d["lock"]),
    owner: str(d["owner"]),
    principal: str(d["principal"]),
    shared: d["mode"] === "shared",
    fencingToken: num(d["fencing_token"], 0),
    holdCount: num(d["hold_count"], 0),
    queueLength: num(d["queue_length"], -1),
    time: new Date(str(d["time"])),
    leaseId: str(d["lease_id"]),
    ...(isStringMap(md) ? { metadata: { ...md } } : {}),
  };
}

/** Whether v is an object of strings (an event's metadata). */
function isStringMap(v: unknown): v is Record<string, string> {
  return typeof v === "object" && v !== null && !Array.isArray(v) && Object.values(v).every((x) => typeof x === "string");
}
