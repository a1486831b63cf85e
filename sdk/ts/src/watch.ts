// The loss watch (Consul's monitorLock), as the Go client's
// (client/losswatch.go): while a lease is held, one blocking query on its
// lock (GET /v1/locks/{name}?index=) answers as soon as the lock changes,
// and a lease no longer among its holders is lost at once rather than at
// its next renewal. A session's bound leases are watched together, with
// one blocking query on the session. The watch is an early warning only:
// renewal stays the source of truth, and a watch that fails is retried
// with backoff and never marks anything lost by itself.

import { ApiError, UnavailableError } from "./errors.js";
import type { FetchLike, Http } from "./http.js";
import { Backoff, sleep } from "./internal.js";

/** How long one blocking query asks to wait; the server clamps it to its maximum wait (60 s by default). */
const watchWaitMs = 300_000;

function lossBackoff(): Backoff {
  return new Backoff(100, 5000);
}

/** An answer that asking again will not change (a key without read access, say): the watch then stops, and renewal alone tells a loss. */
export function refused(e: ApiError): boolean {
  return e.status >= 400 && e.status < 500 && e.status !== 408 && e.status !== 429;
}

/** What a LossWatch asks of its lease or session. */
export interface LossWatchSteps {
  /** The path to query: the lock's, or the session's. */
  path: string;
  /** Aborted when the watch must stop: a release or close, or the end of what it watches. */
  stop: AbortSignal;
  /** Takes in an answer (gen: gen() when the query was sent); true when the watch is done. */
  answer(doc: unknown, gen: number): boolean;
  /** Takes in an answer of the server other than 200; true when the watch is done. */
  refusal(e: ApiError): boolean;
  /** The current generation of what is watched (the session's bound leases); 0 for a lease. */
  gen?(): number;
}

/**
 * One blocking query at a time on steps.path until steps.stop aborts or
 * steps says it is done. On Node.js the queries do not keep the process
 * alive (backgroundFetch), unless ClientOptions.fetch was given.
 */
export class LossWatch {
  /** Settles when the watch has returned. */
  readonly done: Promise<void>;
  private current: AbortController | undefined;
  private requeried = false;

  private readonly http: Http;

  constructor(http: Http, private readonly steps: LossWatchSteps) {
    this.http = http.forBackground(backgroundFetch());
    this.done = this.run().catch(() => {
      // run settles every failure; nothing escapes.
    });
  }

  /** Ends the query in flight and asks afresh (a lease was bound to the session). */
  requery(): void {
    this.requeried = true;
    this.current?.abort();
  }

  private async run(): Promise<void> {
    const { stop } = this.steps;
    let index: string | undefined;
    let bo = lossBackoff();
    while (!stop.aborted) {
      const ctl = new AbortController();
      const onStop = () => ctl.abort();
      stop.addEventListener("abort", onStop, { once: true });
      this.current = ctl;
      this.requeried = false;
      const gen = this.steps.gen?.() ?? 0;
      const q = `?wait_ms=${watchWaitMs}` + (index ? `&index=${encodeURIComponent(index)}` : "");
      let doc: { index?: string } | undefined;
      let failure: unknown;
      try {
        doc = (await this.http.call<{ index?: string }>("GET", this.steps.path + q, {
          signal: ctl.signal,
          timeoutMs: watchWaitMs + this.http.timeoutMs,
        })).data;
      } catch (e) {
        failure = e;
      } finally {
        stop.removeEventListener("abort", onStop);
        this.current = undefined;
      }
      if (stop.aborted) {
        return;
      }
      if (this.requeried) {
        index = undefined;
        continue;
      }
      if (doc === undefined) {
        if (failure instanceof ApiError && !(failure instanceof UnavailableError) && this.steps.refusal(failure)) {
          return;
        }
        index = undefined;
        if (!(await sleep(bo.next(), stop, true))) {
          return;
        }
        continue;
      }
      bo = lossBackoff();
      if (this.steps.answer(doc, gen)) {
        return;
      }
      index = doc.index;
    }
  }
}

/** The parts of Node.js's http and https modules that backgroundFetch uses. */
interface NodeRequest {
  on(event: "socket", fn: (s: { unref(): void }) => void): NodeRequest;
  on(event: "error", fn: (e: Error) => void): NodeRequest;
  destroy(e?: Error): void;
  end(): void;
}
interface NodeResponse {
  statusCode?: number;
  headers: Record<string, string | string[] | undefined>;
  on(event: "data", fn: (chunk: Uint8Array) => void): NodeResponse;
  on(event: "end", fn: () => void): NodeResponse;
  on(event: "error", fn: (e: Error) => void): NodeResponse;
}
interface NodeHttpModule {
  request(url: URL, opts: Record<string, unknown>, cb: (res: NodeResponse) => void): NodeRequest;
}

let background: FetchLike | undefined | null = null;

/**
 * A fetch on Node.js's own http and https modules whose sockets do not keep
 * the process alive, as the watchdog's timers do not: a process that ends
 * while it holds a lease ends, and the lease expires. undefined where
 * Node.js offers no process.getBuiltinModule (a browser, Node.js before
 * 20.16): the watch then sends with fetch.
 */
export function backgroundFetch(): FetchLike | undefined {
  if (background !== null) {
    return background;
  }
  const p = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process;
  if (typeof p?.getBuiltinModule !== "function") {
    return (background = undefined);
  }
  const mods: Record<string, NodeHttpModule> = {
    "http:": p.getBuiltinModule("node:http") as NodeHttpModule,
    "https:": p.getBuiltinModule("node:https") as NodeHttpModule,
  };
  background = (input, init) =>
    new Promise<Response>((resolve, reject) => {
      const u = new URL(input);
      const mod = mods[u.protocol];
      if (!mod) {
        reject(new TypeError(`lockapi: unsupported protocol ${u.protocol}`));
        return;
      }
      const signal = init.signal ?? undefined;
      let settled = false;
      const finish = (f: () => void) => {
        if (!settled) {
          settled = true;
          signal?.removeEventListener("abort", onAbort);
          f();
        }
      };
      const req = mod.request(u, { method: init.method ?? "GET", headers: init.headers, agent: false }, (res) => {
        const chunks: Uint8Array[] = [];
        res.on("data", (c) => chunks.push(c));
        res.on("error", (e) => finish(() => reject(e)));
        res.on("end", () =>
          finish(() => {
            const headers = new Headers();
            for (const [k, v] of Object.entries(res.headers)) {
              if (v !== undefined) {
                headers.set(k, Array.isArray(v) ? v.join(", ") : v);
              }
            }
            let n = 0;
            for (const c of chunks) {
              n += c.length;
            }
            const body = new Uint8Array(n);
            n = 0;
            for (const c of chunks) {
              body.set(c, n);
              n += c.length;
            }
            resolve(new Response(body, { status: res.statusCode ?? 502, headers }));
          }),
        );
      });
      const onAbort = () => {
        const e = new Error("aborted");
        e.name = "AbortError";
        req.destroy(e);
        finish(() => reject(e));
      };
      req.on("socket", (s) => s.unref());
      req.on("error", (e) => finish(() => reject(e)));
      if (signal?.aborted) {
        onAbort();
        return;
      }
      signal?.addEventListener("abort", onAbort, { once: true });
      req.end();
    });
  return background;
}
