package fakestripe_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
)

// A released hold shows at Stripe as a refund of the whole amount, made by
// Stripe: cancelled (charge.refunded, then payment_intent.canceled) or
// lapsed (charge.expired, charge.refunded with reason
// expired_uncaptured_charge, payment_intent.canceled). It moves no money.
func TestHoldReleaseIsShownAsARefund(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	intents, refunds := e.stripeClients()
	visa := customerID(t, e, "tok_visa")
	hold := func(key string) *stripe.PaymentIntent {
		p := intentParams(key, visa)
		p.Amount = stripe.Int64(1000)
		p.CaptureMethod = stripe.String("manual")
		pi, err := intents.New(p)
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusRequiresCapture, pi.Status)
		return pi
	}
	releaseOf := func(chargeID string) *stripe.Refund {
		t.Helper()
		it := refunds.List(&stripe.RefundListParams{Charge: stripe.String(chargeID)})
		var out []*stripe.Refund
		for it.Next() {
			out = append(out, it.Refund())
		}
		require.NoError(t, it.Err())
		require.Len(t, out, 1, "one refund shows the release")
		r := out[0]
		require.Equal(t, stripe.RefundStatusSucceeded, r.Status)
		require.EqualValues(t, 1000, r.Amount)
		require.Empty(t, r.Metadata, "made by Stripe, not tagged by the caller")
		require.Nil(t, r.BalanceTransaction, "no money moved")
		return r
	}

	t.Run("Cancelled", func(t *testing.T) {
		pi := hold("ride-1-hold")
		before := len(e.fake.Events())
		_, err := intents.Cancel(pi.ID, &stripe.PaymentIntentCancelParams{})
		require.NoError(t, err)
		require.Equal(t, []string{"charge.refunded", "payment_intent.canceled"}, eventTypes(e.fake)[before:])
		wire := rawCharge(t, e, pi.LatestCharge.ID)
		require.Equal(t, false, wire["captured"])
		require.Equal(t, float64(1000), wire["amount_refunded"])
		require.Equal(t, true, wire["refunded"])
		r := releaseOf(pi.LatestCharge.ID)
		require.Empty(t, r.Reason)
		for _, fr := range e.fake.Refunds() {
			if fr.ID == r.ID {
				require.True(t, fr.Release)
			}
		}
	})

	t.Run("Lapsed", func(t *testing.T) {
		pi := hold("ride-2-hold")
		before := len(e.fake.Events())
		req, err := http.NewRequest(http.MethodPost, e.url+"/_fake/payment_intents/"+pi.ID+"/expire", nil)
		require.NoError(t, err)
		res, body := do(t, req)
		require.Equal(t, http.StatusOK, res.StatusCode, string(body))
		var got fakestripe.PaymentIntent
		require.NoError(t, json.Unmarshal(body, &got))
		require.Equal(t, fakestripe.PaymentIntentCanceled, got.Status)
		require.Equal(t, "automatic", got.CancellationReason)
		require.Equal(t, []string{"charge.expired", "charge.refunded", "payment_intent.canceled"}, eventTypes(e.fake)[before:])
		r := releaseOf(pi.LatestCharge.ID)
		require.Equal(t, stripe.RefundReasonExpiredUncapturedCharge, r.Reason)

		// Lapsed once: nothing is held any more.
		res, _ = do(t, req.Clone(req.Context()))
		require.Equal(t, http.StatusConflict, res.StatusCode)
		req, err = http.NewRequest(http.MethodPost, e.url+"/_fake/payment_intents/pi_missing/expire", nil)
		require.NoError(t, err)
		res, _ = do(t, req)
		require.Equal(t, http.StatusNotFound, res.StatusCode)
	})

	t.Run("PartialCaptureRest", func(t *testing.T) {
		pi := hold("ride-3-hold")
		_, err := intents.Capture(pi.ID, &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(600)})
		require.NoError(t, err)
		it := refunds.List(&stripe.RefundListParams{Charge: stripe.String(pi.LatestCharge.ID)})
		require.False(t, it.Next(), "the rest is counted in amount_refunded only")
		require.NoError(t, it.Err())
	})
}
