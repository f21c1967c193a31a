package jobs_test

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/jobs"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/receipts"
)

// loseBooking books a ride under key and then deletes what a restore to a
// backup taken before its commits would lose: the ride (its receipt
// record) and the request's idempotency key. The charge stays at the fake
// Stripe: an orphan. It returns the charge's id.
func (b *testBundle) loseBooking(t *testing.T, uid int64, key string) string {
	t.Helper()
	resp, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status)
	ride := testkit.DecodeRide(t, resp.Body)
	require.NotNil(t, ride.StripeChargeID)
	b.waitFinal(t, service.RideReceiptArgs{}.Kind(), 1)
	b.Exec(t, `DELETE FROM rides WHERE id = $1`, ride.ID)
	b.Exec(t, `DELETE FROM idempotency_keys WHERE idempotency_key = $1`, key)
	return *ride.StripeChargeID
}

// An orphan charge is left alone within the grace period, then refunded
// once by any number of passes, concurrent ones included, with one receipt
// telling the rider why; reconciliation then finds nothing unresolved.
func TestOrphanChargeRefundedOnceAfterGrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const email = "orphan@example.com"
	uid := b.rider(t, email)
	chargeID := b.loseBooking(t, uid, "orphan-lost-booking-key-01")

	rep, err := b.Service.Reconcile(b.Ctx, time.Hour)
	require.NoError(t, err)
	require.Len(t, rep.OrphanCharges, 1)
	require.Equal(t, chargeID, rep.OrphanCharges[0].ID)

	// Within the grace period: nothing recorded, nothing refunded.
	n, err := b.Service.OrphanRefundsSchedule(b.Ctx, time.Hour)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Zero(t, b.Count(t, `SELECT count(*) FROM orphan_refunds`))
	require.Empty(t, b.Stripe.RefundsForCharge(chargeID))

	// Past it: two passes at once record the orphan once, with one job.
	var wg sync.WaitGroup
	counts := make([]int, 2)
	errs := make([]error, 2)
	for i := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts[i], errs[i] = b.Service.OrphanRefundsSchedule(b.Ctx, time.Nanosecond)
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Equal(t, 1, counts[0]+counts[1])

	require.Equal(t, river.EventKindJobCompleted, b.waitFinal(t, service.OrphanRefundArgs{}.Kind(), 1)[0].Kind)
	require.Equal(t, river.EventKindJobCompleted, b.waitFinal(t, service.OrphanReceiptArgs{}.Kind(), 1)[0].Kind)

	refunds := b.Stripe.RefundsForCharge(chargeID)
	require.Len(t, refunds, 1)
	require.Equal(t, service.RefundKey(b.Service.Namespace(), chargeID, 0), refunds[0].Metadata["ar_key"])
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM orphan_refunds
		WHERE stripe_charge_id = $1 AND status = 'refunded' AND stripe_refund_id = $2
		AND email = $3 AND receipt_sent_at IS NOT NULL`, chargeID, refunds[0].ID, email))

	msgs := b.Sink.Messages()
	var sent int
	for _, m := range msgs {
		if m.MessageID == receipts.OrphanMessageID(chargeID, service.DefaultMailFrom) {
			sent++
			require.Equal(t, []string{email}, m.To)
			require.Contains(t, string(m.Data), "lost")
			require.Contains(t, string(m.Data), refunds[0].ID)
		}
	}
	require.Equal(t, 1, sent)

	// Another pass, and the refund job run again: still one refund.
	n, err = b.Service.OrphanRefundsSchedule(b.Ctx, time.Nanosecond)
	require.NoError(t, err)
	require.Zero(t, n)
	o, err := b.Service.OrphanRefund(b.Ctx, chargeID)
	require.NoError(t, err)
	require.Equal(t, service.OrphanRefundRefunded, o.Status)
	require.Len(t, b.Stripe.RefundsForCharge(chargeID), 1)

	rep, err = b.Service.Reconcile(b.Ctx, time.Hour)
	require.NoError(t, err)
	require.True(t, rep.Clean(), "report: %+v", rep)
}

// The client of a lost booking that comes back after its charge was
// refunded is answered booking-refunded and charged nothing.
func TestOrphanRefundedClientReturns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	uid := b.rider(t, "orphan-returns@example.com")
	const key = "orphan-returning-client-01"
	chargeID := b.loseBooking(t, uid, key)
	n, err := b.Service.OrphanRefundsSchedule(b.Ctx, time.Nanosecond)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	b.waitFinal(t, service.OrphanRefundArgs{}.Kind(), 1)
	chargesBefore := len(b.Stripe.Charges())

	// The process restarted with the restore: nothing of the lost booking
	// is remembered in memory either.
	restarted, err := service.New(service.Config{Pool: b.Pool, Payments: b.Payments})
	require.NoError(t, err)
	resp, err := restarted.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, resp.Status)
	var p service.Problem
	require.NoError(t, json.Unmarshal(resp.Body, &p))
	require.Equal(t, service.ProblemBookingRefunded, p.Type)
	require.Contains(t, p.Detail, chargeID)
	require.Len(t, b.Stripe.Charges(), chargesBefore, "no charge sent")
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE user_id = $1 AND charge_status = 'declined'`, uid))

	// The answer is the request's: a retry replays it.
	again, err := restarted.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, again.Status)
	require.Len(t, b.Stripe.Charges(), chargesBefore)

	// A new booking under a new key is charged as usual.
	fresh, err := b.Service.RideCreate(b.Ctx, uid, "orphan-returning-client-02", testkit.SomeRide, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, fresh.Status)
}

// The periodic pass, run by two workers at once, schedules each orphan's
// refund once.
func TestOrphanPassJobsConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	uid := b.rider(t, "orphan-pass@example.com")
	chargeID := b.loseBooking(t, uid, "orphan-pass-lost-booking-1")

	_, err := b.client.InsertMany(b.Ctx, []river.InsertManyParams{{Args: jobs.OrphanPassArgs{}}, {Args: jobs.OrphanPassArgs{}}})
	require.NoError(t, err)
	for _, ev := range b.waitFinal(t, jobs.OrphanPassArgs{}.Kind(), 2) {
		require.Equal(t, river.EventKindJobCompleted, ev.Kind)
	}
	require.Equal(t, river.EventKindJobCompleted, b.waitFinal(t, service.OrphanRefundArgs{}.Kind(), 1)[0].Kind)
	require.Equal(t, river.EventKindJobCompleted, b.waitFinal(t, service.OrphanReceiptArgs{}.Kind(), 1)[0].Kind)
	require.Len(t, b.Stripe.RefundsForCharge(chargeID), 1)
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM river_job WHERE kind = $1`, service.OrphanRefundArgs{}.Kind()))
}

// The client of a lost booking that comes back within the grace period
// gets its charge (the processor still holds the key): the ride records
// it, and no pass refunds it.
func TestOrphanClaimedWithinGrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	uid := b.rider(t, "orphan-claimed@example.com")
	const key = "orphan-claimed-lost-key-01"
	chargeID := b.loseBooking(t, uid, key)
	chargesBefore := len(b.Stripe.Charges())

	restarted, err := service.New(service.Config{Pool: b.Pool, Payments: b.Payments})
	require.NoError(t, err)
	resp, err := restarted.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status)
	ride := testkit.DecodeRide(t, resp.Body)
	require.Equal(t, chargeID, *ride.StripeChargeID, "the processor answered with the charge it made")
	require.Len(t, b.Stripe.Charges(), chargesBefore)

	n, err := b.Service.OrphanRefundsSchedule(b.Ctx, time.Nanosecond)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Empty(t, b.Stripe.RefundsForCharge(chargeID))
}
