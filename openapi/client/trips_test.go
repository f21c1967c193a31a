package client_test

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/openapi"
	"github.com/atomicrides/atomicrides/openapi/client"
	"github.com/atomicrides/atomicrides/service"
)

// dispatchToken is the dispatch side's credential in the trip worlds.
const dispatchToken = "client-test-dispatch-token-6Q2ZK8"

// setupTrips is a world whose bookings hold their fare (CAPTURE=trip), with
// the dispatch side's token configured.
func setupTrips(t *testing.T) *testBundle {
	t.Helper()
	env := testkit.NewWith(t, testkit.Options{Capture: service.CaptureTrip})
	return &testBundle{Env: env, url: testkit.ServeAPI(t, openapi.NewHandler(openapi.Config{
		Service: env.Service, Accounts: env.Accounts, DispatchToken: dispatchToken, Logger: slog.New(slog.DiscardHandler),
	}))}
}

// dispatch returns a client holding the dispatch side's token.
func (b *testBundle) dispatch(t *testing.T, opts ...client.ClientOption) *client.Client {
	t.Helper()
	c, err := client.NewClient(b.url, append([]client.ClientOption{client.WithBearer(dispatchToken)}, opts...)...)
	require.NoError(t, err)
	return c
}

// bookTrip books a ride through c and returns it, its fare held.
func bookTrip(t *testing.T, b *testBundle, c client.ClientInterface) *client.Ride {
	t.Helper()
	res, err := (&client.Retrier{Client: c}).RideCreate(b.Ctx, "", someRide)
	require.NoError(t, err)
	outcome, ride, err := res.Reply.Outcome()
	require.NoError(t, err)
	require.Equal(t, client.RideOutcomeAuthorized, outcome, string(res.Reply.Body))
	require.Equal(t, client.RideCaptureTrip, ride.Capture)
	return ride
}

// keyRecorder records the Idempotency-Key of every request it passes on
// and, once armed, throws the next answer away: the request was served,
// the client never heard.
type keyRecorder struct {
	next  http.RoundTripper
	armed atomic.Bool
	mu    sync.Mutex
	keys  []string
}

func (k *keyRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	k.mu.Lock()
	k.keys = append(k.keys, req.Header.Get("Idempotency-Key"))
	k.mu.Unlock()
	resp, err := k.next.RoundTrip(req)
	if err == nil && k.armed.CompareAndSwap(true, false) {
		_ = resp.Body.Close()
		return nil, errors.New("connection reset by peer")
	}
	return resp, err
}

func (k *keyRecorder) sent() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.keys...)
}

// requireOneKey checks that every request recorded carried key.
func requireOneKey(t *testing.T, rec *keyRecorder, key string, n int) {
	t.Helper()
	sent := rec.sent()
	require.Len(t, sent, n)
	for _, k := range sent {
		require.Equal(t, key, k, "every attempt carries the operation's one key")
	}
}

// The dispatch side completes a trip through two capture failures at
// Stripe: the 503s are retried with the one key, the fare is captured once,
// and the same key gets the stored answer back; another key with the same
// fare gets the same completion (200), and another fare is refused at once.
func TestRideCompleteRetriesThroughAStripeOutage(t *testing.T) {
	t.Parallel()
	b := setupTrips(t)
	ride := bookTrip(t, b, b.rider(t, "complete@example.com", "tok_visa"))
	rec := &keyRecorder{next: http.DefaultTransport}
	w := &waits{}
	var statuses []int
	r := &client.Retrier{Client: b.dispatch(t, client.WithHTTPClient(&http.Client{Transport: rec})), Policy: client.Policy{
		Sleep:   w.sleep,
		OnRetry: func(_, status int, _ error, _ time.Duration) { statuses = append(statuses, status) },
	}}
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCapture, Kind: fakestripe.FaultStatus, Status: http.StatusServiceUnavailable, Times: 2})

	fare := client.RideCompleteInputBody{FareCents: service.RideAmountCents - 650, Currency: "usd"}
	res, err := r.RideComplete(b.Ctx, "", ride.ID, fare)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode, string(res.Reply.Body))
	require.Equal(t, []int{503, 503}, statuses)
	require.Equal(t, 3, res.Attempts)
	require.False(t, res.Replayed)
	requireOneKey(t, rec, res.Key, 3)
	for _, d := range w.all() {
		require.GreaterOrEqual(t, d, time.Second, "the server's Retry-After is a floor")
	}
	done, err := res.Reply.Ride()
	require.NoError(t, err)
	require.Equal(t, ride.ID, done.ID)
	require.Equal(t, client.RideChargeStatusCompleted, done.ChargeStatus)
	require.Equal(t, fare.FareCents, *done.FareCents)
	require.Equal(t, client.RideExtraStatusNone, *done.ExtraStatus)
	require.Zero(t, done.BalanceDueCents)
	require.Equal(t, 1, b.Stripe.Executed(fakestripe.OpPaymentIntentCapture))
	pi, ok := b.Stripe.PaymentIntent(*ride.PaymentID)
	require.True(t, ok)
	require.Equal(t, fare.FareCents, pi.AmountReceived)

	// The same logical completion again: the stored answer, byte for byte.
	again, err := r.RideComplete(b.Ctx, res.Key, ride.ID, fare)
	require.NoError(t, err)
	require.Equal(t, 1, again.Attempts)
	require.True(t, again.Replayed)
	require.Equal(t, "true", *again.Reply.Headers201.IdempotentReplayed)
	require.Equal(t, res.Reply.Body, again.Reply.Body)

	// Another key with the same fare: the same completion, 200.
	other, err := r.RideComplete(b.Ctx, "", ride.ID, fare)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, other.StatusCode)
	same, err := other.Reply.Ride()
	require.NoError(t, err)
	require.Equal(t, done.CompletedAt, same.CompletedAt)

	// Another fare: refused, final at the first answer (not retried).
	r.Policy.OnRetry = func(int, int, error, time.Duration) { t.Error("retried a refusal") }
	refused, err := r.RideComplete(b.Ctx, "", ride.ID, client.RideCompleteInputBody{FareCents: fare.FareCents + 1, Currency: "usd"})
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, refused.StatusCode)
	require.Equal(t, 1, refused.Attempts)
	_, err = refused.Reply.Ride()
	var pe *client.ProblemError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, client.ProblemRideNotCompletable, pe.Type)
	require.Equal(t, ride.ID, pe.RideID())
	require.Contains(t, pe.Detail, strconv.FormatInt(fare.FareCents, 10), "the refusal names the completion's fare")
	require.Equal(t, 1, b.Stripe.Executed(fakestripe.OpPaymentIntentCapture), "captured once")
}

// Completion is the dispatch side's: a rider's key is refused, as is a
// wrong token, and nothing is captured.
func TestRideCompleteNeedsTheDispatchToken(t *testing.T) {
	t.Parallel()
	b := setupTrips(t)
	rider := b.rider(t, "not-dispatch@example.com", "tok_visa")
	ride := bookTrip(t, b, rider)
	noRetry := client.Policy{OnRetry: func(int, int, error, time.Duration) { t.Error("retried a final answer") }}
	wrong, err := client.NewClient(b.url, client.WithBearer("not-the-dispatch-token"))
	require.NoError(t, err)
	for _, c := range []client.ClientInterface{rider, wrong} {
		res, err := (&client.Retrier{Client: c, Policy: noRetry}).RideComplete(b.Ctx, "", ride.ID, client.RideCompleteInputBody{FareCents: 1500, Currency: "usd"})
		require.NoError(t, err)
		require.Equal(t, http.StatusUnauthorized, res.StatusCode)
		_, err = res.Reply.Ride()
		var pe *client.ProblemError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, http.StatusUnauthorized, pe.Status)
	}
	require.Zero(t, b.Stripe.Executed(fakestripe.OpPaymentIntentCapture))
}

// Five dispatchers complete one trip at once, each under its own key: the
// keys wait their turn on the ride (409, retried), exactly one completes it
// (201), the others get the same completion (200), and the fare is
// captured once.
func TestRideCompleteUnderManyKeysCapturesOnce(t *testing.T) {
	t.Parallel()
	b := setupTrips(t)
	ride := bookTrip(t, b, b.rider(t, "many-keys@example.com", "tok_visa"))
	r := &client.Retrier{Client: b.dispatch(t), Policy: client.Policy{BaseDelay: 20 * time.Millisecond}}
	statuses := make([]int, 5)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := r.RideComplete(b.Ctx, "", ride.ID, client.RideCompleteInputBody{FareCents: 1700, Currency: "usd"})
			if err != nil {
				t.Error(err)
				return
			}
			statuses[i] = res.StatusCode
		}()
	}
	wg.Wait()
	created := 0
	for _, s := range statuses {
		require.Contains(t, []int{http.StatusCreated, http.StatusOK}, s)
		if s == http.StatusCreated {
			created++
		}
	}
	require.Equal(t, 1, created)
	require.Equal(t, 1, b.Stripe.Executed(fakestripe.OpPaymentIntentCapture))
}

// A rider cancels their trip and the answer is lost: the retry with the one
// key gets the stored 201 back, and the hold was released once. The
// dispatch side's cancellation under another key gets the same ride (200);
// another rider's cancellation is 404; a completed trip is refused at once.
func TestRideCancelSurvivesALostAnswer(t *testing.T) {
	t.Parallel()
	b := setupTrips(t)
	rec := &keyRecorder{next: http.DefaultTransport}
	c := b.rider(t, "cancel@example.com", "tok_visa", client.WithHTTPClient(&http.Client{Transport: rec}))
	ride := bookTrip(t, b, c)
	rec.armed.Store(true)
	r := &client.Retrier{Client: c, Policy: client.Policy{Sleep: (&waits{}).sleep}}
	before := len(rec.sent())

	res, err := r.RideCancel(b.Ctx, "", ride.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode, string(res.Reply.Body))
	require.Equal(t, 2, res.Attempts)
	require.True(t, res.Replayed, "the lost 201 was stored; the retry got it back")
	require.Equal(t, []string{res.Key, res.Key}, rec.sent()[before:], "both attempts carry the one key")
	cancelled, err := res.Reply.Ride()
	require.NoError(t, err)
	require.Equal(t, client.RideChargeStatusCancelled, cancelled.ChargeStatus)
	require.NotNil(t, cancelled.ReleasedAt)
	require.Equal(t, 1, b.Stripe.Executed(fakestripe.OpPaymentIntentCancel))

	byDispatch, err := (&client.Retrier{Client: b.dispatch(t)}).RideCancel(b.Ctx, "", ride.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, byDispatch.StatusCode)
	same, err := byDispatch.Reply.Ride()
	require.NoError(t, err)
	require.Equal(t, cancelled.ReleasedAt, same.ReleasedAt)
	require.Equal(t, 1, b.Stripe.Executed(fakestripe.OpPaymentIntentCancel))

	noRetry := client.Policy{OnRetry: func(int, int, error, time.Duration) { t.Error("retried a final answer") }}
	stranger, err := (&client.Retrier{Client: b.rider(t, "stranger@example.com", "tok_visa"), Policy: noRetry}).RideCancel(b.Ctx, "", ride.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, stranger.StatusCode)

	// A completed trip: refused at the first answer; refund it instead.
	completed := bookTrip(t, b, c)
	done, err := (&client.Retrier{Client: b.dispatch(t)}).RideComplete(b.Ctx, "", completed.ID, client.RideCompleteInputBody{FareCents: 1400, Currency: "usd"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, done.StatusCode)
	refused, err := (&client.Retrier{Client: c, Policy: noRetry}).RideCancel(b.Ctx, "", completed.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, refused.StatusCode)
	require.Equal(t, 1, refused.Attempts)
	_, err = refused.Reply.Ride()
	var pe *client.ProblemError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, client.ProblemRideNotCancellable, pe.Type)
	require.Equal(t, completed.ID, pe.RideID())
}

// The fare above the hold is declined: the trip is completed with a
// balance due, and the rider's next booking is refused (402, naming the
// ride, nothing booked). Paying is declined once (stored, replayed for its
// key), then paid under a new key; another key finds it paid (200), and the
// refused booking's key books now.
func TestRideBalancePayUnblocksTheNextBooking(t *testing.T) {
	t.Parallel()
	b := setupTrips(t)
	c := b.rider(t, "balance@example.com", "tok_visa")
	ride := bookTrip(t, b, c)
	// The fare above the hold is a payment of its own: declined.
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultRefuse, Status: http.StatusPaymentRequired, Times: 1})
	completed, err := (&client.Retrier{Client: b.dispatch(t)}).RideComplete(b.Ctx, "", ride.ID, client.RideCompleteInputBody{FareCents: service.RideAmountCents + 500, Currency: "usd"})
	require.NoError(t, err)
	done, err := completed.Reply.Ride()
	require.NoError(t, err, string(completed.Reply.Body))
	require.Equal(t, client.RideChargeStatusCompleted, done.ChargeStatus)
	require.Equal(t, client.RideExtraStatusDue, *done.ExtraStatus)
	require.Equal(t, int64(500), done.BalanceDueCents)

	noRetry := client.Policy{OnRetry: func(int, int, error, time.Duration) { t.Error("retried a final answer") }}
	r := &client.Retrier{Client: c, Policy: noRetry}
	refused, err := r.RideCreate(b.Ctx, "", someRide)
	require.NoError(t, err)
	require.Equal(t, http.StatusPaymentRequired, refused.StatusCode)
	require.Equal(t, 1, refused.Attempts)
	require.False(t, refused.Replayed)
	outcome, none, err := refused.Reply.Outcome()
	require.NoError(t, err)
	require.Equal(t, client.RideOutcomeBalanceDue, outcome)
	require.Nil(t, none)
	problem := refused.Reply.Problem()
	require.Equal(t, client.ProblemBalanceDue, problem.Type)
	require.Equal(t, ride.ID, problem.RideID(), "the refusal names the ride that owes")

	// The same card is declined again: 402, stored and replayed.
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultRefuse, Status: http.StatusPaymentRequired, Times: 1})
	declined, err := r.RideBalancePay(b.Ctx, "", problem.RideID())
	require.NoError(t, err)
	require.Equal(t, http.StatusPaymentRequired, declined.StatusCode, string(declined.Reply.Body))
	require.Equal(t, 1, declined.Attempts)
	_, err = declined.Reply.Ride()
	var pe *client.ProblemError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, http.StatusPaymentRequired, pe.Status)
	replayed, err := r.RideBalancePay(b.Ctx, declined.Key, ride.ID)
	require.NoError(t, err)
	require.True(t, replayed.Replayed)
	require.Equal(t, declined.Reply.Body, replayed.Reply.Body)

	// Under a new key, through a Stripe outage: paid once.
	w := &waits{}
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultStatus, Status: http.StatusServiceUnavailable, Times: 1})
	payer := &client.Retrier{Client: c, Policy: client.Policy{Sleep: w.sleep}}
	paid, err := payer.RideBalancePay(b.Ctx, "", ride.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, paid.StatusCode, string(paid.Reply.Body))
	require.Equal(t, 2, paid.Attempts)
	paidRide, err := paid.Reply.Ride()
	require.NoError(t, err)
	require.Equal(t, client.RideExtraStatusPaid, *paidRide.ExtraStatus)
	require.Zero(t, paidRide.BalanceDueCents)

	// Paid already, under another key: 200.
	again, err := payer.RideBalancePay(b.Ctx, "", ride.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, again.StatusCode)

	// The refused booking's key was left free: it books now.
	booked, err := r.RideCreate(b.Ctx, refused.Key, someRide)
	require.NoError(t, err)
	outcome, next, err := booked.Reply.Outcome()
	require.NoError(t, err)
	require.Equal(t, client.RideOutcomeAuthorized, outcome, string(booked.Reply.Body))

	// A ride that owes nothing: refused at the first answer.
	nothing, err := r.RideBalancePay(b.Ctx, "", next.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, nothing.StatusCode)
	require.Equal(t, 1, nothing.Attempts)
	_, err = nothing.Reply.Ride()
	require.ErrorAs(t, err, &pe)
	require.Equal(t, client.ProblemNoBalanceDue, pe.Type)
}
