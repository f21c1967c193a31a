package jobs_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/openapi"
	"github.com/atomicrides/atomicrides/service"
)

// adyenNotifications serves the service's HTTP API for b and points the
// fake Adyen's notifications at it, with ep's fault switches.
func (b *testBundle) adyenNotifications(t *testing.T, ep fakeadyen.NotificationEndpoint) {
	t.Helper()
	url := testkit.ServeAPI(t, openapi.NewHandler(openapi.Config{Service: b.Service, Accounts: b.Accounts}))
	ep.URL, ep.HMACKey = url+"/webhooks/adyen", testkit.AdyenHMACKey
	b.adyen.SetNotificationEndpoint(&ep)
	t.Cleanup(func() { b.adyen.SetNotificationEndpoint(nil) })
}

// settleAdyen waits until the fake Adyen has delivered every item and
// every item recorded in the inbox is applied.
func (b *testBundle) settleAdyen(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 60*time.Second)
	defer cancel()
	require.NoError(t, b.adyen.NotificationsIdle(ctx))
	require.Eventually(t, func() bool {
		return b.Count(t, `SELECT count(*) FROM inbox_events WHERE applied_at IS NULL`) == 0
	}, 60*time.Second, 10*time.Millisecond, "inbox events left unapplied")
	require.Equal(t, len(b.adyen.NotificationItems()), b.Count(t, `SELECT count(*) FROM inbox_events WHERE source = 'adyen'`))
}

// TestAdyenNotificationsDuplicatedAndReorderedAppliedOnce: every item
// delivered 5 times over HTTP, in any order, is recorded and applied once.
func TestAdyenNotificationsDuplicatedAndReorderedAppliedOnce(t *testing.T) {
	t.Parallel()
	b := setupWith(t, options{adyenFirst: true})
	b.adyenNotifications(t, fakeadyen.NotificationEndpoint{Duplicates: 4, Reorder: true, Delay: 100 * time.Millisecond})
	uid := b.rider(t, "adyen-storm@example.com")
	ride := b.Ride(t, uid)
	require.Equal(t, service.ProcessorAdyen, ride.Processor)

	require.NoError(t, b.adyen.Dispute(*ride.StripeChargeID, fakeadyen.EventChargeback))
	require.NoError(t, b.adyen.Dispute(*ride.StripeChargeID, fakeadyen.EventChargebackReversed))
	_, err := b.adyen.DashboardRefund(*ride.StripeChargeID)
	require.NoError(t, err)
	b.settleAdyen(t)

	items := b.adyen.NotificationItems()
	require.Len(t, items, 4) // AUTHORISATION, CHARGEBACK, CHARGEBACK_REVERSED, REFUND
	delivered := map[string]int{}
	for _, d := range b.adyen.NotificationDeliveries() {
		if d.Status == http.StatusOK {
			delivered[d.PSPReference+d.EventCode]++
		}
	}
	for _, it := range items {
		require.Equal(t, 5, delivered[it.PSPReference+it.EventCode], "%s delivered 5 times", it.EventCode)
	}
	require.Equal(t, 4, b.Count(t, `SELECT count(*) FROM inbox_events WHERE source = 'adyen' AND applied_at IS NOT NULL`))
	// The AUTHORISATION found the ride recorded (or, overtaking the
	// booking's last commit, finished it through the engine).
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM inbox_events WHERE source = 'adyen' AND event_type = 'AUTHORISATION' AND outcome IN ($1, $2)`,
		service.InboxOutcomeAlreadyRecorded, service.InboxOutcomeCompleted))

	got, err := b.Service.RideGet(b.Ctx, uid, ride.ID)
	require.NoError(t, err)
	require.Equal(t, service.DisputeWon, got.DisputeStatus, "a late chargeback never reopens a decided dispute")
	require.Equal(t, service.RideRefundRefunded, got.RefundStatus)
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM refunds WHERE ride_id = $1`, ride.ID))
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'refund.recorded_from_processor'`))
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM river_job WHERE kind = $1`, service.RefundReceiptArgs{}.Kind()))
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM notified_charges WHERE charge_id = $1`, *ride.StripeChargeID))
}

// TestAdyenAuthorisationFinishesTheBookingNow: a booking whose answer from
// Adyen was lost finishes from the AUTHORISATION notification, well before
// the completer's idle time.
func TestAdyenAuthorisationFinishesTheBookingNow(t *testing.T) {
	t.Parallel()
	b := setupWith(t, options{adyenFirst: true})
	b.adyenNotifications(t, fakeadyen.NotificationEndpoint{})
	uid := b.rider(t, "adyen-lost-answer@example.com")
	key := testkit.NewKey()
	b.adyen.Inject(fakeadyen.Fault{Op: fakeadyen.OpPayment, Kind: fakeadyen.FaultDropAfter, Times: 1})
	_, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	require.Equal(t, service.CodeProcessorUnavailable, service.ErrorCode(err), "err: %v", err)
	require.Len(t, b.adyen.AuthorisedPayments(), 1)

	b.settleAdyen(t)
	psp := b.adyen.AuthorisedPayments()[0].PSPReference
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1 AND recovery_point = 'finished' AND response_code = 201`, key))
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE charge_status = 'charged' AND processor = 'adyen' AND stripe_charge_id = $1`, psp))
	require.Len(t, b.adyen.AuthorisedPayments(), 1, "the same payment, replayed under its key")
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM inbox_events WHERE outcome = $1`, service.InboxOutcomeCompleted))
}
