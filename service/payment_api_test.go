package service_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
)

// TestABookingInFlightAcrossTheUpgradeFinishesOnTheChargesAPI: a booking
// whose ride a release before PaymentIntents committed, and whose charge
// that release sent with its answer lost, is continued after the upgrade
// on the Charges API with the same request and key: Stripe answers with
// the charge it made, and nothing is charged twice. The ride stays
// readable, refundable (by its charge) and its payment is its charge. A new
// booking goes to PaymentIntents and is refunded through its PaymentIntent.
func TestABookingInFlightAcrossTheUpgradeFinishesOnTheChargesAPI(t *testing.T) {
	t.Parallel()
	b, uid, key := setupRider(t, "upgrade@example.com")
	_, err := b.Service.CustomerCreate(b.Ctx, uid, "")
	require.NoError(t, err)
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultStatus, Status: http.StatusServiceUnavailable, Times: 1})
	_, err = b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	testkit.RequireCode(t, err, service.CodeProcessorUnavailable)
	require.Empty(t, b.Stripe.PaymentIntents())

	// The ride as the release before the upgrade left it: committed at its
	// recovery point, on the Charges API (the migration's value for every
	// ride booked before it) ...
	b.Exec(t, `UPDATE rides SET payment_api = 'charges' WHERE user_id = $1`, uid)
	// ... with its charge sent by that release, the answer lost.
	var email, customer string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT email, stripe_customer_id FROM users WHERE id = $1`, uid).Scan(&email, &customer))
	pkey := service.ChargeKey(b.Service.Namespace(), email, key)
	lost, err := b.Payments.ChargeCreate(b.Ctx, service.ChargeCreateParams{
		IdempotencyKey: service.ChargeIdempotencyKey(pkey, customer), CustomerID: customer,
		AmountCents: service.RideAmountCents, Currency: service.RideCurrency, Description: service.RideDescription,
		Tag: service.RideTag(b.Service, email, pkey),
	})
	require.NoError(t, err)

	resp, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
	ride := testkit.DecodeRide(t, resp.Body)
	require.Equal(t, lost.ID, *ride.ChargeID, "the charge the earlier release made")
	require.Equal(t, lost.ID, *ride.StripeChargeID)
	require.Equal(t, lost.ID, *ride.PaymentID, "a Charges API charge is its own payment")
	require.Len(t, b.Stripe.SucceededCharges(), 1)
	require.Empty(t, b.Stripe.PaymentIntents(), "finished on the API it started with")

	// Refundable, by its charge.
	refund, err := b.Service.RideRefundCreate(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, refund.Status, string(refund.Body))
	refunds := b.Stripe.Refunds()
	require.Len(t, refunds, 1)
	require.Equal(t, lost.ID, refunds[0].Charge)
	require.Empty(t, refunds[0].PaymentIntent)
	got := rideNow(t, b.Env, uid, ride.ID)
	require.Equal(t, service.RideRefundRefunded, got.RefundStatus)
	require.Equal(t, refunds[0].ID, *got.RefundID)
	require.Equal(t, refunds[0].ID, *got.StripeRefundID)

	// A new booking goes to PaymentIntents, and its refund through it.
	next := b.Ride(t, uid)
	require.NotNil(t, next.PaymentID)
	require.True(t, strings.HasPrefix(*next.PaymentID, "pi_"), *next.PaymentID)
	pis := b.Stripe.PaymentIntents()
	require.Len(t, pis, 1)
	require.Equal(t, *next.ChargeID, pis[0].LatestCharge)
	refund, err = b.Service.RideRefundCreate(b.Ctx, uid, testkit.NewKey(), next.ID, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, refund.Status, string(refund.Body))
	refunds = b.Stripe.Refunds()
	require.Len(t, refunds, 2)
	require.Equal(t, *next.PaymentID, refunds[1].PaymentIntent)
	require.Equal(t, *next.ChargeID, refunds[1].Charge)
}
