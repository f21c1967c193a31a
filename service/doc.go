// Package service is the domain of Atomic Rides and the only layer that
// begins and commits transactions.
//
// # Idempotency keys, atomic phases, recovery points
//
// A request that changes foreign state (a charge) is served under a
// client's idempotency key by the engine of package idem, as an idem.Flow:
// steps between recovery points, each an optional foreign call with no
// transaction open followed by one atomic phase. The flows below are the
// domain's; the engine keeps their invariants (engine.go translates its
// errors and counts what it does).
//
// POST /rides:
//
//	          claim (insert, or take an expired lease over)
//	               │  same transaction
//	               ▼
//	started ──[ride + audit record]──► ride_created
//	                                      │
//	                          Stripe charge, key ChargeKey(namespace, rider's
//	                          email, client key) + "." + customer, tagged
//	                          ar_ns/ar_rider/ar_key (no transaction open;
//	                          past Stripe's 24 h key window, look the charge
//	                          up by ar_key first and adopt it if it is ours)
//	                 ┌────────────────────┼──────────────────────┐
//	            charged│            declined│           indeterminate│
//	                   ▼                    ▼                        ▼
//	[charge id + receipt job    [ride declined + 402]     lease released,
//	 (InsertTx) + 201]                  │                 stays ride_created,
//	                   │                │                 503 / 500 + Retry-After
//	                   └──► finished ◄──┘
//
// POST /rides/{id}/refund is the same engine with entity-level idempotency:
// a ride has at most one refund row (ride_id UNIQUE) and the processor sees
// one refund key per charge and attempt (the attempt rises only after a
// recorded refusal), so requests under any number of keys converge on one
// refund, and a refused refund asked for again reaches the processor again:
//
//	          claim + [lock the user's ride]  (not found: 404; not charged:
//	               │                           409; rolled back, no key kept)
//	               ▼
//	started ──[refund row: create (or retry a refused one) + audit record,
//	   │       or join a pending one]──► refund_created
//	   │                                     │
//	   │ already refunded          Stripe refund, key RefundKey(namespace,
//	   │                           charge, attempt), tagged as charges are
//	   │                           (no transaction open; past Stripe's key
//	   │                            window, or told the charge is already
//	   │                            refunded: list its refunds, adopt the one
//	   │                            of this deployment and rider)
//	   │                      ┌──────────────────┼──────────────────────┐
//	   │              refunded│           refused│           indeterminate│
//	   ▼                      ▼                  ▼                        ▼
//	[200 + the refund] [refund id + receipt   [refund failed      lease released,
//	   │                job (InsertTx) + 201   + 409]             stays refund_created,
//	   │                for the first key,        │               503 / 500 + Retry-After
//	   │                200 for others]           │
//	   └──────────────► finished ◄────────────────┘
//
// A finished key replays its stored response byte for byte and writes
// nothing, from memory for a while (Config.ReplayCacheTTL). Leases, fencing
// and transaction retries are the engine's (package idem).
//
// # Requests nobody drives any more
//
// A request whose client gave up stays at its recovery point. The completer
// (KeysAbandonedEnqueue, run periodically by package jobs) finds keys that
// are unfinished, unleased and idle past Config.AbandonedAfter, and queues
// one KeyCompleteArgs job per key in the same transaction; KeyComplete then
// drives the stored request through its flow exactly as a retry would:
//
//	unfinished, idle ──[completer: SKIP LOCKED + InsertManyTx]──► key_complete job
//	key_complete ──KeyComplete──► finished            (job completed)
//	             ──409 / 503 / 500──► River backoff    (attempts left)
//	             ──last attempt──► discarded          (dead letter: KeysDead,
//	                                                    an operator completes it)
//
// The reaper (KeysReap) deletes finished keys past Config.KeyRetention and
// never an unfinished one. Receipts (package receipts: RideSend, RefundSend) are
// sent with no transaction open and recorded afterwards, under a Message-ID
// that is the same for every resend.
//
// PUT /users/{email}, API keys and booking sessions are package accounts';
// the audit trail every flow writes in its own transaction is package
// audit's. This package is also the vocabulary the domain packages share:
// Error and its codes, the rider (User), the email rule (NormalizeEmail).
package service
