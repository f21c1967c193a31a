package dbtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/atomicrides/atomicrides/internal/pgenv"
	"github.com/atomicrides/atomicrides/internal/pguuid"
)

// DefaultMaxConns is the size limit of a pool from New unless WithMaxConns
// says otherwise. It is small because hundreds of tests may hold pools at
// once against one server.
const DefaultMaxConns = 10

// Option adjusts what New returns.
type Option func(*options)

type options struct {
	maxConns int32
}

// WithMaxConns sets the most connections the pool from New opens (n ≥ 1).
func WithMaxConns(n int32) Option {
	return func(o *options) { o.maxConns = max(n, 1) }
}

// New creates a fresh database for t, migrated to the current schema, and
// returns a pool connected to it. When t ends, the pool is closed and the
// database dropped (its remaining sessions ended). Safe for parallel tests.
func New(t testing.TB, opts ...Option) *pgxpool.Pool {
	t.Helper()
	o := options{maxConns: DefaultMaxConns}
	for _, opt := range opts {
		opt(&o)
	}
	url := NewURL(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	cfg.MaxConns = o.maxConns
	cfg.AfterConnect = pguuid.AfterConnect // as the service's pools
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("dbtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close) // runs before NewURL's drop: cleanups run last-in first-out
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("dbtest: connect to the test database: %v", err)
	}
	return pool
}

// NewURL creates a fresh database for t, migrated to the current schema, and
// returns a URL for it, for tests that connect by themselves (another
// process, say). When t ends the database is dropped, ending whatever
// sessions it still has.
func NewURL(t testing.TB) string {
	t.Helper()
	s := getServer(t)
	name := newDatabaseName(time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.createDatabase(ctx, name); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.dropDatabase(ctx, name); err != nil {
			t.Errorf("dbtest: %v", err)
		}
	})
	url, err := pgenv.WithDatabase(s.adminURL, name)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	return url
}

// AdminURL returns a URL for the maintenance database of the server the tests
// use: a role there may create and drop databases. Tests must not change
// anything else in it.
func AdminURL(t testing.TB) string {
	t.Helper()
	return getServer(t).adminURL
}

// DatabaseURL returns a URL for the database name on the server the tests
// use. It neither creates the database nor checks that it exists.
func DatabaseURL(t testing.TB, name string) string {
	t.Helper()
	url, err := pgenv.WithDatabase(AdminURL(t), name)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	return url
}

// Open creates a fresh database, migrated to the current schema, outside
// any test: for a TestMain whose examples (which have no testing.T) need a
// database. It returns a pool on it and a function that closes the pool
// and drops the database.
func Open(ctx context.Context) (*pgxpool.Pool, func(), error) {
	serverOnce.Do(func() { theServer, serverErr = setupServer() })
	if serverErr != nil {
		return nil, nil, fmt.Errorf("dbtest: %w", serverErr)
	}
	s := theServer
	name := newDatabaseName(time.Now())
	if err := s.createDatabase(ctx, name); err != nil {
		return nil, nil, fmt.Errorf("dbtest: %w", err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = s.dropDatabase(ctx, name)
	}
	url, err := pgenv.WithDatabase(s.adminURL, name)
	if err != nil {
		drop()
		return nil, nil, fmt.Errorf("dbtest: %w", err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		drop()
		return nil, nil, fmt.Errorf("dbtest: %w", err)
	}
	cfg.MaxConns = DefaultMaxConns
	cfg.AfterConnect = pguuid.AfterConnect
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		drop()
		return nil, nil, fmt.Errorf("dbtest: open pool: %w", err)
	}
	return pool, func() { pool.Close(); drop() }, nil
}
