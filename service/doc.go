// Package service is the domain of Atomic Rides and the only layer that
// begins and commits transactions.
//
// # Idempotency keys, atomic phases, recovery points
//
// A request that changes foreign state (a Stripe charge) is served under a
// client's idempotency key as a Flow: a directed acyclic graph of steps
// between recovery points. Each step is an optional foreign call, made with
// no transaction open, followed by one atomic phase (one short transaction)
// that records the call's result and returns an Outcome: MoveTo a recovery
// point, Finish with a stored response, or NoOp. Every foreign call is
// preceded by a committed recovery point, and nothing more is committed.
//
// POST /rides:
//
//	          claim (insert, or take an expired lease over)
//	               │  same transaction
//	               ▼
//	started ──[ride + audit record]──► ride_created
//	                                      │
//	                          Stripe charge, key "ride-charge-<key id>"
//	                          (no transaction open; past Stripe's 24 h
//	                           key window, look the charge up first)
//	                 ┌────────────────────┼──────────────────────┐
//	            charged│            declined│           indeterminate│
//	                   ▼                    ▼                        ▼
//	[charge id + receipt job    [ride declined + 402]     lease released,
//	 (InsertTx) + 201]                  │                 stays ride_created,
//	                   │                │                 503 / 500 + Retry-After
//	                   └──► finished ◄──┘
//
// A finished key replays its stored response byte for byte and writes
// nothing. A finished response never changes, so a process answers replays
// of keys it saw finished from memory for a while (Config.ReplayCacheTTL).
// A new key is claimed by its insert, with no read before it: a new ride
// commits twice, a replay at most once. A key is leased (locked_at, lock_token) for longer than the
// payment client's whole time budget; every phase locks the key only under
// its own token, so a request whose lease was taken over stops without
// writing. Serialization failures and deadlocks rerun the transaction with
// jittered backoff.
//
// PUT /users/{email} is one SERIALIZABLE transaction per request (the 1:1
// model): the user, an audit record, the first API key and the job that
// creates the Stripe customer.
package service
