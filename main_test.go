package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/service/payments/fakestripe"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// TestServeShutsDownGracefully runs the real binary, holds requests at
// Stripe, sends SIGTERM, and expects every in-flight request to finish with
// 201 and the process to exit 0.
func TestServeShutsDownGracefully(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	bin := buildBinary(t)

	fake := fakestripe.New(fakestripe.Options{})
	stripeSrv := httptest.NewServer(fake)
	t.Cleanup(stripeSrv.Close)

	addr := freeAddr(t)
	logs := &syncBuffer{}
	proc := startBinary(t, bin, logs, []string{
		"DATABASE_URL=" + dbtest.NewURL(t),
		"ADDR=" + addr,
		"ADMIN_TOKEN=shutdown-admin",
		"STRIPE_API_BASE=" + stripeSrv.URL,
		"STRIPE_SECRET_KEY=sk_test_shutdown",
		"MAIL_DIR=" + t.TempDir(),
	}, "serve", "-dev") // -dev: receipts to the built-in mail sink
	cmd, exited := proc.cmd, proc.exited

	base := "http://" + addr
	waitReady(t, base+"/readyz", exited)

	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, base+"/users/shutdown@example.com", nil)
	req.Header.Set("Authorization", "Bearer shutdown-admin")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var created struct {
		APIKey string `json:"api_key"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&created))
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	// Hold every charge at Stripe until SIGTERM has been sent.
	const n = 8
	gate, fired := make(chan struct{}), make(chan struct{}, n)
	fake.Inject(fakestripe.Fault{Op: fakestripe.OpChargeCreate, Kind: fakestripe.FaultLatency, Gate: gate, Fired: fired, Times: n})

	statuses := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := `{"origin_lat":1,"origin_lon":2,"target_lat":3,"target_lon":4}`
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/rides", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+created.APIKey)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", fmt.Sprintf("shutdown-key-%012d", i))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	for range n {
		<-fired // every request is in flight, waiting at Stripe
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	close(gate)
	wg.Wait()
	close(statuses)
	for s := range statuses {
		require.Equal(t, http.StatusCreated, s, "an in-flight request failed during shutdown; logs:\n%s", logs.String())
	}
	select {
	case err := <-exited:
		require.NoError(t, err, "exit status; logs:\n%s", logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not exit after SIGTERM; logs:\n%s", logs.String())
	}
	require.Len(t, fake.SucceededCharges(), n)
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin != "" {
		_ = os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}

// buildBinary builds the real binary once per test run (TestMain removes it).
func buildBinary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "atomicrides-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "atomicrides")
		build := exec.Command("go", "build", "-o", builtBin, ".")
		build.Stderr = os.Stderr
		buildErr = build.Run()
	})
	require.NoError(tb, buildErr)
	return builtBin
}

// syncBuffer collects a child's output while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// freeAddr returns a loopback address that was free a moment ago, for a
// child process to listen on.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	addr := ln.Addr().String()
	require.NoError(tb, ln.Close())
	return addr
}

// binaryProcess is the built binary running one of its commands.
type binaryProcess struct {
	cmd *exec.Cmd
	// exited receives the process's exit status once.
	exited chan error
}

// startBinary runs bin with args, with env added to the test's environment
// and its output written to out. The process is killed when tb ends, if it
// is still running.
func startBinary(tb testing.TB, bin string, out io.Writer, env []string, args ...string) *binaryProcess {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(tb, cmd.Start())
	p := &binaryProcess{cmd: cmd, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	tb.Cleanup(func() { _ = cmd.Process.Kill() })
	return p
}

// waitReady polls url until it answers 200, with a bounded deadline; the
// process exiting first fails the test.
func waitReady(tb testing.TB, url string, exited <-chan error) {
	tb.Helper()
	waitFor(tb, 60*time.Second, url+" to be ready", func() bool {
		select {
		case err := <-exited:
			tb.Fatalf("the process exited before it was ready: %v", err)
		default:
		}
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// waitFor polls cond until it holds, failing the test after timeout. It is
// the one way these tests wait for another process: on a condition, never
// on a fixed delay.
func waitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
