package binrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

// Result is what a command that ran to its end printed, and its exit code.
type Result struct {
	Stdout, Stderr string
	ExitCode       int
}

// Run runs c to its end, for the binary's short commands (book, keys): it
// returns what the command printed on stdout and stderr (c.Output and
// c.LogPath are not used) and its exit code. The error is for a command that
// could not start, was killed by a signal, or outlived ctx; an exit code
// other than 0 is not an error.
func (c Cmd) Run(ctx context.Context) (Result, error) {
	cmd := exec.CommandContext(ctx, c.Bin, c.Args...)
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.Dir = c.Dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := Result{Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return res, fmt.Errorf("binrun: %v: %w\n%s", c.Args, ctx.Err(), res.Stderr)
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		res.ExitCode = exit.ExitCode()
	default:
		return res, fmt.Errorf("binrun: %v: %w\n%s", c.Args, err, res.Stderr)
	}
	return res, nil
}

// RunT runs the built binary (Build) with args to its end, with env added to
// the test's environment, in a temporary working directory, within a minute
// of its start,
// and fails tb if it could not be run at all.
func RunT(tb testing.TB, env []string, args ...string) Result {
	tb.Helper()
	bin := Build(tb) // not within the minute: a build may wait for a busy machine
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Cmd{Bin: bin, Args: args, Env: env, Dir: tb.TempDir()}.Run(ctx)
	if err != nil {
		tb.Fatalf("run %v: %v", args, err)
	}
	return res
}
