package binrun

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { Main(m) }

// TestBuildOncePerTags builds the binary once per tag set: the same path
// for every caller, concurrent ones included, another for other tags.
func TestBuildOncePerTags(t *testing.T) {
	t.Parallel()
	paths := make([]string, 4)
	var wg sync.WaitGroup
	for i := range paths {
		wg.Go(func() { paths[i] = Build(t) })
	}
	wg.Wait()
	for _, p := range paths {
		require.Equal(t, paths[0], p)
	}
	info, err := os.Stat(paths[0])
	require.NoError(t, err)
	require.NotZero(t, info.Mode()&0o111, "executable")

	tagged := Build(t, "failpoints")
	require.NotEqual(t, paths[0], tagged)
	require.FileExists(t, tagged)
	require.Equal(t, filepath.Dir(paths[0]), filepath.Dir(tagged), "one directory, removed by Main")
}

// TestProcessLifecycle starts the fake Stripe command of the binary, waits
// until it is ready, and stops it: it exits 0 on SIGTERM, in a working
// directory under the test's t.TempDir(), and its output was captured.
func TestProcessLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	addr := FreeAddr(t)
	logs := &Buffer{}
	p := Start(t, Cmd{Bin: Build(t), Args: []string{"fakestripe", "-addr", addr}, Output: logs})
	require.NoError(t, p.Ready(ctx, "http://"+addr+"/_fake/faults", time.Minute), "logs:\n%s", logs.String())

	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", p.Pid()))
	require.NoError(t, err)
	require.Equal(t, filepath.Dir(t.TempDir()), filepath.Dir(cwd), "the working directory is one of the test's")

	require.Nil(t, p.Err(), "still running")
	require.NoError(t, p.Stop(30*time.Second))
	select {
	case <-p.Done():
	default:
		t.Fatal("Done is not closed after Stop")
	}
	require.NoError(t, p.Err())
	require.NotEmpty(t, logs.String())
	require.NoError(t, p.Signal(os.Interrupt), "signalling an exited process is no error")
}

// TestKillAndReadyOfAnExitedProcess kills a process: it reports a non-zero
// exit, and waiting for it to be ready then fails at once.
func TestKillAndReadyOfAnExitedProcess(t *testing.T) {
	t.Parallel()
	addr := FreeAddr(t)
	p := Start(t, Cmd{Bin: Build(t), Args: []string{"fakestripe", "-addr", addr}})
	p.Kill()
	require.Error(t, p.Err())
	start := time.Now()
	err := p.Ready(context.Background(), "http://"+addr+"/_fake/faults", time.Minute)
	require.ErrorContains(t, err, "exited")
	require.Less(t, time.Since(start), 10*time.Second)
}

// TestLogPath appends the output of each process to the file, and closes it
// when the process exits.
func TestLogPath(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "out.log")
	require.NoError(t, os.WriteFile(log, []byte("before\n"), 0o644))
	res, err := Cmd{Bin: Build(t), Args: []string{"no-such-command"}}.Run(context.Background())
	require.NoError(t, err)
	require.NotZero(t, res.ExitCode)
	require.NotEmpty(t, res.Stderr)

	p, err := Cmd{Bin: Build(t), Args: []string{"no-such-command"}, Dir: t.TempDir(), LogPath: log}.Start()
	require.NoError(t, err)
	<-p.Done()
	require.Error(t, p.Err())
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	require.Regexp(t, `^before\natomicrides: unknown command "no-such-command".*\n$`, string(b))
}

// TestPoll retries until the condition holds, stops at once on GiveUp, and
// fails with the last error after its bound.
func TestPoll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	calls := 0
	require.NoError(t, Poll(ctx, time.Minute, func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	}))
	require.Equal(t, 3, calls)

	stop := errors.New("gone")
	calls = 0
	err := Poll(ctx, time.Minute, func() error { calls++; return GiveUp(stop) })
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, calls)

	err = Poll(ctx, 50*time.Millisecond, func() error { return errors.New("never") })
	require.ErrorContains(t, err, "still failing after 50ms: never")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, Poll(cancelled, time.Minute, func() error { return errors.New("never") }), context.Canceled)
}

// TestWaitFor returns once the condition holds, however it is reached.
func TestWaitFor(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	done := false
	go func() {
		mu.Lock()
		defer mu.Unlock()
		done = true
	}()
	WaitFor(t, time.Minute, "the goroutine", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return done
	})
}

// TestBufferConcurrentWrites keeps every write of concurrent writers.
func TestBufferConcurrentWrites(t *testing.T) {
	t.Parallel()
	b := &Buffer{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("x"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	require.Len(t, b.String(), 800)
}

// TestFreeAddr returns distinct loopback addresses that can be listened on.
func TestFreeAddr(t *testing.T) {
	t.Parallel()
	a, b := FreeAddr(t), FreeAddr(t)
	require.Contains(t, a, "127.0.0.1:")
	require.NotEqual(t, a, b)

	// Below the ephemeral range, never handed out twice, and free to listen
	// on.
	seen := map[int]bool{}
	for range 50 {
		port := FreePort(t)
		require.False(t, seen[port], "port %d handed out twice", port)
		seen[port] = true
		require.GreaterOrEqual(t, port, freePortMin)
		require.Less(t, port, ephemeralLow())
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		require.NoError(t, err)
		require.NoError(t, ln.Close())
	}
}
