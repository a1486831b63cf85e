// Timing helpers shared by the client, its leases and its event stream.

/** Milliseconds on a clock that never jumps (unlike Date.now). */
export function monotonicNow(): number {
  return performance.now();
}

/**
 * Waits ms milliseconds. It resolves true, or false as soon as signal
 * aborts. A background sleep (the watchdog's) does not keep a Node.js
 * process alive on its own; one that a caller awaits does.
 */
export function sleep(ms: number, signal?: AbortSignal, background = false): Promise<boolean> {
  if (signal?.aborted) {
    return Promise.resolve(false);
  }
  if (ms <= 0) {
    return Promise.resolve(true);
  }
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    if (background) {
      unref(timer);
    }
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** Lets a Node.js process exit while the timer is pending; a no-op in browsers. */
export function unref(timer: unknown): void {
  (timer as { unref?: () => void } | undefined)?.unref?.();
}

/**
 * A signal that aborts when parent does, or after ms milliseconds with a
 * TimeoutError; call done to drop its timer and listener.
 */
export function deadlineSignal(parent: AbortSignal | undefined, ms: number): { signal: AbortSignal; done: () => void } {
  const ctl = new AbortController();
  const onAbort = () => ctl.abort(parent?.reason);
  if (parent?.aborted) {
    ctl.abort(parent.reason);
  } else {
    parent?.addEventListener("abort", onAbort, { once: true });
  }
  const timer = setTimeout(() => ctl.abort(timeoutError()), Math.max(ms, 0));
  unref(timer);
  return {
    signal: ctl.signal,
    done: () => {
      clearTimeout(timer);
      parent?.removeEventListener("abort", onAbort);
    },
  };
}

function timeoutError(): Error {
  const e = new Error("the request timed out");
  e.name = "TimeoutError";
  return e;
}

/** The reason a signal aborted with, as an Error. */
export function abortReason(signal: AbortSignal): Error {
  const r: unknown = signal.reason;
  if (r instanceof Error) {
    return r;
  }
  const e = new Error(r === undefined ? "aborted" : String(r));
  e.name = "AbortError";
  return e;
}

/** Exponentially growing pauses with jitter. */
export class Backoff {
  private cur: number;
  private readonly max: number;

  constructor(baseMs: number, maxMs: number) {
    this.cur = baseMs;
    this.max = maxMs;
  }

  /** The next pause: between half and all of the current step, which then doubles up to the maximum. */
  next(): number {
    const d = this.cur;
    this.cur = Math.min(2 * this.cur, this.max);
    return d / 2 + Math.random() * (d / 2);
  }
}

/** Random hex digits, from the platform's CSPRNG where there is one. */
export function randomHex(bytes: number): string {
  const b = new Uint8Array(bytes);
  const c = (globalThis as { crypto?: { getRandomValues?: (a: Uint8Array) => Uint8Array } }).crypto;
  if (c?.getRandomValues) {
    c.getRandomValues(b);
  } else {
    for (let i = 0; i < b.length; i++) {
      b[i] = Math.floor(Math.random() * 256);
    }
  }
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}
