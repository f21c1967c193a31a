package jobs_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/openapi"
	"github.com/atomicrides/atomicrides/service"
)

// webhooks serves the service's HTTP API for b and points the fake Stripe's
// webhook endpoint at it, with ep's fault switches.
func (b *testBundle) webhooks(t *testing.T, ep fakestripe.WebhookEndpoint) {
	t.Helper()
	url := testkit.ServeAPI(t, openapi.NewHandler(openapi.Config{Service: b.Service, Accounts: b.Accounts}))
	ep.URL, ep.Secret = url+"/webhooks/stripe", testkit.WebhookSecret
	b.Stripe.SetWebhookEndpoint(&ep)
	t.Cleanup(func() { b.Stripe.SetWebhookEndpoint(nil) })
}

// settle waits until the fake has delivered every event and every event
// recorded in the inbox is applied.
func (b *testBundle) settle(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 60*time.Second)
	defer cancel()
	require.NoError(t, b.Stripe.WebhooksIdle(ctx))
	require.Eventually(t, func() bool {
		return b.Count(t, `SELECT count(*) FROM inbox_events WHERE applied_at IS NULL`) == 0
	}, 60*time.Second, 10*time.Millisecond, "inbox events left unapplied")
	// Every event the fake made is recorded once.
	require.Equal(t, len(b.Stripe.Events()), b.Count(t, `SELECT count(*) FROM inbox_events`))
}

func (b *testBundle) refundAt(t *testing.T, uid int64, rideID int64) *service.Response {
	t.Helper()
	resp, err := b.Service.RideRefundCreate(b.Ctx, uid, testkit.NewKey(), rideID, nil)
	require.NoError(t, err)
	return resp
}

func TestInboxDashboardRefundThenRefundRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.webhooks(t, fakestripe.WebhookEndpoint{})
	uid := b.rider(t, "dashboard@example.com")
	ride := b.Ride(t, uid)

	ref, err := b.Stripe.DashboardRefund(*ride.StripeChargeID)
	require.NoError(t, err)
	b.settle(t)

	got, err := b.Service.RideGet(b.Ctx, uid, ride.ID)
	require.NoError(t, err)
	require.Equal(t, service.RideRefundRefunded, got.RefundStatus)
	require.Equal(t, ref.ID, *got.StripeRefundID)

	// The rider (or a client) asks for the refund afterwards: the answer is
	// the dashboard's refund, and no second refund is sent.
	resp := b.refundAt(t, uid, ride.ID)
	require.Equal(t, http.StatusOK, resp.Status, string(resp.Body))
	require.Contains(t, string(resp.Body), ref.ID)
	require.Len(t, b.Stripe.RefundsForCharge(*ride.StripeChargeID), 1)
	for _, r := range b.Stripe.Requests() {
		require.NotEqual(t, fakestripe.OpRefundCreate, r.Op, "no refund was asked of the processor")
	}
	receipt := b.waitFinal(t, service.RefundReceiptArgs{}.Kind(), 1)
	require.Equal(t, river.EventKindJobCompleted, receipt[0].Kind, "the rider's refund receipt is sent")
}

func TestInboxRefundRequestBeforeTheDashboardRefundIsHeardOf(t *testing.T) {
	t.Parallel()
	b := setup(t) // no webhook endpoint: the service hears nothing
	uid := b.rider(t, "early@example.com")
	ride := b.Ride(t, uid)
	ref, err := b.Stripe.DashboardRefund(*ride.StripeChargeID)
	require.NoError(t, err)

	resp := b.refundAt(t, uid, ride.ID)
	require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
	require.Contains(t, string(resp.Body), ref.ID, "the dashboard's refund is adopted")
	require.Len(t, b.Stripe.RefundsForCharge(*ride.StripeChargeID), 1)
}

func TestInboxDisputeLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.webhooks(t, fakestripe.WebhookEndpoint{})
	uid := b.rider(t, "disputer@example.com")
	ride := b.Ride(t, uid)
	require.Equal(t, service.DisputeNone, ride.DisputeStatus)

	d, err := b.Stripe.DisputeOpen(*ride.StripeChargeID)
	require.NoError(t, err)
	b.settle(t)
	got, err := b.Service.RideGet(b.Ctx, uid, ride.ID)
	require.NoError(t, err)
	require.Equal(t, service.DisputeOpen, got.DisputeStatus)

	_, err = b.Stripe.DisputeClose(d.ID, fakestripe.DisputeLost)
	require.NoError(t, err)
	b.settle(t)
	got, err = b.Service.RideGet(b.Ctx, uid, ride.ID)
	require.NoError(t, err)
	require.Equal(t, service.DisputeLost, got.DisputeStatus)
	require.Equal(t, 2, b.Count(t, `SELECT count(*) FROM audit_records WHERE action LIKE 'ride.dispute_%' AND resource_id = $1`, ride.ID))
}

func TestInboxDuplicatedAndReorderedAppliedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Every event delivered 5 times, each delivery held a random while so
	// that they overtake each other.
	b.webhooks(t, fakestripe.WebhookEndpoint{Duplicates: 4, Reorder: true, Delay: 100 * time.Millisecond})
	uid := b.rider(t, "storm@example.com")
	ride := b.Ride(t, uid)

	d, err := b.Stripe.DisputeOpen(*ride.StripeChargeID)
	require.NoError(t, err)
	_, err = b.Stripe.DisputeClose(d.ID, fakestripe.DisputeWon)
	require.NoError(t, err)
	_, err = b.Stripe.DashboardRefund(*ride.StripeChargeID)
	require.NoError(t, err)
	b.settle(t)

	events := b.Stripe.Events()
	// payment intent created, charge succeeded, payment intent succeeded;
	// dispute created, closed; refund created; charge refunded
	require.Len(t, events, 7)
	delivered := map[string]int{}
	for _, d := range b.Stripe.WebhookDeliveries() {
		if d.Status == http.StatusOK {
			delivered[d.EventID]++
		}
	}
	for _, ev := range events {
		require.Equal(t, 5, delivered[ev.ID], "event %s delivered 5 times", ev.Type)
	}
	require.Equal(t, 7, b.Count(t, `SELECT count(*) FROM inbox_events WHERE applied_at IS NOT NULL`))

	got, err := b.Service.RideGet(b.Ctx, uid, ride.ID)
	require.NoError(t, err)
	require.Equal(t, service.DisputeWon, got.DisputeStatus, "a late 'created' never reopens a decided dispute")
	require.Equal(t, service.RideRefundRefunded, got.RefundStatus)
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM refunds WHERE ride_id = $1`, ride.ID))
	// Two refund events, one refund recorded, one receipt.
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'refund.recorded_from_processor'`))
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM river_job WHERE kind = $1`, service.RefundReceiptArgs{}.Kind()))
}

func TestInboxChargeOutcomeFinishesTheBookingNow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.webhooks(t, fakestripe.WebhookEndpoint{})
	uid := b.rider(t, "lost-answer@example.com")
	key := testkit.NewKey()

	// The charge is made, its answer lost: the request stays at its
	// recovery point, and the completer would wait for its idle time.
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultDropAfter, Times: 1})
	_, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	require.Equal(t, service.CodeProcessorUnavailable, service.ErrorCode(err), "err: %v", err)
	require.Len(t, b.Stripe.SucceededCharges(), 1)

	// charge.succeeded drives the stored request to its end now, without
	// ageing the request past the completer's idle time.
	b.settle(t)
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1 AND recovery_point = 'finished' AND response_code = 201`, key))
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE charge_status = 'charged' AND stripe_charge_id = $1`, b.Stripe.SucceededCharges()[0].ID))
	require.Len(t, b.Stripe.SucceededCharges(), 1, "the same charge, adopted through its key")
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM inbox_events WHERE outcome = $1`, service.InboxOutcomeCompleted))

	// The client's retry replays the answer.
	resp, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	require.NoError(t, err)
	require.True(t, resp.Replayed)
	require.Equal(t, http.StatusCreated, resp.Status)
}

func TestInboxReplayReadsWhatWasNeverDelivered(t *testing.T) {
	t.Parallel()
	b := setup(t) // no webhook endpoint: as if the deliveries were lost with a restore
	uid := b.rider(t, "replayed@example.com")
	ride := b.Ride(t, uid)
	d, err := b.Stripe.DisputeOpen(*ride.StripeChargeID)
	require.NoError(t, err)
	_, err = b.Stripe.DisputeClose(d.ID, fakestripe.DisputeLost)
	require.NoError(t, err)
	_, err = b.Stripe.DashboardRefund(*ride.StripeChargeID)
	require.NoError(t, err)

	rep, err := b.Service.InboxReplay(b.Ctx, service.InboxSourceStripe, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Equal(t, 7, rep.Listed) // as TestInboxDuplicatedAndReorderedAppliedOnce's
	require.Equal(t, 7, rep.Recorded)
	b.settle(t)
	got, err := b.Service.RideGet(b.Ctx, uid, ride.ID)
	require.NoError(t, err)
	require.Equal(t, service.DisputeLost, got.DisputeStatus)
	require.Equal(t, service.RideRefundRefunded, got.RefundStatus)

	// Again: everything is a duplicate, nothing is written.
	rep, err = b.Service.InboxReplay(b.Ctx, service.InboxSourceStripe, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Equal(t, 7, rep.Duplicates)
	require.Equal(t, 0, rep.Recorded)
	require.Equal(t, 7, b.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'inbox_apply'`))
}

// TestInboxWaitsForALeasedBookingWithoutSpendingAttempts: the event of a
// charge whose booking is held under a live lease (its process died with
// it, say) waits for the lease without failing an attempt, and is applied
// once the key is free.
func TestInboxWaitsForALeasedBookingWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	snoozed, cancel := b.client.Subscribe(river.EventKindJobSnoozed)
	t.Cleanup(cancel)
	uid := b.rider(t, "leased@example.com")
	key := testkit.NewKey()
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultDropAfter, Times: 1})
	_, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	require.Equal(t, service.CodeProcessorUnavailable, service.ErrorCode(err), "err: %v", err)
	// Another request holds the key.
	b.Exec(t, `UPDATE idempotency_keys SET locked_at = now(), lock_token = gen_random_uuid() WHERE idempotency_key = $1`, key)
	// The charge's event reaches the inbox (through the events pass, so
	// that it comes after the lease).
	_, err = b.Service.InboxReplay(b.Ctx, service.InboxSourceStripe, time.Now().Add(-time.Hour))
	require.NoError(t, err)

	timeout := time.After(60 * time.Second)
	for waiting := true; waiting; {
		select {
		case ev := <-snoozed:
			if ev.Job.Kind == (service.InboxApplyArgs{}).Kind() {
				require.Empty(t, ev.Job.Errors, "no attempt failed")
				waiting = false
			}
		case <-timeout:
			t.Fatal("the event's job never waited for the lease")
		}
	}
	require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1 AND recovery_point = 'finished'`, key))

	// The lease is over: the next run finishes the booking.
	b.Exec(t, `UPDATE idempotency_keys SET locked_at = NULL, lock_token = NULL WHERE idempotency_key = $1`, key)
	b.settle(t)
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1 AND recovery_point = 'finished' AND response_code = 201`, key))
	require.Len(t, b.Stripe.SucceededCharges(), 1)
}
