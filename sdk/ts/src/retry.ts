/**
 * Bounds the retries of a call answered 429 or 503, or lost to a network
 * error. A POST is retried only when it is safe to send again: it carries
 * an idempotency key (every create of this SDK does) or each of its items
 * a requestId (createPayments).
 */
export interface RetryPolicy {
  /** The most attempts of one call, the first included (1: never retry). */
  attempts: number;
  /** The first backoff in ms; each next one doubles, up to maxMs. */
  baseMs: number;
  maxMs: number;
  /** The longest Retry-After honoured, in ms: longer is returned to the caller. */
  maxRetryAfterMs: number;
}

/** 4 attempts, backing off from 200 ms to 5 s, honouring a Retry-After of up to 30 s. */
export const defaultRetry: RetryPolicy = { attempts: 4, baseMs: 200, maxMs: 5000, maxRetryAfterMs: 30_000 };

/** The header that marks a POST as safe to send again (batches). */
export const retrySafeHeader = "x-paysched-retry-safe";

/** Reads a Retry-After header: seconds, or an HTTP date; undefined when absent or bad. */
export function retryAfterMs(v: string | null, now = Date.now()): number | undefined {
  if (v === null || v === "") return undefined;
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const t = Date.parse(v);
  return Number.isNaN(t) ? undefined : Math.max(t - now, 0);
}

function resendable(req: Request): boolean {
  if (["GET", "HEAD", "PUT", "DELETE", "OPTIONS"].includes(req.method)) return true;
  return req.headers.has("idempotency-key") || req.headers.has(retrySafeHeader);
}

/** sleep waits ms, or rejects when signal aborts. */
export type Sleep = (ms: number, signal?: AbortSignal | null) => Promise<void>;

const sleep: Sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });

/**
 * retrying wraps fetch: a 429, a 503 or a network error is sent again,
 * the same request (its idempotency key included), after a jittered
 * backoff and never sooner than the answer's Retry-After.
 */
export function retrying(inner: typeof fetch, policy: RetryPolicy, wait: Sleep = sleep, timeoutMs = 30_000): (req: Request) => Promise<Response> {
  return async (original: Request) => {
    const again = resendable(original);
    // The marker is the SDK's own: it never goes on the wire.
    const headers = new Headers(original.headers);
    headers.delete(retrySafeHeader);
    const req = new Request(original, { headers });
    let backoff = policy.baseMs;
    for (let attempt = 1; ; attempt++) {
      const base = again && attempt < policy.attempts ? req.clone() : req;
      // Each attempt is bounded: a hung connection becomes a network error.
      const signals = [AbortSignal.timeout(timeoutMs), ...(original.signal ? [original.signal] : [])];
      const sent = new Request(base, { signal: AbortSignal.any(signals) });
      let res: Response | undefined;
      let err: unknown;
      try {
        res = await inner(sent);
      } catch (e) {
        if (original.signal?.aborted) throw e;
        err = e;
      }
      let retry = err !== undefined;
      let ms = backoff / 2 + Math.random() * (backoff / 2);
      if (res && (res.status === 429 || res.status === 503)) {
        retry = true;
        const after = retryAfterMs(res.headers.get("retry-after"));
        if (after !== undefined) {
          if (after > policy.maxRetryAfterMs) retry = false;
          else ms = Math.max(ms, after);
        }
      }
      if (!retry || !again || attempt >= policy.attempts) {
        if (res) return res;
        throw err;
      }
      if (res) await res.body?.cancel();
      await wait(ms, original.signal);
      backoff = Math.min(2 * backoff, policy.maxMs);
    }
  };
}
