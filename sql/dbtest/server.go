package dbtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/atomicrides/atomicrides/internal/pgenv"
)

const (
	// setupTimeout bounds finding the server, starting a cluster and
	// building the template.
	setupTimeout = 3 * time.Minute
	// maxConcurrentDDL caps this process's CREATE/DROP DATABASE statements
	// in flight: more only queue inside the server.
	maxConcurrentDDL = 4
)

// server is the database server of this test process, set up once.
type server struct {
	adminURL string        // maintenance database
	admin    *pgxpool.Pool // for CREATE/DROP DATABASE
	template string        // migrated template of every test database
	ddl      chan struct{} // semaphore of maxConcurrentDDL
}

var (
	serverOnce sync.Once
	theServer  *server
	serverErr  error
)

// getServer returns the process's server, setting it up on first use; it
// fails t (and every later test) if that failed.
func getServer(t testing.TB) *server {
	t.Helper()
	serverOnce.Do(func() { theServer, serverErr = setupServer() })
	if serverErr != nil {
		t.Fatalf("dbtest: %v", serverErr)
	}
	return theServer
}

func setupServer() (*server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	db, err := pgenv.Resolve(ctx, pgenv.Options{EnvVars: pgenv.TestEnvVars(), Start: true})
	if err != nil {
		return nil, err
	}
	if db.Started {
		fmt.Fprintf(os.Stderr, "dbtest: started a throwaway PostgreSQL cluster (%s); it stays up for later tests, `task db:down` stops it\n", db.Source)
	}
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConcurrentDDL
	admin, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s := &server{adminURL: db.URL, admin: admin, template: templateName(), ddl: make(chan struct{}, maxConcurrentDDL)}
	if err := ensureTemplate(ctx, s.adminURL, s.admin, s.template); err != nil {
		admin.Close()
		return nil, fmt.Errorf("%w (server from %s)", err, db.Source)
	}
	s.dropStale(ctx, time.Now())
	return s, nil
}

// createDatabase creates name as a copy of the template.
func (s *server) createDatabase(ctx context.Context, name string) error {
	release, err := s.acquireDDL(ctx)
	if err != nil {
		return err
	}
	defer release()
	sql := "CREATE DATABASE " + ident(name) + " TEMPLATE " + ident(s.template)
	if err := retryInUse(ctx, func() error { _, err := s.admin.Exec(ctx, sql); return err }); err != nil {
		return fmt.Errorf("create test database %s from %s: %w", name, s.template, err)
	}
	return nil
}

// dropDatabase drops name, ending its sessions.
func (s *server) dropDatabase(ctx context.Context, name string) error {
	release, err := s.acquireDDL(ctx)
	if err != nil {
		return err
	}
	defer release()
	if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop test database %s: %w", name, err)
	}
	return nil
}

func (s *server) acquireDDL(ctx context.Context) (func(), error) {
	select {
	case s.ddl <- struct{}{}:
		return func() { <-s.ddl }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }
