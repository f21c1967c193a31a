// Package clientts_test runs the TypeScript client's tests (node --test)
// against the real server, on its own database, in front of the fake
// Stripe, and checks the charges at the fake afterwards: the booking tests
// against a server that charges at booking, the trip tests against one
// whose bookings hold their fare (CAPTURE=trip). The client itself is
// TypeScript; this package holds only that test.
package clientts_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/openapi"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/payments"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

const (
	adminToken    = "ts-client-admin-token"
	dispatchToken = "ts-client-dispatch-token"
)

// testBundle is the real server (handler, service, its own database) in
// front of its own fake Stripe, both on loopback ports.
type testBundle struct {
	url      string
	stripe   string
	pool     *pgxpool.Pool
	fake     *fakestripe.Server
	node     string
	packages string
}

func setup(t *testing.T, node, packages string) *testBundle {
	t.Helper()
	b := &testBundle{node: node, packages: packages}
	stripe := testkit.NewStripe(t)
	b.fake, b.stripe = stripe.Server, stripe.URL
	// No keep-alives towards Stripe: a dropped answer must reach the service
	// as the lost answer it is.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DisableKeepAlives = true
	b.pool = dbtest.New(t)
	svc, err := service.New(service.Config{Pool: b.pool, Payments: payments.New(payments.Config{
		APIBase: stripe.URL, SecretKey: "sk_test_client_ts", MaxNetworkRetries: payments.NoRetries,
		HTTPClient: &http.Client{Transport: transport},
	})})
	require.NoError(t, err)
	srv := httptest.NewServer(testkit.Conform(t, openapi.NewHandler(openapi.Config{Service: svc, Accounts: testkit.NewAccounts(t, svc, nil), AdminToken: adminToken, Logger: slog.New(slog.DiscardHandler)})))
	t.Cleanup(srv.Close)
	b.url = srv.URL
	return b
}

// nodePath finds Node.js. Without it the test fails, in CI and out of it:
// the client's guarantees are only proven by running it.
func nodePath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node is missing in CI: .ci/run installs it; the TypeScript client's tests must run")
		}
		t.Fatal("Node.js 20 or later is required for the TypeScript client's tests: install nodejs and npm")
	}
	return p
}

// nodeModules returns the client's installed packages, which `go tool task
// npm` installs from the lock file.
func nodeModules(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("node_modules")
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(dir, "typescript", "bin", "tsc")); err != nil {
		t.Fatalf("openapi/client-ts/node_modules is not installed (%v): run `go tool task npm`", err)
	}
	return dir
}

// run runs node with args in dir and fails the test with its output if it
// fails; the output is logged either way.
func (b *testBundle) run(t *testing.T, ctx context.Context, dir string, env []string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, b.node, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node %v: %v\n%s", args, err, out)
	}
	t.Logf("node %v:\n%s", args, out)
}

// tripBundle is the real server whose bookings hold their fare
// (CAPTURE=trip), with the dispatch side's token, in front of its own fake
// Stripe.
type tripBundle struct {
	*testkit.Env
	url string
}

func setupTrips(t *testing.T) *tripBundle {
	t.Helper()
	env := testkit.NewWith(t, testkit.Options{Capture: service.CaptureTrip})
	return &tripBundle{Env: env, url: testkit.ServeAPI(t, openapi.NewHandler(openapi.Config{
		Service: env.Service, Accounts: env.Accounts, AdminToken: adminToken, DispatchToken: dispatchToken, Logger: slog.New(slog.DiscardHandler),
	}))}
}

// The TypeScript client's tests pass against the real servers. The client
// and its tests are compiled once; the booking tests then run against a
// server that charges at booking, the trip tests against one that holds
// the fare, each world with its own database and fake Stripe.
func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	compiler := &testBundle{node: nodePath(t), packages: nodeModules(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)

	// Compile the client and its tests into a temporary directory, an ES
	// module package that finds the installed packages beside it.
	out := t.TempDir()
	compiler.run(t, ctx, ".", nil, filepath.Join(compiler.packages, "typescript", "bin", "tsc"), "-p", "tsconfig.test.json", "--outDir", out)
	require.NoError(t, os.WriteFile(filepath.Join(out, "package.json"), []byte(`{"type":"module"}`), 0o644))
	require.NoError(t, os.Symlink(compiler.packages, filepath.Join(out, "node_modules")))
	tests, err := filepath.Glob(filepath.Join(out, "test", "*.test.js"))
	require.NoError(t, err)
	require.Len(t, tests, 3)
	file := func(name string) string { return filepath.Join(out, "test", name+".test.js") }

	t.Run("Bookings", func(t *testing.T) {
		t.Parallel()
		bookings(t, ctx, setup(t, compiler.node, compiler.packages), out, file("booking"), file("retry"))
	})
	t.Run("Trips", func(t *testing.T) {
		t.Parallel()
		trips(t, ctx, compiler, setupTrips(t), out, file("trips"))
	})
}

// bookings runs the booking tests, and checks that the fake Stripe holds
// exactly one succeeded charge for each charged ride: the booking through
// injected 503s, the one whose connections dropped after the charge, the
// one two clients sent at once, the refunded one, and the five that
// rideAll lists.
func bookings(t *testing.T, ctx context.Context, b *testBundle, out string, tests ...string) {
	b.run(t, ctx, out, []string{
		"ATOMICRIDES_URL=" + b.url,
		"ATOMICRIDES_ADMIN_TOKEN=" + adminToken,
		"FAKESTRIPE_URL=" + b.stripe,
	}, append([]string{"--test", "--test-reporter=spec"}, tests...)...)

	// The ledger at the fake Stripe: one succeeded charge per charged ride,
	// and none besides.
	rows, err := b.pool.Query(ctx, `SELECT id, stripe_charge_id FROM rides WHERE charge_status = 'charged'`)
	require.NoError(t, err)
	charged := map[string]string{}
	for rows.Next() {
		var id int64
		var chargeID string
		require.NoError(t, rows.Scan(&id, &chargeID))
		charged[itoa(id)] = chargeID
	}
	require.NoError(t, rows.Err())
	require.Len(t, charged, 9, "the node tests book nine paid rides (five of them listed)")
	// A ride's charge carries the processor key of its request (metadata
	// ar_key): Stripe holds one succeeded charge under it, the ride's.
	perKey := map[string][]string{}
	for _, c := range b.fake.SucceededCharges() {
		perKey[c.Metadata["ar_key"]] = append(perKey[c.Metadata["ar_key"]], c.ID)
	}
	for rideID, chargeID := range charged {
		var key string
		for _, c := range b.fake.SucceededCharges() {
			if c.ID == chargeID {
				key = c.Metadata["ar_key"]
			}
		}
		require.NotEmpty(t, key, "ride %s: its charge is at Stripe", rideID)
		require.Equal(t, []string{chargeID}, perKey[key], "ride %s: one charge at Stripe", rideID)
	}
	require.Len(t, b.fake.SucceededCharges(), len(charged), "no charge without its ride")
}

// trips runs the trip tests, and checks the holds at the fake Stripe: each
// completed ride's hold captured once, by the fare up to the hold, and each
// cancelled ride's released with nothing captured.
func trips(t *testing.T, ctx context.Context, node *testBundle, b *tripBundle, out string, tests ...string) {
	node.run(t, ctx, out, []string{
		"ATOMICRIDES_URL=" + b.url,
		"ATOMICRIDES_ADMIN_TOKEN=" + adminToken,
		"ATOMICRIDES_DISPATCH_TOKEN=" + dispatchToken,
		"FAKESTRIPE_URL=" + b.Stripe.URL,
	}, append([]string{"--test", "--test-reporter=spec"}, tests...)...)

	rows, err := b.Pool.Query(ctx, `SELECT id, charge_status, payment_id, coalesce(captured_cents, 0) FROM rides WHERE capture = 'trip' AND charge_status IN ('completed', 'cancelled')`)
	require.NoError(t, err)
	counts := map[string]int{}
	for rows.Next() {
		var (
			id              int64
			status, payment string
			captured        int64
		)
		require.NoError(t, rows.Scan(&id, &status, &payment, &captured))
		counts[status]++
		pi, ok := b.Stripe.PaymentIntent(payment)
		require.True(t, ok, "ride %d: its hold is at Stripe", id)
		switch status {
		case "completed":
			require.Equal(t, fakestripe.PaymentIntentSucceeded, pi.Status, "ride %d", id)
			require.Equal(t, captured, pi.AmountReceived, "ride %d: captured what the ride says", id)
		case "cancelled":
			require.Equal(t, fakestripe.PaymentIntentCanceled, pi.Status, "ride %d", id)
			require.Zero(t, pi.AmountReceived, "ride %d: nothing captured", id)
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]int{"completed": 3, "cancelled": 1}, counts,
		"the node tests complete three trips (one with a balance due) and cancel one")
	captures := 0
	for _, r := range b.Stripe.Requests() {
		if r.Op == fakestripe.OpPaymentIntentCapture && !r.Replayed && r.Status == http.StatusOK {
			captures++
		}
	}
	require.Equal(t, counts["completed"], captures, "one capture per completed trip")
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }
