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
/** The body of POST /rides/{id}/complete: the trip's final fare and its currency. */
export type RideCompleteBody = components["schemas"]["RideCompleteInputBody"];

/** Problem types of a trip's refusals (RFC 9457 "type"). */
export const problemTypes = {
  /**
   * A booking refused (402, nothing booked, not stored): the rider owes the
   * balance of the ride the problem's instance names (/rides/{id}). Pay it
   * (Retrier.rideBalancePay), then book again; the key is free.
   */
  balanceDue: "/problems/balance-due",
  /** The ride holds nothing to capture, or was completed with another fare (409, final). */
  rideNotCompletable: "/problems/ride-not-completable",
  /** The trip was completed (refund it instead), or holds nothing to release (409, final). */
  rideNotCancellable: "/problems/ride-not-cancellable",
  /** The ride owes nothing (409, final). */
  noBalanceDue: "/problems/no-balance-due",
} as const;

/** How to reach the API. */
export interface ClientOptions {
  /** The service's base URL, e.g. http://127.0.0.1:8080. */
  baseUrl: string;
  /**
   * A rider's API key, the operator token for the admin operations, or the
   * dispatch side's token (DISPATCH_TOKEN) to complete and cancel trips.
   */
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

  /**
   * Completes a trip with its final fare: the dispatch side's operation
   * (the client's token is DISPATCH_TOKEN). Every attempt carries the one
   * key; a 503 leaves the ride at its recovery point and the retry carries
   * it on. 201 (this request completed the ride), 200 (another key did,
   * with the same fare) and 202 (the processor confirms the capture later)
   * are the final, stored answers; a 409 refusal (ride-not-completable) is
   * final and not stored. tripRide reads the answer.
   */
  rideComplete(rideId: number, body: RideCompleteBody, options: OperationOptions = {}) {
    return withRetries(
      options.key ?? newIdempotencyKey(),
      (key, signal) =>
        this.client.POST("/rides/{id}/complete", {
          params: { path: { id: rideId }, header: { "Idempotency-Key": key } },
          body,
          signal,
        }),
      this.policy,
      options.signal,
    );
  }

  /**
   * Cancels a trip and releases its hold: the rider their own ride (their
   * API key), the dispatch side any ride (its token). Every attempt carries
   * the one key. 201 (this request cancelled the ride) and 200 (another key
   * did) are the final, stored answers; a 409 refusal (ride-not-cancellable:
   * the trip was completed, refund it) is final and not stored. tripRide
   * reads the answer.
   */
  rideCancel(rideId: number, options: OperationOptions = {}) {
    return withRetries(
      options.key ?? newIdempotencyKey(),
      (key, signal) =>
        this.client.POST("/rides/{id}/cancel", {
          params: { path: { id: rideId }, header: { "Idempotency-Key": key } },
          signal,
        }),
      this.policy,
      options.signal,
    );
  }

  /**
   * Pays the balance the rider owes for a ride (its balance_due_cents)
   * with the rider's current payment source. Every attempt carries the one
   * key. 201 (paid by this request), 200 (paid already) and 402 (declined:
   * the balance stays due; register another card, then pay again under a
   * new key) are the final, stored answers; a 409 refusal (no-balance-due)
   * is final and not stored. tripRide reads the answer.
   */
  rideBalancePay(rideId: number, options: OperationOptions = {}) {
    return withRetries(
      options.key ?? newIdempotencyKey(),
      (key, signal) =>
        this.client.POST("/rides/{id}/balance", {
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
/** The result of Retrier.rideComplete. */
export type RideCompleteResult = Awaited<ReturnType<Retrier["rideComplete"]>>;
/** The result of Retrier.rideCancel. */
export type RideCancelResult = Awaited<ReturnType<Retrier["rideCancel"]>>;
/** The result of Retrier.rideBalancePay. */
export type RideBalancePayResult = Awaited<ReturnType<Retrier["rideBalancePay"]>>;

/**
 * An answer other than an operation's success: its status and its RFC 9457
 * problem (undefined when the body was none).
 */
export class ProblemError extends Error {
  constructor(
    readonly status: number,
    readonly problem: Problem | undefined,
  ) {
    const type = problem?.type && problem.type !== "about:blank" ? ` (${problem.type})` : "";
    const text = problem?.detail ?? problem?.title;
    super(`answered ${status}${type}${text ? `: ${text}` : ""}`);
    this.name = "ProblemError";
  }

  /** The problem type; undefined when it has none. */
  get type(): string | undefined {
    return this.problem?.type;
  }

  /**
   * The ride the problem is about: the one its instance names (/rides/{id}:
   * the ride whose balance is due, the ride not cancellable), else its
   * ride_id member (a declined payment's ride); undefined when none.
   */
  get rideId(): number | undefined {
    return problemRideId(this.problem);
  }
}

/** The ride a problem names: its instance /rides/{id}, else its ride_id member. */
function problemRideId(problem: unknown): number | undefined {
  if (typeof problem !== "object" || problem === null) {
    return undefined;
  }
  const { instance, ride_id } = problem as { instance?: unknown; ride_id?: unknown };
  const m = typeof instance === "string" ? /^\/rides\/(\d+)$/.exec(instance) : null;
  if (m) {
    return Number(m[1]);
  }
  return typeof ride_id === "number" ? ride_id : undefined;
}

/**
 * Reads the final answer of a trip's action as its ride: completed (201 by
 * this request, 200 by another key with the same fare) or capturing (202)
 * for rideComplete; cancelled (201, 200) for rideCancel; its balance paid
 * (201, 200) for rideBalancePay. A completed ride may still say its
 * capture failed (charge_status capture_failed) or that the rider owes the
 * fare above the hold (extra_status due, balance_due_cents). Throws
 * ProblemError for any other answer: a refusal (409), a declined balance
 * payment (402), a status the retries gave up on.
 */
export function tripRide(result: RideCompleteResult | RideCancelResult | RideBalancePayResult): Ride {
  const { data, error } = result.answer as { data?: Ride; error?: unknown };
  if ((result.status === 200 || result.status === 201 || result.status === 202) && data !== undefined) {
    return data;
  }
  throw new ProblemError(result.status, error as Problem | undefined);
}

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
   * 201: booked and its fare held (capture trip): the dispatch side
   * completes it with the final fare (rideComplete), or it is cancelled
   * (rideCancel).
   */
  | { kind: "authorized"; ride: Ride }
  /**
   * 202: the rider's bank asks the rider to authenticate the payment. Send
   * them to nextAction.redirect_url (or give nextAction.client_secret to
   * Stripe's SDK); the ride then moves by itself (awaitRide).
   */
  | { kind: "requires_action"; ride: Ride; nextAction: RideNextAction }
  /** 402: declined, nothing charged; problem.ride_id names the ride. */
  | { kind: "declined"; problem: DeclinedProblem }
  /**
   * 402: nothing booked: the rider owes the balance of ride rideId (the
   * problem's instance). Pay it (rideBalancePay), then book again: the key
   * is free.
   */
  | { kind: "balance_due"; problem: Problem; rideId: number };

/**
 * Reads the final answer of Retrier.rideCreate as what it means. Throws
 * for any other answer (a status the retries gave up on, a 409 or 422).
 */
export function rideOutcome(result: RideCreateResult): RideOutcome {
  const { data, error } = result.answer;
  if (result.status === 201 && data !== undefined) {
    return data.charge_status === "authorized" ? { kind: "authorized", ride: data } : { kind: "charged", ride: data };
  }
  if (result.status === 202 && data !== undefined && data.next_action) {
    return { kind: "requires_action", ride: data, nextAction: data.next_action };
  }
  if (result.status === 402 && error !== undefined) {
    const rideId = problemRideId(error);
    if (error.type === problemTypes.balanceDue && rideId !== undefined) {
      return { kind: "balance_due", problem: error as Problem, rideId };
    }
    return { kind: "declined", problem: error as DeclinedProblem };
  }
  throw new Error(`booking answered ${result.status}: ${JSON.stringify(error ?? data)}`);
}

/** A ride as GET /rides/{id} answers it. */
export type RideDetail = components["schemas"]["RideDetail"];

/**
 * Reads ride id every intervalMs (default 1000) until its booking's charge
 * is decided — charged, authorized (a trip's fare held), declined or
 * expired; no longer pending or requires_action — and returns it then. A
 * ride waits for its rider at most until its next_action.expires_at.
 * Throws on an answer other than 200, and when signal ends the wait.
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
    if (data.charge_status !== "pending" && data.charge_status !== "requires_action") {
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
