package client_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/openapi"
	"github.com/atomicrides/atomicrides/openapi/client"
)

// testBundle is the real server (handler, service, its own database) in
// front of its own fake Stripe: one isolated world served over HTTP.
type testBundle struct {
	*testkit.Env
	url string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	env := testkit.New(t)
	return &testBundle{Env: env, url: testkit.ServeAPI(t, openapi.NewHandler(openapi.Config{Service: env.Service, Accounts: env.Accounts, Logger: slog.New(slog.DiscardHandler)}))}
}

// rider creates a rider paying with source and returns a client holding the
// rider's API key.
func (b *testBundle) rider(t *testing.T, email, source string, opts ...client.ClientOption) *client.Client {
	t.Helper()
	c, err := client.NewClient(b.url, append([]client.ClientOption{client.WithBearer(b.Rider(t, email, source).APIKey)}, opts...)...)
	require.NoError(t, err)
	return c
}

var someRide = client.RideCreateBody{OriginLat: 37.7749, OriginLon: -122.4194, TargetLat: 37.8044, TargetLon: -122.2712}

// waits records the waits a policy asks for and lets them pass at once: the
// retried failures are not stored, so nothing on the server needs the time.
type waits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (w *waits) sleep(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	w.d = append(w.d, d)
	w.mu.Unlock()
	return ctx.Err()
}

func (w *waits) all() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.d...)
}

// Stripe fails the first two charges: the server answers 503 with
// Retry-After twice, the retrier waits as told and tries again with the same
// key, and the rider is charged once.
func TestRideCreateRetriesThroughAStripeOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.rider(t, "outage@example.com", "")
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultStatus, Status: http.StatusServiceUnavailable, Times: 2})

	w := &waits{}
	var statuses []int
	r := &client.Retrier{Client: c, Policy: client.Policy{
		Sleep:   w.sleep,
		OnRetry: func(_, status int, _ error, _ time.Duration) { statuses = append(statuses, status) },
	}}
	res, err := r.RideCreate(b.Ctx, "", someRide)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode, string(res.Reply.Body))
	require.Equal(t, 3, res.Attempts)
	require.False(t, res.Replayed)
	require.Equal(t, []int{503, 503}, statuses)
	for _, d := range w.all() {
		require.GreaterOrEqual(t, d, 2*time.Second, "the server's Retry-After is a floor")
	}
	ride := res.Reply.JSON201
	require.NotNil(t, ride)
	require.Equal(t, client.RideChargeStatusCharged, ride.ChargeStatus)
	charges := b.Stripe.SucceededCharges()
	require.Len(t, charges, 1, "one charge at Stripe")
	require.Equal(t, charges[0].ID, *ride.StripeChargeID)

	// The same logical operation again: the stored answer, byte for byte.
	again, err := r.RideCreate(b.Ctx, res.Key, someRide)
	require.NoError(t, err)
	require.Equal(t, 1, again.Attempts)
	require.True(t, again.Replayed)
	require.Equal(t, "true", *again.Reply.Headers201.IdempotentReplayed, "the generated client types the replay header")
	require.Equal(t, res.Reply.Body, again.Reply.Body)
	require.Len(t, b.Stripe.SucceededCharges(), 1)
}

// Stripe charges but its answer is lost, then our own answer is lost on the
// way back to the client: two retries, each resumed from the recovery
// point, and still one charge. The second retry finds the work done and is
// answered from the stored response.
func TestRideCreateSurvivesLostAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	lose := &losingTransport{next: http.DefaultTransport}
	c := b.rider(t, "lost@example.com", "", client.WithHTTPClient(&http.Client{Transport: lose}))
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultDropAfter, Times: 1})

	var statuses []int
	r := &client.Retrier{Client: c, Policy: client.Policy{
		OnRetry: func(attempt, status int, _ error, _ time.Duration) {
			statuses = append(statuses, status)
			if attempt == 1 {
				lose.armed.Store(true) // lose the next answer the server gives
			}
		},
		Sleep: (&waits{}).sleep,
	}}
	res, err := r.RideCreate(b.Ctx, "", someRide)
	require.NoError(t, err)
	require.Equal(t, []int{503, 0}, statuses, "Stripe's lost answer, then ours")
	require.Equal(t, 3, res.Attempts)
	require.Equal(t, http.StatusCreated, res.StatusCode)
	require.True(t, res.Replayed, "the lost 201 was stored; the retry got it back")
	require.Len(t, b.Stripe.SucceededCharges(), 1)
	require.Equal(t, b.Stripe.SucceededCharges()[0].ID, *res.Reply.JSON201.StripeChargeID)
}

// losingTransport, once armed, delivers one request and throws its answer
// away: the request was served, the client never heard.
type losingTransport struct {
	next  http.RoundTripper
	armed atomic.Bool
}

func (l *losingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err == nil && l.armed.CompareAndSwap(true, false) {
		_ = resp.Body.Close()
		return nil, errors.New("connection reset by peer")
	}
	return resp, err
}

// A second client with the same key while the first is at Stripe: it gets
// 409 and waits, and then the first one's answer as a replay.
func TestRideCreateWaitsOutAConcurrentAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.rider(t, "concurrent@example.com", "")
	gate, fired := make(chan struct{}), make(chan struct{}, 1)
	var release sync.Once
	open := func() { release.Do(func() { close(gate) }) }
	t.Cleanup(open)
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultLatency, Gate: gate, Fired: fired, Times: 1})
	key := client.NewIdempotencyKey()

	first := make(chan *client.Result[*client.RideCreateReply], 1)
	go func() {
		res, err := (&client.Retrier{Client: c}).RideCreate(b.Ctx, key, someRide)
		if err != nil {
			t.Error(err)
		}
		first <- res
	}()
	<-fired // the first attempt holds the key, waiting at Stripe

	var statuses []int
	second, err := (&client.Retrier{Client: c, Policy: client.Policy{
		OnRetry: func(_, status int, _ error, _ time.Duration) {
			statuses = append(statuses, status)
			if len(statuses) == 1 {
				open() // let the first one finish while the second waits
			}
		},
	}}).RideCreate(b.Ctx, key, someRide)
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, statuses[0])
	require.Equal(t, http.StatusCreated, second.StatusCode)
	require.True(t, second.Replayed)

	one := <-first
	require.NotNil(t, one)
	require.Equal(t, http.StatusCreated, one.StatusCode)
	require.False(t, one.Replayed)
	require.Equal(t, one.Reply.Body, second.Reply.Body)
	require.Len(t, b.Stripe.SucceededCharges(), 1)
}

// Final answers are never retried: a declined card (stored, and replayed for
// the same key), invalid input, a bad API key.
func TestRideCreateNeverRetriesFinalAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	noRetry := client.Policy{OnRetry: func(int, int, error, time.Duration) { t.Error("retried a final answer") }}

	declined := &client.Retrier{Client: b.rider(t, "declined@example.com", fakestripe.TokenChargeDeclined), Policy: noRetry}
	res, err := declined.RideCreate(b.Ctx, "", someRide)
	require.NoError(t, err)
	require.Equal(t, http.StatusPaymentRequired, res.StatusCode)
	require.Equal(t, 1, res.Attempts)
	require.NotNil(t, res.Reply.ApplicationProblemJSON402)
	again, err := declined.RideCreate(b.Ctx, res.Key, someRide)
	require.NoError(t, err)
	require.Equal(t, http.StatusPaymentRequired, again.StatusCode)
	require.True(t, again.Replayed)
	require.Equal(t, "true", *again.Reply.Headers402.IdempotentReplayed)

	ok := &client.Retrier{Client: b.rider(t, "invalid@example.com", ""), Policy: noRetry}
	bad := someRide
	bad.OriginLat = 91
	res, err = ok.RideCreate(b.Ctx, "", bad)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Equal(t, "body.origin_lat", *(*res.Reply.ApplicationProblemJSON422.Errors)[0].Location)
	require.Equal(t, 1, res.Attempts)

	anon, err := client.NewClient(b.url, client.WithBearer("ark_not-a-key"))
	require.NoError(t, err)
	res, err = (&client.Retrier{Client: anon, Policy: noRetry}).RideCreate(b.Ctx, "", someRide)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	require.Equal(t, 1, res.Attempts)

	require.Empty(t, b.Stripe.SucceededCharges())
}

// A refund through the retrier survives a refund outage at Stripe, and a
// second logical refund under another key gets the same refund with 200.
func TestRideRefundRetriesThroughAStripeOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.rider(t, "refund-retry@example.com", "")
	w := &waits{}
	r := &client.Retrier{Client: c, Policy: client.Policy{Sleep: w.sleep}}
	booked, err := r.RideCreate(b.Ctx, "", someRide)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, booked.StatusCode)

	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpRefundCreate, Kind: fakestripe.FaultStatus, Status: http.StatusServiceUnavailable, Times: 2})
	res, err := r.RideRefund(b.Ctx, "", booked.Reply.JSON201.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode, string(res.Reply.Body))
	require.Equal(t, 3, res.Attempts)
	require.NotNil(t, res.Reply.JSON201)
	require.Len(t, b.Stripe.Refunds(), 1)

	other, err := r.RideRefund(b.Ctx, "", booked.Reply.JSON201.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, other.StatusCode)
	require.Equal(t, res.Reply.JSON201.StripeRefundID, other.Reply.JSON200.StripeRefundID)
	require.Len(t, b.Stripe.Refunds(), 1)
}
