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
	pool, err := openPool(NewURL(t), o.maxConns)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(pool.Close) // runs before NewURL's drop: cleanups run last-in first-out
	return pool
}

// NewURL creates a fresh database for t, migrated to the current schema, and
// returns a URL for it, for tests that connect by themselves (another
// process, say). When t ends the database is dropped, ending whatever
// sessions it still has.
func NewURL(t testing.TB) string {
	t.Helper()
	url, drop, err := createDatabase(getServer(t))
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Errorf("dbtest: %v", err)
		}
	})
	return url
}

// createDatabase creates a fresh database on s from the template and
// returns its URL and the function that drops it.
func createDatabase(s *server) (url string, drop func() error, err error) {
	name := newDatabaseName(time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.createDatabase(ctx, name); err != nil {
		return "", nil, err
	}
	drop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return s.dropDatabase(ctx, name)
	}
	if url, err = pgenv.WithDatabase(s.adminURL, name); err != nil {
		_ = drop()
		return "", nil, err
	}
	return url, drop, nil
}

// openPool opens a pool of maxConns on url, as the service opens its own
// (pguuid), and checks that it connects.
func openPool(url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	cfg.AfterConnect = pguuid.AfterConnect // as the service's pools
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to the test database: %w", err)
	}
	return pool, nil
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
func Open() (*pgxpool.Pool, func(), error) {
	serverOnce.Do(func() { theServer, serverErr = setupServer() })
	if serverErr != nil {
		return nil, nil, fmt.Errorf("dbtest: %w", serverErr)
	}
	url, drop, err := createDatabase(theServer)
	if err != nil {
		return nil, nil, fmt.Errorf("dbtest: %w", err)
	}
	pool, err := openPool(url, DefaultMaxConns)
	if err != nil {
		_ = drop()
		return nil, nil, fmt.Errorf("dbtest: %w", err)
	}
	return pool, func() { pool.Close(); _ = drop() }, nil
}
