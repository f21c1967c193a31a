package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
)

// TestHealthcheck runs the healthcheck command of the built binary against
// an HTTP server on the port of ADDR: it asks for /readyz on the loopback
// interface and exits 0 on 200 only; a 503, or nothing listening, is exit 1
// and a line that says what it got.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	var status atomic.Int32
	var paths atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths.Store(r.Method + " " + r.URL.Path)
		w.WriteHeader(int(status.Load()))
	}))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)

	// The image's ADDR is ":PORT": the check goes to 127.0.0.1:PORT, as it
	// does from inside a container; an explicit host is used as is.
	for _, addr := range []string{":" + port, "0.0.0.0:" + port, "127.0.0.1:" + port} {
		status.Store(http.StatusOK)
		r := binrun.RunT(t, []string{"ADDR=" + addr, unreachableDB}, "healthcheck")
		require.Equal(t, 0, r.ExitCode, "ADDR=%s: %s", addr, r.Stderr)
		require.Equal(t, "GET /readyz", paths.Load())
		require.Empty(t, r.Stdout)

		status.Store(http.StatusServiceUnavailable)
		r = binrun.RunT(t, []string{"ADDR=" + addr, unreachableDB}, "healthcheck")
		require.Equal(t, 1, r.ExitCode, "ADDR=%s", addr)
		require.Contains(t, r.Stderr, "503 Service Unavailable")
	}

	srv.Close()
	r := binrun.RunT(t, []string{"ADDR=127.0.0.1:" + port, unreachableDB}, "healthcheck", "-timeout", "3s")
	require.Equal(t, 1, r.ExitCode)
	require.Contains(t, r.Stderr, "connection refused")

	r = binrun.RunT(t, []string{"ADDR=nowhere"}, "healthcheck")
	require.Equal(t, 1, r.ExitCode)
	require.Equal(t, 1, strings.Count(r.Stderr, "\n"), "one line: %q", r.Stderr)
	require.Contains(t, r.Stderr, "ADDR")
}

// TestReadyzURL maps a listen address to the URL the check asks.
func TestReadyzURL(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		":8080":             "http://127.0.0.1:8080/readyz",
		"0.0.0.0:8080":      "http://127.0.0.1:8080/readyz",
		"[::]:8080":         "http://127.0.0.1:8080/readyz",
		"127.0.0.1:9000":    "http://127.0.0.1:9000/readyz",
		"[::1]:9000":        "http://[::1]:9000/readyz",
		"rides.internal:80": "http://rides.internal:80/readyz",
	} {
		got, err := readyzURL(addr)
		require.NoError(t, err, addr)
		require.Equal(t, want, got, addr)
	}
}
