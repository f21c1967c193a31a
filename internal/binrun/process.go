package binrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Cmd is one run of the binary: what to run and where its output goes.
type Cmd struct {
	// Bin is the binary, usually from [Build].
	Bin string
	// Args are the command and its flags ("serve", "-no-migrate").
	Args []string
	// Env is added to the test process's environment (later entries win).
	Env []string
	// Dir is the working directory; empty: the test process's. [Start]
	// sets it to a directory under the test's t.TempDir() when empty.
	Dir string
	// Output receives stdout and stderr, unless LogPath is set; nil
	// discards them.
	Output io.Writer
	// LogPath, when set, is a file that stdout and stderr are appended to
	// (created if needed), closed when the process exits.
	LogPath string
}

// Process is the binary running one command. Its owner stops it, with
// [Process.Stop] or [Process.Kill]; [Start] registers a kill with the test.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit status, set before done is closed
}

// Start starts c. The caller owns the process: stop it, or kill it, before
// the test ends.
func (c Cmd) Start() (*Process, error) {
	cmd := exec.Command(c.Bin, c.Args...)
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.Dir = c.Dir
	out := c.Output
	var logFile *os.File
	if c.LogPath != "" {
		f, err := os.OpenFile(c.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("binrun: %w", err)
		}
		logFile, out = f, f
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		if logFile != nil {
			_ = logFile.Close()
		}
		return nil, fmt.Errorf("binrun: start %s %v: %w", c.Bin, c.Args, err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		if logFile != nil {
			_ = logFile.Close()
		}
		close(p.done)
	}()
	return p, nil
}

// Start starts c for a test, in a working directory under tb.TempDir() when
// c.Dir is empty, and fails the test if it cannot. A process still running
// when the test ends is killed, and waited for, before the test's temporary
// directories are removed.
func Start(tb testing.TB, c Cmd) *Process {
	tb.Helper()
	if c.Dir == "" {
		c.Dir = tb.TempDir()
	}
	p, err := c.Start()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Kill)
	return p
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit status (nil: exit 0), once [Process.Done] is
// closed; nil before.
func (p *Process) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Signal sends sig to the process; a process that has exited is not an
// error.
func (p *Process) Signal(sig os.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// Kill sends SIGKILL and waits until the process has exited.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop asks the process to end (SIGTERM) and waits up to grace; a process
// still running then is killed. It returns the exit status, or an error
// saying the process had to be killed.
func (p *Process) Stop(grace time.Duration) error {
	if err := p.Signal(syscall.SIGTERM); err != nil {
		p.Kill()
		return fmt.Errorf("binrun: SIGTERM: %w", err)
	}
	select {
	case <-p.done:
		return p.err
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("binrun: %s did not exit within %s of SIGTERM; killed", p.cmd.Path, grace)
	}
}

// readyClient bounds each readiness probe.
var readyClient = &http.Client{Timeout: 10 * time.Second}

// Ready waits, within the bound, until url answers 200 (the binary's
// /readyz, say). The process exiting first ends the wait at once, with an
// error.
func (p *Process) Ready(ctx context.Context, url string, within time.Duration) error {
	return Poll(ctx, within, func() error {
		select {
		case <-p.done:
			return GiveUp(fmt.Errorf("the process exited before %s answered 200: %v", url, p.err))
		default:
		}
		resp, err := readyClient.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %d", url, resp.StatusCode)
		}
		return nil
	})
}
