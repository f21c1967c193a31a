// The TypeScript client of the Atomic Rides API: the types generated from
// openapi/openapi.yaml by openapi-typescript (schema.gen.ts), requests sent
// by openapi-fetch, and safe retries for the operations that take an
// idempotency key.

import createClient, { type Client } from "openapi-fetch";

import type { components, operations, paths } from "./schema.gen.js";
import { newIdempotencyKey, withRetries, type Policy } from "./retry.js";

export type { components, operations, paths } from "./schema.gen.js";
export * from "./retry.js";

/** A typed client of the API (openapi-fetch's, over the generated paths). */
export type AtomicRidesClient = Client<paths>;

/** The body of POST /rides. */
export type RideCreateBody = components["schemas"]["RideCreateBody"];
/** A ride, as the API answers it. */
export type Ride = components["schemas"]["Ride"];
/** A refund, as POST /rides/{id}/refund answers it. */
export type RideRefundResult = components["schemas"]["RideRefundResult"];
/** A page of GET /rides. */
export type RideList = components["schemas"]["RideList"];
/** The query of GET /rides: limit, cursors and filters. */
export type RideListQuery = NonNullable<operations["ride-list"]["parameters"]["query"]>;
/** The stored 402 of a declined booking; ride_id names the declined ride. */
export type DeclinedProblem = components["schemas"]["Problem"];
/** An RFC 9457 problem, the body of every error. */
export type Problem = components["schemas"]["ErrorModel"];

/** How to reach the API. */
export interface ClientOptions {
  /** The service's base URL, e.g. http://127.0.0.1:8080. */
  baseUrl: string;
  /** A rider's API key, or the operator token for the admin operations. */
  token: string;
  /** Replaces the global fetch (a proxy, a test double). */
  fetch?: (request: Request) => Promise<Response>;
}

/** Creates a typed client that authenticates every request with the token. */
export function createAtomicRidesClient(options: ClientOptions): AtomicRidesClient {
  return createClient<paths>({
    baseUrl: options.baseUrl,
    headers: { Authorization: `Bearer ${options.token}` },
    ...(options.fetch ? { fetch: options.fetch } : {}),
  });
}

/** Options of one logical operation. */
export interface OperationOptions {
  /**
   * The idempotency key of the operation: pass the key of an earlier result
   * to continue that operation; omitted, a fresh key is minted.
   */
  key?: string;
  /** Ends the operation early (with NoAnswerError). */
  signal?: AbortSignal;
}

/**
 * Makes the API's idempotent operations safe to retry: each logical
 * operation carries one idempotency key through every attempt, so that the
 * server does its work at most once however many attempts reach it.
 */
export class Retrier {
  /**
   * @param client sends the attempts (see createAtomicRidesClient).
   * @param policy bounds the retries (see Policy; empty: the defaults).
   */
  constructor(
    readonly client: AtomicRidesClient,
    readonly policy: Policy = {},
  ) {}

  /**
   * Books one ride. A 201, 202 or 402 is the final, stored answer
   * (rideOutcome reads it), and Result.replayed tells whether an earlier
   * request with the key produced it. Throws NoAnswerError when no answer came; retry with its key.
   */
  rideCreate(body: RideCreateBody, options: OperationOptions = {}) {
    return withRetries(
      options.key ?? newIdempotencyKey(),
      (key, signal) => this.client.POST("/rides", { params: { header: { "Idempotency-Key": key } }, body, signal }),
      this.policy,
      options.signal,
    );
  }

  /**
   * Refunds a ride in full. 201 (this key asked for the refund), 200
   * (another key did) and a 409 refusal are the final, stored answers.
   */
  rideRefund(rideId: number, options: OperationOptions = {}) {
    return withRetries(
      options.key ?? newIdempotencyKey(),
      (key, signal) =>
        this.client.POST("/rides/{id}/refund", {
          params: { path: { id: rideId }, header: { "Idempotency-Key": key } },
          signal,
        }),
      this.policy,
      options.signal,
    );
  }
}

/** The result of Retrier.rideCreate. */
export type RideCreateResult = Awaited<ReturnType<Retrier["rideCreate"]>>;
/** The result of Retrier.rideRefund. */
export type RideRefundOutcome = Awaited<ReturnType<Retrier["rideRefund"]>>;

/** An answer to a list request other than 200: its status and problem. */
export class ListError extends Error {
  constructor(
    readonly status: number,
    readonly problem: unknown,
  ) {
    super(`list answered ${status}: ${JSON.stringify(problem)}`);
    this.name = "ListError";
  }
}

/**
 * Yields the rider's rides newest first, every one once, reading pages of
 * query (limit, filters, and starting_after to start below a ride) and
 * following each page's cursor to the next while the server says it has
 * more. Rides booked while it reads are not among them (they are newer
 * than the first page). Throws ListError for an answer other than 200, and
 * refuses ending_before: it reads forwards only.
 */
export async function* rideAll(
  client: AtomicRidesClient,
  query: Omit<RideListQuery, "ending_before"> = {},
  signal?: AbortSignal,
): AsyncGenerator<Ride, void, undefined> {
  if ("ending_before" in query) {
    throw new TypeError("rideAll reads forwards only; page with ending_before through GET /rides");
  }
  let params: RideListQuery = { ...query };
  for (;;) {
    const { data, error, response } = await client.GET("/rides", { params: { query: params }, signal });
    if (data === undefined) {
      throw new ListError(response.status, error);
    }
    yield* data.data ?? [];
    const last = data.data?.at(-1);
    if (!data.has_more || last === undefined) {
      return;
    }
    params = { ...params, starting_after: last.id };
  }
}

/** What the rider's bank asks for, while a ride waits for its rider. */
export type RideNextAction = NonNullable<Ride["next_action"]>;

/** What a booking's final answer says of the ride. */
export type RideOutcome =
  /** 201: booked and charged. */
  | { kind: "charged"; ride: Ride }
  /**
   * 202: the rider's bank asks the rider to authenticate the payment. Send
   * them to nextAction.redirect_url (or give nextAction.client_secret to
   * Stripe's SDK); the ride then moves by itself (awaitRide).
   */
  | { kind: "requires_action"; ride: Ride; nextAction: RideNextAction }
  /** 402: declined, nothing charged; problem.ride_id names the ride. */
  | { kind: "declined"; problem: DeclinedProblem };

/**
 * Reads the final answer of Retrier.rideCreate as what it means. Throws
 * for any other answer (a status the retries gave up on, a 409 or 422).
 */
export function rideOutcome(result: RideCreateResult): RideOutcome {
  const { data, error } = result.answer;
  if (result.status === 201 && data !== undefined) {
    return { kind: "charged", ride: data };
  }
  if (result.status === 202 && data !== undefined && data.next_action) {
    return { kind: "requires_action", ride: data, nextAction: data.next_action };
  }
  if (result.status === 402 && error !== undefined) {
    return { kind: "declined", problem: error as DeclinedProblem };
  }
  throw new Error(`booking answered ${result.status}: ${JSON.stringify(error ?? data)}`);
}

/** A ride as GET /rides/{id} answers it. */
export type RideDetail = components["schemas"]["RideDetail"];

/**
 * Reads ride id every intervalMs (default 1000) until its charge is
 * decided — charged, declined or expired — and returns it then. A ride
 * waits for its rider at most until its next_action.expires_at. Throws on
 * an answer other than 200, and when signal ends the wait.
 */
export async function awaitRide(
  client: AtomicRidesClient,
  id: number,
  options: { intervalMs?: number; signal?: AbortSignal } = {},
): Promise<RideDetail> {
  for (;;) {
    const { data, error, response } = await client.GET("/rides/{id}", { params: { path: { id } }, signal: options.signal });
    if (data === undefined) {
      throw new Error(`ride ${id} answered ${response.status}: ${JSON.stringify(error)}`);
    }
    if (data.charge_status === "charged" || data.charge_status === "declined" || data.charge_status === "expired") {
      return data;
    }
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(resolve, options.intervalMs ?? 1000);
      options.signal?.addEventListener("abort", () => {
        clearTimeout(timer);
        reject(options.signal?.reason);
      });
    });
  }
}
