package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/service/payments/fakestripe"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// servedBinary is the built binary serving the API on its own database, with
// a fake Stripe of the test.
type servedBinary struct {
	*binaryProcess
	base   string
	logs   *syncBuffer
	stripe *fakestripe.Server
	// adminToken is the ADMIN_TOKEN the process was given.
	adminToken string
	// dbURL is the process's database.
	dbURL string
}

// testAdminToken is the operator credential of the served binaries.
const testAdminToken = "test-admin-token-0123456789abcdef0123"

// serveBinary runs `serve` of the built binary until t ends; env adds to (and
// overrides) the defaults: a fresh database, a loopback address, the fake
// Stripe, the test's admin token and a mail directory under t.TempDir().
func serveBinary(t *testing.T, env ...string) *servedBinary {
	t.Helper()
	fake := fakestripe.New(fakestripe.Options{})
	stripeSrv := httptest.NewServer(fake)
	t.Cleanup(stripeSrv.Close)
	addr := freeAddr(t)
	s := &servedBinary{base: "http://" + addr, logs: &syncBuffer{}, stripe: fake, adminToken: testAdminToken, dbURL: dbtest.NewURL(t)}
	s.binaryProcess = startBinary(t, buildBinary(t), s.logs, append([]string{
		"DATABASE_URL=" + s.dbURL,
		"ADDR=" + addr,
		"ADMIN_TOKEN=" + testAdminToken,
		"STRIPE_API_BASE=" + stripeSrv.URL,
		"STRIPE_SECRET_KEY=sk_test_serve",
		"MAIL_DIR=" + t.TempDir(),
	}, env...), "serve")
	waitReady(t, s.base+"/readyz", s.exited)
	return s
}

// request sends a request to the served API and returns its status.
func (s *servedBinary) request(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// count runs a query returning one number against the process's database.
func (s *servedBinary) count(t *testing.T, query string, args ...any) int64 {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), s.dbURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var n int64
	require.NoError(t, conn.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// ranBinary is what a command of the built binary printed and how it ended.
type ranBinary struct {
	stdout, stderr string
	code           int
}

// runBinary runs the built binary with args to completion, with env added to
// the test's environment, in a temporary working directory; it fails the
// test if the command runs longer than a minute.
func runBinary(t *testing.T, env []string, args ...string) ranBinary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, buildBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "%v did not finish; stderr:\n%s", args, stderr.String())
	code := 0
	if err != nil {
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		code = exit.ExitCode()
	}
	return ranBinary{stdout: stdout.String(), stderr: stderr.String(), code: code}
}
