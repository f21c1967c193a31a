package service_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
)

// notify delivers the fake Adyen's items with that code, signed with the
// tests' key, to the service's inbox, then applies each; it returns the
// outcomes.
func notify(t *testing.T, w *testkit.TwoProcessors, code string) []string {
	t.Helper()
	var outcomes []string
	for _, it := range w.Adyen.NotificationItems() {
		if it.EventCode != code {
			continue
		}
		body, err := fakeadyen.NotificationBody(testkit.AdyenHMACKey, it)
		require.NoError(t, err)
		_, err = w.Service.InboxReceive(w.Ctx, service.InboxSourceAdyen, body, "")
		require.NoError(t, err)
		id := it.PSPReference + ":" + it.EventCode + ":" + it.Success
		out, err := w.Service.InboxApply(w.Ctx, service.InboxSourceAdyen, id)
		require.NoError(t, err)
		outcomes = append(outcomes, out)
	}
	return outcomes
}

// TestAdyenLostRoutingCommitDoubleChargeRefundedOnce is case 3 with
// P = Adyen, Q = Stripe: a booking charged at Adyen loses its commits,
// its client's retry meets Adyen's circuit open and is charged at Stripe.
// Adyen's AUTHORISATION makes reconciliation list the double charge, and
// the orphan policy refunds the Adyen payment exactly once, however many
// passes and refund jobs run at once.
func TestAdyenLostRoutingCommitDoubleChargeRefundedOnce(t *testing.T) {
	t.Parallel()
	w := testkit.NewAdyenFirst(t, 1, time.Hour)
	uid := w.Rider(t, "double@example.com", "tok_visa").ID
	_, err := w.Service.CustomerCreate(w.Ctx, uid, "")
	require.NoError(t, err)
	key := testkit.NewKey()
	first, err := book(t, w, uid, key)
	require.NoError(t, err)
	charged := testkit.DecodeRide(t, first.Body)
	require.Equal(t, service.ProcessorAdyen, charged.Processor)

	// The restore: the key, its ride and what hangs on it are gone.
	w.Exec(t, `DELETE FROM receipts WHERE ride_id = $1`, charged.ID)
	w.Exec(t, `DELETE FROM rides WHERE id = $1`, charged.ID)
	w.Exec(t, `DELETE FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2`, uid, key)

	// Adyen goes down and its circuit opens on another booking; the
	// client's retry of the lost request is charged at Stripe.
	w.Adyen.SetOutage(true)
	_, err = book(t, w, uid, testkit.NewKey())
	require.Error(t, err)
	again, err := book(t, w, uid, key)
	require.NoError(t, err)
	rerouted := testkit.DecodeRide(t, again.Body)
	require.Equal(t, service.ProcessorStripe, rerouted.Processor)
	w.Adyen.SetOutage(false)

	// Without the notification the Adyen payment is not seen.
	rep, err := w.Service.Reconcile(w.Ctx, time.Hour)
	require.NoError(t, err)
	require.Empty(t, rep.DoubleCharges)

	// Adyen's AUTHORISATION arrives (twice: a duplicate writes nothing).
	require.Equal(t, []string{service.InboxOutcomeOrphanCharge}, notify(t, w, fakeadyen.EventAuthorisation))
	require.Equal(t, []string{service.InboxOutcomeOrphanCharge}, notify(t, w, fakeadyen.EventAuthorisation))
	require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM notified_charges`))

	rep, err = w.Service.Reconcile(w.Ctx, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{service.ProcessorAdyen}, rep.Notified)
	require.Len(t, rep.DoubleCharges, 1, "%+v", rep)
	d := rep.DoubleCharges[0]
	require.Equal(t, rerouted.ID, d.RideID)
	require.Equal(t, service.ProcessorStripe, d.RecordedProcessor)
	require.Equal(t, *rerouted.StripeChargeID, d.RecordedChargeID)
	require.Equal(t, service.ProcessorAdyen, d.OtherProcessor)
	require.Equal(t, *charged.StripeChargeID, d.OtherChargeID)
	require.Empty(t, rep.OrphanCharges)
	require.Equal(t, 1, rep.Orphans()["double_charge"])

	// Two passes at once (no grace for a double charge): one row, one job.
	var wg sync.WaitGroup
	counts := make([]int, 2)
	for i := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := w.Service.OrphanRefundsSchedule(w.Ctx, 48*time.Hour)
			require.NoError(t, err)
			counts[i] = n
		}()
	}
	wg.Wait()
	require.Equal(t, 1, counts[0]+counts[1], "scheduled once")
	require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM orphan_refunds WHERE processor = 'adyen' AND reason = 'double_charge' AND stripe_charge_id = $1`, d.OtherChargeID))
	require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'orphan_refund'`))

	// Two refund jobs at once, on two other processes (this one's Adyen
	// circuit is still open; a job retries until it closes): one refund at
	// Adyen.
	for _, svc := range []*service.Service{w.Instance(t), w.Instance(t)} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := svc.OrphanRefund(w.Ctx, d.OtherChargeID)
			if err == nil {
				require.Equal(t, service.OrphanRefundRefunded, o.Status)
			}
		}()
	}
	wg.Wait()
	o, err := w.Instance(t).OrphanRefund(w.Ctx, d.OtherChargeID)
	require.NoError(t, err)
	require.Equal(t, service.OrphanRefundRefunded, o.Status)
	var refunds int
	for _, r := range w.Adyen.Refunds() {
		if r.PaymentPSPReference == d.OtherChargeID {
			refunds++
		}
	}
	require.Equal(t, 1, refunds, "the unrecorded Adyen payment is refunded once")
	require.Empty(t, w.Stripe.RefundsForCharge(*rerouted.StripeChargeID), "the ride's own charge stays")

	// The rider's receipt says why, once.
	sent, err := w.Receipts.OrphanSend(w.Ctx, d.OtherChargeID, nil)
	require.NoError(t, err)
	require.True(t, sent)
	sent, err = w.Receipts.OrphanSend(w.Ctx, d.OtherChargeID, nil)
	require.NoError(t, err)
	require.False(t, sent)
	msgs := w.Mail.Messages()
	var found bool
	for _, m := range msgs {
		if strings.Contains(m.Subject, "second charge") {
			found = true
		}
	}
	require.True(t, found, "the rider is told about the second charge")

	// Resolved: reconciliation is clean of it.
	rep, err = w.Service.Reconcile(w.Ctx, time.Hour)
	require.NoError(t, err)
	require.Empty(t, rep.DoubleCharges)
	require.Empty(t, rep.OrphanCharges)
}

// TestAdyenAuthorisationFinishesALostAnswer: a booking whose answer from
// Adyen was lost (charged, the connection dropped) finishes when Adyen's
// AUTHORISATION is applied, without waiting for the completer.
func TestAdyenAuthorisationFinishesALostAnswer(t *testing.T) {
	t.Parallel()
	w := testkit.NewAdyenFirst(t, 5, time.Hour)
	uid := w.Rider(t, "lostanswer@example.com", "tok_visa").ID
	_, err := w.Service.CustomerCreate(w.Ctx, uid, "")
	require.NoError(t, err)
	w.Adyen.Inject(fakeadyen.Fault{Op: fakeadyen.OpPayment, Kind: fakeadyen.FaultDropAfter, Times: 1})
	key := testkit.NewKey()
	_, err = book(t, w, uid, key)
	require.Equal(t, service.CodeProcessorUnavailable, service.ErrorCode(err), "err: %v", err)
	require.Len(t, w.Adyen.AuthorisedPayments(), 1, "charged, the answer lost")

	require.Equal(t, []string{service.InboxOutcomeCompleted}, notify(t, w, fakeadyen.EventAuthorisation))
	resp, err := book(t, w, uid, key)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status)
	require.True(t, resp.Replayed, "finished by the notification, replayed")
	ride := testkit.DecodeRide(t, resp.Body)
	require.Equal(t, w.Adyen.AuthorisedPayments()[0].PSPReference, *ride.StripeChargeID)
	require.Len(t, w.Adyen.AuthorisedPayments(), 1)
	// Applied again: already recorded.
	require.Equal(t, []string{service.InboxOutcomeCompleted}, notify(t, w, fakeadyen.EventAuthorisation), "an applied item answers its outcome")
}

// TestAdyenRefundNotificationThenRefundRequest: a refund made in Adyen's
// Customer Area is recorded on the ride from its REFUND notification; the
// rider's refund request afterwards answers it, and no second refund is
// sent.
func TestAdyenRefundNotificationThenRefundRequest(t *testing.T) {
	t.Parallel()
	w := testkit.NewAdyenFirst(t, 5, time.Hour)
	uid := w.Rider(t, "adyenrefund@example.com", "tok_visa").ID
	_, err := w.Service.CustomerCreate(w.Ctx, uid, "")
	require.NoError(t, err)
	ride := w.Ride(t, uid)
	require.Equal(t, service.ProcessorAdyen, ride.Processor)

	ref, err := w.Adyen.DashboardRefund(*ride.StripeChargeID)
	require.NoError(t, err)
	require.Equal(t, []string{service.InboxOutcomeRefundRecorded}, notify(t, w, fakeadyen.EventRefund))
	got, err := w.Service.RideGet(w.Ctx, uid, ride.ID)
	require.NoError(t, err)
	require.Equal(t, service.RideRefundRefunded, got.RefundStatus)

	resp, err := w.Service.RideRefundCreate(w.Ctx, uid, testkit.NewKey(), ride.ID, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.Status, string(resp.Body))
	require.Contains(t, string(resp.Body), ref.PSPReference)
	require.Len(t, w.Adyen.Refunds(), 1, "one refund at Adyen")

	// A chargeback moves the dispute forward only.
	require.NoError(t, w.Adyen.Dispute(*ride.StripeChargeID, fakeadyen.EventSecondChargeback))
	require.NoError(t, w.Adyen.Dispute(*ride.StripeChargeID, fakeadyen.EventChargeback))
	require.Equal(t, []string{service.InboxOutcomeDisputeMoved}, notify(t, w, fakeadyen.EventSecondChargeback))
	require.Equal(t, []string{service.InboxOutcomeDisputeStale}, notify(t, w, fakeadyen.EventChargeback))
	got, err = w.Service.RideGet(w.Ctx, uid, ride.ID)
	require.NoError(t, err)
	require.Equal(t, service.DisputeLost, got.DisputeStatus)
}

// TestAdyenServiceRefundThenNotification: the service's own refund, then
// Adyen's REFUND of it: already recorded, nothing more.
func TestAdyenServiceRefundThenNotification(t *testing.T) {
	t.Parallel()
	w := testkit.NewAdyenFirst(t, 5, time.Hour)
	uid := w.Rider(t, "ownrefund@example.com", "tok_visa").ID
	_, err := w.Service.CustomerCreate(w.Ctx, uid, "")
	require.NoError(t, err)
	ride := w.Ride(t, uid)
	resp, err := w.Service.RideRefundCreate(w.Ctx, uid, testkit.NewKey(), ride.ID, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
	require.Equal(t, []string{service.InboxOutcomeAlreadyRecorded}, notify(t, w, fakeadyen.EventRefund))
	require.Len(t, w.Adyen.Refunds(), 1)
}

// TestAdyenOrphanRefundedAfterGrace: an Adyen payment no ride records
// (the booking lost, its client never back) is listed as an orphan, left
// alone within the grace, and refunded once after it.
func TestAdyenOrphanRefundedAfterGrace(t *testing.T) {
	t.Parallel()
	w := testkit.NewAdyenFirst(t, 5, time.Hour)
	uid := w.Rider(t, "orphan-adyen@example.com", "tok_visa").ID
	_, err := w.Service.CustomerCreate(w.Ctx, uid, "")
	require.NoError(t, err)
	key := testkit.NewKey()
	first, err := book(t, w, uid, key)
	require.NoError(t, err)
	charged := testkit.DecodeRide(t, first.Body)
	w.Exec(t, `DELETE FROM receipts WHERE ride_id = $1`, charged.ID)
	w.Exec(t, `DELETE FROM rides WHERE id = $1`, charged.ID)
	w.Exec(t, `DELETE FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2`, uid, key)
	require.Equal(t, []string{service.InboxOutcomeOrphanCharge}, notify(t, w, fakeadyen.EventAuthorisation))

	grace := 48 * time.Hour
	rep, err := w.Service.Reconcile(w.Ctx, grace+service.OrphanScanWindow)
	require.NoError(t, err)
	require.Len(t, rep.OrphanCharges, 1, "%+v", rep)
	require.Equal(t, *charged.StripeChargeID, rep.OrphanCharges[0].ID)
	n, err := w.Service.OrphanRefundsSchedule(w.Ctx, grace)
	require.NoError(t, err)
	require.Zero(t, n, "within the grace the payment stays")

	w.Age(t, grace+time.Hour)
	n, err = w.Service.OrphanRefundsSchedule(w.Ctx, grace)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	o, err := w.Service.OrphanRefund(w.Ctx, *charged.StripeChargeID)
	require.NoError(t, err)
	require.Equal(t, service.OrphanRefundRefunded, o.Status)
	require.NotNil(t, o.Email, "the rider is found from the payment's rider reference")
	require.Len(t, w.Adyen.Refunds(), 1)

	// The client comes back: not charged again.
	resp, err := book(t, w, uid, key)
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, resp.Status, string(resp.Body))
	require.Len(t, w.Adyen.AuthorisedPayments(), 1)

}
