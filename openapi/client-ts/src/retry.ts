// Safe retries of the API's idempotent operations: the contract of the Go
// retrier (openapi/client/retry.go), for TypeScript.
//
// One logical operation carries one idempotency key through every attempt,
// so however many attempts reach the server it does the work at most once.
// Only a missing answer and the statuses that promise nothing was stored
// (409, 429, 500, 502, 503, 504) are retried — a 409 only while another
// request holds the key, not one that refuses the request — with
// exponential backoff and full jitter, never sooner than the server's
// Retry-After (spread by up to half of it more, and at least across the
// second after it: retryAfterWait), within a bounded number of attempts and
// a bounded time.

/** Defaults of an empty {@link Policy}. */
export const defaults = {
  maxAttempts: 8,
  maxElapsedMs: 60_000,
  baseDelayMs: 200,
  maxDelayMs: 10_000,
} as const;

/** What {@link Policy.onRetry} is told before each wait. */
export interface RetryInfo {
  /** The attempt that failed, from 1. */
  attempt: number;
  /** Its HTTP status, 0 when no answer arrived. */
  status: number;
  /** The failure when no answer arrived. */
  error?: unknown;
  /** The wait before the next attempt, in milliseconds. */
  waitMs: number;
}

/** Bounds the retries of one logical operation; every field is optional. */
export interface Policy {
  /** Bounds the requests sent, the first included (default 8). */
  maxAttempts?: number;
  /**
   * Bounds the whole operation, waits included (default 60 s): no attempt
   * runs past it, and no wait is begun that would end past it.
   */
  maxElapsedMs?: number;
  /**
   * Shape the backoff: before retry n (from 1) the wait is uniform in
   * [0, min(maxDelayMs, baseDelayMs·2^(n-1))] ("full jitter"), and never
   * shorter than the server's Retry-After, which is itself spread at random
   * ({@link retryAfterWait}). Defaults 200 ms and 10 s.
   */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Told of every retry before its wait. */
  onRetry?: (info: RetryInfo) => void;
  /** Replace the clock (ms since the epoch), the wait and the randomness (uniform in [0, 1)). */
  now?: () => number;
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>;
  random?: () => number;
}

/** The shape of an answer of openapi-fetch: the parsed body and the response. */
export interface Answer {
  response: Response;
  /** The parsed body of an error status (a problem+json document). */
  error?: unknown;
}

/** The outcome of one logical operation. */
export interface Result<A extends Answer> {
  /**
   * The answer of the last attempt (openapi-fetch's data, error and
   * response). After the retries gave up it may be a retryable status:
   * check status.
   */
  answer: A;
  /** The HTTP status of the answer. */
  status: number;
  /** The idempotency key every attempt carried. */
  key: string;
  /** The requests sent. */
  attempts: number;
  /**
   * True when the server answered from the response it had stored for the
   * key (Idempotent-Replayed: true): an earlier request with this key did
   * the work, and this answer repeats it byte for byte.
   */
  replayed: boolean;
}

/**
 * The operation ended with no answer to report: every attempt failed on
 * the network, the caller's signal or the time budget ended it, or an
 * attempt failed in a way a retry cannot mend. Retry later with the same
 * key to continue the same operation.
 */
export class NoAnswerError extends Error {
  /** The idempotency key the attempts carried. */
  readonly key: string;
  /** The requests sent. */
  readonly attempts: number;

  constructor(message: string, key: string, attempts: number, cause: unknown) {
    super(message, { cause });
    this.name = "NoAnswerError";
    this.key = key;
    this.attempts = attempts;
  }
}

/**
 * Reports whether an answer with this status may change on a retry with
 * the same key: a concurrent request held the key (409), the server asked
 * to slow down (429), or it or a gateway failed without storing anything
 * (500, 502, 503, 504). Every other status is final.
 */
export function retryable(status: number): boolean {
  return [409, 429, 500, 502, 503, 504].includes(status);
}

/**
 * The problem type of the 409 that answers a request while another request
 * holds its idempotency key, or holds the ride it acts on: the one 409 a
 * retry may see otherwise.
 */
export const problemKeyInUse = "/problems/idempotency-key-in-use";

/**
 * Reports whether an answer with this status and problem (openapi-fetch's
 * error) may change on a retry with the same key: a retryable status,
 * except a 409 whose problem type names a refusal of the request (a ride
 * not refundable, not completable, not cancellable, owing nothing, a refund
 * the processor rejected) rather than the key in use: it is refused the
 * same way on every retry. A 409 without a problem type (a gateway's) is
 * retried.
 */
export function retryableAnswer(status: number, problem?: unknown): boolean {
  if (status !== 409) {
    return retryable(status);
  }
  const type = typeof problem === "object" && problem !== null ? (problem as { type?: unknown }).type : undefined;
  return typeof type !== "string" || type === "" || type === "about:blank" || type === problemKeyInUse;
}

/**
 * Reports whether err is a failure of the exchange (no connection, reset,
 * answer cut short), which fetch reports as a TypeError, rather than a
 * cancellation or a bug.
 */
export function transient(err: unknown): boolean {
  return err instanceof TypeError;
}

/**
 * Reads Retry-After as delay-seconds or as an HTTP date, in milliseconds; 0
 * when absent or unreadable. At most a day.
 */
export function parseRetryAfter(value: string | null, now: number): number {
  const v = (value ?? "").trim();
  if (v === "") {
    return 0;
  }
  if (/^\d+$/.test(v)) {
    return Math.min(Number(v), 86_400) * 1000;
  }
  const at = Date.parse(v);
  return Number.isNaN(at) || at <= now ? 0 : Math.min(at - now, 86_400_000);
}

/**
 * The wait before retry n (from 1): full jitter over
 * [0, min(maxDelayMs, baseDelayMs·2^(n-1))], raised to
 * {@link retryAfterWait} of retryAfterMs.
 */
export function backoff(policy: Policy, n: number, retryAfterMs: number): number {
  const base = policy.baseDelayMs ?? defaults.baseDelayMs;
  const cap = policy.maxDelayMs ?? defaults.maxDelayMs;
  const ceiling = Math.min(cap, base * 2 ** Math.min(n - 1, 52));
  const random = policy.random ?? Math.random;
  const wait = Math.floor(random() * (ceiling + 1));
  if (retryAfterMs <= 0) {
    return wait;
  }
  return Math.max(wait, retryAfterWait(retryAfterMs, random));
}

/**
 * The wait before retry n (from 1) after an answer of status that said
 * retryAfterMs. A 429 is the caller's own budget, spent: it refills when
 * the server says, whatever the service's load, so the wait is the server's
 * Retry-After spread ({@link retryAfterWait}) and nothing grows it. Every
 * other answer (a 503: the service short of capacity; a 5xx, a 409, no
 * answer) backs off exponentially, never sooner than Retry-After.
 */
export function waitBefore(policy: Policy, n: number, status: number, retryAfterMs: number): number {
  if (status === 429 && retryAfterMs > 0) {
    return retryAfterWait(retryAfterMs, policy.random ?? Math.random);
  }
  return backoff(policy, n, retryAfterMs);
}

/**
 * The time, in milliseconds, until the budget of a RateLimit field
 * (draft-ietf-httpapi-ratelimit-headers, e.g. "writes";r=0;t=10) allows a
 * request again: its t parameter when nothing remains; 0 when absent,
 * unreadable, or when the budget still has room.
 */
export function rateLimitReset(value: string | null): number {
  let remaining = -1;
  let reset = -1;
  for (const param of (value ?? "").split(";").slice(1)) {
    const m = /^\s*([rt])=(\d+)\s*$/.exec(param);
    if (m) {
      if (m[1] === "r") {
        remaining = Number(m[2]);
      } else {
        reset = Number(m[2]);
      }
    }
  }
  return remaining !== 0 || reset <= 0 ? 0 : Math.min(reset, 86_400) * 1000;
}

/**
 * How long a client waits, in milliseconds, when the server said
 * Retry-After: retryAfterMs, never less, plus a spread of its own drawn with
 * random (uniform in [0, 1)): up to half of retryAfterMs more, and at least
 * up to a second more; 0 without a Retry-After. The server speaks in whole
 * seconds and spreads its answers by whole seconds; this spreads the
 * clients told the same second across it, so that they do not all come
 * back in the same instant.
 */
export function retryAfterWait(retryAfterMs: number, random: () => number): number {
  if (retryAfterMs <= 0) {
    return 0;
  }
  const spread = Math.max(Math.floor(retryAfterMs / 2), 1000);
  return retryAfterMs + Math.floor(random() * (spread + 1));
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    const done = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", done);
      resolve();
    }, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

/**
 * Runs one logical operation under one idempotency key: send makes one
 * attempt with the key (and the signal that bounds it), typically an
 * openapi-fetch call. It retries a missing answer and the retryable
 * statuses (retryableAnswer), never another status, with full-jitter
 * exponential backoff that honours Retry-After, within the policy's attempts
 * and time.
 *
 * It throws NoAnswerError only when there is no answer to report; a final
 * answer is returned as it is, whatever its status.
 */
export async function withRetries<A extends Answer>(
  key: string,
  send: (key: string, signal: AbortSignal) => Promise<A>,
  policy: Policy = {},
  signal?: AbortSignal,
): Promise<Result<A>> {
  const maxAttempts = policy.maxAttempts ?? defaults.maxAttempts;
  const maxElapsedMs = policy.maxElapsedMs ?? defaults.maxElapsedMs;
  const now = policy.now ?? Date.now;
  const wait = policy.sleep ?? sleep;
  const deadline = now() + maxElapsedMs;
  const budget = AbortSignal.timeout(maxElapsedMs);
  const bounded = signal ? AbortSignal.any([signal, budget]) : budget;

  let last: A | undefined;
  for (let attempt = 1; ; attempt++) {
    let status = 0;
    let error: unknown;
    let retryAfterMs = 0;
    try {
      const answer = await send(key, bounded);
      last = answer;
      status = answer.response.status;
      if (!retryableAnswer(status, answer.error)) {
        return result(answer, key, attempt);
      }
      retryAfterMs = parseRetryAfter(answer.response.headers.get("Retry-After"), now());
      if (retryAfterMs === 0 && status === 429) {
        retryAfterMs = rateLimitReset(answer.response.headers.get("RateLimit"));
      }
    } catch (err) {
      if (bounded.aborted || !transient(err)) {
        throw new NoAnswerError(`attempt ${attempt} of key ${key}: ${describe(err)}`, key, attempt, err);
      }
      error = err;
    }
    // The last attempt's outcome is final once the attempts or the time
    // run out.
    const waitMs = waitBefore(policy, attempt, status, retryAfterMs);
    if (attempt >= maxAttempts || now() + waitMs > deadline) {
      if (error !== undefined || last === undefined) {
        throw new NoAnswerError(`gave up after ${attempt} attempts of key ${key}: ${describe(error)}`, key, attempt, error);
      }
      return result(last, key, attempt);
    }
    policy.onRetry?.({ attempt, status, error, waitMs });
    try {
      await wait(waitMs, bounded);
    } catch (err) {
      throw new NoAnswerError(`waiting to retry key ${key}: ${describe(err)}`, key, attempt, err);
    }
  }
}

function result<A extends Answer>(answer: A, key: string, attempts: number): Result<A> {
  return {
    answer,
    status: answer.response.status,
    key,
    attempts,
    replayed: answer.response.headers.get("Idempotent-Replayed") === "true",
  };
}

function describe(err: unknown): string {
  if (err instanceof Error) {
    const cause = err.cause instanceof Error ? ` (${err.cause.message})` : "";
    return err.message + cause;
  }
  return String(err);
}

const base32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/**
 * Returns a fresh idempotency key: 26 random base32 characters (130 bits),
 * as the Go client mints them. Mint one per logical operation and reuse it
 * for every retry of that operation.
 */
export function newIdempotencyKey(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(26));
  let key = "";
  for (const b of bytes) {
    key += base32[b & 31];
  }
  return key;
}
