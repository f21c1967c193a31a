package pgenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultStandbyName is the application_name a standby streams under when
// StandbyOptions.Name is empty; a synchronous primary names it in
// synchronous_standby_names.
const DefaultStandbyName = "pgenv_standby"

// StandbyOptions adjust the standby that StartStandby starts.
type StandbyOptions struct {
	// Port is the port to ask for first; when it is taken, any free port
	// is used.
	Port int
	// Synchronous makes the primary wait, at every commit, until the
	// standby has flushed the commit's WAL (synchronous_standby_names names
	// the standby, synchronous_commit = on): a commit a client saw
	// acknowledged survives the loss of the primary. Without it the standby
	// streams asynchronously and may be behind when it is promoted.
	Synchronous bool
	// Name is the standby's application_name; empty means
	// DefaultStandbyName.
	Name string
}

// BaseBackup copies the running cluster c, with pg_basebackup (WAL
// streamed alongside, a fast checkpoint), into a new cluster kept in dir,
// and returns that cluster, not running. Started with StartClusterWith, it
// is the database as it was when the backup ended: a restore that has lost
// every commit made since. c must have been started with
// ClusterOptions.Replication. dir must not hold a cluster yet.
func (c *Cluster) BaseBackup(ctx context.Context, dir string) (*Cluster, error) {
	if !c.replication {
		return nil, fmt.Errorf("pgenv: base backup of %s: the cluster was not started with ClusterOptions.Replication", c.DataDir)
	}
	b, unlock, err := openCluster(ctx, dir, true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := b.baseBackupFrom(ctx, c); err != nil {
		return nil, err
	}
	b.crashSafe, b.replication = c.crashSafe, true
	if err := b.save(); err != nil {
		return nil, err
	}
	return b, nil
}

// StartStandby makes the cluster kept in dir a streaming standby of
// primary, and starts it: a base backup of primary (see BaseBackup), a
// standby.signal file, and a primary_conninfo naming the standby; it
// returns once the primary reports the standby streaming (and, with
// Synchronous, as its synchronous standby). The standby answers read-only
// queries until Promote. primary must have been started with
// ClusterOptions.Replication.
func StartStandby(ctx context.Context, dir string, primary *Cluster, opts StandbyOptions) (*Cluster, error) {
	if !primary.replication {
		return nil, fmt.Errorf("pgenv: standby of %s: the primary was not started with ClusterOptions.Replication", primary.DataDir)
	}
	name := opts.Name
	if name == "" {
		name = DefaultStandbyName
	}
	s, unlock, err := openCluster(ctx, dir, true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.baseBackupFrom(ctx, primary); err != nil {
		return nil, err
	}
	signal := filepath.Join(s.DataDir, "standby.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		return nil, fmt.Errorf("pgenv: %w", err)
	}
	if err := s.acct.chownAll(signal); err != nil {
		return nil, fmt.Errorf("pgenv: %w", err)
	}
	s.crashSafe, s.replication = primary.crashSafe, true
	s.primaryConninfo = fmt.Sprintf("host=127.0.0.1 port=%d user=%s application_name=%s", primary.Port, Superuser, name)
	if err := s.start(ctx, []int{opts.Port}); err != nil {
		return nil, err
	}
	s.Started = true
	if err := s.save(); err != nil {
		return nil, err
	}
	if opts.Synchronous {
		if err := primary.setSyncStandby(ctx, name); err != nil {
			return nil, err
		}
	}
	want := "async"
	if opts.Synchronous {
		want = "sync"
	}
	if err := waitStreaming(ctx, primary.URL, name, want); err != nil {
		return nil, fmt.Errorf("pgenv: standby %s of %s: %w (see %s)", name, primary.DataDir, err, filepath.Join(s.Root, logName))
	}
	return s, nil
}

// Promote turns a standby into a primary (pg_ctl promote) and returns once
// it accepts writes. Its data are what it had received from its primary:
// everything the primary committed, for a synchronous standby.
func (c *Cluster) Promote(ctx context.Context) error {
	unlock, err := lockFile(ctx, filepath.Join(c.Dir, lockFileName))
	if err != nil {
		return err
	}
	defer unlock()
	logPath := filepath.Join(c.Root, logName)
	logStart := fileSize(logPath)
	out, err := c.acct.command(ctx, c.Root, filepath.Join(c.binDir, "pg_ctl"),
		"promote", "-D", c.DataDir, "-w", "-t", strconv.Itoa(int(readyTimeout/time.Second)), "-s",
	).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgenv: pg_ctl promote (as %s) on %s: %w\n%s\n%s says:\n%s",
			c.acct, c.DataDir, err, strings.TrimSpace(string(out)), logPath, lastLines(readFrom(logPath, logStart), 30))
	}
	c.primaryConninfo = "" // a later start writes no standby settings
	if err := c.save(); err != nil {
		return err
	}
	return waitReady(ctx, c.URL, readyTimeout)
}

// Kill ends the server as the loss of its machine would: SIGKILL to the
// postmaster and to every one of its processes at once, with no shutdown
// of any kind; connections are reset, and WAL not yet streamed to a
// standby is gone with the server. It returns once every process has
// exited. The cluster can be started again (StartClusterWith), as after a
// crash.
func (c *Cluster) Kill(ctx context.Context) error {
	unlock, err := lockFile(ctx, filepath.Join(c.Dir, lockFileName))
	if err != nil {
		return err
	}
	defer unlock()
	pid, _, err := readPostmasterPID(c.DataDir)
	if err != nil || !postmasterAlive(pid, c.DataDir) {
		return fmt.Errorf("pgenv: kill the server of %s: not running", c.DataDir)
	}
	if err := killServer(ctx, pid); err != nil {
		return err
	}
	c.PID, c.URL = 0, ""
	return c.save()
}

// baseBackupFrom runs pg_basebackup from src into c's DataDir, through a
// scratch directory renamed into place at the end, so that a DataDir that
// exists is always complete.
func (c *Cluster) baseBackupFrom(ctx context.Context, src *Cluster) error {
	if _, err := os.Stat(c.DataDir); err == nil {
		return fmt.Errorf("pgenv: %s already holds a cluster", c.DataDir)
	}
	if c.binDir == "" {
		return fmt.Errorf("pgenv: base backup into %s: %w", c.DataDir, ErrNoBinaries)
	}
	scratch := c.DataDir + ".init"
	if err := os.RemoveAll(scratch); err != nil {
		return fmt.Errorf("pgenv: remove stale %s: %w", scratch, err)
	}
	out, err := c.acct.command(ctx, c.Root, filepath.Join(c.binDir, "pg_basebackup"),
		"-D", scratch, "-d", fmt.Sprintf("host=127.0.0.1 port=%d user=%s", src.Port, Superuser),
		"-X", "stream", "-c", "fast", "--no-sync", "-w",
	).CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(scratch)
		return fmt.Errorf("pgenv: pg_basebackup (as %s) of port %d into %s: %w\n%s", c.acct, src.Port, scratch, err, out)
	}
	if err := os.Rename(scratch, c.DataDir); err != nil {
		return fmt.Errorf("pgenv: %w", err)
	}
	return nil
}

// setSyncStandby names the standby every commit of c waits for, and
// reloads c's settings.
func (c *Cluster) setSyncStandby(ctx context.Context, name string) error {
	unlock, err := lockFile(ctx, filepath.Join(c.Dir, lockFileName))
	if err != nil {
		return err
	}
	defer unlock()
	c.syncStandby = name
	if err := c.writeConf(c.Port); err != nil {
		return err
	}
	out, err := c.acct.command(ctx, c.Root, filepath.Join(c.binDir, "pg_ctl"), "reload", "-D", c.DataDir, "-s").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgenv: pg_ctl reload (as %s) on %s: %w\n%s", c.acct, c.DataDir, err, out)
	}
	return nil
}

// waitStreaming polls the primary at url until it reports the standby name
// streaming with sync_state want ("sync" or "async").
func waitStreaming(ctx context.Context, url, name, want string) error {
	deadline := time.Now().Add(readyTimeout)
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 250*time.Millisecond) {
		state, err := replicationState(ctx, url, name)
		if err == nil && state != "streaming "+want {
			err = fmt.Errorf("replication state %q, want %q", state, "streaming "+want)
		}
		if err == nil {
			return nil
		}
		if time.Now().Add(delay).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
}

// replicationState returns the state and sync_state the primary at url
// reports for the standby name, joined by a space.
func replicationState(ctx context.Context, url, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	var state string
	err = conn.QueryRow(ctx, `SELECT state || ' ' || sync_state FROM pg_stat_replication WHERE application_name = $1`, name).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return "not connected", nil
	}
	return state, err
}
