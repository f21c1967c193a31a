// Package chaos holds the chaos harness: the executable proof that every
// request happens exactly once under faults, through the real binary.
//
// The harness (in this package's tests) runs the binary, built with
// -tags failpoints, as separate processes: two serve instances on one
// database, the fake Stripe, and a PostgreSQL cluster of its own. It drives
// them with concurrent clients while it crashes processes at every phase
// boundary of the engine (see package failpoint), restarts PostgreSQL, makes
// Stripe misbehave, and sends duplicates and malformed requests. When the
// faults stop and the system settles, it reads the database, the fake
// Stripe's ledger and the mail sink, and checks that every request
// happened exactly once: each invariant is a function of its own
// (chaosInvariants), and both the report's table and the test's subtests
// (TestChaosShort/keys_finished, …) name the check.
//
//   - TestChaosShort: one pass of each fault, in turn (part of go tool task
//     test, about 90 s).
//   - TestChaos: the full run, each fault in turn then all mixed, bounded to
//     5 minutes; it needs -chaos.full (go tool task chaos). -chaos.logs DIR
//     keeps the processes' logs.
//   - TestProductionBinaryCarriesNoFailpoints: the binary as it ships holds
//     none of the failpoint machinery.
//
// See README.md, "Chaos".
package chaos
