// Package idem serves requests that change foreign state exactly once under
// a client's idempotency key, however often the client retries, whichever
// process crashes, and whoever else asks under the same key.
//
// A request is served as a Flow: a directed acyclic graph of Steps between
// recovery points. A Step is an optional foreign call, made with no
// transaction open, followed by one atomic phase (one short transaction)
// that records the call's result and returns an Outcome: MoveTo a recovery
// point, Finish with a response, or NoOp. The engine keeps the rules the
// whole design rests on, so that a flow cannot break them:
//
//   - no foreign call inside a transaction: a Call gets no transaction;
//   - nothing committed past a recovery point: a phase's writes and the key's
//     new recovery point commit together, or not at all;
//   - every phase under the lease's fencing token: a request whose lease was
//     taken over (it worked past Engine.Lease) writes nothing (ErrLeaseLost);
//   - a finished answer is never rewritten: it is replayed byte for byte,
//     from the database or, for a while, from memory (Config.ReplayTTL).
//
// A key's life, as the row in idempotency_keys records it:
//
//	        Run (read first, one statement: a finished key is answered
//	        │    from it; a new key is inserted with its lease; a claimable
//	        │    one is locked, judged again and leased)
//	        ▼
//	┌─── started ◄──────────────────────────────────────────────┐
//	│       │ Step from started: Call (no transaction),          │
//	│       │ then Phase + the record, one transaction            │
//	│       ▼                                                     │
//	│   <point> ──► … ──► each Step leaves one point              │ a failed Call or
//	│       │                                                     │ phase: the lease is
//	│       │ Finish(status, body)                                │ released, the key
//	│       ▼                                                     │ stays at its point
//	│   finished: the response is stored; every later request ───┘ for a retry, the
//	│   with the same key and body gets it (Replayed), another      completer or an
//	│   body gets ErrKeyReused                                      expired lease
//	│
//	└── while a lease is live, another request gets *KeyInUseError
//
// A finished key's answer never changes, so the claim reads the key first,
// alone: no transaction, no lock, one round trip answers a replay, a
// mismatch or a live lease. The claim runs the first step's phase in its
// own transaction when that step makes no call. Each phase locks the key by
// its token (the fence) before the flow's writes; the fence travels with
// the phase's first statement and the BEGIN, and its last statement, the
// record on the key, with the COMMIT (CommitWith), so neither the fence nor
// the transaction's ends cost a round trip of their own. Serialization
// failures and deadlocks rerun a phase from its start (InTx), with jittered
// backoff.
//
// A request whose client gave up stays at its recovery point. The
// completer finds such keys (Abandoned) and drives each through its flow
// exactly as a retry would (Complete, for the flows given to Register);
// the reaper deletes finished keys past their retention (Reap), never an
// unfinished one.
//
// A build with the "failpoints" tag can crash a request at every boundary
// of every step (FailpointName: before a phase's commit, after it, after a
// call) to prove that a retry from the recovery point finishes the work
// once.
//
// The engine needs the idempotency_keys table of this repository's
// migrations and nothing else of them; it knows no domain: its flows are
// given to it, and its errors are translated by its caller.
package idem
