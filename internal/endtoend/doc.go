// Package endtoend holds the end-to-end suites of the built binary: several
// `serve` processes sharing one database, revocation across processes,
// River UI's guard, the servers' timeouts and the admin token's rules, each
// driven over real HTTP against real PostgreSQL, the fake Stripe and a mail
// sink. Tests of one command's own behaviour (flags, configuration errors,
// exit codes) stay beside the binary, in the repository's root.
package endtoend
