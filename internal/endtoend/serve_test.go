package endtoend

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// servedBinary is the built binary serving the API (startServe) on its own
// database, with a fake Stripe and a mail sink of the test.
type servedBinary struct {
	*instance
	stripe *fakestripe.Server
	// adminToken is the ADMIN_TOKEN the process was given.
	adminToken string
	// dbURL is the process's database.
	dbURL string
}

// testAdminToken is the operator credential of the served binaries.
const testAdminToken = "test-admin-token-0123456789abcdef0123"

// serveBinary runs `serve` of the built binary until t ends; env adds to (and
// overrides) the defaults: a fresh database, the fake Stripe, a mail sink
// keeping messages in memory and the test's admin token.
func serveBinary(t *testing.T, env ...string) *servedBinary {
	t.Helper()
	fake := testkit.NewStripe(t)
	_, smtpURL := testkit.NewMailSink(t)
	s := &servedBinary{stripe: fake.Server, adminToken: testAdminToken, dbURL: dbtest.NewURL(t)}
	s.instance = startServe(t, append([]string{
		"DATABASE_URL=" + s.dbURL,
		"ADMIN_TOKEN=" + testAdminToken,
		"STRIPE_API_BASE=" + fake.URL,
		"STRIPE_SECRET_KEY=sk_test_serve",
		"SMTP_URL=" + smtpURL,
	}, env...)...)
	return s
}

// stop stops the served binary with SIGTERM and requires a clean exit.
func (s *servedBinary) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, s.proc.Stop(time.Minute), "logs:\n%s", s.logs.String())
}

// request sends a request to the served API and returns its response,
// whose body is closed when t ends.
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
