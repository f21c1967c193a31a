// The retry policy on its own: scripted answers, a recorded clock and
// waits, no server.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  backoff,
  NoAnswerError,
  parseRetryAfter,
  problemKeyInUse,
  rateLimitReset,
  retryable,
  retryableAnswer,
  retryAfterWait,
  waitBefore,
  withRetries,
  type Policy,
} from "../src/retry.js";

/** A scripted attempt: a status (with headers and a problem) or a thrown error. */
type Step = { status: number; headers?: Record<string, string>; problem?: unknown } | { throws: unknown };

/** Runs withRetries over steps and records the keys sent and the waits. */
async function run(steps: Step[], policy: Policy = {}) {
  const keys: string[] = [];
  const waits: number[] = [];
  let clock = 1_000_000;
  let i = 0;
  const result = withRetries(
    "KEY-OF-ONE-LOGICAL-OPERATION",
    async (key) => {
      keys.push(key);
      const step = steps[i++];
      assert.ok(step, "no more attempts expected");
      if ("throws" in step) {
        throw step.throws;
      }
      return { response: new Response(null, { status: step.status, headers: step.headers }), error: step.problem };
    },
    {
      now: () => clock,
      sleep: async (ms) => {
        waits.push(ms);
        clock += ms;
      },
      ...policy,
    },
  );
  return { result, keys, waits };
}

const lost = () => new TypeError("fetch failed", { cause: new Error("socket hang up") });

test("retries exactly 409, 429, 500, 502, 503 and 504", () => {
  for (let status = 100; status < 600; status++) {
    assert.equal(retryable(status), [409, 429, 500, 502, 503, 504].includes(status), `status ${status}`);
  }
});

test("a final status is returned at once, whatever it is", async () => {
  for (const status of [200, 201, 400, 401, 402, 404, 413, 422, 501]) {
    const { result, keys } = await run([{ status }]);
    const r = await result;
    assert.equal(r.status, status);
    assert.equal(r.attempts, 1);
    assert.equal(keys.length, 1);
  }
});

test("one key for every attempt, through lost answers and retryable statuses", async () => {
  const { result, keys, waits } = await run([
    { throws: lost() },
    { status: 503, headers: { "Retry-After": "2" } },
    { status: 409, headers: { "Retry-After": "1" } },
    { status: 429 },
    { status: 201, headers: { "Idempotent-Replayed": "true" } },
  ]);
  const r = await result;
  assert.equal(r.status, 201);
  assert.equal(r.attempts, 5);
  assert.equal(r.replayed, true);
  assert.equal(r.key, "KEY-OF-ONE-LOGICAL-OPERATION");
  assert.deepEqual(new Set(keys), new Set([r.key]));
  assert.equal(waits.length, 4);
  assert.ok(waits[1]! >= 2000, "Retry-After is a floor");
  assert.ok(waits[2]! >= 1000, "Retry-After is a floor");
});

test("a 409 is retried while the key is in use, and final when it refuses the request", async () => {
  const { result, keys } = await run([
    { status: 409, headers: { "Retry-After": "1" }, problem: { status: 409, type: problemKeyInUse } },
    { status: 409, problem: { status: 409 } },
    { status: 409 },
    { status: 200 },
  ]);
  const r = await result;
  assert.equal(r.status, 200);
  assert.equal(r.attempts, 4);
  assert.equal(keys.length, 4);

  for (const type of [
    "/problems/ride-not-cancellable",
    "/problems/ride-not-completable",
    "/problems/no-balance-due",
    "/problems/ride-not-refundable",
    "/problems/refund-rejected",
  ]) {
    assert.equal(retryableAnswer(409, { status: 409, type }), false, type);
    const { result, keys, waits } = await run([{ status: 409, problem: { status: 409, type } }, { status: 201 }]);
    const r = await result;
    assert.equal(r.status, 409, type);
    assert.equal(r.attempts, 1);
    assert.equal(keys.length, 1);
    assert.equal(waits.length, 0);
  }
  assert.equal(retryableAnswer(503, { type: "/problems/processor-unavailable" }), true);
  assert.equal(retryableAnswer(402, { type: "/problems/card-declined" }), false);
});

test("full jitter: uniform under an exponential ceiling, capped", () => {
  const policy: Policy = { baseDelayMs: 100, maxDelayMs: 1000 };
  for (const [n, ceiling] of [[1, 100], [2, 200], [3, 400], [4, 800], [5, 1000], [30, 1000]] as const) {
    assert.equal(backoff({ ...policy, random: () => 0 }, n, 0), 0, `retry ${n} may not wait`);
    assert.equal(backoff({ ...policy, random: () => 0.999999999 }, n, 0), ceiling, `retry ${n}`);
    assert.equal(backoff({ ...policy, random: () => 0 }, n, 5000), 5000, "never shorter than Retry-After");
    assert.equal(backoff({ ...policy, random: () => 0.999999999 }, n, 50000), 75000, "Retry-After spread by up to half of it");
    assert.equal(backoff({ ...policy, random: () => 0.999999999 }, n, 1000), 2000, "a Retry-After of one second spread across the next");
  }
});

test("Retry-After is a floor, spread by up to half of it and at least across the next second", () => {
  const highest = () => 0.999999999;
  for (const [retryAfterMs, spreadMs] of [[1000, 1000], [2000, 1000], [1500, 1000], [3000, 1500], [30000, 15000]] as const) {
    assert.equal(retryAfterWait(retryAfterMs, () => 0), retryAfterMs, `Retry-After ${retryAfterMs} ms is the floor, reached exactly`);
    assert.equal(retryAfterWait(retryAfterMs, highest), retryAfterMs + spreadMs, `Retry-After ${retryAfterMs} ms: up to ${spreadMs} ms more`);
    assert.equal(retryAfterWait(retryAfterMs, () => 0.5), retryAfterMs + Math.floor(0.5 * (spreadMs + 1)), "uniform over the spread");
  }
  const never = () => assert.fail("no spread without a Retry-After");
  assert.equal(retryAfterWait(0, never), 0);
  assert.equal(retryAfterWait(-1000, never), 0);

  // With real randomness: within the bounds, and over both halves of the
  // second (the odds of 1,000 draws all in one half are 2^-999).
  let early = false;
  let late = false;
  for (let i = 0; i < 1000; i++) {
    const w = retryAfterWait(1000, Math.random);
    assert.ok(w >= 1000 && w <= 2000, `${w} ms`);
    early ||= w < 1500;
    late ||= w > 1500;
  }
  assert.ok(early && late, "the waits spread across the second");
});

test("Retry-After as seconds or as an HTTP date", () => {
  const now = Date.parse("2026-11-22T03:46:25Z");
  assert.equal(parseRetryAfter("3", now), 3000);
  assert.equal(parseRetryAfter(" 0 ", now), 0);
  assert.equal(parseRetryAfter(null, now), 0);
  assert.equal(parseRetryAfter("soon", now), 0);
  assert.equal(parseRetryAfter("Sun, 22 Nov 2026 03:46:35 GMT", now), 10_000);
  assert.equal(parseRetryAfter("Sun, 22 Nov 2026 03:46:15 GMT", now), 0, "a date in the past");
  assert.equal(parseRetryAfter("999999999", now), 86_400_000, "at most a day");
});

test("bounded attempts: the last answer is returned as it is", async () => {
  const { result, keys } = await run(Array(3).fill({ status: 503 }), { maxAttempts: 3 });
  const r = await result;
  assert.equal(r.status, 503);
  assert.equal(r.attempts, 3);
  assert.equal(keys.length, 3);
});

test("bounded attempts with no answer at all: NoAnswerError with the key", async () => {
  const { result } = await run([{ throws: lost() }, { throws: lost() }], { maxAttempts: 2 });
  await assert.rejects(result, (err: unknown) => {
    assert.ok(err instanceof NoAnswerError);
    assert.equal(err.key, "KEY-OF-ONE-LOGICAL-OPERATION");
    assert.equal(err.attempts, 2);
    assert.match(err.message, /gave up after 2 attempts/);
    return true;
  });
});

test("bounded time: no wait is begun that would end past the budget", async () => {
  const { result, waits } = await run(
    [{ status: 503, headers: { "Retry-After": "2" } }, { status: 503, headers: { "Retry-After": "30" } }],
    { maxElapsedMs: 10_000 },
  );
  const r = await result;
  assert.equal(r.status, 503);
  assert.equal(r.attempts, 2);
  assert.equal(waits.length, 1);
});

test("an error that is not the network's is not retried", async () => {
  const { result, keys } = await run([{ throws: new SyntaxError("Unexpected token") }]);
  await assert.rejects(result, NoAnswerError);
  assert.equal(keys.length, 1);
});

test("the caller's signal ends the operation", async () => {
  const controller = new AbortController();
  const attempts: number[] = [];
  const r = withRetries(
    "KEY-OF-ONE-LOGICAL-OPERATION",
    async (_key, signal) => {
      attempts.push(1);
      controller.abort();
      assert.ok(signal.aborted, "the attempt's signal follows the caller's");
      throw lost();
    },
    {},
    controller.signal,
  );
  await assert.rejects(r, NoAnswerError);
  assert.equal(attempts.length, 1);
});

test("a 429 waits for the budget, a 503 backs off", async () => {
  const highest: Policy = { random: () => 0.999999999 };
  assert.equal(waitBefore(highest, 8, 429, 1000), 2000, "the budget's second, spread across the next, at the eighth retry too");
  assert.equal(waitBefore(highest, 8, 503, 1000), 10_000, "the service's: backed off to the cap");
  assert.equal(waitBefore(highest, 8, 429, 0), 10_000, "a 429 that says nothing backs off");
  assert.equal(rateLimitReset('"writes";r=0;t=10'), 10_000);
  assert.equal(rateLimitReset('"writes";r=3;t=10'), 0, "room left: no wait to read");
  assert.equal(rateLimitReset(null), 0);

  const { result, waits } = await run(
    [{ status: 429, headers: { RateLimit: '"writes";r=0;t=3' } }, { status: 201 }],
    { random: () => 0 },
  );
  assert.equal((await result).status, 201);
  assert.deepEqual(waits, [3000], "a 429 without Retry-After waits for its RateLimit reset");
});
