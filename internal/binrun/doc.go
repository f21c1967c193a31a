// Package binrun runs the project's own binary in tests, as a separate
// process: the way the root package's tests, the chaos harness
// (internal/chaos) and the benchmark harness (internal/bench) see the
// service as it ships.
//
// It builds the binary from the module root once per test process and build
// tag set ([Build]; [Main] removes the builds when the tests end), picks free
// loopback addresses ([FreeAddr], [FreePort]), starts the binary with an
// environment and arguments ([Start], [Cmd.Start]) in a working directory of
// its own, and waits for it to be ready ([Process.Ready]), stops it with
// SIGTERM ([Process.Stop]) or kills it ([Process.Kill]). Its output goes to a
// writer (a [Buffer] the test reads while the process writes) or a log file.
//
// Waiting is always on a condition, never on a fixed delay: [Poll] retries a
// condition with a short backoff within a bound, and [WaitFor] is the same
// for a test, failing it on timeout.
//
// A process started with [Start] runs in a directory under the test's
// t.TempDir(), so whatever it writes relative to its working directory
// (receipts of the built-in mail sink, say) is removed with the test.
package binrun
