package binrun

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// giveUp marks an error that ends [Poll] at once.
type giveUp struct{ err error }

func (g giveUp) Error() string { return g.err.Error() }
func (g giveUp) Unwrap() error { return g.err }

// GiveUp wraps err so that [Poll] stops at once and returns it: the
// condition can no longer hold (the process it waits for has exited, say).
func GiveUp(err error) error { return giveUp{err: err} }

// Poll calls cond until it returns nil, it returns an error made by
// [GiveUp], ctx ends, or within has passed; then it returns cond's last
// error (nil on success). Calls are spaced by a backoff from 10 ms to
// 250 ms.
func Poll(ctx context.Context, within time.Duration, cond func() error) error {
	deadline := time.Now().Add(within)
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 250*time.Millisecond) {
		err := cond()
		var g giveUp
		if err == nil || errors.As(err, &g) {
			return err
		}
		if time.Now().Add(delay).After(deadline) {
			return fmt.Errorf("still failing after %s: %w", within, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(delay):
		}
	}
}

// errNotYet is the error of a [WaitFor] condition that does not hold yet.
var errNotYet = errors.New("condition not met")

// WaitFor polls cond until it holds, failing the test after timeout. It is
// how a test waits for another process: on a condition, never on a fixed
// delay.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	err := Poll(context.Background(), timeout, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
	if err != nil {
		tb.Fatalf("timed out waiting for %s", what)
	}
}

// FreeAddr returns a loopback address (127.0.0.1:port) that was free a
// moment ago, for a child process to listen on.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePort(tb))
}

// FreePort returns a loopback port that was free a moment ago, for a
// process to listen on. It is drawn at random from below the kernel's
// ephemeral range (ip_local_port_range), where no outgoing connection takes
// a port between the check and the listen, and never twice in one test
// binary; the kernel's own pick is the fallback.
func FreePort(tb testing.TB) int {
	tb.Helper()
	low := ephemeralLow()
	for range 200 {
		port := freePortMin + rand.IntN(low-freePortMin)
		if _, taken := handedOut.LoadOrStore(port, true); taken {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		_ = ln.Close()
		return port
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// freePortMin is the lowest port FreePort draws: above the well-known and
// the commonly configured ones.
const freePortMin = 20000

// handedOut holds the ports FreePort returned in this process.
var handedOut sync.Map

// ephemeralLow is the first port of the kernel's ephemeral range, 32768
// when it cannot be read or leaves too little room below it.
func ephemeralLow() int {
	const def = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return def
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return def
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil || low < freePortMin+1000 {
		return def
	}
	return low
}
