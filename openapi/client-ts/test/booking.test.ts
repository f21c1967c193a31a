// The client against the real server and the fake Stripe, which the Go test
// openapi/client-ts/client_test.go starts and describes in the environment:
//
//	ATOMICRIDES_URL          the server's base URL
//	ATOMICRIDES_ADMIN_TOKEN  the operator token (to create riders)
//	FAKESTRIPE_URL           the fake Stripe's base URL (its /_fake/ controls)
//
// The tests of this file run one after the other: the fake's faults act on
// whichever charge comes next.

import assert from "node:assert/strict";
import { afterEach, test } from "node:test";

import { createAtomicRidesClient, ListError, Retrier, rideAll, type RetryInfo, type RideCreateBody } from "../src/index.js";

function env(name: string): string {
  const v = process.env[name];
  assert.ok(v, `${name} is not set: run this through go test ./openapi/client-ts/`);
  return v;
}

const baseUrl = env("ATOMICRIDES_URL");
const adminToken = env("ATOMICRIDES_ADMIN_TOKEN");
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

/**
 * The charge attempts the fake Stripe made for a ride's request: those under
 * the processor key (metadata ar_key) of the ride's charge.
 */
async function chargesOf(ride: { stripe_charge_id?: string | null }): Promise<{ id: string; status: string }[]> {
  const ledger = await control("GET", "ledger");
  const key = ledger.charges.find((c: any) => c.id === ride.stripe_charge_id)?.metadata?.ar_key;
  return key === undefined ? [] : ledger.charges.filter((c: any) => c.metadata?.ar_key === key);
}

/** Resolves once every injected fault has fired (the fake lists only faults with firings left). */
async function chargeHeld(): Promise<void> {
  const deadline = Date.now() + 30_000;
  while ((await control("GET", "faults")).faults.length > 0) {
    assert.ok(Date.now() < deadline, "the charge never reached the fake Stripe");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

let riders = 0;

/** Creates a rider through the API and returns a client with its key. */
async function rider(source = "tok_visa", fetchImpl?: (r: Request) => Promise<Response>) {
  const admin = createAtomicRidesClient({ baseUrl, token: adminToken });
  const email = `ts-${process.pid}-${++riders}@example.com`;
  const { data, response } = await admin.PUT("/users/{email}", {
    params: { path: { email } },
    body: { payment_source: source },
  });
  assert.equal(response.status, 201);
  assert.ok(data?.api_key);
  return createAtomicRidesClient({ baseUrl, token: data.api_key, ...(fetchImpl ? { fetch: fetchImpl } : {}) });
}

/** Records the waits asked for and lets them pass at once: the retried failures are not stored, so nothing on the server needs the time. */
function recordedWaits() {
  const waits: number[] = [];
  return { waits, sleep: async (ms: number) => void waits.push(ms) };
}

afterEach(async () => {
  await control("DELETE", "faults");
});

test("a booking through injected 503s is charged once, and replayed after", async () => {
  const client = await rider();
  await control("POST", "faults", { op: "payment_intent.create", kind: "status", status: 503, times: 2 });
  const { waits, sleep } = recordedWaits();
  const retries: RetryInfo[] = [];
  const retrier = new Retrier(client, { sleep, onRetry: (info) => void retries.push(info) });

  const res = await retrier.rideCreate(someRide);
  assert.equal(res.status, 201, JSON.stringify(res.answer.error));
  assert.equal(res.attempts, 3);
  assert.equal(res.replayed, false);
  assert.deepEqual(retries.map((r) => r.status), [503, 503]);
  for (const w of waits) {
    assert.ok(w >= 2000, `waited ${w} ms, less than the server's Retry-After of 2 s`);
  }
  const ride = res.answer.data;
  assert.ok(ride);
  assert.equal(ride.charge_status, "charged");
  const charges = await chargesOf(ride);
  assert.equal(charges.length, 1, "one charge at Stripe");
  assert.equal(charges[0]!.status, "succeeded");
  assert.equal(charges[0]!.id, ride.stripe_charge_id);

  // The same logical operation again: the stored answer, byte for byte.
  const again = await retrier.rideCreate(someRide, { key: res.key });
  assert.equal(again.attempts, 1);
  assert.equal(again.replayed, true);
  assert.deepEqual(again.answer.data, ride);
  assert.equal((await chargesOf(ride)).length, 1);
});

test("a connection dropped after the charge, then our answer lost: still one charge", async () => {
  // Stripe charges, and the connection to it drops before its answer: the
  // server answers 503. Then the next answer of the server is lost on its
  // way to the client, after the server stored it.
  await control("POST", "faults", { op: "payment_intent.create", kind: "drop_after", times: 1 });
  let loseNext = false;
  const losing = async (request: Request) => {
    const response = await fetch(request);
    if (loseNext) {
      loseNext = false;
      await response.body?.cancel();
      throw new TypeError("fetch failed", { cause: new Error("other side closed") });
    }
    return response;
  };
  const client = await rider("tok_visa", losing);
  const statuses: number[] = [];
  const { sleep } = recordedWaits();
  const retrier = new Retrier(client, {
    sleep,
    onRetry: (info) => {
      statuses.push(info.status);
      if (info.attempt === 1) {
        loseNext = true;
      }
    },
  });

  const res = await retrier.rideCreate(someRide);
  assert.deepEqual(statuses, [503, 0], "Stripe's lost answer, then ours");
  assert.equal(res.attempts, 3);
  assert.equal(res.status, 201);
  assert.equal(res.replayed, true, "the lost 201 was stored; the retry got it back");
  const ride = res.answer.data;
  assert.ok(ride);
  const charges = await chargesOf(ride);
  assert.equal(charges.length, 1, "one charge at Stripe");
  assert.equal(charges[0]!.id, ride.stripe_charge_id);
});

test("two clients with one key while the charge is slow: one waits out the 409, one charge", async () => {
  const client = await rider();
  await control("POST", "faults", { op: "payment_intent.create", kind: "latency", duration: "2s", times: 1 });
  const key = "TS-CONCURRENT-" + process.pid + "-" + Date.now();
  const retrier = new Retrier(client);
  const statuses: number[] = [];
  const second = new Retrier(client, { onRetry: (info) => void statuses.push(info.status) });

  const first = retrier.rideCreate(someRide, { key });
  // The second starts once the first holds the key, its charge held at
  // Stripe: the fault has fired, so the fake no longer lists it.
  await chargeHeld();
  const [a, b] = await Promise.all([first, second.rideCreate(someRide, { key })]);
  assert.equal(a.status, 201);
  assert.equal(b.status, 201);
  assert.ok(statuses.includes(409), `the second saw the key in use: ${statuses}`);
  assert.equal(b.replayed, true);
  assert.deepEqual(b.answer.data, a.answer.data);
  assert.equal((await chargesOf(a.answer.data!)).length, 1);
});

test("final answers are not retried: a declined card, an invalid body", async () => {
  const declined = new Retrier(await rider("tok_chargeCustomerFail"));
  const res = await declined.rideCreate(someRide);
  assert.equal(res.status, 402);
  assert.equal(res.attempts, 1);
  assert.equal(res.answer.error?.type, "/problems/card-declined");
  const again = await declined.rideCreate(someRide, { key: res.key });
  assert.equal(again.status, 402);
  assert.equal(again.replayed, true, "a decline is stored and replayed");

  const invalid = await new Retrier(await rider()).rideCreate({ ...someRide, origin_lat: 91 });
  assert.equal(invalid.status, 422);
  assert.equal(invalid.attempts, 1);
  const problem = invalid.answer.error;
  assert.ok(problem && "errors" in problem, "a 422 is a validation problem, not a declined booking's");
  assert.equal(problem.errors?.[0]?.location, "body.origin_lat");
});

test("a refund through an injected 503 is made once", async () => {
  const client = await rider();
  const retrier = new Retrier(client, { sleep: recordedWaits().sleep });
  const booked = await retrier.rideCreate(someRide);
  assert.equal(booked.status, 201);
  await control("POST", "faults", { op: "refund.create", kind: "status", status: 503, times: 1 });

  const res = await retrier.rideRefund(booked.answer.data!.id);
  assert.equal(res.status, 201, JSON.stringify(res.answer.error));
  assert.equal(res.attempts, 2);
  assert.equal(res.answer.data?.status, "refunded");
  const ledger = await control("GET", "ledger");
  const refunds = ledger.refunds.filter((r: any) => r.charge === booked.answer.data!.stripe_charge_id);
  assert.equal(refunds.length, 1, "one refund at Stripe");
});

test("rideAll follows the cursors over every ride of the rider, newest first", async () => {
  const client = await rider();
  const other = await rider();
  const retrier = new Retrier(client);
  const booked: number[] = [];
  for (let i = 0; i < 5; i++) {
    const res = await retrier.rideCreate(someRide);
    assert.equal(res.status, 201);
    assert.ok(res.answer.data);
    booked.unshift(res.answer.data.id);
  }
  const seen: number[] = [];
  for await (const ride of rideAll(client, { limit: 2 })) {
    assert.equal(ride.charge_status, "charged");
    seen.push(ride.id);
  }
  assert.deepEqual(seen, booked, "five rides over three pages, in order");

  const below: number[] = [];
  for await (const ride of rideAll(client, { limit: 2, starting_after: booked[1], charge_status: "charged" })) {
    below.push(ride.id);
  }
  assert.deepEqual(below, booked.slice(2));

  // Another rider's ride is no cursor: 404.
  await assert.rejects(
    async () => {
      for await (const _ of rideAll(other, { starting_after: booked[0] })) {
        assert.fail("no ride of another rider");
      }
    },
    (err: unknown) => err instanceof ListError && err.status === 404,
  );
  // limit out of range: 422 naming the field.
  const { error, response } = await client.GET("/rides", { params: { query: { limit: 101 } } });
  assert.equal(response.status, 422);
  assert.deepEqual(error?.errors?.map((e) => e.location), ["query.limit"]);
});

test("a declined booking's 402 names its ride, which reads declined", async () => {
  const client = await rider("tok_chargeCustomerFail");
  const res = await new Retrier(client).rideCreate(someRide);
  assert.equal(res.status, 402);
  const problem = res.answer.error;
  assert.ok(problem && "ride_id" in problem && typeof problem.ride_id === "number", JSON.stringify(problem));
  const { data: ride, response } = await client.GET("/rides/{id}", { params: { path: { id: problem.ride_id } } });
  assert.equal(response.status, 200);
  assert.equal(ride?.charge_status, "declined");
  assert.equal(ride?.decline_code, "card_declined");
  const declined: number[] = [];
  for await (const r of rideAll(client, { charge_status: "declined" })) {
    declined.push(r.id);
  }
  assert.deepEqual(declined, [problem.ride_id]);
});
