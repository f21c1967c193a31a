package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/failpoint"
	"github.com/atomicrides/atomicrides/service/mail/mailsink"
	"github.com/atomicrides/atomicrides/service/payments"
	"github.com/atomicrides/atomicrides/service/payments/fakestripe"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// bareEnv is the test's environment without any Stripe, mail or job
// setting, so that a child process sees only what a test gives it.
func bareEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "STRIPE_"), name == "SMTP_URL", name == "MAIL_DIR",
			strings.HasPrefix(name, "JOB_"), strings.HasPrefix(name, "COMPLETER_"), name == failpoint.EnvVar:
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// abandonedRide leaves a booking of a new rider at its recovery point
// ride_created (Stripe answered 503) and returns the pool and the key's id.
func abandonedRide(t *testing.T, dbURL, stripeURL string, fake *fakestripe.Server) (*pgxpool.Pool, int64) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	svc, err := service.New(service.Config{Pool: pool, Payments: payments.New(payments.Config{
		APIBase: stripeURL, SecretKey: "sk_test_money", MaxNetworkRetries: payments.NoRetries,
	})})
	require.NoError(t, err)
	user, err := svc.UserUpsert(ctx, service.UserUpsertParams{Email: "abandoned@example.com"})
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
	bin := buildBinary(t)
	fake := fakestripe.New(fakestripe.Options{})
	stripeSrv := httptest.NewServer(fake)
	t.Cleanup(stripeSrv.Close)
	dbURL := dbtest.NewURL(t)
	pool, keyID := abandonedRide(t, dbURL, stripeSrv.URL, fake)
	keyState := func() string {
		var s string
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT recovery_point || ' ' || coalesce(locked_at::text, '-') || ' ' || last_run_at::text FROM idempotency_keys WHERE id = $1`, keyID).Scan(&s))
		return s
	}
	before := keyState()
	run := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}

	for _, tc := range []struct {
		name, want string
		env        []string
		args       []string
	}{
		{"serve", "STRIPE_SECRET_KEY", bareEnv("DATABASE_URL="+dbURL, "ADDR="+freeAddr(t)), []string{"serve"}},
		{"serve with a base but no key", "STRIPE_SECRET_KEY", bareEnv("DATABASE_URL="+dbURL, "ADDR="+freeAddr(t), "STRIPE_API_BASE="+stripeSrv.URL), []string{"serve"}},
		{"serve without SMTP", "SMTP_URL", bareEnv("DATABASE_URL="+dbURL, "ADDR="+freeAddr(t), "STRIPE_SECRET_KEY=sk_test_money", "STRIPE_API_BASE="+stripeSrv.URL), []string{"serve"}},
		{"keys complete", "STRIPE_SECRET_KEY", bareEnv("DATABASE_URL="+dbURL, "COMPLETER_IDLE=1ms"), []string{"keys", "complete", strconv.FormatInt(keyID, 10)}},
		{"keys reconcile", "STRIPE_SECRET_KEY", bareEnv("DATABASE_URL=" + dbURL), []string{"keys", "reconcile", "-json"}},
	} {
		out, err := run(tc.env, tc.args...)
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%s: %s", tc.name, out)
		require.NotZero(t, exit.ExitCode(), tc.name)
		require.Contains(t, out, tc.want, tc.name)
		require.NotContains(t, out, "\n", "%s: one line", tc.name)
	}
	require.Equal(t, before, keyState(), "the request is left as it was")
	require.Empty(t, fake.Charges())

	// With the configuration, keys complete drives it, and reconcile is
	// clean (exit 0) until a charge of this deployment that no ride
	// records appears (exit 1, listed in its JSON).
	env := bareEnv("DATABASE_URL="+dbURL, "STRIPE_SECRET_KEY=sk_test_money", "STRIPE_API_BASE="+stripeSrv.URL)
	out, err := run(env, "keys", "complete", strconv.FormatInt(keyID, 10))
	require.NoError(t, err, out)
	require.Contains(t, out, "finished: 201")
	out, err = run(env, "keys", "reconcile", "--since", "1h", "-json")
	require.NoError(t, err, out)

	var namespace string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT namespace FROM deployment`).Scan(&namespace))
	stripe := payments.New(payments.Config{APIBase: stripeSrv.URL, SecretKey: "sk_test_money"})
	cus, err := stripe.CustomerCreate(context.Background(), service.CustomerCreateParams{IdempotencyKey: "orphan-customer", Source: "tok_visa"})
	require.NoError(t, err)
	orphan, err := stripe.ChargeCreate(context.Background(), service.ChargeCreateParams{
		IdempotencyKey: "orphan-charge", CustomerID: cus.ID, AmountCents: 2000, Currency: "usd",
		Tag: service.Tag{Namespace: namespace, Rider: "lost", Key: "ar-ch-lost"},
	})
	require.NoError(t, err)
	cmd := exec.Command(bin, "keys", "reconcile", "--since", "1h", "-json")
	cmd.Env = env
	stdout, err := cmd.Output()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 1, exit.ExitCode())
	var rep service.ReconcileReport
	require.NoError(t, json.Unmarshal(stdout, &rep), "%s", stdout)
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
	bin := chaosBuildBinary(t, t.TempDir())
	fake := fakestripe.New(fakestripe.Options{})
	stripeSrv := httptest.NewServer(fake)
	t.Cleanup(stripeSrv.Close)
	sink := mailsink.New(mailsink.Options{})
	smtpURL, stopSink, err := sink.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = stopSink(context.Background()) })
	dbURL := dbtest.NewURL(t)
	pool, keyID := abandonedRide(t, dbURL, stripeSrv.URL, fake)
	ctx := context.Background()

	env := bareEnv("DATABASE_URL="+dbURL, "ADMIN_TOKEN=crash-admin", "STRIPE_SECRET_KEY=sk_test_money",
		"STRIPE_API_BASE="+stripeSrv.URL, "SMTP_URL="+smtpURL, "COMPLETER_INTERVAL=2s", "COMPLETER_IDLE=1s")

	// The first process dies in its first completer pass.
	logs := &syncBuffer{}
	dying := startBinary(t, bin, logs, append(env, "ADDR="+freeAddr(t), failpoint.EnvVar+"=jobs:key_completer:work=crash"), "serve")
	select {
	case <-dying.exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("serve did not reach the completer's failpoint: %s", logs.String())
	}
	require.Contains(t, logs.String(), "failpoint jobs:key_completer:work: crash")
	var deadJob int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM river_job WHERE kind = 'key_completer' AND state = 'running'`).Scan(&deadJob))

	// A new process with default rescue settings completes the booking.
	addr := freeAddr(t)
	proc := startBinary(t, bin, logs, append(env, "ADDR="+addr), "serve")
	waitReady(t, "http://"+addr+"/readyz", proc.exited)
	start := time.Now()
	waitFor(t, time.Minute, "the abandoned booking to be completed", func() bool {
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
