package service_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
)

// replace sends PUT /users/{email} with source for an existing rider.
func replace(t *testing.T, svc *service.Service, w *testkit.TwoProcessors, email, source string) *accounts.UserUpsertResult {
	t.Helper()
	res, err := testkit.NewAccounts(t, svc, nil).UserUpsert(w.Ctx, accounts.UserUpsertParams{Email: email, PaymentSource: source})
	require.NoError(t, err)
	require.False(t, res.Created)
	require.Equal(t, source, res.User.PaymentSource)
	return res
}

// registrationStates maps processor to status for the rider's current
// source.
func registrationStates(t *testing.T, svc *service.Service, w *testkit.TwoProcessors, email string) map[string]string {
	t.Helper()
	u, err := testkit.NewAccounts(t, svc, nil).UserGet(w.Ctx, email)
	require.NoError(t, err)
	out := map[string]string{}
	for _, r := range u.Registrations {
		out[r.Processor] = r.Status
	}
	return out
}

// stripeSourceOf is the source of the Stripe customer a charge was made to.
func stripeSourceOf(t *testing.T, w *testkit.TwoProcessors, chargeID string) string {
	t.Helper()
	sources := map[string]string{}
	for _, c := range w.Stripe.Customers() {
		sources[c.ID] = c.Source
	}
	for _, ch := range w.Stripe.SucceededCharges() {
		if ch.ID == chargeID {
			return sources[ch.Customer]
		}
	}
	t.Fatalf("no succeeded Stripe charge %s", chargeID)
	return ""
}

// adyenSourceOf is the source of the stored card an Adyen payment charged.
func adyenSourceOf(t *testing.T, w *testkit.TwoProcessors, psp string) string {
	t.Helper()
	cards := map[string]string{}
	for _, c := range w.Adyen.StoredCards() {
		cards[c.ID] = c.Source
	}
	for _, p := range w.Adyen.AuthorisedPayments() {
		if p.PSPReference == psp {
			return cards[p.StoredCardID]
		}
	}
	t.Fatalf("no authorised Adyen payment %s", psp)
	return ""
}

func TestSourceReplacement(t *testing.T) {
	t.Parallel()

	t.Run("SameSourceChangesNothing", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewTwoProcessors(t, 5, time.Hour)
		uid := w.Rider(t, "same@example.com", "tok_visa").ID
		_, err := w.Service.CustomerCreate(w.Ctx, uid, "")
		require.NoError(t, err)
		requests := w.Adyen.Requests()
		customers := len(w.Stripe.Customers())

		for _, src := range []string{"tok_visa", ""} { // "" keeps the source under -dev
			res, err := w.Accounts.UserUpsert(w.Ctx, accounts.UserUpsertParams{Email: "same@example.com", PaymentSource: src})
			require.NoError(t, err)
			require.False(t, res.Created)
			require.False(t, res.Replaced)
			require.Equal(t, "tok_visa", res.User.PaymentSource)
			require.Len(t, res.User.Registrations, 2)
		}
		require.Zero(t, w.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'user.payment_source_replaced'`))
		require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'customer_create'`))
		_, err = w.Service.CustomerCreate(w.Ctx, uid, "tok_visa")
		require.NoError(t, err)
		require.Equal(t, requests, w.Adyen.Requests(), "nothing registered again")
		require.Len(t, w.Stripe.Customers(), customers)
	})

	t.Run("NewSourceRegisteredAnewAtEveryProcessorAndBackAgain", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewTwoProcessors(t, 5, time.Hour)
		const email = "swap@example.com"
		uid := w.Rider(t, email, "tok_visa").ID
		first, err := w.Service.CustomerCreate(w.Ctx, uid, "")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"stripe": "registered", "adyen": "registered"}, registrationStates(t, w.Service, w, email))

		res := replace(t, w.Service, w, email, "tok_mastercard")
		require.True(t, res.Replaced)
		require.Empty(t, res.User.Registrations, "registration starts again for the new source")
		require.Nil(t, res.User.StripeCustomerID)
		var data map[string]string
		require.NoError(t, w.Pool.QueryRow(w.Ctx, `SELECT data FROM audit_records WHERE action = 'user.payment_source_replaced' AND user_id = $1`, uid).Scan(&data))
		require.Equal(t, map[string]string{"from": "tok_visa", "to": "tok_mastercard"}, data)
		require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'customer_create' AND args->>'payment_source' = 'tok_mastercard'`))

		// The job of the old source, run again late: its source is
		// answered everywhere, so it calls nothing, and the new source's
		// registrations are untouched.
		before := w.Adyen.Requests()
		_, err = w.Service.CustomerCreate(w.Ctx, uid, "tok_visa")
		require.NoError(t, err)
		require.Equal(t, before, w.Adyen.Requests())
		require.Empty(t, registrationStates(t, w.Service, w, email))

		// The new source's job: a new customer at Stripe under the new
		// source's key, a second stored card under the same shopper at
		// Adyen.
		second, err := w.Service.CustomerCreate(w.Ctx, uid, "tok_mastercard")
		require.NoError(t, err)
		require.NotEqual(t, first, second)
		require.Equal(t, map[string]string{"stripe": "registered", "adyen": "registered"}, registrationStates(t, w.Service, w, email))
		ns := w.Service.Namespace()
		for src, id := range map[string]string{"tok_visa": first, "tok_mastercard": second} {
			cs := w.Stripe.CustomersWithMetadata("ar_key", service.CustomerKey(ns, email, src))
			require.Len(t, cs, 1, src)
			require.Equal(t, id, cs[0].ID)
			require.Equal(t, src, cs[0].Source)
		}
		cards := w.Adyen.StoredCards()
		require.Len(t, cards, 2)
		require.Equal(t, cards[0].ShopperReference, cards[1].ShopperReference)
		u, err := w.Accounts.UserGet(w.Ctx, email)
		require.NoError(t, err)
		require.Equal(t, second, *u.StripeCustomerID)

		// Back to the first source: its registrations are the answers the
		// processors gave it, and nothing is registered again.
		back := replace(t, w.Service, w, email, "tok_visa")
		require.True(t, back.Replaced)
		require.Equal(t, first, *back.User.StripeCustomerID)
		require.Len(t, back.User.Registrations, 2)
		before = w.Adyen.Requests()
		_, err = w.Service.CustomerCreate(w.Ctx, uid, "tok_visa")
		require.NoError(t, err)
		require.Equal(t, before, w.Adyen.Requests())
		require.Len(t, w.Stripe.Customers(), 2)
		require.Equal(t, 2, w.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'user.payment_source_replaced'`))
	})

	t.Run("JobOfAReplacedSourceStillRegistersIt", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewTwoProcessors(t, 5, time.Hour)
		const email = "late-job@example.com"
		uid := w.Rider(t, email, "tok_visa").ID
		replace(t, w.Service, w, email, "tok_mastercard")
		// The first source's job runs only now.
		_, err := w.Service.CustomerCreate(w.Ctx, uid, "tok_visa")
		require.NoError(t, err)
		require.Empty(t, registrationStates(t, w.Service, w, email), "the current source is not the one registered")
		u, err := w.Accounts.UserGet(w.Ctx, email)
		require.NoError(t, err)
		require.Nil(t, u.StripeCustomerID)
		// Back to it: answered everywhere, at once.
		back := replace(t, w.Service, w, email, "tok_visa")
		require.Len(t, back.User.Registrations, 2)
		require.NotNil(t, back.User.StripeCustomerID)
		require.Len(t, w.Adyen.StoredCards(), 1)
	})

	t.Run("ConcurrentReplacementsLeaveOneSourceAndAnAuditPerChange", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewTwoProcessors(t, 5, time.Hour)
		const email = "crowd-swap@example.com"
		w.Rider(t, email, "tok_visa")
		sources := []string{"tok_a", "tok_b", "tok_c", "tok_d", "tok_e", "tok_f", "tok_g", "tok_h"}
		var wg sync.WaitGroup
		errs := make(chan error, len(sources))
		start := make(chan struct{})
		for _, src := range sources {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := w.Accounts.UserUpsert(w.Ctx, accounts.UserUpsertParams{Email: email, PaymentSource: src})
				errs <- err
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, "serialization failures are retried, never surfaced")
		}
		// Every replacement committed once, each with its audit record and
		// the job of its source; the rider ends with one of them.
		require.Equal(t, len(sources), w.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'user.payment_source_replaced'`))
		require.Equal(t, len(sources)+1, w.Count(t, `SELECT count(DISTINCT args->>'payment_source') FROM river_job WHERE kind = 'customer_create'`))
		var final string
		require.NoError(t, w.Pool.QueryRow(w.Ctx, `SELECT payment_source FROM users WHERE email = $1`, email).Scan(&final))
		require.Contains(t, sources, final)
		var last string
		require.NoError(t, w.Pool.QueryRow(w.Ctx, `SELECT data->>'to' FROM audit_records WHERE action = 'user.payment_source_replaced' ORDER BY created_at DESC, id DESC LIMIT 1`).Scan(&last))
		require.Equal(t, final, last, "the last replacement audited is the source kept")
	})

	t.Run("InvalidSourceWritesNothing", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewTwoProcessors(t, 5, time.Hour)
		w.Rider(t, "bad@example.com", "tok_visa")
		for _, src := range []string{"tok visa", "tok-visa", string(make([]byte, 256))} {
			_, err := w.Accounts.UserUpsert(w.Ctx, accounts.UserUpsertParams{Email: "bad@example.com", PaymentSource: src})
			e := testkit.RequireCode(t, err, service.CodeInvalid)
			require.Equal(t, "body.payment_source", e.Field)
		}
		require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM users WHERE payment_source = 'tok_visa'`))
		require.Zero(t, w.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'user.payment_source_replaced'`))
		require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'customer_create'`))
	})

	t.Run("RefusedAtStripeThenReplacedIsChargedAtStripeAgain", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewTwoProcessors(t, 5, time.Hour)
		const email = "recover@example.com"
		// An Adyen card field: Stripe refuses it, Adyen stores it.
		uid := w.Rider(t, email, fakeadyen.EncryptedCardPrefix+"0_1_25_card").ID
		_, err := w.Service.CustomerCreate(w.Ctx, uid, "")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"stripe": "refused", "adyen": "registered"}, registrationStates(t, w.Service, w, email))
		resp, err := book(t, w, uid, testkit.NewKey())
		require.NoError(t, err)
		require.Equal(t, service.ProcessorAdyen, testkit.DecodeRide(t, resp.Body).Processor)

		replace(t, w.Service, w, email, "tok_visa")
		// Before the job has run, the booking registers the new source at
		// Stripe itself and is charged there.
		resp, err = book(t, w, uid, testkit.NewKey())
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		ride := testkit.DecodeRide(t, resp.Body)
		require.Equal(t, service.ProcessorStripe, ride.Processor)
		require.Equal(t, "tok_visa", stripeSourceOf(t, w, *ride.StripeChargeID))
		require.Equal(t, map[string]string{"stripe": "registered"}, registrationStates(t, w.Service, w, email))
		// The job then finds Stripe answered and registers at Adyen only.
		_, err = w.Service.CustomerCreate(w.Ctx, uid, "tok_visa")
		require.NoError(t, err)
		require.Len(t, w.Stripe.Customers(), 1)
		require.Equal(t, map[string]string{"stripe": "registered", "adyen": "registered"}, registrationStates(t, w.Service, w, email))
	})

	// A booking held at Stripe while the rider replaces its source is
	// charged with the source it was booked with; a booking made meanwhile
	// uses the new one. Then a booking whose answer is lost, a replacement
	// back to the first source, and the client's retry: charged once, with
	// the source it started with.
	t.Run("InFlightBookingKeepsItsSourceAtStripe", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewTwoProcessors(t, 5, time.Hour)
		const email = "inflight@example.com"
		uid := w.Rider(t, email, "tok_visa").ID
		_, err := w.Service.CustomerCreate(w.Ctx, uid, "")
		require.NoError(t, err)

		gate, fired := make(chan struct{}), make(chan struct{}, 1)
		w.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultLatency, Gate: gate, Fired: fired, Times: 1})
		type result struct {
			resp *service.Response
			err  error
		}
		held := make(chan result, 1)
		heldKey := testkit.NewKey()
		go func() {
			resp, err := book(t, w, uid, heldKey)
			held <- result{resp, err}
		}()
		select {
		case <-fired: // the charge call is at Stripe, past its recovery point
		case <-time.After(30 * time.Second):
			t.Fatal("the held booking never reached Stripe")
		}

		replace(t, w.Service, w, email, "tok_mastercard")
		resp, err := book(t, w, uid, testkit.NewKey())
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		newRide := testkit.DecodeRide(t, resp.Body)
		require.Equal(t, "tok_mastercard", stripeSourceOf(t, w, *newRide.StripeChargeID))
		select {
		case r := <-held:
			t.Fatalf("the held booking finished before Stripe answered: %v %v", r.resp, r.err)
		default:
		}

		close(gate)
		r := <-held
		if r.err != nil {
			// The client gave up on Stripe first (a loaded machine): its
			// retry continues the same request.
			require.Equal(t, service.CodeProcessorUnavailable, service.ErrorCode(r.err), "err: %v", r.err)
			r.resp, r.err = book(t, w, uid, heldKey)
			require.NoError(t, r.err)
		}
		require.Equal(t, http.StatusCreated, r.resp.Status, string(r.resp.Body))
		heldRide := testkit.DecodeRide(t, r.resp.Body)
		require.Equal(t, "tok_visa", stripeSourceOf(t, w, *heldRide.StripeChargeID))
		require.Len(t, w.Stripe.ChargesWithMetadata("ar_key", service.ChargeKey(w.Service.Namespace(), email, heldKey)), 1)
		require.Equal(t, "tok_visa", rideSource(t, w, heldRide.ID))
		require.Equal(t, "tok_mastercard", rideSource(t, w, newRide.ID))

		// A charge answer lost with tok_mastercard, the rider back to
		// tok_visa, the client's retry.
		lostKey := testkit.NewKey()
		w.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultDropAfter, Times: 1})
		_, err = book(t, w, uid, lostKey)
		require.Equal(t, service.CodeProcessorUnavailable, service.ErrorCode(err), "err: %v", err)
		charges := len(w.Stripe.SucceededCharges())
		replace(t, w.Service, w, email, "tok_visa")
		resp, err = book(t, w, uid, lostKey)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		retried := testkit.DecodeRide(t, resp.Body)
		require.Equal(t, charges, len(w.Stripe.SucceededCharges()), "the retry is the charge already made")
		require.Equal(t, "tok_mastercard", stripeSourceOf(t, w, *retried.StripeChargeID))
		require.Len(t, w.Stripe.ChargesWithMetadata("ar_key", service.ChargeKey(w.Service.Namespace(), email, lostKey)), 1)

		resp, err = book(t, w, uid, testkit.NewKey())
		require.NoError(t, err)
		require.Equal(t, "tok_visa", stripeSourceOf(t, w, *testkit.DecodeRide(t, resp.Body).StripeChargeID))
		require.Len(t, w.Stripe.Customers(), 2, "one customer per source, the first one reused")
		require.Len(t, w.Stripe.SucceededCharges(), 4)
	})

	t.Run("InFlightBookingKeepsItsStoredCardAtAdyen", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewTwoProcessors(t, 5, time.Hour)
		svc, err := service.New(service.Config{Pool: w.Pool, Processors: []service.Processor{
			{Name: service.ProcessorAdyen, Payments: w.Adyen.Client()},
			{Name: service.ProcessorStripe, Payments: w.Payments},
		}, ReplayCacheTTL: -1})
		require.NoError(t, err)
		const email = "inflight-adyen@example.com"
		res, err := testkit.NewAccounts(t, svc, nil).UserUpsert(w.Ctx, accounts.UserUpsertParams{Email: email, PaymentSource: "tok_visa"})
		require.NoError(t, err)
		uid := res.User.ID
		_, err = svc.CustomerCreate(w.Ctx, uid, "")
		require.NoError(t, err)

		lostKey := testkit.NewKey()
		w.Adyen.Inject(fakeadyen.Fault{Op: fakeadyen.OpPayment, Kind: fakeadyen.FaultDropAfter, Times: 1})
		_, err = svc.RideCreate(w.Ctx, uid, lostKey, testkit.SomeRide, nil)
		require.Equal(t, service.CodeProcessorUnavailable, service.ErrorCode(err), "err: %v", err)
		require.Len(t, w.Adyen.AuthorisedPayments(), 1)

		replace(t, svc, w, email, "tok_mastercard")
		_, err = svc.CustomerCreate(w.Ctx, uid, "tok_mastercard")
		require.NoError(t, err)
		require.Len(t, w.Adyen.StoredCards(), 2)

		resp, err := svc.RideCreate(w.Ctx, uid, lostKey, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		ride := testkit.DecodeRide(t, resp.Body)
		require.Equal(t, service.ProcessorAdyen, ride.Processor)
		require.Len(t, w.Adyen.AuthorisedPayments(), 1, "charged once")
		require.Equal(t, "tok_visa", adyenSourceOf(t, w, *ride.StripeChargeID))

		resp, err = svc.RideCreate(w.Ctx, uid, testkit.NewKey(), testkit.SomeRide, nil)
		require.NoError(t, err)
		next := testkit.DecodeRide(t, resp.Body)
		require.Equal(t, service.ProcessorAdyen, next.Processor)
		require.Equal(t, "tok_mastercard", adyenSourceOf(t, w, *next.StripeChargeID))
		require.Empty(t, w.Stripe.Charges())
	})
}

// rideSource is the payment source recorded with the ride.
func rideSource(t *testing.T, w *testkit.TwoProcessors, rideID int64) string {
	t.Helper()
	var src string
	require.NoError(t, w.Pool.QueryRow(w.Ctx, `SELECT payment_source FROM rides WHERE id = $1`, rideID).Scan(&src))
	return src
}
