package pgenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
)

const (
	// DefaultDatabase is the database Resolve uses, creating it if needed,
	// on a server it found or started (never on one given by URL).
	DefaultDatabase = "atomicrides"
	// DefaultLocalAddr is where Resolve looks for an already running server.
	DefaultLocalAddr = "127.0.0.1:5432"
	// LocalAddrEnv names the environment variable that replaces
	// DefaultLocalAddr when Options.LocalAddr is empty; LocalOff there
	// skips the probe, as if no server ran (handy to test the cluster path
	// on a machine that has one).
	LocalAddrEnv = "PGENV_LOCAL_ADDR"
	// LocalOff, as Options.LocalAddr or in LocalAddrEnv, skips the probe.
	LocalOff = "off"
)

// ErrNoPostgres is wrapped by Resolve's error when it found no server and
// could not (or was not allowed to) start one; the message says how to get
// PostgreSQL.
var ErrNoPostgres = errors.New("pgenv: no PostgreSQL server available")

// DefaultEnvVars returns the environment variables Resolve consults when
// Options.EnvVars is nil: DATABASE_URL.
func DefaultEnvVars() []string { return []string{"DATABASE_URL"} }

// TestEnvVars returns the environment variables tests consult, in order:
// TEST_DATABASE_URL, then DATABASE_URL.
func TestEnvVars() []string { return []string{"TEST_DATABASE_URL", "DATABASE_URL"} }

// Options steer Resolve. The zero value consults DATABASE_URL, then a server
// on 127.0.0.1:5432, then a throwaway cluster that is already running, and
// starts none.
type Options struct {
	// ProjectDir is where the project root (the nearest directory with a
	// go.mod) is searched from; empty means the working directory. The
	// throwaway cluster lives in <project root>/.pgdata.
	ProjectDir string
	// ClusterDir, if set, replaces <project root>/.pgdata as the throwaway
	// cluster's directory (see StartCluster).
	ClusterDir string
	// EnvVars are the environment variables holding a connection URL or DSN
	// to consult, in order; the first one set wins and is used as is. Nil
	// means DefaultEnvVars(); an empty, non-nil slice consults none.
	EnvVars []string
	// LocalAddr is the host:port probed for a running server; empty means
	// $PGENV_LOCAL_ADDR, else DefaultLocalAddr; LocalOff skips the probe.
	LocalAddr string
	// Start allows starting a throwaway cluster when nothing else is found.
	// Without it, only a cluster that already runs is used.
	Start bool
	// Database is the database to use, created if missing, on a server that
	// was found or started; empty means DefaultDatabase.
	Database string
	// Logger receives a line saying which server was chosen; nil discards.
	Logger *slog.Logger
}

// Database is the outcome of Resolve.
type Database struct {
	// URL connects to a database that exists.
	URL string
	// Source says where URL came from: "env:<VAR>", "local:<host:port>" or
	// "cluster:<dir>", dir being what StopCluster takes.
	Source string
	// Started is true when Resolve started the throwaway cluster (rather
	// than finding it running); whoever wants to leave no server behind
	// stops it with StopCluster.
	Started bool
}

// Resolve finds the PostgreSQL server to use, in the order the package
// documentation gives, and returns a URL for a database on it. It fails with
// an error wrapping ErrNoPostgres, which says how to get PostgreSQL, when
// there is none.
func Resolve(ctx context.Context, opts Options) (*Database, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	envVars := opts.EnvVars
	if envVars == nil {
		envVars = DefaultEnvVars()
	}
	for _, name := range envVars {
		if v := os.Getenv(name); v != "" {
			if _, err := pgx.ParseConfig(v); err != nil {
				return nil, fmt.Errorf("pgenv: %s: %w", name, err)
			}
			log.Info("pgenv: using the database given by the environment", "var", name)
			return &Database{URL: v, Source: "env:" + name}, nil
		}
	}
	dbName := opts.Database
	if dbName == "" {
		dbName = DefaultDatabase
	}

	addr := localAddr(opts.LocalAddr)
	var localErr error
	if addr != "" {
		admin, err := probeLocal(ctx, addr)
		if err == nil {
			u, err := ensureDatabase(ctx, admin, dbName)
			if err != nil {
				return nil, err
			}
			log.Info("pgenv: using the running server", "addr", addr, "database", dbName)
			return &Database{URL: u, Source: "local:" + addr}, nil
		}
		localErr = err
	}

	dir := opts.ClusterDir
	if dir == "" {
		root, err := FindProjectRoot(opts.ProjectDir)
		if err != nil {
			return nil, err
		}
		dir = filepath.Join(root, DefaultDirName)
	}
	var c *Cluster
	if opts.Start {
		if _, err := FindBinaries(); err != nil {
			return nil, noPostgres(envVars, addr, localErr, dir, err)
		}
		var err error
		if c, err = StartCluster(ctx, dir); err != nil {
			return nil, err
		}
	} else {
		var err error
		if c, err = runningCluster(ctx, dir); err != nil {
			return nil, err
		}
		if c == nil {
			return nil, noPostgres(envVars, addr, localErr, dir, nil)
		}
	}
	u, err := ensureDatabase(ctx, c.URL, dbName)
	if err != nil {
		return nil, err
	}
	log.Info("pgenv: using the throwaway cluster", "dir", c.Root, "port", c.Port, "started", c.Started, "database", dbName)
	return &Database{URL: u, Source: "cluster:" + c.Dir, Started: c.Started}, nil
}

// runningCluster returns the cluster of dir if its server runs, else nil.
func runningCluster(ctx context.Context, dir string) (*Cluster, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, nil
	}
	c, unlock, err := openCluster(ctx, dir, false)
	if err != nil || c == nil {
		return nil, err
	}
	defer unlock()
	if ok, err := c.attach(ctx); !ok {
		return nil, err
	}
	return c, nil
}

func localAddr(addr string) string {
	if addr == "" {
		addr = os.Getenv(LocalAddrEnv)
	}
	switch addr {
	case "":
		return DefaultLocalAddr
	case LocalOff:
		return ""
	}
	return addr
}

// noPostgres explains what was tried and how to get a server.
func noPostgres(envVars []string, addr string, localErr error, dir string, startErr error) error {
	var b strings.Builder
	if len(envVars) > 0 {
		fmt.Fprintf(&b, "\n  - %s: not set", strings.Join(envVars, ", "))
	}
	if addr == "" {
		fmt.Fprintf(&b, "\n  - running server: not probed (%s=%s)", LocalAddrEnv, LocalOff)
	} else {
		fmt.Fprintf(&b, "\n  - running server on %s: %v", addr, localErr)
	}
	if startErr != nil {
		fmt.Fprintf(&b, "\n  - throwaway cluster in %s: %v", dir, startErr)
	} else {
		fmt.Fprintf(&b, "\n  - throwaway cluster in %s: not running, and starting one was not asked for (task db:up, or go run ./internal/pgenv/cmd/pgenv up, starts it)", dir)
	}
	msg := fmt.Sprintf(`%v; tried:%s
To get one, do any of:
  - install PostgreSQL's server programs and rerun; a throwaway cluster is then started in %s:
      Debian/Ubuntu: sudo apt-get install postgresql    Fedora: sudo dnf install postgresql-server    macOS: brew install postgresql@17
  - start a server on %s that the user postgres (or your OS user) can reach without a password
  - set DATABASE_URL (for tests: TEST_DATABASE_URL), e.g. postgres://USER:PASSWORD@HOST:5432/atomicrides?sslmode=disable`,
		ErrNoPostgres, b.String(), dir, DefaultLocalAddr)
	return &noPostgresError{msg: msg, cause: startErr}
}

// noPostgresError is ErrNoPostgres with its explanation, wrapping also why
// no cluster could start (ErrNoBinaries, say).
type noPostgresError struct {
	msg   string
	cause error
}

func (e *noPostgresError) Error() string { return e.msg }

func (e *noPostgresError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrNoPostgres}
	}
	return []error{ErrNoPostgres, e.cause}
}
