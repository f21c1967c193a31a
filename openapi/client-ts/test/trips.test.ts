// Trips through the client against the real server whose bookings hold
// their fare (CAPTURE=trip), in front of its own fake Stripe, which the Go
// test openapi/client-ts/client_test.go starts and describes in the
// environment:
//
//	ATOMICRIDES_URL             the server's base URL
//	ATOMICRIDES_ADMIN_TOKEN     the operator token (to create riders)
//	ATOMICRIDES_DISPATCH_TOKEN  the dispatch side's token (to complete and cancel trips)
//	FAKESTRIPE_URL              the fake Stripe's base URL (its /_fake/ controls)
//
// The tests of this file run one after the other: the fake's faults act on
// whichever request comes next.

import assert from "node:assert/strict";
import { afterEach, test } from "node:test";

import {
  createAtomicRidesClient,
  problemTypes,
  ProblemError,
  Retrier,
  rideOutcome,
  tripRide,
  type Ride,
  type RideCreateBody,
} from "../src/index.js";

function env(name: string): string {
  const v = process.env[name];
  assert.ok(v, `${name} is not set: run this through go test ./openapi/client-ts/`);
  return v;
}

const baseUrl = env("ATOMICRIDES_URL");
const adminToken = env("ATOMICRIDES_ADMIN_TOKEN");
const dispatchToken = env("ATOMICRIDES_DISPATCH_TOKEN");
const fakeStripe = env("FAKESTRIPE_URL");

const someRide: RideCreateBody = { origin_lat: 37.7749, origin_lon: -122.4194, target_lat: 37.8044, target_lon: -122.2712 };

/** Sends a control request to the fake Stripe. */
async function control(method: string, path: string, body?: unknown): Promise<any> {
  const resp = await fetch(fakeStripe + "/_fake/" + path, {
    method,
    headers: { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  assert.equal(resp.status, 200, `${method} /_fake/${path}: ${await resp.clone().text()}`);
  return resp.json();
}

/** The fake Stripe's PaymentIntent of a ride's hold. */
async function holdOf(ride: Ride): Promise<{ status: string; amount_received: number }> {
  const ledger = await control("GET", "ledger");
  const pi = ledger.payment_intents.find((p: any) => p.id === ride.payment_id);
  assert.ok(pi, `no PaymentIntent ${ride.payment_id}`);
  return pi;
}

/** The requests of op the fake Stripe executed (not replays). */
async function executed(op: string): Promise<number> {
  const ledger = await control("GET", "ledger");
  return ledger.requests.filter((r: any) => r.op === op && !r.replayed && r.status === 200).length;
}

/**
 * A fetch that records the Idempotency-Key of every request and, while
 * loseNext is set, throws the next answer away after the server gave it.
 */
function recording() {
  const keys: string[] = [];
  const state = { loseNext: false };
  const fetchImpl = async (request: Request) => {
    keys.push(request.headers.get("Idempotency-Key") ?? "");
    const response = await fetch(request);
    if (state.loseNext) {
      state.loseNext = false;
      await response.body?.cancel();
      throw new TypeError("fetch failed", { cause: new Error("other side closed") });
    }
    return response;
  };
  return { keys, state, fetch: fetchImpl };
}

let riders = 0;

/** Creates a rider through the API and returns a client with its key. */
async function rider(fetchImpl?: (r: Request) => Promise<Response>) {
  const admin = createAtomicRidesClient({ baseUrl, token: adminToken });
  const email = `ts-trip-${process.pid}-${++riders}@example.com`;
  const { data, response } = await admin.PUT("/users/{email}", {
    params: { path: { email } },
    body: { payment_source: "tok_visa" },
  });
  assert.equal(response.status, 201);
  assert.ok(data?.api_key);
  return createAtomicRidesClient({ baseUrl, token: data.api_key, ...(fetchImpl ? { fetch: fetchImpl } : {}) });
}

/** The dispatch side's client. */
function dispatch(fetchImpl?: (r: Request) => Promise<Response>) {
  return createAtomicRidesClient({ baseUrl, token: dispatchToken, ...(fetchImpl ? { fetch: fetchImpl } : {}) });
}

/** Books a ride whose fare is held, and returns it. */
async function bookTrip(retrier: Retrier): Promise<Ride> {
  const outcome = rideOutcome(await retrier.rideCreate(someRide));
  assert.equal(outcome.kind, "authorized");
  assert.equal(outcome.ride.capture, "trip");
  return outcome.ride;
}

/** Lets the waits asked for pass at once: the retried failures are not stored. */
const noWait = { sleep: async () => {} };

/** A policy under which a retry fails the test. */
const noRetry = { onRetry: () => assert.fail("retried a final answer") };

afterEach(async () => {
  await control("DELETE", "faults");
});

test("a trip completed through injected capture 503s is captured once under one key, and replayed after", async () => {
  const ride = await bookTrip(new Retrier(await rider()));
  const rec = recording();
  const statuses: number[] = [];
  const retrier = new Retrier(dispatch(rec.fetch), { ...noWait, onRetry: (info) => void statuses.push(info.status) });
  await control("POST", "faults", { op: "payment_intent.capture", kind: "status", status: 503, times: 2 });

  const res = await retrier.rideComplete(ride.id, { fare_cents: 1350, currency: "usd" });
  assert.equal(res.status, 201, JSON.stringify(res.answer.error));
  assert.deepEqual(statuses, [503, 503]);
  assert.equal(res.attempts, 3);
  assert.equal(res.replayed, false);
  assert.deepEqual(rec.keys, [res.key, res.key, res.key], "every attempt carries the one key");
  const done = tripRide(res);
  assert.equal(done.id, ride.id);
  assert.equal(done.charge_status, "completed");
  assert.equal(done.fare_cents, 1350);
  assert.equal(done.extra_status, "none");
  const hold = await holdOf(ride);
  assert.equal(hold.status, "succeeded");
  assert.equal(hold.amount_received, 1350);
  assert.equal(await executed("payment_intent.capture"), 1);

  // The same logical completion again: the stored answer.
  const again = await retrier.rideComplete(ride.id, { fare_cents: 1350, currency: "usd" }, { key: res.key });
  assert.equal(again.attempts, 1);
  assert.equal(again.replayed, true);
  assert.deepEqual(tripRide(again), done);

  // Another key, the same fare: the same completion, 200.
  const other = await retrier.rideComplete(ride.id, { fare_cents: 1350, currency: "usd" });
  assert.equal(other.status, 200);
  assert.equal(tripRide(other).completed_at, done.completed_at);

  // Another fare: refused at the first answer, naming the ride.
  const refused = await new Retrier(dispatch(), noRetry).rideComplete(ride.id, { fare_cents: 1400, currency: "usd" });
  assert.equal(refused.status, 409);
  assert.equal(refused.attempts, 1);
  assert.throws(
    () => tripRide(refused),
    (err: unknown) => err instanceof ProblemError && err.type === problemTypes.rideNotCompletable && err.rideId === ride.id,
  );
  assert.equal(await executed("payment_intent.capture"), 1, "captured once");
});

test("completing a trip takes the dispatch token", async () => {
  const client = await rider();
  const ride = await bookTrip(new Retrier(client));
  for (const c of [client, createAtomicRidesClient({ baseUrl, token: "not-the-dispatch-token" })]) {
    const res = await new Retrier(c, noRetry).rideComplete(ride.id, { fare_cents: 1500, currency: "usd" });
    assert.equal(res.status, 401);
    assert.throws(() => tripRide(res), (err: unknown) => err instanceof ProblemError && err.status === 401);
  }
});

test("a cancellation whose answer is lost gets it back under its key; the hold is released once", async () => {
  const rec = recording();
  const client = await rider(rec.fetch);
  const ride = await bookTrip(new Retrier(client));
  const before = rec.keys.length;
  rec.state.loseNext = true;

  const res = await new Retrier(client, noWait).rideCancel(ride.id);
  assert.equal(res.status, 201, JSON.stringify(res.answer.error));
  assert.equal(res.attempts, 2);
  assert.equal(res.replayed, true, "the lost 201 was stored; the retry got it back");
  assert.deepEqual(rec.keys.slice(before), [res.key, res.key], "both attempts carry the one key");
  const cancelled = tripRide(res);
  assert.equal(cancelled.charge_status, "cancelled");
  assert.ok(cancelled.released_at);
  assert.equal((await holdOf(ride)).status, "canceled");

  // The dispatch side under another key: the same ride, 200.
  const byDispatch = await new Retrier(dispatch()).rideCancel(ride.id);
  assert.equal(byDispatch.status, 200);
  assert.equal(tripRide(byDispatch).released_at, cancelled.released_at);
  assert.equal(await executed("payment_intent.cancel"), 1);

  // Another rider's ride is not found; a completed trip is refused at once.
  const stranger = await new Retrier(await rider(), noRetry).rideCancel(ride.id);
  assert.equal(stranger.status, 404);
  const completed = await bookTrip(new Retrier(client));
  assert.equal((await new Retrier(dispatch()).rideComplete(completed.id, { fare_cents: 1200, currency: "usd" })).status, 201);
  const refused = await new Retrier(client, noRetry).rideCancel(completed.id);
  assert.equal(refused.status, 409);
  assert.equal(refused.attempts, 1);
  assert.throws(
    () => tripRide(refused),
    (err: unknown) => err instanceof ProblemError && err.type === problemTypes.rideNotCancellable && err.rideId === completed.id,
  );
});

test("a declined fare above the hold is a balance due: the next booking is refused until it is paid", async () => {
  const client = await rider();
  const retrier = new Retrier(client, noRetry);
  const ride = await bookTrip(retrier);
  // The fare above the hold is a payment of its own: declined.
  await control("POST", "faults", { op: "payment_intent.create", kind: "refuse", status: 402, times: 1 });
  const done = tripRide(await new Retrier(dispatch()).rideComplete(ride.id, { fare_cents: 2500, currency: "usd" }));
  assert.equal(done.charge_status, "completed");
  assert.equal(done.extra_status, "due");
  assert.equal(done.balance_due_cents, 500);

  // The next booking: 402, naming the ride that owes; nothing booked.
  const refused = await retrier.rideCreate(someRide);
  assert.equal(refused.status, 402);
  assert.equal(refused.attempts, 1);
  const outcome = rideOutcome(refused);
  assert.equal(outcome.kind, "balance_due");
  assert.ok(outcome.kind === "balance_due");
  assert.equal(outcome.rideId, ride.id);
  assert.equal(outcome.problem.instance, `/rides/${ride.id}`);

  // The same card declined again: 402, stored and replayed for its key.
  await control("POST", "faults", { op: "payment_intent.create", kind: "refuse", status: 402, times: 1 });
  const declined = await retrier.rideBalancePay(outcome.rideId);
  assert.equal(declined.status, 402);
  assert.throws(() => tripRide(declined), (err: unknown) => err instanceof ProblemError && err.status === 402);
  const replayed = await retrier.rideBalancePay(outcome.rideId, { key: declined.key });
  assert.equal(replayed.replayed, true);
  assert.deepEqual(replayed.answer.error, declined.answer.error);

  // Under a new key, through a 503: paid once; another key finds it paid.
  await control("POST", "faults", { op: "payment_intent.create", kind: "status", status: 503, times: 1 });
  const paid = await new Retrier(client, noWait).rideBalancePay(outcome.rideId);
  assert.equal(paid.status, 201, JSON.stringify(paid.answer.error));
  assert.equal(paid.attempts, 2);
  const paidRide = tripRide(paid);
  assert.equal(paidRide.extra_status, "paid");
  assert.equal(paidRide.balance_due_cents, 0);
  assert.equal((await retrier.rideBalancePay(outcome.rideId)).status, 200);

  // The refused booking's key was left free: it books now.
  const booked = rideOutcome(await retrier.rideCreate(someRide, { key: refused.key }));
  assert.equal(booked.kind, "authorized");
  assert.ok(booked.kind === "authorized");

  // A ride that owes nothing: refused at the first answer.
  const nothing = await retrier.rideBalancePay(booked.ride.id);
  assert.equal(nothing.status, 409);
  assert.equal(nothing.attempts, 1);
  assert.throws(() => tripRide(nothing), (err: unknown) => err instanceof ProblemError && err.type === problemTypes.noBalanceDue);
});
