package service_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
)

// openFor is how long a tripped circuit stays open in these tests: short,
// so that "Stripe comes back" is a poll, not a wait.
const openFor = 300 * time.Millisecond

// stripeDown makes every Stripe charge answer 503 until cleared.
func stripeDown(w *testkit.TwoProcessors) {
	w.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultStatus, Status: http.StatusServiceUnavailable})
}

// book books SomeRide under key.
func book(t *testing.T, w *testkit.TwoProcessors, uid int64, key string) (*service.Response, error) {
	t.Helper()
	return w.Service.RideCreate(w.Ctx, uid, key, testkit.SomeRide, nil)
}

// chargesFor counts the successful charges at each processor for the ride.
func chargesFor(w *testkit.TwoProcessors, ride service.Ride) (stripe, adyen int) {
	for _, ch := range w.Stripe.SucceededCharges() {
		if ride.StripeChargeID != nil && ch.ID == *ride.StripeChargeID {
			stripe++
		}
	}
	for _, p := range w.Adyen.AuthorisedPayments() {
		if ride.StripeChargeID != nil && p.PSPReference == *ride.StripeChargeID {
			adyen++
		}
	}
	return stripe, adyen
}

func TestProcessorRouting(t *testing.T) {
	t.Parallel()

	t.Run("StripeDownNewBookingsChargedAtAdyen", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewTwoProcessors(t, 2, time.Hour)
		uid := w.Rider(t, "failover@example.com", "tok_visa").ID
		// The customer job has registered the rider at both.
		_, err := w.Service.CustomerCreate(w.Ctx, uid, "")
		require.NoError(t, err)
		stripeDown(w)
		// Two bookings meet Stripe down: each stays at its recovery point,
		// routed to Stripe, and the second opens Stripe's circuit.
		for range 2 {
			_, err := book(t, w, uid, testkit.NewKey())
			require.Equal(t, service.CodeProcessorUnavailable, service.ErrorCode(err), "err: %v", err)
		}
		resp, err := book(t, w, uid, testkit.NewKey())
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		ride := testkit.DecodeRide(t, resp.Body)
		require.Equal(t, service.ProcessorAdyen, ride.Processor)
		require.Len(t, w.Adyen.AuthorisedPayments(), 1)
		require.Empty(t, w.Stripe.SucceededCharges())
		_, adyen := chargesFor(w, ride)
		require.Equal(t, 1, adyen)
	})

	t.Run("TimedOutAtStripeStaysWithStripeUntilCharged", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewTwoProcessors(t, 1, openFor)
		uid := w.Rider(t, "sticky@example.com", "tok_visa").ID
		key := testkit.NewKey()
		// Stripe makes the charge and the answer is lost: indeterminate,
		// and the circuit opens.
		w.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultDropAfter, Times: 1})
		_, err := book(t, w, uid, key)
		require.Equal(t, service.CodeProcessorUnavailable, service.ErrorCode(err), "err: %v", err)
		require.Len(t, w.Stripe.SucceededCharges(), 1)

		// Stripe stays down. Whatever its circuit's state, a client's
		// retry and the completer go back to Stripe (503: refused by the
		// open circuit, or Stripe's own 503 once half-open), never to
		// Adyen.
		stripeDown(w)
		for range 3 {
			_, err = book(t, w, uid, key)
			require.Equal(t, service.CodeProcessorUnavailable, service.ErrorCode(err), "err: %v", err)
		}
		keyID := keyIDOf(t, w, uid, key)
		_, err = w.Service.KeyComplete(w.Ctx, keyID)
		require.Equal(t, service.CodeProcessorUnavailable, service.ErrorCode(err), "err: %v", err)
		require.Zero(t, w.Adyen.Requests())
		require.Len(t, w.Stripe.SucceededCharges(), 1)

		// Stripe returns; once its circuit lets traffic through, the
		// completer's continuation reaches Stripe with the same key and
		// gets the one charge.
		w.Stripe.ClearFaults()
		var resp *service.Response
		require.Eventually(t, func() bool {
			resp, err = w.Service.KeyComplete(w.Ctx, keyID)
			return err == nil
		}, 10*time.Second, 20*time.Millisecond)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		ride := testkit.DecodeRide(t, resp.Body)
		require.Equal(t, service.ProcessorStripe, ride.Processor)
		stripe, adyen := chargesFor(w, ride)
		require.Equal(t, 1, stripe)
		require.Zero(t, adyen)
		require.Len(t, w.Stripe.SucceededCharges(), 1, "charged exactly once at Stripe")
		require.Zero(t, w.Adyen.Requests())

		// The client's retry replays the same answer.
		again, err := book(t, w, uid, key)
		require.NoError(t, err)
		require.Equal(t, resp.Body, again.Body)

		k, err := w.Service.KeyGet(w.Ctx, keyID)
		require.NoError(t, err)
		require.Equal(t, []service.KeyAttempt{{Attempt: 1, Processor: service.ProcessorStripe}}, k.Attempts)
	})

	t.Run("EveryCircuitOpenRefusedBeforeAnythingIsWritten", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewTwoProcessors(t, 1, time.Hour)
		uid := w.Rider(t, "nowhere@example.com", "tok_visa").ID
		_, err := w.Service.CustomerCreate(w.Ctx, uid, "")
		require.NoError(t, err)
		stripeDown(w)
		w.Adyen.SetOutage(true)
		for range 2 { // one opens Stripe's circuit, the next Adyen's
			_, err = book(t, w, uid, testkit.NewKey())
			require.Equal(t, service.CodeProcessorUnavailable, service.ErrorCode(err), "err: %v", err)
		}
		require.Equal(t, 2, w.Count(t, `SELECT count(*) FROM rides WHERE user_id = $1`, uid))
		require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM rides WHERE user_id = $1 AND processor = 'adyen'`, uid))
		key := testkit.NewKey()
		_, err = book(t, w, uid, key)
		require.Equal(t, service.CodeProcessorUnavailable, service.ErrorCode(err), "err: %v", err)
		require.Equal(t, 0, w.Count(t, `SELECT count(*) FROM rides WHERE user_id = $1 AND processor = 'stripe' AND idempotency_key_id IN (SELECT id FROM idempotency_keys WHERE idempotency_key = $2)`, uid, key), "%v", err)
		require.Equal(t, 2, w.Count(t, `SELECT count(*) FROM rides WHERE user_id = $1`, uid))
		require.Zero(t, w.Count(t, `SELECT count(*) FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2`, uid, key))
	})

	t.Run("RefundGoesToTheProcessorThatCharged", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewTwoProcessors(t, 1, time.Hour)
		uid := w.Rider(t, "refund-adyen@example.com", "tok_visa").ID
		_, err := w.Service.CustomerCreate(w.Ctx, uid, "")
		require.NoError(t, err)
		stripeDown(w)
		_, err = book(t, w, uid, testkit.NewKey())
		require.Error(t, err)
		resp, err := book(t, w, uid, testkit.NewKey())
		require.NoError(t, err)
		ride := testkit.DecodeRide(t, resp.Body)
		require.Equal(t, service.ProcessorAdyen, ride.Processor)

		ref, err := w.Service.RideRefundCreate(w.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, ref.Status, string(ref.Body))
		refunds := w.Adyen.Refunds()
		require.Len(t, refunds, 1)
		require.Equal(t, *ride.StripeChargeID, refunds[0].PaymentPSPReference)
		require.Equal(t, int64(service.RideAmountCents), refunds[0].AmountValue)
		require.Empty(t, w.Stripe.Refunds())
	})
}

func keyIDOf(t *testing.T, w *testkit.TwoProcessors, uid int64, key string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, w.Pool.QueryRow(w.Ctx, `SELECT id FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2`, uid, key).Scan(&id))
	return id
}

func TestPaymentSource(t *testing.T) {
	t.Parallel()

	t.Run("RequiredOutsideDevelopment", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		svc, err := service.New(service.Config{Pool: b.Pool, Payments: b.Payments})
		require.NoError(t, err)
		acc, err := accounts.New(accounts.Config{Engine: svc.Engine(), Jobs: svc.Jobs()})
		require.NoError(t, err)
		_, err = acc.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: "nosource@example.com"})
		e := testkit.RequireCode(t, err, service.CodeInvalid)
		require.Equal(t, "body.payment_source", e.Field)
		require.Zero(t, b.Count(t, `SELECT count(*) FROM users WHERE role = 'rider'`))
	})

	t.Run("RefusedEverywhereIsTheRidersStateAnd402", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewTwoProcessors(t, 5, time.Hour)
		reg := prometheus.NewRegistry()
		svc, err := service.New(service.Config{Pool: w.Pool, Processors: []service.Processor{
			{Name: service.ProcessorStripe, Payments: w.Payments},
			{Name: service.ProcessorAdyen, Payments: w.Adyen.Client()},
		}, Registerer: reg})
		require.NoError(t, err)
		res, err := testkit.NewAccounts(t, svc, nil).UserUpsert(w.Ctx, accounts.UserUpsertParams{Email: "z@example.com", PaymentSource: "z"})
		require.NoError(t, err)
		uid := res.User.ID

		// The customer job: an answer from every processor, no error to
		// retry.
		_, err = svc.CustomerCreate(w.Ctx, uid, "")
		require.NoError(t, err)
		user, err := testkit.NewAccounts(t, svc, nil).UserGet(w.Ctx, "z@example.com")
		require.NoError(t, err)
		require.Len(t, user.Registrations, 2)
		for _, r := range user.Registrations {
			require.Equal(t, "refused", r.Status)
			require.NotNil(t, r.Reason)
			require.Contains(t, *r.Reason, r.Processor+" refused the payment source")
		}
		require.Zero(t, configErrorsTotal(t, reg))

		resp, err := svc.RideCreate(w.Ctx, uid, testkit.NewKey(), testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusPaymentRequired, resp.Status)
		var p service.Problem
		require.NoError(t, json.Unmarshal(resp.Body, &p))
		require.Contains(t, p.Detail, "refused the payment source")
		require.Empty(t, w.Stripe.Charges())
		require.Empty(t, w.Adyen.Payments())
	})

	t.Run("RefusedAtStripeRoutedToAdyenBeforeAnyCharge", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewTwoProcessors(t, 5, time.Hour)
		uid := w.Rider(t, "adyen-only@example.com", fakeadyen.EncryptedCardPrefix+"0_1_25_card").ID
		key := testkit.NewKey()
		// No customer job has run: the booking meets Stripe's refusal in
		// its own call, records it, and moves on to Adyen as attempt 2.
		resp, err := book(t, w, uid, key)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		ride := testkit.DecodeRide(t, resp.Body)
		require.Equal(t, service.ProcessorAdyen, ride.Processor)
		require.Empty(t, w.Stripe.Charges())
		require.Len(t, w.Adyen.AuthorisedPayments(), 1)

		k, err := w.Service.KeyGet(w.Ctx, keyIDOf(t, w, uid, key))
		require.NoError(t, err)
		require.Len(t, k.Attempts, 2)
		require.Equal(t, service.ProcessorStripe, k.Attempts[0].Processor)
		require.True(t, strings.Contains(k.Attempts[0].Reason, "stripe refused the payment source"), k.Attempts[0].Reason)
		require.Equal(t, service.ProcessorAdyen, k.Attempts[1].Processor)

		user, err := w.Accounts.UserGet(w.Ctx, "adyen-only@example.com")
		require.NoError(t, err)
		states := map[string]string{}
		for _, r := range user.Registrations {
			states[r.Processor] = r.Status
		}
		require.Equal(t, map[string]string{"stripe": "refused", "adyen": "registered"}, states)

		// The next booking goes straight to Adyen.
		next, err := book(t, w, uid, testkit.NewKey())
		require.NoError(t, err)
		require.Equal(t, service.ProcessorAdyen, testkit.DecodeRide(t, next.Body).Processor)
	})
}

// configErrorsTotal sums atomicrides_stripe_config_errors_total.
func configErrorsTotal(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "atomicrides_stripe_config_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// TestLostRoutingCommitIsDetected is the one case the design cannot
// prevent: a booking charged at Stripe whose commits are lost (a restore
// from a backup, a failover that loses commits), retried by its client
// while Stripe's circuit is open, is routed anew — to Adyen — and charged
// there too. Reconciliation lists it as a double charge, with its metric.
func TestLostRoutingCommitIsDetected(t *testing.T) {
	t.Parallel()
	w := testkit.NewTwoProcessors(t, 1, time.Hour)
	uid := w.Rider(t, "lost@example.com", "tok_visa").ID
	_, err := w.Service.CustomerCreate(w.Ctx, uid, "")
	require.NoError(t, err)
	key := testkit.NewKey()
	first, err := book(t, w, uid, key)
	require.NoError(t, err)
	charged := testkit.DecodeRide(t, first.Body)
	require.Equal(t, service.ProcessorStripe, charged.Processor)

	// The restore: the key, its ride and what hangs on it are gone.
	w.Exec(t, `DELETE FROM receipts WHERE ride_id = $1`, charged.ID)
	w.Exec(t, `DELETE FROM rides WHERE id = $1`, charged.ID)
	w.Exec(t, `DELETE FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2`, uid, key)

	// Stripe goes down and its circuit opens on another booking; the
	// client retries the lost request, which now looks new.
	stripeDown(w)
	_, err = book(t, w, uid, testkit.NewKey())
	require.Error(t, err)
	again, err := book(t, w, uid, key)
	require.NoError(t, err)
	rerouted := testkit.DecodeRide(t, again.Body)
	require.Equal(t, service.ProcessorAdyen, rerouted.Processor)

	w.Stripe.ClearFaults()
	rep, err := w.Service.Reconcile(w.Ctx, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{service.ProcessorStripe}, rep.Processors)
	require.Equal(t, []string{service.ProcessorAdyen}, rep.Notified, "Adyen's charges are read from its notifications")
	require.Empty(t, rep.Unlisted)
	require.Len(t, rep.DoubleCharges, 1, "%+v", rep)
	d := rep.DoubleCharges[0]
	require.Equal(t, rerouted.ID, d.RideID)
	require.Equal(t, service.ProcessorAdyen, d.RecordedProcessor)
	require.Equal(t, *rerouted.StripeChargeID, d.RecordedChargeID)
	require.Equal(t, service.ProcessorStripe, d.OtherProcessor)
	require.Equal(t, *charged.StripeChargeID, d.OtherChargeID)
	require.Empty(t, rep.OrphanCharges, "the Stripe charge is listed as the double charge it is, not as an orphan")
	require.Equal(t, 1, rep.Orphans()["double_charge"])
	require.False(t, rep.Clean())

	// Resolved at once by the orphan policy: the Stripe charge no ride
	// records is refunded, once; the ride's own charge at Adyen stays.
	n, err := w.Service.OrphanRefundsSchedule(w.Ctx, 48*time.Hour)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = w.Service.OrphanRefundsSchedule(w.Ctx, 48*time.Hour)
	require.NoError(t, err)
	require.Zero(t, n)
	// The refund job, on a process whose Stripe circuit is closed (this
	// one's stays open for the test's hour; the job retries until then).
	o, err := w.Instance(t).OrphanRefund(w.Ctx, d.OtherChargeID)
	require.NoError(t, err)
	require.Equal(t, service.OrphanRefundRefunded, o.Status)
	require.Equal(t, service.OrphanReasonDoubleCharge, o.Reason)
	require.Len(t, w.Stripe.RefundsForCharge(d.OtherChargeID), 1)
	require.Empty(t, w.Adyen.Refunds())
	rep, err = w.Service.Reconcile(w.Ctx, time.Hour)
	require.NoError(t, err)
	require.True(t, rep.Clean(), "%+v", rep)
}
