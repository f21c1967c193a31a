// Package bench holds the benchmark harness: the built service measured as
// its users feel it, against baselines run by pgbench on the same
// PostgreSQL in the same run.
//
// BenchmarkRides (go tool task bench) sweeps client concurrencies, and at
// each measures new rides, new rides through PgBouncer in transaction
// pooling mode on the same database (DATABASE_POOLER=pgbouncer, against the
// direct ones), replays of finished keys, new rides with Stripe latency, and
// trips (CAPTURE=trip: each client books a ride, its fare held, then
// completes it as the dispatch side, the fake Stripe capturing the fare),
// each on a fresh serve process of the built binary (see package binrun)
// with the fake Stripe and a mail sink (which keeps no file) in processes of
// their own; beside them, pgbench runs the floor (the least SQL a ride
// needs), the floor with its receipt (the receipt job's fetch, the receipt
// and the job's completion), the floor of a trip (the least SQL of a booking
// held and then completed: four commits), the seed's design and the
// service's own SQL, from the scripts in sql/bench of the module root. Each
// measurement reports the CPU per ride of every process, read from /proc
// (cpuSampler: the measured database's backends, the server, the fake
// Stripe, the mail sink, the load generator or pgbench), and the round trips
// and statements the server sent per ride, read from its /metrics
// (service.DBCounter). The load generator speaks HTTP/1.1 itself (leanConn)
// so that its own CPU stays small, and is reported. Then, on a deployment
// holding -rides.grow-keys finished keys loaded with SQL, it measures new
// rides and first replays again, and new rides during a reaper pass. Last,
// with the limits on (package limits), the noisy-neighbour run
// (noisy_test.go: one rider at ten times its budget beside quiet riders, and
// the CPU of a refusal against a booking's) and the overload run
// (overload_test.go: a test of metastability on one process of trips with
// the admission control at its defaults — the saturated throughput found
// by a sweep, then the saturating clients, ten times them and them again,
// then an open loop at ten times the saturated throughput, every client
// timing out and retrying, with completions, refunds and replays mixed in;
// per 100 ms the goodput and the server's admission limit, overload.png;
// and the fake Stripe's ledger), each left out with -rides.noisy=false or
// -rides.overload=false; they append their sections to report.md. It writes
// report.md, results.json, throughput.png and the processes' logs to
// -rides.out (.bench at the module root); its other flags are
// -rides.clients, -rides.duration, -rides.warmup, -rides.stripe-latency,
// -rides.pool, -rides.users, -rides.pgbench-max-clients, -rides.seed-backoff
// and -rides.cpuprofile (the server's CPU profile over each measured run,
// taken through PPROF_ADDR: go tool task pgo merges them into default.pgo).
// Run it with -benchtime 1x: each measurement lasts -rides.duration.
// BenchmarkTrips measures the trips alone, with the same flags, and writes
// report-trips.md.
//
// TestBenchSmoke (part of go tool task test) runs the whole harness for a
// second per measurement at 3 clients, with thirty thousand grown keys,
// writing only under its t.TempDir(), and asserts that it measured something
// (CPU of every process, round trips, trips completed with their receipt
// jobs, the floors' commits) and wrote its files.
//
// docs/benchmarks.md tells what each target means and holds the figures.
package bench
