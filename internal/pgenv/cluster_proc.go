package pgenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// readyTimeout bounds every wait for the server: pg_ctl's -t and the
	// polls below.
	readyTimeout = 60 * time.Second
	logName      = "postgres.log" // in Root, appended to by every start
)

// attach adopts a postmaster already running on DataDir, waiting (bounded)
// until it accepts connections. It reports false when none runs.
func (c *Cluster) attach(ctx context.Context) (bool, error) {
	pid, port, err := readPostmasterPID(c.DataDir)
	if err != nil {
		return false, nil
	}
	if !postmasterAlive(pid, c.DataDir) {
		// Left by a crash. PostgreSQL would refuse to start while the pid
		// in its lock files names a live process (a zombie, or a reused
		// pid), so clear them: postmaster.pid and the socket's.
		stale, _ := filepath.Glob(filepath.Join(c.Root, "run", ".s.PGSQL.*"))
		for _, path := range append(stale, filepath.Join(c.DataDir, "postmaster.pid")) {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return false, fmt.Errorf("pgenv: remove stale lock file: %w", err)
			}
		}
		return false, nil
	}
	c.PID, c.Port, c.URL = pid, port, clusterURL(port)
	if err := waitReady(ctx, c.URL, readyTimeout); err != nil {
		return false, fmt.Errorf("pgenv: a postmaster (pid %d) runs on %s but does not accept connections on port %d (%w); see %s, or stop it with StopCluster",
			pid, c.DataDir, port, err, filepath.Join(c.Root, logName))
	}
	return true, nil
}

// start starts the server on the first free port of prefer (else any free
// port), retrying a few times: on another port if one is taken between the
// check and postgres's bind, and after a pause if a crashed server's
// backends still hold its shared memory.
func (c *Cluster) start(ctx context.Context, prefer []int) error {
	logPath := filepath.Join(c.Root, logName)
	tried := map[int]bool{}
	for attempt := 1; ; attempt++ {
		port, err := freePort(prefer, tried)
		if err != nil {
			return err
		}
		tried[port] = true
		if err := c.writeConf(port); err != nil {
			return err
		}
		logStart := fileSize(logPath)
		out, err := c.acct.command(ctx, c.Root, filepath.Join(c.binDir, "pg_ctl"),
			"start", "-D", c.DataDir, "-l", logPath, "-w", "-t", strconv.Itoa(int(readyTimeout/time.Second)), "-s",
		).CombinedOutput()
		if err == nil {
			break
		}
		log := readFrom(logPath, logStart)
		if attempt < 5 && (strings.Contains(log, "could not bind") || strings.Contains(log, "already in use")) {
			continue // another process took the port: try another
		}
		if attempt < 5 && strings.Contains(log, "shared memory block") && strings.Contains(log, "still in use") {
			// Backends of a crashed postmaster have not all exited yet.
			delete(tried, port)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
			continue
		}
		return fmt.Errorf("pgenv: pg_ctl start (as %s) on %s, port %d: %w\n%s\n%s says:\n%s",
			c.acct, c.DataDir, port, err, strings.TrimSpace(string(out)), logPath, lastLines(log, 30))
	}
	pid, port, err := readPostmasterPID(c.DataDir)
	if err != nil {
		return fmt.Errorf("pgenv: started, but %w", err)
	}
	c.PID, c.Port, c.URL = pid, port, clusterURL(port)
	return waitReady(ctx, c.URL, readyTimeout)
}

// restartImmediate runs pg_ctl restart -m immediate and waits until the new
// server accepts connections.
func (c *Cluster) restartImmediate(ctx context.Context) error {
	if c.binDir == "" {
		return fmt.Errorf("pgenv: cannot restart the server of %s: %w", c.DataDir, ErrNoBinaries)
	}
	logPath := filepath.Join(c.Root, logName)
	logStart := fileSize(logPath)
	out, err := c.acct.command(ctx, c.Root, filepath.Join(c.binDir, "pg_ctl"),
		"restart", "-D", c.DataDir, "-m", "immediate", "-l", logPath,
		"-w", "-t", strconv.Itoa(int(readyTimeout/time.Second)), "-s",
	).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgenv: pg_ctl restart -m immediate (as %s) on %s: %w\n%s\n%s says:\n%s",
			c.acct, c.DataDir, err, strings.TrimSpace(string(out)), logPath, lastLines(readFrom(logPath, logStart), 30))
	}
	pid, port, err := readPostmasterPID(c.DataDir)
	if err != nil {
		return fmt.Errorf("pgenv: restarted, but %w", err)
	}
	c.PID, c.Port, c.URL = pid, port, clusterURL(port)
	return waitReady(ctx, c.URL, readyTimeout)
}

// stop stops a running server and waits until its postmaster has exited.
func (c *Cluster) stop(ctx context.Context) error {
	defer func() { c.PID, c.URL = 0, "" }()
	pid, _, err := readPostmasterPID(c.DataDir)
	if err != nil || !postmasterAlive(pid, c.DataDir) {
		return nil
	}
	if c.binDir == "" {
		return fmt.Errorf("pgenv: cannot stop the postmaster (pid %d) of %s: %w", pid, c.DataDir, ErrNoBinaries)
	}
	out, err := c.acct.command(ctx, c.Root, filepath.Join(c.binDir, "pg_ctl"),
		"stop", "-D", c.DataDir, "-m", "fast", "-w", "-t", strconv.Itoa(int(readyTimeout/time.Second)), "-s",
	).CombinedOutput()
	if err != nil && postmasterAlive(pid, "") {
		return fmt.Errorf("pgenv: pg_ctl stop (as %s) on %s: %w\n%s", c.acct, c.DataDir, err, out)
	}
	// pg_ctl returns once postmaster.pid is gone, a moment before the
	// process itself.
	deadline := time.Now().Add(readyTimeout)
	for delay := time.Millisecond; postmasterAlive(pid, ""); delay = min(2*delay, 100*time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("pgenv: postmaster %d of %s still runs %s after pg_ctl stop", pid, c.DataDir, readyTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
	return nil
}

func clusterURL(port int) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", Superuser, port)
}

// readPostmasterPID reads the postmaster's pid and port from the lock file
// the server keeps in its data directory while it runs.
func readPostmasterPID(dataDir string) (pid, port int, err error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, 0, err
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0, 0, fmt.Errorf("pgenv: %s/postmaster.pid is incomplete", dataDir)
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, err2 := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("pgenv: %s/postmaster.pid: %w", dataDir, err)
	}
	return pid, port, nil
}

// freePort returns the first of prefer that can be bound on 127.0.0.1 and was
// not tried, else a port the kernel picks.
func freePort(prefer []int, tried map[int]bool) (int, error) {
	for _, p := range prefer {
		if p <= 0 || tried[p] {
			continue
		}
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			_ = l.Close()
			return p, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgenv: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ping connects to url once.
func ping(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// waitReady polls a connection to url until one succeeds, ctx ends or
// timeout passes.
func waitReady(ctx context.Context, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 250*time.Millisecond) {
		err := ping(ctx, url, 5*time.Second)
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

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readFrom returns what path holds past offset (at most 64 KiB of it).
func readFrom(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(io.NewSectionReader(f, offset, 1<<62), 64<<10))
	return string(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
