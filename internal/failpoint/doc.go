// Package failpoint crashes the process on purpose at named points, so that
// a test harness can prove that a request survives a crash at each of them.
//
// It is compiled in only with the build tag "failpoints". Without it,
// Enabled is the constant false and Hit does nothing; callers guard their
// calls with Enabled, so the compiler drops them and a production binary
// carries no failpoint code or names.
//
// With the tag, the environment variable ATOMICRIDES_FAILPOINTS arms points
// when the process starts: a comma-separated list of name=action, where the
// action is "crash" (on the first hit) or "crash@N" (on the N-th hit of that
// point in this process), e.g.
//
//	ATOMICRIDES_FAILPOINTS=ride.create:ride_created:after_call=crash@3
//
// A crash writes "failpoint <name>: crash" to standard error and sends the
// process SIGKILL: no deferred function runs, no connection is closed
// gracefully, nothing is flushed.
package failpoint

// EnvVar names the environment variable that arms failpoints in a build
// with the "failpoints" tag.
const EnvVar = "ATOMICRIDES_FAILPOINTS"
