// The one place that sends requests: base URL, API key, timeouts, and the
// translation of failures into the client's errors.

import { ApiError, networkError, responseError } from "./errors.js";
import { abortReason, deadlineSignal } from "./internal.js";

/** The fetch the client sends its requests with. */
export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

/** A decoded success. */
export interface Answer<T> {
  status: number;
  headers: Headers;
  data: T;
}

export interface CallOptions {
  body?: unknown;
  headers?: Record<string, string>;
  /** The caller's signal: its abort rejects the call with its reason. */
  signal?: AbortSignal | undefined;
  /** Bounds the whole exchange, answer body included. */
  timeoutMs: number;
  /** The lock the request is about, for errors whose body does not name it. */
  lockName?: string;
}

export class Http {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  /** Whether leases and sessions are watched to learn of a loss at once (ClientOptions.lossWatch). */
  lossWatch = true;
  private readonly apiKey: string | undefined;
  private readonly fetchImpl: FetchLike;
  /** The caller chose the fetch (ClientOptions.fetch). */
  private readonly ownFetch: boolean;

  constructor(baseUrl: string, apiKey: string | undefined, timeoutMs: number, fetchImpl: FetchLike | undefined) {
    let u: URL;
    try {
      u = new URL(baseUrl);
    } catch {
      throw new TypeError(`lockapi: server URL "${baseUrl}": want http://host[:port] or https://host[:port]`);
    }
    if ((u.protocol !== "http:" && u.protocol !== "https:") || !u.host) {
      throw new TypeError(`lockapi: server URL "${baseUrl}": want http://host[:port] or https://host[:port]`);
    }
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.apiKey = apiKey || undefined;
    this.timeoutMs = timeoutMs;
    const f = fetchImpl ?? (globalThis.fetch as FetchLike | undefined);
    if (!f) {
      throw new TypeError("lockapi: no global fetch: use Node.js 18 or later, or pass options.fetch");
    }
    this.fetchImpl = fetchImpl ?? ((input, init) => globalThis.fetch(input, init));
    this.ownFetch = fetchImpl !== undefined;
  }

  /**
   * This Http for requests that must not keep a Node.js process alive (the
   * loss watch's blocking queries): one sending with background, unless
   * the caller chose its own fetch or there is no background fetch (a
   * browser, or Node.js before 20.16).
   */
  forBackground(background: FetchLike | undefined): Http {
    if (this.ownFetch || !background) {
      return this;
    }
    const h = new Http(this.baseUrl, this.apiKey, this.timeoutMs, background);
    h.lossWatch = this.lossWatch;
    return h;
  }

  /** The request headers every call carries, plus extra. */
  headers(extra?: Record<string, string>): Record<string, string> {
    const h: Record<string, string> = { Accept: "application/json", ...extra };
    if (this.apiKey) {
      h["Authorization"] = "Bearer " + this.apiKey;
    }
    return h;
  }

  /** Sends a request without reading its answer (the event stream). */
  fetch(path: string, init: RequestInit): Promise<Response> {
    return this.fetchImpl(this.baseUrl + path, init);
  }

  /**
   * Sends one request and decodes a 2xx answer's JSON. Any other answer
   * rejects with the matching ApiError, a failure to exchange it with an
   * UnavailableError (status 0), and the caller's abort with its reason.
   */
  async call<T>(method: string, path: string, opts: CallOptions): Promise<Answer<T>> {
    const { signal, done } = deadlineSignal(opts.signal, opts.timeoutMs);
    const headers = this.headers(opts.headers);
    let body: string | undefined;
    if (opts.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(opts.body);
    }
    try {
      let res: Response;
      let text: string;
      try {
        const init: RequestInit = { method, headers, signal };
        if (body !== undefined) {
          init.body = body;
        }
        res = await this.fetchImpl(this.baseUrl + path, init);
        if (!res.ok) {
          throw await responseError(res, opts.lockName ?? "");
        }
        text = await res.text();
      } catch (e) {
        if (opts.signal?.aborted) {
          throw abortReason(opts.signal);
        }
        if (e instanceof ApiError) {
          throw e; // the server's answer
        }
        throw networkError(signal.aborted ? signal.reason : e);
      }
      let data: T;
      try {
        data = (text ? JSON.parse(text) : {}) as T;
      } catch {
        throw new ApiError({
          status: res.status,
          type: "",
          title: "Malformed answer",
          detail: `the answer to ${method} ${path} is not JSON: ${text.slice(0, 200)}`,
          requestId: res.headers.get("X-Request-ID") ?? undefined,
        });
      }
      return { status: res.status, headers: res.headers, data };
    } finally {
      done();
    }
  }
}

/**
 * A lock name as a path segment. Names hold only `A-Z a-z 0-9 . _ : @ ~ -`,
 * of which `:` and `@` may stand unescaped in a path, as Go's client sends
 * them; anything else is escaped and left for the server to refuse.
 */
export function pathName(name: string): string {
  return encodeURIComponent(name).replace(/%3A/gi, ":").replace(/%40/g, "@");
}
