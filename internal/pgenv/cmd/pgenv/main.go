// Command pgenv gives the Taskfile (and people) the PostgreSQL server that
// package pgenv resolves.
//
//	pgenv url  [flags]              print a database URL: $DATABASE_URL, else 127.0.0.1:5432, else the
//	                                throwaway cluster (started if needed, unless -start=false)
//	pgenv up   [flags]              the same, always allowed to start the throwaway cluster (task db:up)
//	pgenv down [flags]              stop the throwaway cluster, if it runs (task db:down)
//	pgenv exec [flags] -- CMD ARGS  run CMD with DATABASE_URL (and, with -test, TEST_DATABASE_URL) set,
//	                                then stop the throwaway cluster if this call started it (task test)
//
// Flags, after the command: -test consults TEST_DATABASE_URL before
// DATABASE_URL; -dir sets the cluster's directory (default
// <project root>/.pgdata); -start=false never starts a cluster; -q logs
// nothing. Only the URL goes to stdout. PGENV_LOCAL_ADDR=off skips the
// 127.0.0.1:5432 probe.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/atomicrides/atomicrides/internal/pgenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

func run(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		return 2, errors.New("usage: pgenv url|up|down|exec [flags] (see go doc ./internal/pgenv/cmd/pgenv)")
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("pgenv "+cmd, flag.ContinueOnError)
	dir := fs.String("dir", "", "directory of the throwaway cluster (default <project root>/"+pgenv.DefaultDirName+")")
	test := fs.Bool("test", false, "consult TEST_DATABASE_URL before DATABASE_URL")
	start := fs.Bool("start", true, "allow starting the throwaway cluster")
	quiet := fs.Bool("q", false, "log nothing to stderr")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if *dir == "" {
		root, err := pgenv.FindProjectRoot("")
		if err != nil {
			return 1, err
		}
		*dir = filepath.Join(root, pgenv.DefaultDirName)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *quiet {
		logger = nil
	}
	opts := pgenv.Options{ClusterDir: *dir, Start: *start, Logger: logger}
	if *test {
		opts.EnvVars = pgenv.TestEnvVars()
	}

	switch cmd {
	case "url", "up":
		if cmd == "up" {
			opts.Start = true
		}
		db, err := pgenv.Resolve(ctx, opts)
		if err != nil {
			return 1, err
		}
		fmt.Println(db.URL)
		return 0, nil
	case "down":
		return exitCode(pgenv.StopCluster(ctx, *dir))
	case "exec":
		if fs.NArg() == 0 {
			return 2, errors.New("usage: pgenv exec [-test] -- CMD [ARGS...]")
		}
		db, err := pgenv.Resolve(ctx, opts)
		if err != nil {
			return 1, err
		}
		c := exec.Command(fs.Arg(0), fs.Args()[1:]...)
		c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
		c.Env = append(os.Environ(), "DATABASE_URL="+db.URL)
		if *test {
			c.Env = append(c.Env, "TEST_DATABASE_URL="+db.URL)
		}
		runErr := c.Run()
		if db.Started {
			if err := pgenv.StopCluster(context.WithoutCancel(ctx), *dir); err != nil {
				return 1, errors.Join(runErr, err)
			}
		}
		var exitErr *exec.ExitError
		if errors.As(runErr, &exitErr) {
			return exitErr.ExitCode(), nil
		}
		return exitCode(runErr)
	}
	return 2, fmt.Errorf("unknown command %q: want url, up, down or exec", cmd)
}

func exitCode(err error) (int, error) {
	if err != nil {
		return 1, err
	}
	return 0, nil
}
