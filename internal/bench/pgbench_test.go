package bench

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/atomicrides/atomicrides/internal/binrun"
	"github.com/atomicrides/atomicrides/internal/pgenv"
)

// pgbenchRun is what one pgbench run measured.
type pgbenchRun struct {
	// Clients is the number of pgbench clients (connections).
	Clients int
	// TPS is runs of the script per second: rides/s for the ride scripts,
	// selects/s for the select script.
	TPS float64
	// Done counts the script runs completed; Failed those that gave up.
	Done, Failed int
	// Retries counts reruns after serialization failures or deadlocks.
	Retries int
	// CommitsPerRun is the database's committed transactions per completed
	// script run (pg_stat_database), when measured.
	CommitsPerRun float64
	// CPU is the CPU per completed script run of the database's backends
	// and of pgbench (Load).
	CPU cpuShare
	// OwnCPU is pgbench's own CPU time, user and system.
	OwnCPU time.Duration
}

// pgbenchScript is the path of the pgbench script name, in sql/bench of the
// module root (go test runs in this package's directory).
func pgbenchScript(tb testing.TB, name string) string {
	tb.Helper()
	root, err := binrun.ModuleRoot()
	if err != nil {
		tb.Fatal(err)
	}
	return filepath.Join(root, "sql", "bench", name)
}

// findPgbench returns the pgbench on PATH, else the one beside the installed
// server binaries.
func findPgbench() (string, error) {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	dir, err := pgenv.FindBinaries()
	if err != nil {
		return "", fmt.Errorf("pgbench is not on PATH and %w", err)
	}
	p := filepath.Join(dir, "pgbench")
	if _, err := exec.LookPath(p); err != nil {
		return "", fmt.Errorf("pgbench is neither on PATH nor in %s (Debian: apt-get install postgresql-contrib)", dir)
	}
	return p, nil
}

// pgbenchArgs configure one pgbench run.
type pgbenchArgs struct {
	bin      string
	url      string
	script   string
	clients  int
	duration time.Duration
	// vars are pgbench variables (-D name=value).
	vars map[string]string
	// maxTries above 1 retries serialization failures and deadlocks.
	maxTries int
}

var (
	pgbenchTPS     = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)
	pgbenchDone    = regexp.MustCompile(`(?m)^number of transactions actually processed: ([0-9]+)`)
	pgbenchFailed  = regexp.MustCompile(`(?m)^number of failed transactions: ([0-9]+)`)
	pgbenchRetries = regexp.MustCompile(`(?m)^total number of retries: ([0-9]+)`)
)

// runPgbench runs pgbench over a custom script (no vacuum, prepared
// statements) for a whole number of seconds, and parses its summary. A client
// aborted by an error fails the run.
func runPgbench(ctx context.Context, a pgbenchArgs) (pgbenchRun, error) {
	secs := max(1, int((a.duration+time.Second-1)/time.Second))
	args := []string{
		"-n", "-M", "prepared", "-f", a.script,
		"-c", strconv.Itoa(a.clients), "-j", strconv.Itoa(min(a.clients, runtime.NumCPU())),
		"-T", strconv.Itoa(secs),
	}
	if a.maxTries > 1 {
		args = append(args, "--max-tries", strconv.Itoa(a.maxTries))
	}
	for k, v := range a.vars {
		args = append(args, "-D", k+"="+v)
	}
	args = append(args, a.url)
	cmd := exec.CommandContext(ctx, a.bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return pgbenchRun{}, fmt.Errorf("pgbench -f %s -c %d: %w\n%s", a.script, a.clients, err, tail(out.String(), 2000))
	}
	run := pgbenchRun{Clients: a.clients}
	if ps := cmd.ProcessState; ps != nil {
		run.OwnCPU = ps.UserTime() + ps.SystemTime()
	}
	m := pgbenchTPS.FindStringSubmatch(out.String())
	if m == nil {
		return pgbenchRun{}, fmt.Errorf("pgbench -f %s: no tps in its output:\n%s", a.script, tail(out.String(), 2000))
	}
	run.TPS, _ = strconv.ParseFloat(m[1], 64)
	for re, dst := range map[*regexp.Regexp]*int{pgbenchDone: &run.Done, pgbenchFailed: &run.Failed, pgbenchRetries: &run.Retries} {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			*dst, _ = strconv.Atoi(m[1])
		}
	}
	return run, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
