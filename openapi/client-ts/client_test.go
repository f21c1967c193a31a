// Package clientts_test runs the TypeScript client's tests (node --test)
// against the real server, on its own database, in front of the fake
// Stripe, and checks the charges at the fake afterwards. The client itself
// is TypeScript; this package holds only that test.
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

const adminToken = "ts-client-admin-token"

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

func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{node: nodePath(t), packages: nodeModules(t)}
	stripe := testkit.NewStripe(t)
	b.fake, b.stripe = stripe.Server, stripe.URL
	// No keep-alives towards Stripe: a dropped answer must reach the service
	// as the lost answer it is.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DisableKeepAlives = true
	b.pool = dbtest.New(t)
	svc, err := service.New(service.Config{DevDefaultPaymentSource: true, Pool: b.pool, Payments: payments.New(payments.Config{
		APIBase: stripe.URL, SecretKey: "sk_test_client_ts", MaxNetworkRetries: payments.NoRetries,
		HTTPClient: &http.Client{Transport: transport},
	})})
	require.NoError(t, err)
	srv := httptest.NewServer(openapi.NewHandler(openapi.Config{Service: svc, AdminToken: adminToken, Logger: slog.New(slog.DiscardHandler)}))
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

// The TypeScript client's tests pass against the real server, and the fake
// Stripe holds exactly one succeeded charge for each charged ride: the
// booking through injected 503s, the one whose connections dropped after
// the charge, the one two clients sent at once, the refunded one, and the
// five that rideAll lists.
func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)

	// Compile the client and its tests into a temporary directory, an ES
	// module package that finds the installed packages beside it.
	out := t.TempDir()
	b.run(t, ctx, ".", nil, filepath.Join(b.packages, "typescript", "bin", "tsc"), "-p", "tsconfig.test.json", "--outDir", out)
	require.NoError(t, os.WriteFile(filepath.Join(out, "package.json"), []byte(`{"type":"module"}`), 0o644))
	require.NoError(t, os.Symlink(b.packages, filepath.Join(out, "node_modules")))
	tests, err := filepath.Glob(filepath.Join(out, "test", "*.test.js"))
	require.NoError(t, err)
	require.Len(t, tests, 2)

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

func itoa(i int64) string { return strconv.FormatInt(i, 10) }
