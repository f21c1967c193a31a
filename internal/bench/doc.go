// Package bench holds the benchmark harness: the built service measured as
// its users feel it, against baselines run by pgbench on the same
// PostgreSQL in the same run.
//
// BenchmarkRides (go tool task bench) sweeps client concurrencies, and at
// each measures new rides, replays of finished keys, and new rides with
// Stripe latency, each on a fresh serve process of the built binary (see
// package binrun) with the fake Stripe in a process of its own; beside them,
// pgbench runs the floor (the least SQL a ride needs), the seed's design and
// the service's own SQL, from the scripts in sql/bench of the module root.
// It writes report.md, results.json, throughput.png and the processes' logs
// to -rides.out (.bench at the module root); its other flags are
// -rides.clients, -rides.duration, -rides.warmup, -rides.stripe-latency,
// -rides.pool, -rides.users, -rides.pgbench-max-clients and
// -rides.seed-backoff. Run it with -benchtime 1x: each measurement lasts
// -rides.duration.
//
// TestBenchSmoke (part of go tool task test) runs the whole harness for a
// second per measurement at 3 clients, writing only under its t.TempDir(),
// and asserts that it measured something and wrote its files.
//
// See README.md, "Benchmarks".
package bench
