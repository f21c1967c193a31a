package service_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
)

// Trips at Adyen: the hold is a manual-capture authorisation; Adyen takes a
// capture or a cancel on ("received") and tells its outcome in a CAPTURE,
// CAPTURE_FAILED or CANCELLATION notification.

// tripsAtAdyen is a world whose bookings hold their fare (CaptureTrip) at
// Adyen, the service's collectors in reg, with one rider paying by card.
func tripsAtAdyen(t *testing.T, email string, holdExpiry time.Duration) (w *testkit.TwoProcessors, reg *prometheus.Registry, uid int64) {
	t.Helper()
	reg = prometheus.NewRegistry()
	w = testkit.NewTwoProcessorsWith(t, testkit.TwoProcessorsOptions{
		Failures: 5, OpenFor: time.Hour, AdyenFirst: true,
		Capture: service.CaptureTrip, HoldExpiry: holdExpiry, Registerer: reg,
	})
	return w, reg, w.Rider(t, email, "tok_visa").ID
}

// bookTripAtAdyen books a ride whose hold Adyen authorises at once.
func bookTripAtAdyen(t *testing.T, w *testkit.TwoProcessors, uid int64) service.Ride {
	t.Helper()
	resp, err := book(t, w, uid, testkit.NewKey())
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
	ride := testkit.DecodeRide(t, resp.Body)
	require.Equal(t, service.ProcessorAdyen, ride.Processor)
	require.Equal(t, service.RideChargeAuthorized, ride.ChargeStatus)
	require.NotNil(t, ride.PaymentID)
	return ride
}

// chargeKeyOf is the processor key the ride's hold was made under: the
// merchant reference of its payment and of its modifications.
func chargeKeyOf(t *testing.T, w *testkit.TwoProcessors, rideID int64) string {
	t.Helper()
	var pkey string
	require.NoError(t, w.Pool.QueryRow(w.Ctx, `SELECT charge_key FROM rides WHERE id = $1`, rideID).Scan(&pkey))
	return pkey
}

// adyenPayment is the fake Adyen's payment pspRef.
func adyenPayment(t *testing.T, w *testkit.TwoProcessors, pspRef string) fakeadyen.Payment {
	t.Helper()
	for _, p := range w.Adyen.Payments() {
		if p.PSPReference == pspRef {
			return p
		}
	}
	require.Failf(t, "no such payment", "the fake Adyen has no payment %s", pspRef)
	return fakeadyen.Payment{}
}

// modificationsOf are the fake Adyen's modifications of kind.
func modificationsOf(w *testkit.TwoProcessors, kind string) []fakeadyen.Modification {
	var out []fakeadyen.Modification
	for _, m := range w.Adyen.Modifications() {
		if m.Kind == kind {
			out = append(out, m)
		}
	}
	return out
}

// cancelAtAdyen cancels the payment pspRef at the fake Adyen's API, as an
// operator or another system would: a cancel the service did not ask for,
// under the operator's reference (empty: none, and Adyen names the
// payment's). Adyen takes it on; its CANCELLATION follows.
func cancelAtAdyen(t *testing.T, w *testkit.TwoProcessors, pspRef, reference string) {
	t.Helper()
	cancel := map[string]any{"merchantAccount": testkit.AdyenMerchantAccount}
	if reference != "" {
		cancel["reference"] = reference
	}
	modifyAtAdyen(t, w, "/v71/payments/"+pspRef+"/cancels", cancel)
}

// captureAtAdyen captures value of the hold pspRef at the fake Adyen's
// API, outside the service (an operator in Adyen's console). Adyen takes it
// on; its CAPTURE follows.
func captureAtAdyen(t *testing.T, w *testkit.TwoProcessors, pspRef string, value int64) {
	t.Helper()
	modifyAtAdyen(t, w, "/v71/payments/"+pspRef+"/captures", map[string]any{
		"merchantAccount": testkit.AdyenMerchantAccount, "amount": map[string]any{"currency": "USD", "value": value},
	})
}

// modifyAtAdyen posts a modification to the fake Adyen's path and requires
// that Adyen took it on (201 "received").
func modifyAtAdyen(t *testing.T, w *testkit.TwoProcessors, path string, request map[string]any) {
	t.Helper()
	body, err := json.Marshal(request)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(w.Ctx, http.MethodPost, w.Adyen.URL+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", "test_operator")
	req.Header.Set("Idempotency-Key", testkit.NewKey())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(answer))
	require.Contains(t, string(answer), `"received"`)
}

// redeliver delivers the fake Adyen's items with that code again, as Adyen
// does when it is not sure the endpoint took them; it returns whether each
// delivery was a duplicate, and each item's outcome when applied again.
func redeliver(t *testing.T, w *testkit.TwoProcessors, code string) (duplicates []bool, outcomes []string) {
	t.Helper()
	for _, it := range w.Adyen.NotificationItems() {
		if it.EventCode != code {
			continue
		}
		body, err := fakeadyen.NotificationBody(testkit.AdyenHMACKey, it)
		require.NoError(t, err)
		dup, err := w.Service.InboxReceive(w.Ctx, service.InboxSourceAdyen, body, "")
		require.NoError(t, err)
		out, err := w.Service.InboxApply(w.Ctx, service.InboxSourceAdyen, it.PSPReference+":"+it.EventCode+":"+it.Success)
		require.NoError(t, err)
		duplicates, outcomes = append(duplicates, dup), append(outcomes, out)
	}
	return duplicates, outcomes
}

// tripsEnded reads atomicrides_trips_ended_total{processor="adyen",status}.
func tripsEnded(t *testing.T, reg *prometheus.Registry, status service.RideChargeStatus) float64 {
	t.Helper()
	return counter(t, reg, "atomicrides_trips_ended_total", map[string]string{"processor": service.ProcessorAdyen, "status": string(status)})
}

// capturesFailed reads atomicrides_captures_failed_total{processor="adyen"}.
func capturesFailed(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	return counter(t, reg, "atomicrides_captures_failed_total", map[string]string{"processor": service.ProcessorAdyen})
}

// cancelsFailed reads atomicrides_cancels_failed_total{processor="adyen"}.
func cancelsFailed(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	return counter(t, reg, "atomicrides_cancels_failed_total", map[string]string{"processor": service.ProcessorAdyen})
}

// receiptJobs counts the ride's receipt jobs.
func receiptJobs(t *testing.T, w *testkit.TwoProcessors, rideID int64) int {
	t.Helper()
	return w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'ride_receipt' AND (args->>'ride_id')::bigint = $1`, rideID)
}

func TestTripAdyenHold(t *testing.T) {
	t.Parallel()
	w, _, uid := tripsAtAdyen(t, "adyen-hold@example.com", 0)
	ride := bookTripAtAdyen(t, w, uid)

	require.Equal(t, service.CaptureTrip, ride.Capture)
	require.NotNil(t, ride.HoldExpiresAt)
	require.WithinDuration(t, time.Now().Add(service.DefaultHoldExpiry), *ride.HoldExpiresAt, time.Minute)
	require.Equal(t, *ride.PaymentID, *ride.ChargeID, "an Adyen payment is its own charge")
	require.Nil(t, ride.FareCents)
	require.Nil(t, ride.CapturedCents)
	require.Nil(t, ride.CompletedAt)

	payments := w.Adyen.Payments()
	require.Len(t, payments, 1)
	p := payments[0]
	require.Equal(t, *ride.PaymentID, p.PSPReference)
	require.Equal(t, fakeadyen.ResultAuthorised, p.ResultCode)
	require.True(t, p.ManualCapture, "the hold is a manual-capture authorisation")
	require.Zero(t, p.CapturedValue)
	require.Equal(t, int64(service.RideAmountCents), p.AmountValue)
	require.Equal(t, "USD", p.Currency)
	require.Equal(t, chargeKeyOf(t, w, ride.ID), p.Reference)
	require.Empty(t, w.Adyen.Modifications())
	require.Zero(t, receiptJobs(t, w, ride.ID), "no receipt before the fare is known")

	// Its AUTHORISATION finds the hold recorded.
	require.Equal(t, []string{service.InboxOutcomeAlreadyRecorded}, notify(t, w, fakeadyen.EventAuthorisation))
	require.Equal(t, service.RideChargeAuthorized, rideNow(t, w.Env, uid, ride.ID).ChargeStatus)
}

func TestTripAdyenComplete(t *testing.T) {
	t.Parallel()

	t.Run("BelowTheHoldIsCapturingUntilItsCAPTURE", func(t *testing.T) {
		t.Parallel()
		w, reg, uid := tripsAtAdyen(t, "adyen-below@example.com", 0)
		ride := bookTripAtAdyen(t, w, uid)
		fare := int64(service.RideAmountCents - 650)
		key := testkit.NewKey()
		first, capturing := complete(t, &testBundle{w.Env}, key, ride.ID, fare)

		// Adyen took the capture on: 202, capturing, nothing captured yet
		// as far as the ride knows, and no receipt.
		require.Equal(t, http.StatusAccepted, first.Status, string(first.Body))
		require.Equal(t, service.RideChargeCapturing, capturing.ChargeStatus)
		require.Equal(t, fare, *capturing.FareCents)
		require.Nil(t, capturing.CapturedCents)
		require.Nil(t, capturing.CompletedAt)
		require.Nil(t, capturing.HoldExpiresAt)
		require.Equal(t, service.ExtraNone, *capturing.ExtraStatus)
		require.Nil(t, capturing.ExtraCents)
		require.Zero(t, receiptJobs(t, w, ride.ID))

		captures := modificationsOf(w, fakeadyen.ModificationCapture)
		require.Len(t, captures, 1)
		c := captures[0]
		require.True(t, c.Success)
		require.Equal(t, *ride.PaymentID, c.PaymentPSPReference)
		require.Equal(t, fare, c.AmountValue)
		require.Equal(t, "USD", c.Currency)
		require.Equal(t, chargeKeyOf(t, w, ride.ID), c.Reference)
		require.Equal(t, fare, adyenPayment(t, w, *ride.PaymentID).CapturedValue)
		require.Len(t, w.Adyen.Payments(), 1, "nothing above the hold")
		require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM rides WHERE id = $1 AND capture_id = $2`, ride.ID, c.PSPReference))

		// The same key while capturing: the 202, byte for byte.
		again, _ := complete(t, &testBundle{w.Env}, key, ride.ID, fare)
		require.True(t, again.Replayed)
		require.Equal(t, http.StatusAccepted, again.Status)
		require.Equal(t, first.Body, again.Body)

		// Adyen's CAPTURE completes it, with its receipt.
		require.Equal(t, []string{service.InboxOutcomeTripCaptured}, notify(t, w, fakeadyen.EventCapture))
		done := rideNow(t, w.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeCompleted, done.ChargeStatus)
		require.Equal(t, fare, *done.CapturedCents)
		require.Equal(t, fare, *done.FareCents)
		require.NotNil(t, done.CompletedAt)
		require.Nil(t, done.CaptureFailure)
		require.Equal(t, 1, receiptJobs(t, w, ride.ID))
		require.Equal(t, 1.0, tripsEnded(t, reg, service.RideChargeCompleted))

		// Delivered again: a duplicate, recorded already; nothing moves.
		dups, outcomes := redeliver(t, w, fakeadyen.EventCapture)
		require.Equal(t, []bool{true}, dups)
		require.Equal(t, []string{service.InboxOutcomeTripCaptured}, outcomes, "an applied item answers its outcome")
		require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM inbox_events WHERE source = 'adyen' AND event_type = 'CAPTURE'`))
		require.Equal(t, done, rideNow(t, w.Env, uid, ride.ID))
		require.Equal(t, 1, receiptJobs(t, w, ride.ID))
		require.Equal(t, 1.0, tripsEnded(t, reg, service.RideChargeCompleted))

		// The completion's key still replays its answer byte for byte;
		// another key with the same fare gets the completed ride (200);
		// nothing is captured again.
		replay, _ := complete(t, &testBundle{w.Env}, key, ride.ID, fare)
		require.True(t, replay.Replayed)
		require.Equal(t, http.StatusAccepted, replay.Status)
		require.Equal(t, first.Body, replay.Body)
		other, same := complete(t, &testBundle{w.Env}, testkit.NewKey(), ride.ID, fare)
		require.Equal(t, http.StatusOK, other.Status, string(other.Body))
		require.Equal(t, service.RideChargeCompleted, same.ChargeStatus)
		require.Equal(t, done.CompletedAt, same.CompletedAt)
		require.Len(t, modificationsOf(w, fakeadyen.ModificationCapture), 1)
		require.Equal(t, 1, receiptJobs(t, w, ride.ID))

		// A completed trip is refunded, not cancelled.
		_, err := w.Service.RideCancel(w.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		testkit.RequireCode(t, err, service.CodeNotCancellable)
		require.Empty(t, modificationsOf(w, fakeadyen.ModificationCancel))
	})

	t.Run("AboveTheHoldCapturesItAllAndChargesTheRestOnItsOwn", func(t *testing.T) {
		t.Parallel()
		w, reg, uid := tripsAtAdyen(t, "adyen-above@example.com", 0)
		ride := bookTripAtAdyen(t, w, uid)
		hold := adyenPayment(t, w, *ride.PaymentID)
		fare := int64(service.RideAmountCents + 730)
		resp, capturing := complete(t, &testBundle{w.Env}, testkit.NewKey(), ride.ID, fare)
		require.Equal(t, http.StatusAccepted, resp.Status, string(resp.Body))
		require.Equal(t, service.RideChargeCapturing, capturing.ChargeStatus)
		require.Equal(t, service.ExtraCharged, *capturing.ExtraStatus)
		require.Equal(t, int64(730), *capturing.ExtraCents)
		require.NotNil(t, capturing.ExtraChargeID)
		require.Zero(t, capturing.BalanceDueCents)

		// The hold is captured in full; the difference is one payment of
		// its own, without the rider, on the same stored card.
		captures := modificationsOf(w, fakeadyen.ModificationCapture)
		require.Len(t, captures, 1)
		require.Equal(t, int64(service.RideAmountCents), captures[0].AmountValue)
		require.Equal(t, int64(service.RideAmountCents), adyenPayment(t, w, *ride.PaymentID).CapturedValue)
		payments := w.Adyen.Payments()
		require.Len(t, payments, 2)
		var extras []fakeadyen.Payment
		for _, p := range payments {
			if p.PSPReference != hold.PSPReference {
				extras = append(extras, p)
			}
		}
		require.Len(t, extras, 1, "the fare above the hold is one payment")
		extra := extras[0]
		require.Equal(t, *capturing.ExtraChargeID, extra.PSPReference)
		require.Equal(t, int64(730), extra.AmountValue)
		require.Equal(t, "USD", extra.Currency)
		require.Equal(t, fakeadyen.ResultAuthorised, extra.ResultCode)
		require.False(t, extra.ManualCapture, "captured at once")
		require.Equal(t, fakeadyen.InteractionContAuth, extra.ShopperInteraction, "the rider is not there")
		require.Equal(t, hold.StoredCardID, extra.StoredCardID)
		require.Equal(t, hold.ShopperReference, extra.ShopperReference)
		require.NotEqual(t, hold.Reference, extra.Reference)
		require.Equal(t, 1.0, counter(t, reg, "atomicrides_trip_extra_payments_total",
			map[string]string{"processor": service.ProcessorAdyen, "outcome": service.ExtraCharged}))

		require.Equal(t, []string{service.InboxOutcomeTripCaptured}, notify(t, w, fakeadyen.EventCapture))
		done := rideNow(t, w.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeCompleted, done.ChargeStatus)
		require.Equal(t, int64(service.RideAmountCents), *done.CapturedCents)
		require.Equal(t, fare, *done.FareCents)
		require.Equal(t, extra.PSPReference, *done.ExtraChargeID)
		require.Equal(t, 1, receiptJobs(t, w, ride.ID))
		require.Len(t, w.Adyen.Payments(), 2)

		// Both payments' AUTHORISATIONs noted, reconciliation finds each
		// recorded by the ride: the payment above the hold is neither an
		// orphan nor a double charge, and is never refunded as one.
		require.Len(t, notify(t, w, fakeadyen.EventAuthorisation), 2)
		require.Equal(t, 2, w.Count(t, `SELECT count(*) FROM notified_charges WHERE processor = 'adyen'`))
		rep, err := w.Service.Reconcile(w.Ctx, time.Hour)
		require.NoError(t, err)
		require.Empty(t, rep.OrphanCharges, "%+v", rep)
		require.Empty(t, rep.DoubleCharges, "%+v", rep)
		w.Age(t, 49*time.Hour)
		n, err := w.Service.OrphanRefundsSchedule(w.Ctx, 48*time.Hour)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Empty(t, w.Adyen.Refunds())
	})

	t.Run("ACaptureWhoseAnswerWasLostIsConfirmedByItsCAPTUREAndTheRetryFinishes", func(t *testing.T) {
		t.Parallel()
		w, _, uid := tripsAtAdyen(t, "adyen-lost-capture@example.com", 0)
		ride := bookTripAtAdyen(t, w, uid)
		key := testkit.NewKey()
		w.Adyen.Inject(fakeadyen.Fault{Op: fakeadyen.OpCapture, Kind: fakeadyen.FaultDropAfter, Times: 1})
		_, err := w.Service.RideComplete(w.Ctx, key, service.RideCompleteParams{RideID: ride.ID, FareCents: 1200, Currency: "usd"}, nil)
		testkit.RequireCode(t, err, service.CodeProcessorUnavailable)
		require.Len(t, modificationsOf(w, fakeadyen.ModificationCapture), 1, "the capture was taken on, its answer lost")
		require.Equal(t, service.RideChargeCapturing, rideNow(t, w.Env, uid, ride.ID).ChargeStatus)

		// The CAPTURE records what was captured; the completion's retry
		// finishes the ride without a second capture.
		require.Equal(t, []string{service.InboxOutcomeTripCaptured}, notify(t, w, fakeadyen.EventCapture))
		resp, done := complete(t, &testBundle{w.Env}, key, ride.ID, 1200)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		require.Equal(t, service.RideChargeCompleted, done.ChargeStatus)
		require.Equal(t, int64(1200), *done.CapturedCents)
		require.Len(t, modificationsOf(w, fakeadyen.ModificationCapture), 1)
		require.Equal(t, int64(1200), adyenPayment(t, w, *ride.PaymentID).CapturedValue)
		require.Equal(t, 1, receiptJobs(t, w, ride.ID))
	})
}

func TestTripAdyenCaptureFailed(t *testing.T) {
	t.Parallel()

	t.Run("CAPTURE_FAILEDAfterTheCAPTURE", func(t *testing.T) {
		t.Parallel()
		w, reg, uid := tripsAtAdyen(t, "adyen-capture-failed@example.com", 0)
		ride := bookTripAtAdyen(t, w, uid)
		resp, _ := complete(t, &testBundle{w.Env}, testkit.NewKey(), ride.ID, 1500)
		require.Equal(t, http.StatusAccepted, resp.Status, string(resp.Body))
		require.Equal(t, []string{service.InboxOutcomeTripCaptured}, notify(t, w, fakeadyen.EventCapture))
		require.Equal(t, service.RideChargeCompleted, rideNow(t, w.Env, uid, ride.ID).ChargeStatus)
		require.Zero(t, capturesFailed(t, reg))

		// The card scheme rejects the capture after the fact.
		failed, err := w.Adyen.FailCapture(*ride.PaymentID, "")
		require.NoError(t, err)
		require.Equal(t, []string{service.InboxOutcomeCaptureFailed}, notify(t, w, fakeadyen.EventCaptureFailed))
		now := rideNow(t, w.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeCaptureFailed, now.ChargeStatus)
		require.NotNil(t, now.CaptureFailure)
		require.Equal(t, fakeadyen.ReasonCaptureRejected, *now.CaptureFailure)
		require.Equal(t, 1.0, capturesFailed(t, reg))
		require.Zero(t, adyenPayment(t, w, *ride.PaymentID).CapturedValue)
		require.False(t, modificationsOf(w, fakeadyen.ModificationCapture)[0].Success)
		require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'ride.capture_failed' AND resource_type = 'ride' AND resource_id = $1`, ride.ID))

		// Delivered again: a duplicate, counted once.
		dups, outcomes := redeliver(t, w, fakeadyen.EventCaptureFailed)
		require.Equal(t, []bool{true}, dups)
		require.Equal(t, []string{service.InboxOutcomeCaptureFailed}, outcomes)
		require.Equal(t, 1.0, capturesFailed(t, reg))
		require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM rides WHERE id = $1 AND capture_id = $2`, ride.ID, failed.PSPReference))

		// The ride is the operator's now: neither cancelled nor captured
		// again by another completion.
		_, err = w.Service.RideCancel(w.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		testkit.RequireCode(t, err, service.CodeNotCancellable)
		other, same := complete(t, &testBundle{w.Env}, testkit.NewKey(), ride.ID, 1500)
		require.Equal(t, http.StatusOK, other.Status, string(other.Body))
		require.Equal(t, service.RideChargeCaptureFailed, same.ChargeStatus)
		require.Len(t, modificationsOf(w, fakeadyen.ModificationCapture), 1)
		require.Empty(t, modificationsOf(w, fakeadyen.ModificationCancel))
	})

	t.Run("ACAPTUREWithSuccessFalseOfAHoldReleasedMeanwhile", func(t *testing.T) {
		t.Parallel()
		w, reg, uid := tripsAtAdyen(t, "adyen-capture-refused@example.com", 0)
		ride := bookTripAtAdyen(t, w, uid)
		// The hold is cancelled at Adyen; its CANCELLATION is still on its
		// way when the dispatch side completes the trip.
		cancelAtAdyen(t, w, *ride.PaymentID, "")
		resp, capturing := complete(t, &testBundle{w.Env}, testkit.NewKey(), ride.ID, 1500)
		require.Equal(t, http.StatusAccepted, resp.Status, string(resp.Body))
		require.Equal(t, service.RideChargeCapturing, capturing.ChargeStatus)

		captures := modificationsOf(w, fakeadyen.ModificationCapture)
		require.Len(t, captures, 1)
		require.False(t, captures[0].Success)
		require.Equal(t, []string{service.InboxOutcomeCaptureFailed}, notify(t, w, fakeadyen.EventCapture))
		now := rideNow(t, w.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeCaptureFailed, now.ChargeStatus)
		require.Equal(t, captures[0].Reason, *now.CaptureFailure)
		require.Nil(t, now.CapturedCents)
		require.Nil(t, now.CompletedAt)
		require.Equal(t, 1.0, capturesFailed(t, reg))
		require.Zero(t, receiptJobs(t, w, ride.ID))

		// The CANCELLATION, late, leaves the failure as it is.
		require.Equal(t, []string{service.InboxOutcomeAlreadyRecorded}, notify(t, w, fakeadyen.EventCancellation))
		require.Equal(t, service.RideChargeCaptureFailed, rideNow(t, w.Env, uid, ride.ID).ChargeStatus)
		require.Zero(t, tripsEnded(t, reg, service.RideChargeExpired))
	})
}

func TestTripAdyenCancel(t *testing.T) {
	t.Parallel()

	t.Run("CancellingUntilItsCANCELLATION", func(t *testing.T) {
		t.Parallel()
		w, reg, uid := tripsAtAdyen(t, "adyen-cancel@example.com", 0)
		ride := bookTripAtAdyen(t, w, uid)
		key := testkit.NewKey()
		resp, err := w.Service.RideCancel(w.Ctx, uid, key, ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, resp.Status, string(resp.Body))
		cancelling := testkit.DecodeRide(t, resp.Body)
		require.Equal(t, service.RideChargeCancelling, cancelling.ChargeStatus, "Adyen only said received")
		require.Nil(t, cancelling.ReleasedAt)
		require.Nil(t, cancelling.CancelFailure)
		require.Zero(t, tripsEnded(t, reg, service.RideChargeCancelled))
		require.Equal(t, service.RideChargeCancelling, rideNow(t, w.Env, uid, ride.ID).ChargeStatus)

		cancels := w.Adyen.Modifications()
		require.Len(t, cancels, 1)
		require.Equal(t, fakeadyen.ModificationCancel, cancels[0].Kind)
		require.True(t, cancels[0].Success)
		require.Equal(t, *ride.PaymentID, cancels[0].PaymentPSPReference)
		require.Equal(t, chargeKeyOf(t, w, ride.ID), cancels[0].Reference)

		// The same key replays the 202; another key while Adyen has not
		// told is 202 too, and Adyen is asked under the same key.
		again, err := w.Service.RideCancel(w.Ctx, uid, key, ride.ID, nil)
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, resp.Body, again.Body)
		waiting, err := w.Service.RideCancel(w.Ctx, 0, testkit.NewKey(), ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, waiting.Status, string(waiting.Body))
		require.Len(t, w.Adyen.Modifications(), 1, "Adyen keeps one cancel under the ride's key")

		// Its CANCELLATION ends it cancelled, once however often it comes.
		require.Equal(t, []string{service.InboxOutcomeHoldReleased}, notify(t, w, fakeadyen.EventCancellation))
		now := rideNow(t, w.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeCancelled, now.ChargeStatus)
		require.NotNil(t, now.ReleasedAt)
		require.Nil(t, now.HoldExpiresAt)
		require.Equal(t, service.RideRefundNone, now.RefundStatus)
		require.Equal(t, 1.0, tripsEnded(t, reg, service.RideChargeCancelled))
		dups, outcomes := redeliver(t, w, fakeadyen.EventCancellation)
		require.Equal(t, []bool{true}, dups)
		require.Equal(t, []string{service.InboxOutcomeHoldReleased}, outcomes, "its recorded outcome")
		require.Equal(t, 1.0, tripsEnded(t, reg, service.RideChargeCancelled))

		// By the dispatch side, under another key: 200.
		other, err := w.Service.RideCancel(w.Ctx, 0, testkit.NewKey(), ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, other.Status)
		require.Equal(t, service.RideChargeCancelled, testkit.DecodeRide(t, other.Body).ChargeStatus)
		require.Len(t, w.Adyen.Modifications(), 1)

		// Completing it now is refused, and nothing is captured.
		_, err = w.Service.RideComplete(w.Ctx, testkit.NewKey(), service.RideCompleteParams{RideID: ride.ID, FareCents: 100, Currency: "usd"}, nil)
		testkit.RequireCode(t, err, service.CodeNotCompletable)
		require.Empty(t, modificationsOf(w, fakeadyen.ModificationCapture))
		require.Zero(t, receiptJobs(t, w, ride.ID))
		p := adyenPayment(t, w, *ride.PaymentID)
		require.Equal(t, fakeadyen.ResultCancelled, p.ResultCode)
		require.Zero(t, p.CapturedValue)
	})

	t.Run("ARefusedCancelLeavesItCancellingForTheOperator", func(t *testing.T) {
		t.Parallel()
		w, reg, uid := tripsAtAdyen(t, "adyen-cancel-refused@example.com", 0)
		ride := bookTripAtAdyen(t, w, uid)
		// Captured at Adyen meanwhile, outside the service: the cancel
		// Adyen takes on then fails.
		captureAtAdyen(t, w, *ride.PaymentID, 1200)
		resp, err := w.Service.RideCancel(w.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, resp.Status, string(resp.Body))
		require.False(t, modificationsOf(w, fakeadyen.ModificationCancel)[0].Success)

		require.Equal(t, []string{service.InboxOutcomeCancelFailed}, notify(t, w, fakeadyen.EventCancellation))
		now := rideNow(t, w.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeCancelling, now.ChargeStatus, "neither cancelled nor completed: the operator's")
		require.NotNil(t, now.CancelFailure)
		require.Equal(t, 1.0, cancelsFailed(t, reg))
		require.NoError(t, w.Service.TripsMeasure(w.Ctx))
		require.Equal(t, 1.0, counter(t, reg, "atomicrides_rides_cancel_failed", nil))
		require.Zero(t, tripsEnded(t, reg, service.RideChargeCancelled))
		require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'ride.cancel_failed' AND resource_id = $1`, ride.ID))

		// Delivered again: applied once.
		dups, outcomes := redeliver(t, w, fakeadyen.EventCancellation)
		require.Equal(t, []bool{true}, dups)
		require.Equal(t, []string{service.InboxOutcomeCancelFailed}, outcomes)
		require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'ride.cancel_failed' AND resource_id = $1`, ride.ID))
	})
}

func TestTripAdyenExpiry(t *testing.T) {
	t.Parallel()

	t.Run("ACANCELLATIONNotAskedForExpiresTheRide", func(t *testing.T) {
		t.Parallel()
		w, reg, uid := tripsAtAdyen(t, "adyen-unasked@example.com", 0)
		ride := bookTripAtAdyen(t, w, uid)
		// Under the operator's own reference: the CANCELLATION's
		// merchantReference is the cancel's, and only its
		// originalReference names the ride's payment.
		cancelAtAdyen(t, w, *ride.PaymentID, "ops-ticket-4711")
		require.Equal(t, service.RideChargeAuthorized, rideNow(t, w.Env, uid, ride.ID).ChargeStatus, "until Adyen tells")
		cancels := modificationsOf(w, fakeadyen.ModificationCancel)
		require.Len(t, cancels, 1)
		require.True(t, cancels[0].Success)
		require.Equal(t, "ops-ticket-4711", cancels[0].Reference)

		require.Equal(t, []string{service.InboxOutcomeHoldReleased}, notify(t, w, fakeadyen.EventCancellation))
		expired := rideNow(t, w.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeExpired, expired.ChargeStatus)
		require.NotNil(t, expired.ReleasedAt)
		require.Equal(t, 1.0, tripsEnded(t, reg, service.RideChargeExpired))
		require.Zero(t, tripsEnded(t, reg, service.RideChargeCancelled))
		require.Equal(t, fakeadyen.ResultCancelled, adyenPayment(t, w, *ride.PaymentID).ResultCode)

		dups, outcomes := redeliver(t, w, fakeadyen.EventCancellation)
		require.Equal(t, []bool{true}, dups)
		require.Equal(t, []string{service.InboxOutcomeHoldReleased}, outcomes)
		require.Equal(t, 1.0, tripsEnded(t, reg, service.RideChargeExpired))

		// Neither completed nor cancelled now; the service asked Adyen for
		// nothing.
		_, err := w.Service.RideComplete(w.Ctx, testkit.NewKey(), service.RideCompleteParams{RideID: ride.ID, FareCents: 100, Currency: "usd"}, nil)
		testkit.RequireCode(t, err, service.CodeNotCompletable)
		_, err = w.Service.RideCancel(w.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		testkit.RequireCode(t, err, service.CodeNotCancellable)
		require.Len(t, w.Adyen.Modifications(), 1, "the operator's cancel only")
	})

	t.Run("ByTheJobThenItsCANCELLATION", func(t *testing.T) {
		t.Parallel()
		w, reg, uid := tripsAtAdyen(t, "adyen-expiry-job@example.com", time.Second)
		ride := bookTripAtAdyen(t, w, uid)
		w.Exec(t, `UPDATE rides SET hold_expires_at = now() - interval '1 second' WHERE id = $1`, ride.ID)
		n, err := w.Service.HoldsRelease(w.Ctx, 100)
		require.NoError(t, err)
		require.Zero(t, n, "Adyen took the cancel on: the ride expires when it tells")
		require.Equal(t, service.RideChargeCancelling, rideNow(t, w.Env, uid, ride.ID).ChargeStatus)
		require.Equal(t, fakeadyen.ResultCancelled, adyenPayment(t, w, *ride.PaymentID).ResultCode)
		cancels := modificationsOf(w, fakeadyen.ModificationCancel)
		require.Len(t, cancels, 1)
		require.Equal(t, chargeKeyOf(t, w, ride.ID), cancels[0].Reference)

		// The next pass does not ask again while the notification is due.
		n, err = w.Service.HoldsRelease(w.Ctx, 100)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Len(t, w.Adyen.Modifications(), 1)

		require.Equal(t, []string{service.InboxOutcomeHoldReleased}, notify(t, w, fakeadyen.EventCancellation))
		expired := rideNow(t, w.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeExpired, expired.ChargeStatus)
		require.NotNil(t, expired.ReleasedAt)
		require.Equal(t, service.RideRefundNone, expired.RefundStatus)
		require.Equal(t, 1.0, tripsEnded(t, reg, service.RideChargeExpired))
		n, err = w.Service.HoldsRelease(w.Ctx, 100)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Len(t, w.Adyen.Modifications(), 1)
	})
}
