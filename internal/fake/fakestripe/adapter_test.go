package fakestripe_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/payments"
)

// The tests in this file drive the fake with the real stripe-go client,
// through the adapter.

func chargeParams(key, customerID string) service.ChargeCreateParams {
	return service.ChargeCreateParams{
		IdempotencyKey: key,
		CustomerID:     customerID,
		AmountCents:    1250,
		Currency:       "eur",
		Description:    "Ride",
		Tag:            testTag(key),
	}
}

// testTag is the tag of an object made under key in these tests.
func testTag(key string) service.Tag {
	return service.Tag{Namespace: "ns-adapter", Rider: "rider-adapter", Key: key}
}

// tagMetadata is testTag(key) as the object's metadata.
func tagMetadata(key string) map[string]string {
	return map[string]string{"ar_ns": "ns-adapter", "ar_rider": "rider-adapter", "ar_key": key}
}

func TestCustomerCreateAndFind(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	c := e.client(payments.Config{})
	ctx := context.Background()

	cust, err := c.CustomerCreate(ctx, service.CustomerCreateParams{
		IdempotencyKey: "user-7-customer", Email: "seven@example.com", Source: "tok_visa", Tag: testTag("user-7-customer"),
	})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(cust.ID, "cus_"), cust.ID)
	require.Equal(t, testTag("user-7-customer"), cust.Tag)

	found, err := c.CustomerFind(ctx, "user-7-customer")
	require.NoError(t, err)
	require.Equal(t, []*service.Customer{cust}, found)

	none, err := c.CustomerFind(ctx, "user-8-customer")
	require.NoError(t, err)
	require.Empty(t, none)

	recorded := e.fake.CustomersWithMetadata("ar_key", "user-7-customer")
	require.Len(t, recorded, 1)
	require.Equal(t, cust.ID, recorded[0].ID)
	require.Equal(t, "seven@example.com", recorded[0].Email)
	require.Equal(t, "tok_visa", recorded[0].Source)
	require.NotEmpty(t, recorded[0].Card)
	require.Equal(t, tagMetadata("user-7-customer"), recorded[0].Metadata)
}

func TestCustomerCreateWithDecliningCard(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	c := e.client(payments.Config{})

	_, err := c.CustomerCreate(context.Background(), service.CustomerCreateParams{
		IdempotencyKey: "user-1-customer", Source: fakestripe.TokenChargeDeclined,
	})
	// A card declined when stored is the rider's source refused: the
	// rider's registration state, never retried.
	pe := paymentError(t, err, service.PaymentClassRefusal)
	require.Equal(t, service.PaymentCodeSourceRefused, pe.Code)
	require.Equal(t, http.StatusPaymentRequired, pe.HTTPStatus)
	require.NotEmpty(t, pe.Message)
	require.Empty(t, e.fake.Customers())

	// So is a source Stripe does not know.
	_, err = c.CustomerCreate(context.Background(), service.CustomerCreateParams{
		IdempotencyKey: "user-2-customer", Source: "z",
	})
	pe = paymentError(t, err, service.PaymentClassRefusal)
	require.Equal(t, service.PaymentCodeSourceRefused, pe.Code)
	require.Equal(t, http.StatusBadRequest, pe.HTTPStatus)
}

func TestChargeCreateAndFind(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	c := e.client(payments.Config{})
	ctx := context.Background()
	cus := e.customer(t, 1, "tok_visa")

	ch, err := c.ChargeCreate(ctx, chargeParams("ride-5-charge", cus))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(ch.ID, "ch_"), ch.ID)
	require.Equal(t, &service.Charge{ID: ch.ID, AmountCents: 1250, Currency: "eur", Status: "succeeded",
		Created: ch.Created, Tag: testTag("ride-5-charge"), CustomerID: cus}, ch)

	found, err := c.ChargeFind(ctx, service.ChargeFindParams{Key: "ride-5-charge"})
	require.NoError(t, err)
	require.Equal(t, []*service.Charge{ch}, found)

	none, err := c.ChargeFind(ctx, service.ChargeFindParams{Key: "ride-6-charge"})
	require.NoError(t, err)
	require.Empty(t, none)

	got, err := c.ChargeGet(ctx, ch.ID)
	require.NoError(t, err)
	require.Equal(t, ch, got)
	missing, err := c.ChargeGet(ctx, "ch_missing")
	require.NoError(t, err)
	require.Nil(t, missing)

	listed, err := c.ChargeListSince(ctx, ch.Created)
	require.NoError(t, err)
	require.Equal(t, []*service.Charge{ch}, listed)
	later, err := c.ChargeListSince(ctx, ch.Created.Add(time.Second))
	require.NoError(t, err)
	require.Empty(t, later)

	recorded := e.fake.ChargesWithMetadata("ar_key", "ride-5-charge")
	require.Len(t, recorded, 1)
	require.Equal(t, fakestripe.Charge{
		ID: ch.ID, Customer: cus, Amount: 1250, Currency: "eur", Description: "Ride",
		Status: fakestripe.ChargeSucceeded, Paid: true, Metadata: tagMetadata("ride-5-charge"),
		Created: recorded[0].Created,
	}, recorded[0])
}

func TestChargeToUnknownCustomerIsConfiguration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})

	_, err := e.client(payments.Config{}).ChargeCreate(context.Background(), chargeParams("k", "cus_missing"))
	pe := paymentError(t, err, service.PaymentClassConfiguration)
	require.Equal(t, "resource_missing", pe.Code)
	require.Equal(t, http.StatusBadRequest, pe.HTTPStatus)
	require.Empty(t, e.fake.Charges())
}

func TestDeclineIsSavedAndReplayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	c := e.client(payments.Config{})
	ctx := context.Background()
	cus := e.customer(t, 1, fakestripe.TokenChargeCustomerFail)

	for range 2 {
		_, err := c.ChargeCreate(ctx, chargeParams("ride-9-charge", cus))
		pe := paymentError(t, err, service.PaymentClassDecline)
		require.Equal(t, "card_declined", pe.Code)
		require.Equal(t, "Your card was declined.", pe.Message)
		require.Equal(t, http.StatusPaymentRequired, pe.HTTPStatus)
	}

	charges := e.fake.Charges()
	require.Len(t, charges, 1, "the replay must not charge again")
	require.Equal(t, fakestripe.ChargeFailed, charges[0].Status)
	require.False(t, charges[0].Paid)
	require.Equal(t, "generic_decline", charges[0].DeclineCode)
	require.Empty(t, e.fake.SucceededCharges())

	reqs := chargeRequests(e.fake)
	require.Len(t, reqs, 2)
	require.False(t, reqs[0].Replayed)
	require.True(t, reqs[1].Replayed)
	require.Equal(t, http.StatusPaymentRequired, reqs[1].Status)

	// The failed attempt carries the ride's metadata but is no charge of it.
	found, err := c.ChargeFind(ctx, service.ChargeFindParams{Key: "ride-9-charge"})
	require.NoError(t, err)
	require.Empty(t, found)
}

func TestRefund(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	c := e.client(payments.Config{})
	ctx := context.Background()
	ch, err := c.ChargeCreate(ctx, chargeParams("ride-3-charge", e.customer(t, 1, "tok_visa")))
	require.NoError(t, err)

	ref, err := c.RefundCreate(ctx, service.RefundCreateParams{IdempotencyKey: "ride-3-refund", ChargeID: ch.ID, Tag: testTag("ride-3-refund")})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(ref.ID, "re_"), ref.ID)
	require.Equal(t, &service.Refund{ID: ref.ID, ChargeID: ch.ID, AmountCents: 1250, Status: "succeeded",
		Created: ref.Created, Tag: testTag("ride-3-refund")}, ref)

	listed, err := c.RefundListSince(ctx, ref.Created)
	require.NoError(t, err)
	require.Equal(t, []*service.Refund{ref}, listed)

	again, err := c.RefundCreate(ctx, service.RefundCreateParams{IdempotencyKey: "ride-3-refund", ChargeID: ch.ID, Tag: testTag("ride-3-refund")})
	require.NoError(t, err)
	require.Equal(t, ref, again, "same key: the saved refund is replayed")

	_, err = c.RefundCreate(ctx, service.RefundCreateParams{IdempotencyKey: "ride-3-refund-2", ChargeID: ch.ID, Tag: testTag("ride-3-refund-2")})
	pe := paymentError(t, err, service.PaymentClassRefusal)
	require.Equal(t, "charge_already_refunded", pe.Code)
	require.Equal(t, http.StatusBadRequest, pe.HTTPStatus)

	refunds := e.fake.RefundsForCharge(ch.ID)
	require.Len(t, refunds, 1)
	require.Equal(t, tagMetadata("ride-3-refund"), refunds[0].Metadata)
	charge := e.fake.ChargesWithMetadata("ar_key", "ride-3-charge")[0]
	require.True(t, charge.Refunded)
	require.Equal(t, int64(1250), charge.AmountRefunded)
}

func TestIdempotentReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	c := e.client(payments.Config{})
	ctx := context.Background()
	cus := e.customer(t, 1, "tok_visa")

	first, err := c.ChargeCreate(ctx, chargeParams("ride-1-charge", cus))
	require.NoError(t, err)
	second, err := c.ChargeCreate(ctx, chargeParams("ride-1-charge", cus))
	require.NoError(t, err)
	require.Equal(t, first, second)

	require.Len(t, e.fake.Charges(), 1)
	require.Equal(t, 2, e.fake.RequestCount(http.MethodPost, "/v1/charges"))
	reqs := chargeRequests(e.fake)
	require.False(t, reqs[0].Replayed)
	require.True(t, reqs[1].Replayed)
	require.Equal(t, "ride-1-charge", reqs[1].IdempotencyKey)
}

func TestKeyReusedWithOtherParameters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	c := e.client(payments.Config{})
	ctx := context.Background()
	cus := e.customer(t, 1, "tok_visa")

	_, err := c.ChargeCreate(ctx, chargeParams("ride-1-charge", cus))
	require.NoError(t, err)
	other := chargeParams("ride-1-charge", cus)
	other.AmountCents = 999
	_, err = c.ChargeCreate(ctx, other)

	pe := paymentError(t, err, service.PaymentClassConfiguration)
	require.Equal(t, http.StatusBadRequest, pe.HTTPStatus)
	require.Contains(t, pe.Message, "same parameters")
	require.Contains(t, pe.Err.Error(), `"type":"idempotency_error"`)
	require.Len(t, e.fake.Charges(), 1)
}

func TestKeyInUseWhileFirstRequestInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	ctx := context.Background()
	cus := e.customer(t, 1, "tok_visa")

	gate := make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release) // never leave a request held, even when failing
	held := make(chan struct{}, 1)
	e.fake.Inject(fakestripe.Fault{Op: fakestripe.OpChargeCreate, Kind: fakestripe.FaultLatency, Gate: gate, Fired: held, Times: 1})

	type result struct {
		ch  *service.Charge
		err error
	}
	first := make(chan result, 1)
	go func() {
		ch, err := e.client(payments.Config{}).ChargeCreate(ctx, chargeParams("ride-1-charge", cus))
		first <- result{ch, err}
	}()
	<-held // the first request holds the key

	_, err := e.client(payments.Config{MaxNetworkRetries: payments.NoRetries}).
		ChargeCreate(ctx, chargeParams("ride-1-charge", cus))
	pe := paymentError(t, err, service.PaymentClassUnavailable)
	require.Equal(t, http.StatusConflict, pe.HTTPStatus)
	require.Equal(t, "idempotency_key_in_use", pe.Code)

	release()
	r := <-first
	require.NoError(t, r.err)
	require.Len(t, e.fake.Charges(), 1)
	require.Equal(t, r.ch.ID, e.fake.Charges()[0].ID)
}

func TestConcurrentSameKeyChargesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	cus := e.customer(t, 1, "tok_visa")
	ctx := context.Background()

	// Whichever request claims the key first is held until every other one
	// has been answered, so all of them overlap with it.
	gate := make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	e.fake.Inject(fakestripe.Fault{Op: fakestripe.OpChargeCreate, Kind: fakestripe.FaultLatency, Gate: gate, Times: 1})
	c := e.client(payments.Config{MaxNetworkRetries: payments.NoRetries})

	const n = 100
	type result struct {
		ch  *service.Charge
		err error
	}
	results := make(chan result, n)
	for range n {
		go func() {
			ch, err := c.ChargeCreate(ctx, chargeParams("ride-1-charge", cus))
			results <- result{ch, err}
		}()
	}
	for range n - 1 {
		r := <-results
		pe := paymentError(t, r.err, service.PaymentClassUnavailable)
		require.Equal(t, http.StatusConflict, pe.HTTPStatus)
	}
	release()
	held := <-results
	require.NoError(t, held.err)

	// Everyone retrying, concurrently, gets the same charge.
	retrier := e.client(payments.Config{})
	var wg sync.WaitGroup
	ids := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			ch, err := retrier.ChargeCreate(ctx, chargeParams("ride-1-charge", cus))
			errs[i] = err
			if err == nil {
				ids[i] = ch.ID
			}
		})
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, held.ch.ID, ids[i])
	}
	charges := e.fake.Charges()
	require.Len(t, charges, 1)
	require.Equal(t, held.ch.ID, charges[0].ID)
	require.Equal(t, 2*n, e.fake.RequestCount(http.MethodPost, "/v1/charges"))
}

func TestAnswerLostAfterChargeThenRetryReplays(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	cus := e.customer(t, 1, "tok_visa")
	// Without keep-alives, net/http cannot transparently resend the request
	// on a fresh connection, so the lost answer reaches the adapter.
	c := e.client(payments.Config{
		MaxNetworkRetries: payments.NoRetries,
		HTTPClient:        &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
	})
	e.fake.Inject(fakestripe.Fault{Op: fakestripe.OpChargeCreate, Kind: fakestripe.FaultDropAfter, Times: 1})
	ctx := context.Background()

	_, err := c.ChargeCreate(ctx, chargeParams("ride-1-charge", cus))
	pe := paymentError(t, err, service.PaymentClassUnavailable)
	require.Zero(t, pe.HTTPStatus)
	made := e.fake.Charges()
	require.Len(t, made, 1, "the charge was made although its answer was lost")

	ch, err := c.ChargeCreate(ctx, chargeParams("ride-1-charge", cus))
	require.NoError(t, err)
	require.Equal(t, made[0].ID, ch.ID)
	require.Len(t, e.fake.Charges(), 1)
	reqs := chargeRequests(e.fake)
	require.Len(t, reqs, 2)
	require.True(t, reqs[0].Dropped)
	require.True(t, reqs[1].Replayed)
}

func TestConnectionDroppedBeforeExecutionIsRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	cus := e.customer(t, 1, "tok_visa")
	e.fake.Inject(fakestripe.Fault{Op: fakestripe.OpChargeCreate, Kind: fakestripe.FaultDropBefore, Times: 1})

	ch, err := e.client(payments.Config{}).ChargeCreate(context.Background(), chargeParams("ride-1-charge", cus))
	require.NoError(t, err)
	require.Len(t, e.fake.Charges(), 1)
	require.Equal(t, ch.ID, e.fake.Charges()[0].ID)
	reqs := chargeRequests(e.fake)
	require.Len(t, reqs, 2)
	require.True(t, reqs[0].Dropped)
	require.False(t, reqs[1].Replayed, "nothing was saved for the dropped request")
}

func TestServiceUnavailableThenSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	cus := e.customer(t, 1, "tok_visa")
	e.fake.Inject(fakestripe.Fault{Op: fakestripe.OpChargeCreate, Kind: fakestripe.FaultStatus, Status: http.StatusServiceUnavailable, Times: 2})

	ch, err := e.client(payments.Config{}).ChargeCreate(context.Background(), chargeParams("ride-1-charge", cus))
	require.NoError(t, err)
	require.Len(t, e.fake.Charges(), 1)
	require.Equal(t, ch.ID, e.fake.Charges()[0].ID)
	reqs := chargeRequests(e.fake)
	require.Len(t, reqs, 3)
	require.Equal(t, []int{503, 503, 200}, []int{reqs[0].Status, reqs[1].Status, reqs[2].Status})
	require.Empty(t, e.fake.Faults(), "both firings were used")
}

func TestStatusFaultsAreUnavailable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		code   string
	}{
		{http.StatusInternalServerError, ""},
		{http.StatusBadGateway, ""},
		{http.StatusServiceUnavailable, ""},
		{http.StatusTooManyRequests, "rate_limit"},
		{http.StatusConflict, "idempotency_key_in_use"},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fakestripe.Options{})
			cus := e.customer(t, 1, "tok_visa")
			e.fake.Inject(fakestripe.Fault{Op: fakestripe.OpAny, Kind: fakestripe.FaultStatus, Status: tc.status})
			c := e.client(payments.Config{MaxNetworkRetries: payments.NoRetries})

			_, err := c.ChargeCreate(context.Background(), chargeParams("ride-1-charge", cus))
			pe := paymentError(t, err, service.PaymentClassUnavailable)
			require.Equal(t, tc.status, pe.HTTPStatus)
			require.Equal(t, tc.code, pe.Code)

			_, err = c.ChargeFind(context.Background(), service.ChargeFindParams{Key: "ride-1-charge"})
			paymentError(t, err, service.PaymentClassUnavailable)
			require.Empty(t, e.fake.Charges())
		})
	}
}

func TestKeyExpiresAfter24Hours(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	e := newEnv(t, fakestripe.Options{Clock: func() time.Time { return start }})
	c := e.client(payments.Config{})
	ctx := context.Background()
	cus := e.customer(t, 1, "tok_visa")

	first, err := c.ChargeCreate(ctx, chargeParams("ride-1-charge", cus))
	require.NoError(t, err)
	e.fake.Advance(fakestripe.KeyLifetime - time.Second)
	replayed, err := c.ChargeCreate(ctx, chargeParams("ride-1-charge", cus))
	require.NoError(t, err)
	require.Equal(t, first.ID, replayed.ID, "the key is still remembered")

	e.fake.Advance(time.Second)
	second, err := c.ChargeCreate(ctx, chargeParams("ride-1-charge", cus))
	require.NoError(t, err)
	require.NotEqual(t, first.ID, second.ID, "an expired key is new again")
	require.Len(t, e.fake.SucceededCharges(), 2)
	require.Equal(t, start.Add(fakestripe.KeyLifetime), e.fake.Now())
}

func TestAttemptTimeoutIsUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	cus := e.customer(t, 1, "tok_visa")
	e.fake.Inject(fakestripe.Fault{Op: fakestripe.OpChargeCreate, Kind: fakestripe.FaultLatency, Duration: time.Minute})
	c := e.client(payments.Config{Timeout: 50 * time.Millisecond, MaxNetworkRetries: payments.NoRetries})

	_, err := c.ChargeCreate(context.Background(), chargeParams("ride-1-charge", cus))
	pe := paymentError(t, err, service.PaymentClassUnavailable)
	require.Zero(t, pe.HTTPStatus)
	require.Empty(t, e.fake.Charges(), "the held request never executes")
}

func TestCanceledContextIsUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	_, err := e.client(payments.Config{}).CustomerFind(ctx, "user-1-customer")
	pe := paymentError(t, err, service.PaymentClassUnavailable)
	require.ErrorIs(t, pe, context.Canceled)
}

func TestMissingIdempotencyKeyIsNeverSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	c := e.client(payments.Config{})
	ctx := context.Background()

	_, err := c.CustomerCreate(ctx, service.CustomerCreateParams{Source: "tok_visa"})
	require.ErrorIs(t, err, payments.ErrMissingIdempotencyKey)
	paymentError(t, err, service.PaymentClassConfiguration)
	_, err = c.ChargeCreate(ctx, chargeParams("", "cus_x"))
	require.ErrorIs(t, err, payments.ErrMissingIdempotencyKey)
	_, err = c.RefundCreate(ctx, service.RefundCreateParams{ChargeID: "ch_x"})
	require.ErrorIs(t, err, payments.ErrMissingIdempotencyKey)
	_, err = c.ChargeCreate(ctx, chargeParams(strings.Repeat("k", 256), "cus_x"))
	require.ErrorIs(t, err, payments.ErrMissingIdempotencyKey)

	require.Empty(t, e.fake.Requests())
}

func TestEveryMutationCarriesTheCallersKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	c := e.client(payments.Config{})
	ctx := context.Background()

	cus, err := c.CustomerCreate(ctx, service.CustomerCreateParams{IdempotencyKey: "user-1-customer", Source: "tok_visa"})
	require.NoError(t, err)
	ch, err := c.ChargeCreate(ctx, chargeParams("ride-1-charge", cus.ID))
	require.NoError(t, err)
	_, err = c.RefundCreate(ctx, service.RefundCreateParams{IdempotencyKey: "ride-1-refund", ChargeID: ch.ID})
	require.NoError(t, err)

	var keys []string
	for _, r := range e.fake.Requests() {
		if r.Method == http.MethodPost {
			keys = append(keys, r.IdempotencyKey)
		}
	}
	require.Equal(t, []string{"user-1-customer", "ride-1-charge", "ride-1-refund"}, keys)
}

func TestBudget(t *testing.T) {
	t.Parallel()
	// 3 attempts of 10s, backoff 0.5s + 1s, 1s margin.
	require.Equal(t, 32500*time.Millisecond, payments.New(payments.Config{}).Budget())
	// 1 attempt of 2s and the margin.
	require.Equal(t, 3*time.Second, payments.New(payments.Config{Timeout: 2 * time.Second, MaxNetworkRetries: payments.NoRetries}).Budget())
	// 6 attempts of 1s, backoff 0.5+1+2.5+5+5 s, 1s margin.
	require.Equal(t, 21*time.Second, payments.New(payments.Config{Timeout: time.Second, MaxNetworkRetries: 5}).Budget())
	require.Less(t, payments.New(payments.Config{}).Budget(), service.ProcessorKeyWindow)
}

// chargeRequests are the recorded POST /v1/charges requests.
func chargeRequests(s *fakestripe.Server) []fakestripe.Request {
	var out []fakestripe.Request
	for _, r := range s.Requests() {
		if r.Method == http.MethodPost && r.Path == "/v1/charges" {
			out = append(out, r)
		}
	}
	return out
}

// TestConcurrentCallsReuseConnections: the adapter's default transport keeps
// the connections of concurrent calls for the next ones, rather than
// opening a connection per call once more than two are in flight.
func TestConcurrentCallsReuseConnections(t *testing.T) {
	t.Parallel()
	fake := fakestripe.New(fakestripe.Options{})
	var opened sync.Map
	srv := httptest.NewUnstartedServer(fake)
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Store(c.RemoteAddr().String(), true)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := payments.New(payments.Config{APIBase: srv.URL, SecretKey: testKey})
	ctx := context.Background()
	cust, err := c.CustomerCreate(ctx, service.CustomerCreateParams{
		IdempotencyKey: "user-1-customer", Email: "one@example.com", Source: "tok_visa",
	})
	require.NoError(t, err)

	const concurrent, rounds = 20, 3
	for round := range rounds {
		errs := make(chan error, concurrent)
		for i := range concurrent {
			go func() {
				n := int64(round*concurrent + i)
				_, err := c.ChargeCreate(ctx, chargeParams(fmt.Sprintf("ride-charge-%d", n), cust.ID))
				errs <- err
			}()
		}
		for range concurrent {
			require.NoError(t, <-errs)
		}
	}
	count := 0
	opened.Range(func(any, any) bool { count++; return true })
	// One connection per concurrent call, give or take one not yet back in
	// the idle pool when the next round starts; a transport keeping two idle
	// connections opens about concurrent-2 more every round.
	require.LessOrEqual(t, count, concurrent+concurrent/2, "connections opened for %d rounds of %d concurrent calls", rounds, concurrent)
	require.Len(t, fake.SucceededCharges(), concurrent*rounds)
}
