package pgenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DefaultPort is the port a throwaway cluster asks for when it has none from
// an earlier start; when that port is taken, any free port is used.
const DefaultPort = 54329

// Superuser is the role initdb creates in a throwaway cluster. It
// authenticates by trust, over TCP on 127.0.0.1 and over the cluster's own
// unix socket, and nowhere else.
const Superuser = "postgres"

// Cluster is a throwaway PostgreSQL cluster started from the installed server
// binaries. Its server outlives the process that started it; it is stopped
// by Stop or StopCluster.
type Cluster struct {
	// Dir is the directory given to StartCluster. It holds the state file
	// (state.json: URL, PID, where the files are) and the lock, and names
	// the cluster for StopCluster.
	Dir string
	// Root holds the cluster's files (data, run, postgres.log): Dir/cluster,
	// or, when the account running PostgreSQL cannot reach Dir (a project
	// under /root, say), a directory under the temp dir recorded in the
	// state file.
	Root string
	// DataDir is the cluster's PGDATA, Root/data.
	DataDir string
	// Port is the server's TCP port on 127.0.0.1; once stopped, the last one,
	// which the next start asks for first.
	Port int
	// PID is the postmaster's process id.
	PID int
	// URL connects as Superuser to the "postgres" database over TCP.
	URL string
	// Started is true when this call started the server, false when it found
	// it running and reused it.
	Started bool

	binDir    string
	acct      *account
	crashSafe bool
	// replication lets standbys stream the server's WAL (wal_level
	// replica, WAL senders); syncStandby, when set, is the
	// application_name of the standby whose flush every commit waits for.
	replication bool
	syncStandby string
	// primaryConninfo, on a standby, is how it reaches its primary.
	primaryConninfo string
}

// ClusterOptions adjust the server that StartClusterWith starts; a server
// that already runs is reused as it is.
type ClusterOptions struct {
	// Port is the port to ask for first. Zero asks for the cluster's last
	// port, then DefaultPort. When it is taken, any free port is used.
	Port int
	// CrashSafe acknowledges a commit only once its WAL reached the
	// operating system (synchronous_commit = on), so that committed
	// transactions survive a crash of the server, such as
	// RestartImmediate. fsync stays off: a crash of the machine may still
	// lose them.
	CrashSafe bool
	// Replication lets standbys stream from the server (wal_level =
	// replica, WAL senders; initdb's pg_hba.conf already lets replication
	// connections in by trust from 127.0.0.1), and lets BaseBackup copy it
	// while it runs. See StartStandby.
	Replication bool
}

// StartCluster returns the cluster kept in dir, running: it reuses the
// server if one already runs there, and otherwise initialises the cluster
// (once; and again if the installed major version changed, discarding the
// old data) and starts it. The server listens on 127.0.0.1 only, plus a unix
// socket in its Root/run, with trust authentication and durability off
// (fsync=off): it is for tests and local runs, never for data worth keeping.
//
// When running as root, PostgreSQL runs as the "postgres" account (or
// "nobody"), which then owns Root. Concurrent callers, in any processes,
// are serialised by a lock file in dir, so exactly one of them starts the
// server and the others reuse it.
func StartCluster(ctx context.Context, dir string) (*Cluster, error) {
	return StartClusterWith(ctx, dir, ClusterOptions{})
}

// StartClusterWith is StartCluster with options for the server it starts.
func StartClusterWith(ctx context.Context, dir string, opts ClusterOptions) (*Cluster, error) {
	c, unlock, err := openCluster(ctx, dir, true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	c.crashSafe, c.replication = opts.CrashSafe, opts.Replication

	running, err := c.attach(ctx)
	if err != nil {
		return nil, err
	}
	if !running {
		if err := c.initialise(ctx); err != nil {
			return nil, err
		}
		if err := c.start(ctx, []int{opts.Port, c.Port, DefaultPort}); err != nil {
			return nil, err
		}
		c.Started = true
	}
	if err := c.save(); err != nil {
		return nil, err
	}
	return c, nil
}

// Stop stops the cluster's server (fast shutdown: sessions are ended) and
// returns once the postmaster has exited. Stopping a stopped cluster is not an
// error. The data stays, for a quick restart.
func (c *Cluster) Stop(ctx context.Context) error {
	unlock, err := lockFile(ctx, filepath.Join(c.Dir, lockFileName))
	if err != nil {
		return err
	}
	defer unlock()
	if err := c.stop(ctx); err != nil {
		return err
	}
	return c.save()
}

// RestartImmediate crashes the cluster's server and starts it again, as a
// crash of PostgreSQL alone would: pg_ctl restart -m immediate ends every
// session at once, without a checkpoint, and the server recovers from its
// WAL as it starts. It returns once the server accepts connections again,
// on the same port.
func (c *Cluster) RestartImmediate(ctx context.Context) error {
	unlock, err := lockFile(ctx, filepath.Join(c.Dir, lockFileName))
	if err != nil {
		return err
	}
	defer unlock()
	if err := c.restartImmediate(ctx); err != nil {
		return err
	}
	return c.save()
}

// StopCluster stops the throwaway cluster kept in dir, as Stop does; it
// returns nil when dir holds no cluster or its server is not running.
func StopCluster(ctx context.Context, dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	c, unlock, err := openCluster(ctx, dir, false)
	if err != nil {
		return err
	}
	defer unlock()
	if c == nil {
		return nil
	}
	if err := c.stop(ctx); err != nil {
		return err
	}
	return c.save()
}

// openCluster locks dir and describes the cluster kept there; the caller
// must call the returned unlock (a no-op when the cluster is nil). With
// create, it makes dir and picks (and prepares) the cluster's Root; without,
// it returns a nil cluster when dir has none.
func openCluster(ctx context.Context, dir string, create bool) (*Cluster, func(), error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("pgenv: %w", err)
	}
	if create {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, nil, fmt.Errorf("pgenv: create %s: %w", dir, err)
		}
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, lockFileName))
	if err != nil {
		return nil, nil, err
	}
	c, err := describeCluster(ctx, dir, create)
	if err != nil || c == nil {
		unlock()
		return nil, func() {}, err
	}
	return c, unlock, nil
}

func describeCluster(ctx context.Context, dir string, create bool) (*Cluster, error) {
	acct, err := clusterAccount()
	if err != nil {
		return nil, err
	}
	st := readState(dir)
	c := &Cluster{Dir: dir, acct: acct}
	if st != nil {
		c.Port = st.Port // the last port, kept for the next start
	}
	if st != nil && st.BinDir != "" && hasServerPrograms(st.BinDir) && !create {
		c.binDir = st.BinDir
	} else if c.binDir, err = FindBinaries(); err != nil && create {
		return nil, err
	}
	if create {
		if c.Root, err = chooseRoot(ctx, dir, st, acct); err != nil {
			return nil, err
		}
	} else {
		c.Root = filepath.Join(dir, "cluster")
		if st != nil && st.Root != "" {
			c.Root = st.Root
		}
		if _, err := os.Stat(c.Root); err != nil {
			return nil, nil // nothing was ever started here
		}
	}
	c.DataDir = filepath.Join(c.Root, "data")
	return c, nil
}

func (c *Cluster) save() error {
	return writeState(c.Dir, &clusterState{
		URL:     c.URL,
		PID:     c.PID,
		Port:    c.Port,
		Root:    c.Root,
		DataDir: c.DataDir,
		BinDir:  c.binDir,
		Account: c.acct.String(),
	})
}
