package service_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
)

// bookHold books testkit.SomeRide under key and returns its hold's
// PaymentIntent.
func (w *restoreWorld) bookHold(t *testing.T, svc *service.Service, key string) string {
	t.Helper()
	resp, err := svc.RideCreate(w.ctx, w.uid, key, testkit.SomeRide, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	ride := testkit.DecodeRide(t, resp.Body)
	require.Equal(t, service.RideChargeAuthorized, ride.ChargeStatus)
	return *ride.PaymentID
}

func TestRestoreLostAHoldTheOrphanPassReleasesIt(t *testing.T) {
	t.Parallel()
	var lost, kept string
	w := newTripRestoreWorld(t, "lost-hold@example.com", func(w *restoreWorld) {
		kept = w.bookHold(t, w.before, testkit.NewKey())
	}, func(w *restoreWorld) {
		lost = w.bookHold(t, w.before, testkit.NewKey())
	})
	_, err := w.restored.Heartbeat(w.ctx)
	require.NoError(t, err)

	// Within the grace a retry of the lost booking may still claim its
	// hold: nothing is released.
	requireOneOrphanHold(t, w.ctx, w.restored, lost)
	_, err = w.restored.OrphanRefundsSchedule(w.ctx, service.DefaultOrphanRefundAfter)
	require.NoError(t, err)
	pi, _ := w.fake.PaymentIntent(lost)
	require.Equal(t, fakestripe.PaymentIntentRequiresCapture, pi.Status)

	// Past the grace: released, not refunded; the kept ride's hold stays.
	_, err = w.restored.OrphanRefundsSchedule(w.ctx, time.Millisecond)
	require.NoError(t, err)
	pi, _ = w.fake.PaymentIntent(lost)
	require.Equal(t, fakestripe.PaymentIntentCanceled, pi.Status)
	require.Zero(t, pi.AmountReceived)
	keptPI, _ := w.fake.PaymentIntent(kept)
	require.Equal(t, fakestripe.PaymentIntentRequiresCapture, keptPI.Status)
	// Stripe shows the release as its own refund of the hold, which
	// returned no money and is nobody's refund.
	refunds := w.fake.Refunds()
	require.Len(t, refunds, 1)
	require.True(t, refunds[0].Release, "nothing refunded: the hold took no money")
	require.Empty(t, refunds[0].Metadata)
	require.Zero(t, w.fake.Executed(fakestripe.OpRefundCreate))
	require.Equal(t, 1.0, counter(t, w.reg, "atomicrides_holds_orphan_released_total", map[string]string{"processor": service.ProcessorStripe}))

	// The next pass sees it released: nothing more.
	_, err = w.restored.OrphanRefundsSchedule(w.ctx, time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, 1.0, counter(t, w.reg, "atomicrides_holds_orphan_released_total", map[string]string{"processor": service.ProcessorStripe}))
	rep, err := w.restored.Reconcile(w.ctx, time.Hour)
	require.NoError(t, err)
	require.Empty(t, rep.OrphanHolds)
	require.Empty(t, rep.OrphanRefunds, "the release is no refund to reconcile")
	require.Empty(t, rep.OrphanCharges)
}

func TestRestoreLostACompletion(t *testing.T) {
	t.Parallel()
	const fare = 1500
	setup := func(ride *service.Ride) func(w *restoreWorld) {
		return func(w *restoreWorld) {
			resp, err := w.before.RideCreate(w.ctx, w.uid, testkit.NewKey(), testkit.SomeRide, nil)
			require.NoError(t, err)
			*ride = testkit.DecodeRide(t, resp.Body)
		}
	}
	lose := func(ride *service.Ride, key string) func(w *restoreWorld) {
		return func(w *restoreWorld) {
			resp, err := w.before.RideComplete(w.ctx, key, service.RideCompleteParams{RideID: ride.ID, FareCents: fare, Currency: "usd"}, nil)
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		}
	}
	t.Run("TheDispatchSidesRetryGetsTheSameCapture", func(t *testing.T) {
		t.Parallel()
		var ride service.Ride
		key := testkit.NewKey()
		w := newTripRestoreWorld(t, "lost-completion@example.com", setup(&ride), lose(&ride, key))
		now, err := w.restored.RideGet(w.ctx, w.uid, ride.ID)
		require.NoError(t, err)
		require.Equal(t, service.RideChargeAuthorized, now.ChargeStatus, "the restore lost the completion")
		resp, err := w.restored.RideComplete(w.ctx, key, service.RideCompleteParams{RideID: ride.ID, FareCents: fare, Currency: "usd"}, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		require.Equal(t, int64(fare), *testkit.DecodeRide(t, resp.Body).CapturedCents)
		require.Equal(t, 1, w.fake.Executed(fakestripe.OpPaymentIntentCapture), "captured once")
	})

	t.Run("AnExpiryOrACancellationRecognisesIt", func(t *testing.T) {
		t.Parallel()
		var ride, other service.Ride
		w := newTripRestoreWorld(t, "lost-completion-2@example.com", func(w *restoreWorld) {
			setup(&ride)(w)
			setup(&other)(w)
		}, func(w *restoreWorld) {
			lose(&ride, testkit.NewKey())(w)
			lose(&other, testkit.NewKey())(w)
		})
		// The rider cancels one: the processor shows it captured, so the
		// ride is completed and the cancellation answers 409 (stored).
		resp, err := w.restored.RideCancel(w.ctx, w.uid, testkit.NewKey(), other.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusConflict, resp.Status, "%s", resp.Body)
		require.Contains(t, string(resp.Body), service.ProblemTripCaptured)
		got, err := w.restored.RideGet(w.ctx, w.uid, other.ID)
		require.NoError(t, err)
		require.Equal(t, service.RideChargeCompleted, got.ChargeStatus)
		require.Equal(t, int64(fare), *got.CapturedCents)

		// The other reaches its hold's expiry: recognised, not released.
		_, err = w.restoredPool.Exec(w.ctx, `UPDATE rides SET hold_expires_at = now() - interval '1 second' WHERE id = $1`, ride.ID)
		require.NoError(t, err)
		n, err := w.restored.HoldsRelease(w.ctx, 10)
		require.NoError(t, err)
		require.Zero(t, n, "nothing expired")
		got, err = w.restored.RideGet(w.ctx, w.uid, ride.ID)
		require.NoError(t, err)
		require.Equal(t, service.RideChargeCompleted, got.ChargeStatus)
		require.Equal(t, int64(fare), *got.FareCents)
		require.Equal(t, 2, w.fake.Executed(fakestripe.OpPaymentIntentCapture), "no capture made again")
		var receipts int
		require.NoError(t, w.restoredPool.QueryRow(w.ctx, `SELECT count(*) FROM river_job WHERE kind = 'ride_receipt'`).Scan(&receipts))
		require.Equal(t, 2, receipts, "each recognised completion has its receipt")
	})
}

// TestRestoreLostAnAdyenHoldTheOrphanPassReleasesIt: at Adyen, which lists
// no payments, the lost booking's hold is known by its AUTHORISATION
// notification (resent after the restore), which says it is a hold: the
// orphan pass cancels it, and refunds nothing.
func TestRestoreLostAnAdyenHoldTheOrphanPassReleasesIt(t *testing.T) {
	t.Parallel()
	ady := testkit.NewAdyen(t)
	var lost string
	w := newRestoreWorldOf(t, func(t *testing.T, pool *pgxpool.Pool, reg prometheus.Registerer) *service.Service {
		return adyenServiceWith(t, pool, ady, reg, service.CaptureTrip)
	}, "lost-adyen-hold@example.com", registerAtAdyen(t), func(w *restoreWorld) {
		lost = w.bookHold(t, w.before, testkit.NewKey())
	})
	_, err := w.restored.Heartbeat(w.ctx)
	require.NoError(t, err)
	// The operator resends Adyen's notifications: the hold has no ride.
	adyenNotify(t, w.restored, ady, fakeadyen.EventAuthorisation)
	requireOneOrphanHold(t, w.ctx, w.restored, lost)

	_, err = w.restored.OrphanRefundsSchedule(w.ctx, time.Millisecond)
	require.NoError(t, err)
	var cancels int
	for _, m := range ady.Modifications() {
		if m.Kind == fakeadyen.ModificationCancel && m.PaymentPSPReference == lost && m.Success {
			cancels++
		}
	}
	require.Equal(t, 1, cancels, "the hold released at Adyen")
	require.Empty(t, ady.Refunds(), "nothing refunded")

	// The next pass finds it released: no second cancel.
	_, err = w.restored.OrphanRefundsSchedule(w.ctx, time.Millisecond)
	require.NoError(t, err)
	require.Len(t, ady.Modifications(), 1)
	require.Equal(t, 1.0, counter(t, w.reg, "atomicrides_holds_orphan_released_total", map[string]string{"processor": service.ProcessorAdyen}))
}

// TestRestoreLostAnAdyenTripCapturedTheOrphanPolicyRefundsIt: booking and
// completion both lost at Adyen: the hold was captured. Its CAPTURE,
// resent after the restore (before or after its AUTHORISATION), makes the
// payment a charge of what was captured, which the orphan policy refunds;
// nothing asks to release it.
func TestRestoreLostAnAdyenTripCapturedTheOrphanPolicyRefundsIt(t *testing.T) {
	t.Parallel()
	for _, captureFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("CaptureNotifiedFirst=%v", captureFirst), func(t *testing.T) {
			t.Parallel()
			ady := testkit.NewAdyen(t)
			var lost string
			w := newRestoreWorldOf(t, func(t *testing.T, pool *pgxpool.Pool, reg prometheus.Registerer) *service.Service {
				return adyenServiceWith(t, pool, ady, reg, service.CaptureTrip)
			}, "lost-adyen-capture@example.com", registerAtAdyen(t), func(w *restoreWorld) {
				key := testkit.NewKey()
				lost = w.bookHold(t, w.before, key)
				resp, err := w.before.RideComplete(w.ctx, testkit.NewKey(), service.RideCompleteParams{
					RideID: rideOfKey(t, w, key), FareCents: 1500, Currency: "usd"}, nil)
				require.NoError(t, err)
				require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
			})
			_, err := w.restored.Heartbeat(w.ctx)
			require.NoError(t, err)
			order := []string{fakeadyen.EventAuthorisation, fakeadyen.EventCapture}
			if captureFirst {
				order[0], order[1] = order[1], order[0]
			}
			for _, code := range order {
				adyenNotify(t, w.restored, ady, code)
			}
			rep, err := w.restored.Reconcile(w.ctx, time.Hour)
			require.NoError(t, err)
			require.Empty(t, rep.OrphanHolds, "captured: no hold to release")
			require.Len(t, rep.OrphanCharges, 1)
			require.Equal(t, int64(1500), rep.OrphanCharges[0].AmountCents)

			n, err := w.restored.OrphanRefundsSchedule(w.ctx, time.Millisecond)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			_, err = w.restored.OrphanRefund(w.ctx, lost)
			require.NoError(t, err)
			refunds := ady.Refunds()
			require.Len(t, refunds, 1)
			require.Equal(t, int64(1500), refunds[0].AmountValue, "what was captured, refunded")
			for _, m := range ady.Modifications() {
				require.NotEqual(t, fakeadyen.ModificationCancel, m.Kind, "nothing asked to release a captured payment")
			}
		})
	}
}

// rideOfKey is the ride w.before booked under the rider's key.
func rideOfKey(t *testing.T, w *restoreWorld, key string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, w.beforePool.QueryRow(w.ctx,
		`SELECT r.id FROM rides r JOIN idempotency_keys k ON k.id = r.idempotency_key_id WHERE k.idempotency_key = $1`, key).Scan(&id))
	return id
}

// requireOneOrphanHold asserts that reconciliation lists the one hold lost
// with its booking, and no charge to refund: a hold is not a charge.
func requireOneOrphanHold(t *testing.T, ctx context.Context, svc *service.Service, lost string) {
	t.Helper()
	rep, err := svc.Reconcile(ctx, time.Hour)
	require.NoError(t, err)
	require.Len(t, rep.OrphanHolds, 1)
	require.Equal(t, lost, rep.OrphanHolds[0].PaymentID)
	require.Empty(t, rep.OrphanCharges, "a hold is no charge to refund")
}
