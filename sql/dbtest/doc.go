// Package dbtest gives each test its own PostgreSQL database, migrated to the
// current schema (the service's tables and River's), and drops it when the
// test ends.
//
// The server comes from package pgenv, resolved once per test process:
// TEST_DATABASE_URL, DATABASE_URL, a server on 127.0.0.1:5432, or a throwaway
// cluster that dbtest starts and leaves running for the next test processes
// (`task db:down` stops it). On it, a template database named after
// migrations.Hash is built once, for all test processes together, and every
// test database is a copy of it (CREATE DATABASE … TEMPLATE), which takes
// milliseconds rather than a migration run.
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		pool := dbtest.New(t)
//		…
//	}
package dbtest
