package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
	"github.com/atomicrides/atomicrides/internal/failpoint"
	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// bareEnv clears every Stripe, mail and job setting the test process may
// have (an empty variable is an unset one to the binary), then adds extra,
// so that a child process sees only what a test gives it.
func bareEnv(extra ...string) []string {
	env := []string{
		"STRIPE_SECRET_KEY=", "STRIPE_API_BASE=", "STRIPE_TIMEOUT=", "SMTP_URL=", "MAIL_DIR=",
		"JOB_TIMEOUT=", "JOB_RESCUE_AFTER=", "COMPLETER_INTERVAL=", "COMPLETER_IDLE=", failpoint.EnvVar + "=",
	}
	return append(env, extra...)
}

// abandonedRide leaves a booking of a new rider at its recovery point
// ride_created (Stripe answered 503) and returns the pool and the key's id.
func abandonedRide(t *testing.T, dbURL string, fake *testkit.Stripe) (*pgxpool.Pool, int64) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	svc, err := service.New(service.Config{Pool: pool, Payments: fake.Payments()})
	require.NoError(t, err)
	user, err := testkit.NewAccounts(t, svc, nil).UserUpsert(ctx, accounts.UserUpsertParams{Email: "abandoned@example.com"})
	require.NoError(t, err)
	fake.Inject(fakestripe.Fault{Op: fakestripe.OpCustomerCreate, Kind: fakestripe.FaultStatus, Status: http.StatusServiceUnavailable, Times: 1})
	_, err = svc.RideCreate(ctx, user.User.ID, "abandoned-booking-0001", service.RideCreateParams{OriginLat: 1, OriginLon: 2, TargetLat: 3, TargetLon: 4}, nil)
	require.Equal(t, service.CodeProcessorUnavailable, service.ErrorCode(err), "%v", err)
	var id int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM idempotency_keys WHERE recovery_point = 'ride_created'`).Scan(&id))
	return pool, id
}

// TestStripeConfigurationIsRequired: without Stripe (or SMTP) settings and
// without -dev, the binary refuses with one line naming the variable, and
// touches nothing.
func TestStripeConfigurationIsRequired(t *testing.T) {
	t.Parallel()
	bin := binrun.Build(t)
	fake := testkit.NewStripe(t)
	dbURL := dbtest.NewURL(t)
	pool, keyID := abandonedRide(t, dbURL, fake)
	keyState := func() string {
		var s string
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT recovery_point || ' ' || coalesce(locked_at::text, '-') || ' ' || last_run_at::text FROM idempotency_keys WHERE id = $1`, keyID).Scan(&s))
		return s
	}
	before := keyState()
	run := func(env []string, args ...string) binrun.Result {
		t.Helper()
		res, err := binrun.Cmd{Bin: bin, Args: args, Env: env, Dir: t.TempDir()}.Run(context.Background())
		require.NoError(t, err)
		return res
	}

	for _, tc := range []struct {
		name, want string
		env        []string
		args       []string
	}{
		{"serve", "STRIPE_SECRET_KEY", bareEnv("DATABASE_URL="+dbURL, "ADDR="+binrun.FreeAddr(t)), []string{"serve"}},
		{"serve with a base but no key", "STRIPE_SECRET_KEY", bareEnv("DATABASE_URL="+dbURL, "ADDR="+binrun.FreeAddr(t), "STRIPE_API_BASE="+fake.URL), []string{"serve"}},
		{"serve without SMTP", "SMTP_URL", bareEnv("DATABASE_URL="+dbURL, "ADDR="+binrun.FreeAddr(t), "STRIPE_SECRET_KEY=sk_test_money", "STRIPE_API_BASE="+fake.URL), []string{"serve"}},
		{"keys complete", "STRIPE_SECRET_KEY", bareEnv("DATABASE_URL="+dbURL, "COMPLETER_IDLE=1ms"), []string{"keys", "complete", strconv.FormatInt(keyID, 10)}},
		{"keys reconcile", "STRIPE_SECRET_KEY", bareEnv("DATABASE_URL=" + dbURL), []string{"keys", "reconcile", "-json"}},
	} {
		res := run(tc.env, tc.args...)
		out := strings.TrimSpace(res.Stdout + res.Stderr)
		require.NotZero(t, res.ExitCode, "%s: %s", tc.name, out)
		require.Contains(t, out, tc.want, tc.name)
		require.NotContains(t, out, "\n", "%s: one line", tc.name)
	}
	require.Equal(t, before, keyState(), "the request is left as it was")
	require.Empty(t, fake.Charges())

	// With the configuration, keys complete drives it, and reconcile is
	// clean (exit 0) until a charge of this deployment that no ride
	// records appears (exit 1, listed in its JSON).
	env := bareEnv("DATABASE_URL="+dbURL, "STRIPE_SECRET_KEY=sk_test_money", "STRIPE_API_BASE="+fake.URL)
	res := run(env, "keys", "complete", strconv.FormatInt(keyID, 10))
	require.Zero(t, res.ExitCode, res.Stderr)
	require.Contains(t, res.Stdout+res.Stderr, "finished: 201")
	res = run(env, "keys", "reconcile", "--since", "1h", "-json")
	require.Zero(t, res.ExitCode, res.Stderr)

	var namespace string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT namespace FROM deployment`).Scan(&namespace))
	stripe := fake.Payments()
	cus, err := stripe.CustomerCreate(context.Background(), service.CustomerCreateParams{IdempotencyKey: "orphan-customer", Source: "tok_visa"})
	require.NoError(t, err)
	orphan, err := stripe.ChargeCreate(context.Background(), service.ChargeCreateParams{
		IdempotencyKey: "orphan-charge", CustomerID: cus.ID, AmountCents: 2000, Currency: "usd",
		Tag: service.Tag{Namespace: namespace, Rider: "lost", Key: "ar-ch-lost"},
	})
	require.NoError(t, err)
	res = run(env, "keys", "reconcile", "--since", "1h", "-json")
	require.Equal(t, 1, res.ExitCode, res.Stderr)
	var rep service.ReconcileReport
	require.NoError(t, json.Unmarshal([]byte(res.Stdout), &rep), "%s", res.Stdout)
	require.Len(t, rep.OrphanCharges, 1)
	require.Equal(t, orphan.ID, rep.OrphanCharges[0].ID)
	require.Equal(t, 1, rep.Charges-len(rep.OrphanCharges), "the completed ride's charge is recorded")
}

// TestCompleterRunsAgainAfterACrashWithDefaults kills serve while it holds
// the completer's pass (a failpoint), restarts it with the default rescue
// settings, and sees an abandoned booking completed within a few
// completer intervals, while the dead pass is still held as running.
func TestCompleterRunsAgainAfterACrashWithDefaults(t *testing.T) {
	t.Parallel()
	bin := binrun.Build(t, "failpoints")
	fake := testkit.NewStripe(t)
	_, smtpURL := testkit.NewMailSink(t)
	dbURL := dbtest.NewURL(t)
	pool, keyID := abandonedRide(t, dbURL, fake)
	ctx := context.Background()

	env := bareEnv("DATABASE_URL="+dbURL, "ADMIN_TOKEN=crash-admin-token-0123456789abcdef0123", "STRIPE_SECRET_KEY=sk_test_money",
		"STRIPE_API_BASE="+fake.URL, "SMTP_URL="+smtpURL, "COMPLETER_INTERVAL=2s", "COMPLETER_IDLE=1s")

	// The first process dies in its first completer pass.
	logs := &binrun.Buffer{}
	dying := binrun.Start(t, binrun.Cmd{Bin: bin, Args: []string{"serve"}, Output: logs,
		Env: append(env, "ADDR="+binrun.FreeAddr(t), failpoint.EnvVar+"=jobs:key_completer:work=crash")})
	select {
	case <-dying.Done():
	case <-time.After(2 * time.Minute):
		t.Fatalf("serve did not reach the completer's failpoint: %s", logs.String())
	}
	require.Contains(t, logs.String(), "failpoint jobs:key_completer:work: crash")
	var deadJob int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM river_job WHERE kind = 'key_completer' AND state = 'running'`).Scan(&deadJob))

	// A new process with default rescue settings completes the booking.
	addr := binrun.FreeAddr(t)
	proc := binrun.Start(t, binrun.Cmd{Bin: bin, Args: []string{"serve"}, Output: logs, Env: append(env, "ADDR="+addr)})
	require.NoError(t, proc.Ready(ctx, "http://"+addr+"/readyz", time.Minute), "logs:\n%s", logs.String())
	start := time.Now()
	binrun.WaitFor(t, time.Minute, "the abandoned booking to be completed", func() bool {
		var point string
		require.NoError(t, pool.QueryRow(ctx, `SELECT recovery_point FROM idempotency_keys WHERE id = $1`, keyID).Scan(&point))
		return point == "finished"
	})
	t.Logf("completed %s after the restart", time.Since(start).Round(time.Second))
	var code int
	require.NoError(t, pool.QueryRow(ctx, `SELECT response_code FROM idempotency_keys WHERE id = $1`, keyID).Scan(&code))
	require.Equal(t, http.StatusCreated, code)
	require.Len(t, fake.SucceededCharges(), 1)
	var state string
	require.NoError(t, pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, deadJob).Scan(&state))
	require.Equal(t, "running", state, "the dead pass is not rescued yet: it did not block the next one")
}
