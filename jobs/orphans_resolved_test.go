package jobs_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
)

// refundRequests counts the refunds the service asked of the fake Stripe.
func (b *testBundle) refundRequests() int {
	n := 0
	for _, r := range b.Stripe.Requests() {
		if r.Op == fakestripe.OpRefundCreate {
			n++
		}
	}
	return n
}

// bookAndRefund books a ride for uid under key and refunds it, and returns
// the ride and the refund's id at Stripe.
func (b *testBundle) bookAndRefund(t *testing.T, uid int64, key string) (service.Ride, string) {
	t.Helper()
	resp, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status)
	ride := testkit.DecodeRide(t, resp.Body)
	resp = b.refundAt(t, uid, ride.ID)
	require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
	refunds := b.Stripe.RefundsForCharge(*ride.StripeChargeID)
	require.Len(t, refunds, 1)
	return ride, refunds[0].ID
}

// A ride booked and refunded, then lost with its refund (a restore): its
// charge is an orphan Stripe has refunded already. The pass records it as
// resolved with that refund and sends nothing: no refund, no receipt.
func TestOrphanRefundedAlreadyResolvedNothingSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	uid := b.rider(t, "orphan-refunded@example.com")
	const key = "orphan-refunded-lost-01"
	ride, refundID := b.bookAndRefund(t, uid, key)
	b.Exec(t, `DELETE FROM refunds WHERE ride_id = $1`, ride.ID)
	b.Exec(t, `DELETE FROM rides WHERE id = $1`, ride.ID)
	b.Exec(t, `DELETE FROM idempotency_keys WHERE user_id = $1`, uid)

	rep, err := b.Service.Reconcile(b.Ctx, time.Hour)
	require.NoError(t, err)
	require.Len(t, rep.OrphanCharges, 1)
	require.Len(t, rep.OrphanRefunds, 1)
	sent := b.refundRequests()

	n, err := b.Service.OrphanRefundsSchedule(b.Ctx, time.Nanosecond)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM orphan_refunds
		WHERE stripe_charge_id = $1 AND status = 'refunded' AND stripe_refund_id = $2 AND refunded_before`,
		*ride.StripeChargeID, refundID))
	require.Equal(t, sent, b.refundRequests(), "no refund asked of the processor")
	require.Zero(t, b.Count(t, `SELECT count(*) FROM river_job WHERE kind IN ('orphan_refund', 'orphan_receipt')`))
	require.Len(t, b.Stripe.RefundsForCharge(*ride.StripeChargeID), 1)

	rep, err = b.Service.Reconcile(b.Ctx, time.Hour)
	require.NoError(t, err)
	require.True(t, rep.Clean(), "report: %+v", rep)

	// Another pass: nothing more.
	n, err = b.Service.OrphanRefundsSchedule(b.Ctx, time.Nanosecond)
	require.NoError(t, err)
	require.Zero(t, n)
}

// A ride that survived a restore whose refund commit was lost: the refund
// at Stripe is recorded on the ride by the pass, as its event would, and a
// refund request afterwards answers it without a second refund.
func TestOrphanRefundOfKeptRideRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	uid := b.rider(t, "orphan-refund-kept@example.com")
	ride, refundID := b.bookAndRefund(t, uid, "orphan-refund-kept-ride-01")
	b.Exec(t, `DELETE FROM refunds WHERE ride_id = $1`, ride.ID)
	b.Exec(t, `DELETE FROM idempotency_keys WHERE user_id = $1 AND flow = 'ride.refund'`, uid)

	rep, err := b.Service.Reconcile(b.Ctx, time.Hour)
	require.NoError(t, err)
	require.Empty(t, rep.OrphanCharges)
	require.Len(t, rep.OrphanRefunds, 1)

	// Within the charge's grace: a refund of a recorded ride needs none.
	_, err = b.Service.OrphanRefundsSchedule(b.Ctx, time.Hour)
	require.NoError(t, err)
	got, err := b.Service.RideGet(b.Ctx, uid, ride.ID)
	require.NoError(t, err)
	require.Equal(t, service.RideRefundRefunded, got.RefundStatus)
	require.Equal(t, refundID, *got.StripeRefundID)
	rep, err = b.Service.Reconcile(b.Ctx, time.Hour)
	require.NoError(t, err)
	require.True(t, rep.Clean(), "report: %+v", rep)

	sent := b.refundRequests()
	resp := b.refundAt(t, uid, ride.ID)
	require.Equal(t, http.StatusOK, resp.Status, string(resp.Body))
	require.Contains(t, string(resp.Body), refundID)
	require.Equal(t, sent, b.refundRequests())
}

// The events pass reads again what the inbox lost (as a restore loses it)
// and applies it once; a pass over events the inbox has writes nothing.
func TestEventsPassRecordsWhatTheInboxLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.webhooks(t, fakestripe.WebhookEndpoint{})
	uid := b.rider(t, "events-pass@example.com")
	ride := b.Ride(t, uid)
	_, err := b.Stripe.DisputeOpen(*ride.StripeChargeID)
	require.NoError(t, err)
	b.settle(t)
	events := len(b.Stripe.Events())

	rep, err := b.Service.EventsPass(b.Ctx)
	require.NoError(t, err)
	require.Equal(t, events, rep.Duplicates)
	require.Zero(t, rep.Recorded)

	// The restore: the dispute's event, its job and its effect are lost.
	b.Exec(t, `DELETE FROM river_job WHERE kind = 'inbox_apply' AND args->>'event_id' IN
		(SELECT event_id FROM inbox_events WHERE event_type = 'charge.dispute.created')`)
	b.Exec(t, `DELETE FROM inbox_events WHERE event_type = 'charge.dispute.created'`)
	b.Exec(t, `UPDATE rides SET dispute_status = 'none', stripe_dispute_id = NULL WHERE id = $1`, ride.ID)
	rep, err = b.Service.EventsPass(b.Ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Recorded)
	require.Equal(t, events-1, rep.Duplicates)
	b.settle(t)
	got, err := b.Service.RideGet(b.Ctx, uid, ride.ID)
	require.NoError(t, err)
	require.Equal(t, service.DisputeOpen, got.DisputeStatus)
}

// A refund made in the dashboard while the charge's booking is still in
// flight (charged, not recorded): its event waits for the ride, and is
// applied on it once the booking is recorded, never as an unknown charge.
func TestInboxRefundOfBookingInFlightWaitsForIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	uid := b.rider(t, "inflight@example.com")
	const key = "inflight-booking-key-0001"
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultDropAfter})
	_, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	require.Equal(t, service.CodeProcessorUnavailable, service.ErrorCode(err), "%v", err)
	b.Stripe.ClearFaults()
	charges := b.Stripe.Charges()
	require.Len(t, charges, 1)
	ref, err := b.Stripe.DashboardRefund(charges[0].ID)
	require.NoError(t, err)

	_, err = b.Service.InboxReplay(b.Ctx, service.InboxSourceStripe, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	// The workers apply the recorded events meanwhile: the refund's waits
	// (its job retries) while the booking is unrecorded.

	// The client retries, as clients do while the key is in use (the
	// charge.succeeded event may be finishing the same request on a
	// worker): the booking is recorded with its charge, and the refund
	// event is applied on it.
	var resp *service.Response
	require.Eventually(t, func() bool {
		resp, err = b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		return service.ErrorCode(err) != service.CodeKeyInUse
	}, 60*time.Second, 20*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
	ride := testkit.DecodeRide(t, resp.Body)
	require.Eventually(t, func() bool {
		got, err := b.Service.RideGet(b.Ctx, uid, ride.ID)
		return err == nil && got.RefundStatus == service.RideRefundRefunded && *got.StripeRefundID == ref.ID
	}, 60*time.Second, 20*time.Millisecond, "the dashboard's refund is recorded on the ride")
	require.Zero(t, b.Count(t, `SELECT count(*) FROM inbox_events WHERE outcome = 'unknown_charge'`))
}
