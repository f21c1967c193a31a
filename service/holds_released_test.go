package service_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakebank"
	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/settlements"
)

// releaseEvents are Stripe's events about a released hold: its expiry
// (charge.expired), the release shown as a refund of the whole amount
// (charge.refunded), and its PaymentIntent cancelled.
var releaseEvents = []string{"charge.expired", "charge.refunded", "payment_intent.canceled"}

// deliverStripeTwice delivers every event of the types given twice by
// webhook, each delivery applied, and returns the outcomes.
func deliverStripeTwice(t *testing.T, b *testBundle, types ...string) []string {
	t.Helper()
	var outcomes []string
	for range 2 {
		for _, typ := range types {
			outcomes = append(outcomes, deliverStripe(t, b, typ)...)
		}
	}
	return outcomes
}

// eventsPassApplied runs the events pass and applies what it recorded, as
// its jobs do.
func eventsPassApplied(t *testing.T, b *testBundle) (recorded int, outcomes []string) {
	t.Helper()
	rep, err := b.Service.EventsPass(b.Ctx)
	require.NoError(t, err)
	rows, err := b.Pool.Query(b.Ctx, `SELECT event_id FROM inbox_events WHERE source = $1 AND applied_at IS NULL ORDER BY received_at, event_id`,
		service.InboxSourceStripe)
	require.NoError(t, err)
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	for _, id := range ids {
		out, err := b.Service.InboxApply(b.Ctx, service.InboxSourceStripe, id)
		require.NoError(t, err)
		outcomes = append(outcomes, out)
	}
	return rep.Recorded, outcomes
}

// requireNoRefund asserts that the ride records no refund, at any layer:
// its answer, its refund row, a refund receipt.
func requireNoRefund(t *testing.T, b *testBundle, uid int64, rideID int64) {
	t.Helper()
	got := rideNow(t, b.Env, uid, rideID)
	require.Equal(t, service.RideRefundNone, got.RefundStatus, "a released hold is no refund")
	require.Nil(t, got.RefundID)
	require.Nil(t, got.StripeRefundID)
	require.Zero(t, b.Count(t, `SELECT count(*) FROM refunds WHERE ride_id = $1`, rideID))
	require.Zero(t, b.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'refund_receipt' AND (args->>'ride_id')::bigint = $1`, rideID))
	require.Zero(t, b.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'refund.recorded_from_processor'`))
}

// requireReleaseAtStripe asserts that Stripe shows the ride's hold released
// as a refund of its whole amount, made by Stripe itself.
func requireReleaseAtStripe(t *testing.T, b *testBundle, ride service.Ride, reason string) {
	t.Helper()
	refunds := b.Stripe.RefundsForCharge(*ride.StripeChargeID)
	require.Len(t, refunds, 1)
	require.True(t, refunds[0].Release)
	require.Equal(t, reason, refunds[0].Reason)
	require.EqualValues(t, ride.AmountCents, refunds[0].Amount)
	require.Empty(t, refunds[0].Metadata)
}

func TestStripeReleasedHoldIsNoRefund(t *testing.T) {
	t.Parallel()

	cancelTrip := func(t *testing.T, b *testBundle, uid int64, ride service.Ride) {
		t.Helper()
		resp, err := b.Service.RideCancel(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		require.Equal(t, service.RideChargeCancelled, testkit.DecodeRide(t, resp.Body).ChargeStatus)
		requireReleaseAtStripe(t, b, ride, "")
	}

	t.Run("CancelledByWebhookTwiceThenTheEventsPass", func(t *testing.T) {
		t.Parallel()
		b, uid := setupTrips(t, "released-cancel@example.com")
		ride := bookTrip(t, b, uid)
		cancelTrip(t, b, uid, ride)

		outcomes := deliverStripeTwice(t, b, releaseEvents...)
		require.NotEmpty(t, outcomes)
		require.NotContains(t, outcomes, service.InboxOutcomeRefundRecorded)
		requireNoRefund(t, b, uid, ride.ID)
		_, replayed := eventsPassApplied(t, b)
		require.NotContains(t, replayed, service.InboxOutcomeRefundRecorded)
		requireNoRefund(t, b, uid, ride.ID)
		require.Equal(t, service.RideChargeCancelled, rideNow(t, b.Env, uid, ride.ID).ChargeStatus)
	})

	t.Run("CancelledAndHeardOfByTheEventsPassOnly", func(t *testing.T) {
		t.Parallel()
		b, uid := setupTrips(t, "released-cancel-pass@example.com")
		ride := bookTrip(t, b, uid)
		cancelTrip(t, b, uid, ride)

		recorded, outcomes := eventsPassApplied(t, b)
		require.Positive(t, recorded, "the pass records the events the webhook did not bring")
		require.NotContains(t, outcomes, service.InboxOutcomeRefundRecorded)
		requireNoRefund(t, b, uid, ride.ID)
		// A second pass lists them again: duplicates, nothing applied.
		recorded, outcomes = eventsPassApplied(t, b)
		require.Zero(t, recorded)
		require.Empty(t, outcomes)
		require.NotContains(t, deliverStripeTwice(t, b, releaseEvents...), service.InboxOutcomeRefundRecorded)
		requireNoRefund(t, b, uid, ride.ID)
	})

	t.Run("LapsedByWebhookTwiceThenTheEventsPass", func(t *testing.T) {
		t.Parallel()
		b, uid := setupTrips(t, "released-lapse@example.com")
		ride := bookTrip(t, b, uid)
		require.NoError(t, b.Stripe.ExpireHold(*ride.PaymentID))
		requireReleaseAtStripe(t, b, ride, fakestripe.RefundReasonExpired)

		// Whichever event comes first, the hold expires once.
		first := deliverStripe(t, b, "charge.refunded")
		require.Equal(t, []string{service.InboxOutcomeHoldReleased}, first, "charge.refunded of a hold is its release")
		outcomes := deliverStripeTwice(t, b, releaseEvents...)
		require.NotContains(t, outcomes, service.InboxOutcomeRefundRecorded)
		_, replayed := eventsPassApplied(t, b)
		require.NotContains(t, replayed, service.InboxOutcomeRefundRecorded)
		got := rideNow(t, b.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeExpired, got.ChargeStatus)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE resource_id = $1 AND action = 'ride.expired'`, ride.ID),
			"expired once")
		requireNoRefund(t, b, uid, ride.ID)
		require.Zero(t, b.Stripe.Executed(fakestripe.OpRefundCreate))
	})

	t.Run("LapsedAndHeardOfByTheEventsPassOnly", func(t *testing.T) {
		t.Parallel()
		b, uid := setupTrips(t, "released-lapse-pass@example.com")
		ride := bookTrip(t, b, uid)
		require.NoError(t, b.Stripe.ExpireHold(*ride.PaymentID))

		recorded, outcomes := eventsPassApplied(t, b)
		require.Positive(t, recorded)
		require.Contains(t, outcomes, service.InboxOutcomeHoldReleased)
		require.NotContains(t, outcomes, service.InboxOutcomeRefundRecorded)
		require.Equal(t, service.RideChargeExpired, rideNow(t, b.Env, uid, ride.ID).ChargeStatus)
		requireNoRefund(t, b, uid, ride.ID)
	})

	t.Run("APartialCapturesRestIsNoRefundAndItsRefundIsOne", func(t *testing.T) {
		t.Parallel()
		b, uid := setupTrips(t, "released-rest@example.com")
		ride := bookTrip(t, b, uid)
		resp, done := complete(t, b, testkit.NewKey(), ride.ID, service.RideAmountCents-650)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		require.Equal(t, service.RideChargeCompleted, done.ChargeStatus)
		require.NotContains(t, deliverStripeTwice(t, b, "charge.captured", "charge.refunded", "payment_intent.succeeded"),
			service.InboxOutcomeRefundRecorded)
		requireNoRefund(t, b, uid, ride.ID)

		// The operator refunds the captured fare in Stripe's dashboard:
		// that is a refund, recorded once.
		ref, err := b.Stripe.DashboardRefund(*ride.StripeChargeID)
		require.NoError(t, err)
		require.EqualValues(t, service.RideAmountCents-650, ref.Amount)
		outcomes := deliverStripeTwice(t, b, "charge.refunded")
		require.Contains(t, outcomes, service.InboxOutcomeRefundRecorded)
		got := rideNow(t, b.Env, uid, ride.ID)
		require.Equal(t, service.RideRefundRefunded, got.RefundStatus)
		require.NotNil(t, got.RefundID)
		require.Equal(t, ref.ID, *got.RefundID)
		_, replayed := eventsPassApplied(t, b)
		require.NotContains(t, replayed, service.InboxOutcomeRefundRecorded)
	})

	t.Run("ACompletedTripsOwnRefundIsARefund", func(t *testing.T) {
		t.Parallel()
		b, uid := setupTrips(t, "released-real@example.com")
		ride := bookTrip(t, b, uid)
		complete(t, b, testkit.NewKey(), ride.ID, service.RideAmountCents)
		resp, err := b.Service.RideRefundCreate(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		var r service.RideRefundResult
		require.NoError(t, json.Unmarshal(resp.Body, &r))
		outcomes := deliverStripeTwice(t, b, "charge.refunded", "refund.created")
		for _, out := range outcomes {
			require.Equal(t, service.InboxOutcomeAlreadyRecorded, out)
		}
		got := rideNow(t, b.Env, uid, ride.ID)
		require.Equal(t, service.RideRefundRefunded, got.RefundStatus)
		require.Equal(t, r.StripeRefundID, *got.RefundID)
	})
}

// The bank settles what a trip captured, and nothing of a hold released:
// every line it sends matches a ride (its captured fare), none is a refund.
func TestStripeReleasedHoldSettlesNothing(t *testing.T) {
	t.Parallel()
	b, uid := setupTrips(t, "released-settle@example.com")
	completed := bookTrip(t, b, uid)
	resp, _ := complete(t, b, testkit.NewKey(), completed.ID, service.RideAmountCents-650)
	require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
	cancelled := bookTrip(t, b, uid)
	_, err := b.Service.RideCancel(b.Ctx, uid, testkit.NewKey(), cancelled.ID, nil)
	require.NoError(t, err)
	lapsed := bookTrip(t, b, uid)
	require.NoError(t, b.Stripe.ExpireHold(*lapsed.PaymentID))
	deliverStripeTwice(t, b, releaseEvents...)

	lines := fakebank.Statement(b.Stripe.Charges(), b.Stripe.Refunds(), "po_trips", time.Now())
	require.Len(t, lines, 2, "the completed trip's charge and the payout")
	require.Equal(t, *completed.StripeChargeID, lines[0].SourceID)
	require.EqualValues(t, service.RideAmountCents-650, lines[0].GrossCents, "what was captured")
	rec, err := b.Settlements.Receive(b.Ctx, "settlement_trips.csv", fakebank.Render(lines))
	require.NoError(t, err)
	applied, err := b.Settlements.Apply(b.Ctx, rec.FileID)
	require.NoError(t, err)
	require.Equal(t, settlements.Applied{FileID: rec.FileID, Status: "applied", Applied: 2}, applied)
	require.Zero(t, b.Count(t, `SELECT count(*) FROM settlement_lines WHERE match IN ('unknown', 'mismatch')`))
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM settlement_lines WHERE match = 'matched' AND ride_id = $1`, completed.ID))
	for _, r := range []service.Ride{cancelled, lapsed} {
		d, err := b.Service.RideDetailGet(b.Ctx, uid, r.ID)
		require.NoError(t, err)
		require.Nil(t, d.Settlement)
		require.Equal(t, service.RideRefundNone, d.RefundStatus)
	}
}
