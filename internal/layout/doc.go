// Package layout holds the repository's rules of who may import whom, as a
// test (layout_test.go) that `go tool task verify` and `task test` run:
// the idempotency engine (service/idem) knows no domain, the domain
// (service) knows no adapter, and each adapter reaches the domain only.
// docs/architecture.md explains the rules; this package keeps them.
package layout
