package testkit

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/internal/pgenv"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// PgBouncer starts PgBouncer in transaction pooling mode in front of the
// test server (which must listen on 127.0.0.1), poolSize server
// connections per database, and stops it when t ends. Every database of
// the server, dbtest's included, is reachable through it (URL).
func PgBouncer(t testing.TB, poolSize int) *pgenv.PgBouncer {
	t.Helper()
	cfg, err := pgx.ParseConfig(dbtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "127.0.0.1" && cfg.Host != "localhost" {
		t.Fatalf("testkit: PgBouncer needs the test server on 127.0.0.1, not %s", cfg.Host)
	}
	// A directory the PostgreSQL account can reach when the tests run as
	// root (t.TempDir's parent is private to root).
	dir, err := os.MkdirTemp("", "testkit-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := pgenv.StartPgBouncer(context.Background(), dir, int(cfg.Port), pgenv.PgBouncerOptions{PoolSize: poolSize, User: cfg.User})
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatal(err)
	}
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			b.Stop()
			_ = os.RemoveAll(b.Root)
			_ = os.RemoveAll(dir)
		})
	})
	return b
}
