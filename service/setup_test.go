package service_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/mail"
	"github.com/atomicrides/atomicrides/service/mail/mailsink"
	"github.com/atomicrides/atomicrides/service/payments"
	"github.com/atomicrides/atomicrides/service/payments/fakestripe"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// testBundle is one isolated world: its own database, fake Stripe and
// service.
type testBundle struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	fake  *fakestripe.Server
	svc   *service.Service
	clock *testClock
	// sink receives the service's mail over SMTP.
	sink *mailsink.Sink
}

type testClock struct{ offset atomic.Int64 }

func (c *testClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *testClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := dbtest.New(t)
	fake := fakestripe.New(fakestripe.Options{})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	// No keep-alives: a dropped connection must reach the client as the
	// lost answer it is, not be retried by net/http on a new connection.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DisableKeepAlives = true
	pay := payments.New(payments.Config{
		APIBase:           srv.URL,
		SecretKey:         "sk_test_bundle",
		Timeout:           5 * time.Second,
		MaxNetworkRetries: -1, // the engine's retries are under test, not stripe-go's
		HTTPClient:        &http.Client{Transport: transport},
	})
	sink := mailsink.New(mailsink.Options{})
	sinkURL, stopSink, err := sink.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = stopSink(context.Background()) })
	mailer, err := mail.New(mail.Config{URL: sinkURL, Timeout: 5 * time.Second})
	require.NoError(t, err)
	clock := &testClock{}
	svc, err := service.New(service.Config{
		Pool: pool, Payments: pay, Clock: clock.Now, Mailer: mailer,
		AbandonedAfter: abandonedAfter,
	})
	require.NoError(t, err)
	return &testBundle{ctx: context.Background(), pool: pool, fake: fake, svc: svc, clock: clock, sink: sink}
}

// abandonedAfter is the completer's grace period in tests; they pass it by
// advancing the clock.
const abandonedAfter = 5 * time.Minute

// user creates a rider paying with source and returns its id.
func (b *testBundle) user(t *testing.T, email, source string) int64 {
	t.Helper()
	res, err := b.svc.UserUpsert(b.ctx, service.UserUpsertParams{Email: email, PaymentSource: source})
	require.NoError(t, err)
	require.True(t, res.Created)
	return res.User.ID
}

var keySeq atomic.Int64

// newKey returns a fresh valid idempotency key.
func newKey() string { return fmt.Sprintf("test-key-%020d", keySeq.Add(1)) }

var someRide = service.RideCreateParams{OriginLat: 37.7749, OriginLon: -122.4194, TargetLat: 37.8044, TargetLon: -122.2712}

func (b *testBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, query, args...).Scan(&n))
	return n
}

func (b *testBundle) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, query, args...)
	require.NoError(t, err)
}

// keyRow is what a test inspects of an idempotency key.
type keyRow struct {
	point  string
	locked bool
	code   *int32
}

func (b *testBundle) key(t *testing.T, userID int64, key string) keyRow {
	t.Helper()
	var r keyRow
	require.NoError(t, b.pool.QueryRow(b.ctx,
		`SELECT recovery_point, locked_at IS NOT NULL, response_code FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2`,
		userID, key).Scan(&r.point, &r.locked, &r.code))
	return r
}

func (b *testBundle) succeededCharges() int { return len(b.fake.SucceededCharges()) }

func requireCode(t *testing.T, err error, code service.Code) *service.Error {
	t.Helper()
	require.Error(t, err)
	var e *service.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, code, e.Code, "error: %v", err)
	return e
}

// chargesOfRide returns the charge attempts at the fake made under the
// processor key of the ride's request.
func (b *testBundle) chargesOfRide(t *testing.T, rideID int64) []fakestripe.Charge {
	t.Helper()
	var key, email string
	require.NoError(t, b.pool.QueryRow(b.ctx, `
		SELECT k.idempotency_key, u.email FROM rides r
		JOIN idempotency_keys k ON k.id = r.idempotency_key_id
		JOIN users u ON u.id = r.user_id WHERE r.id = $1`, rideID).Scan(&key, &email))
	return b.fake.ChargesWithMetadata("ar_key", service.ChargeKey(b.svc.Namespace(), email, key))
}

// age makes the service's records older by d, as if d had passed on the
// database's clock, which judges leases, idle times and ages.
func (b *testBundle) age(t *testing.T, d time.Duration) {
	t.Helper()
	for _, q := range []string{
		`UPDATE idempotency_keys SET created_at = created_at - make_interval(secs => $1),
			last_run_at = last_run_at - make_interval(secs => $1), locked_at = locked_at - make_interval(secs => $1)`,
		`UPDATE refunds SET created_at = created_at - make_interval(secs => $1), updated_at = updated_at - make_interval(secs => $1)`,
		`UPDATE rides SET created_at = created_at - make_interval(secs => $1)`,
		`UPDATE users SET created_at = created_at - make_interval(secs => $1)`,
	} {
		_, err := b.pool.Exec(b.ctx, q, d.Seconds())
		require.NoError(t, err)
	}
}
