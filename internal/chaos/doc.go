// Package chaos holds the chaos harness: the executable proof that every
// request happens exactly once under faults, through the real binary.
//
// The harness (in this package's tests) runs the binary, built with
// -tags failpoints, as separate processes: two serve instances on one
// database, the fake Stripe, the fake Adyen (the main and the restore runs
// route between both processors, with processor outages and flapping
// circuits: processors_test.go), and a PostgreSQL cluster of its own. It drives
// them with concurrent clients while it crashes processes at every phase
// boundary of the engine (see package failpoint), restarts PostgreSQL, makes
// Stripe misbehave, and sends duplicates and malformed requests. When the
// faults stop and the system settles, it reads the database, the fake
// Stripe's ledger and the mail sink, and checks that every request
// happened exactly once: each invariant is a function of its own
// (chaosInvariants), and both the report's table and the test's subtests
// (TestChaosShort/keys_finished, …) name the check. The main run also
// runs whole trips (a third serve instance books with CAPTURE=trip):
// completed, cancelled and expired under the same faults
// (trips_test.go, trips_checks_test.go); so does the restore run, whose
// lost bookings, completions and cancellations are judged by what the
// restore promises (docs/trips.md).
//
//   - TestChaosShort: one pass of each fault, in turn (part of go tool task
//     test, about 90 s).
//
//   - TestChaos: the full run, each fault in turn then all mixed, bounded to
//     5 minutes; it needs -chaos.full (go tool task chaos). -chaos.logs DIR
//     keeps the processes' logs.
//
//   - TestChaosFailoverShort, TestChaosFailover: the primary, which has a
//     synchronous streaming standby, is SIGKILLed under load and the
//     standby promoted; the serve processes, given both servers in one
//     multi-host DATABASE_URL, carry on without a restart, and nothing a
//     client saw is lost. The report says what clients saw and when the
//     first booking was committed again.
//
//   - TestChaosRestoreShort, TestChaosRestore: a base backup taken mid-run
//     replaces the primary when it dies, losing the commits made since;
//     still no client key is charged twice, no key is answered with
//     another's charge, and `keys reconcile` lists the charges no ride
//     records.
//
//   - TestChaosPgBouncerShort, TestChaosPgBouncer: the serve processes
//     reach PostgreSQL through PgBouncer in transaction pooling mode
//     (DATABASE_POOLER=pgbouncer, listeners on DATABASE_DIRECT_URL), and
//     PostgreSQL crashes and restarts behind it under load.
//
//   - TestChaosPatroniShort, TestChaosPatroni: a Patroni cluster on etcd;
//     the leader's Patroni and PostgreSQL are SIGKILLed and Patroni
//     promotes the synchronous standby by itself; the report gives the
//     times its REST API showed.
//
//   - TestChaosPatroniEtcdShort, TestChaosPatroniEtcd: etcd is killed for
//     longer than the leader key's TTL: never two primaries, only
//     retryable errors while none takes writes, and recovery by itself.
//
// The short forms run in go tool task test; the full ones need -chaos.full
// (go tool task chaos runs them all).
//   - TestProductionBinaryCarriesNoFailpoints: the binary as it ships holds
//     none of the failpoint machinery.
//
// docs/chaos.md tells what it proves and how to read its report.
package chaos
