package service_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
)

// setupTrips is a world whose bookings hold their fare (CaptureTrip), with
// one rider paying by card.
func setupTrips(t *testing.T, email string) (b *testBundle, uid int64) {
	t.Helper()
	b = &testBundle{testkit.NewWith(t, testkit.Options{Capture: service.CaptureTrip})}
	return b, b.Rider(t, email, "tok_visa").ID
}

// bookTrip books a ride whose hold is placed at once.
func bookTrip(t *testing.T, b *testBundle, uid int64) service.Ride {
	t.Helper()
	resp, err := b.Service.RideCreate(b.Ctx, uid, testkit.NewKey(), testkit.SomeRide, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
	ride := testkit.DecodeRide(t, resp.Body)
	require.Equal(t, service.RideChargeAuthorized, ride.ChargeStatus)
	return ride
}

func complete(t *testing.T, b *testBundle, key string, rideID, fare int64) (*service.Response, service.Ride) {
	t.Helper()
	resp, err := b.Service.RideComplete(b.Ctx, key, service.RideCompleteParams{RideID: rideID, FareCents: fare, Currency: "usd"}, nil)
	require.NoError(t, err)
	var ride service.Ride
	if resp.Status < 300 {
		require.NoError(t, json.Unmarshal(resp.Body, &ride))
	}
	return resp, ride
}

// intentOf is the fake Stripe's PaymentIntent of a ride.
func intentOf(t *testing.T, b *testBundle, ride service.Ride) fakestripe.PaymentIntent {
	t.Helper()
	require.NotNil(t, ride.PaymentID)
	pi, ok := b.Stripe.PaymentIntent(*ride.PaymentID)
	require.True(t, ok, "no payment intent %s", *ride.PaymentID)
	return pi
}

// dispatchID is the dispatch side's account.
func (b *testBundle) dispatchID(t *testing.T) int64 {
	t.Helper()
	return int64(b.Count(t, `SELECT id FROM users WHERE role = 'dispatch'`))
}

func TestTripHold(t *testing.T) {
	t.Parallel()

	t.Run("BookedIsAuthorizedAndNothingCaptured", func(t *testing.T) {
		t.Parallel()
		b, uid := setupTrips(t, "hold@example.com")
		ride := bookTrip(t, b, uid)

		require.Equal(t, service.CaptureTrip, ride.Capture)
		require.NotNil(t, ride.HoldExpiresAt)
		require.WithinDuration(t, time.Now().Add(service.DefaultHoldExpiry), *ride.HoldExpiresAt, time.Minute)
		require.Nil(t, ride.FareCents)
		require.Nil(t, ride.CapturedCents)
		pi := intentOf(t, b, ride)
		require.Equal(t, fakestripe.PaymentIntentRequiresCapture, pi.Status)
		require.Equal(t, int64(service.RideAmountCents), pi.AmountCapturable)
		require.Zero(t, pi.AmountReceived)
		require.Zero(t, b.receipts(t, ride.ID), "no receipt before the fare is known")
	})

	t.Run("DeclinedHoldIs402", func(t *testing.T) {
		t.Parallel()
		b := &testBundle{testkit.NewWith(t, testkit.Options{Capture: service.CaptureTrip})}
		uid := b.Rider(t, "declined-hold@example.com", fakestripe.TokenChargeDeclined).ID
		resp, err := b.Service.RideCreate(b.Ctx, uid, testkit.NewKey(), testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusPaymentRequired, resp.Status, string(resp.Body))
	})

	t.Run("BookingModeStillChargesAtOnce", func(t *testing.T) {
		t.Parallel()
		b, uid, ride := setupRide(t, "booking-mode@example.com")
		require.Equal(t, service.CaptureBooking, ride.Capture)
		require.Equal(t, service.RideChargeCharged, ride.ChargeStatus)
		resp, err := b.Service.RideComplete(b.Ctx, testkit.NewKey(), service.RideCompleteParams{RideID: ride.ID, FareCents: 1500, Currency: "usd"}, nil)
		e := testkit.RequireCode(t, err, service.CodeNotCompletable)
		require.Nil(t, resp)
		require.Equal(t, ride.ID, e.RideID)
		_, err = b.Service.RideCancel(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		testkit.RequireCode(t, err, service.CodeNotCancellable)
	})
}

func TestTripComplete(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name  string
		fare  int64
		extra int64
	}{
		{"BelowTheHold", service.RideAmountCents - 650, 0},
		{"AtTheHold", service.RideAmountCents, 0},
		{"AboveTheHold", service.RideAmountCents + 730, 730},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, uid := setupTrips(t, "fare-"+tc.name+"@example.com")
			ride := bookTrip(t, b, uid)
			key := testkit.NewKey()
			first, done := complete(t, b, key, ride.ID, tc.fare)
			require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
			require.Equal(t, service.RideChargeCompleted, done.ChargeStatus)
			require.Equal(t, tc.fare, *done.FareCents)
			captured := min(tc.fare, service.RideAmountCents)
			require.Equal(t, captured, *done.CapturedCents)
			require.Zero(t, done.BalanceDueCents)

			pi := intentOf(t, b, ride)
			require.Equal(t, fakestripe.PaymentIntentSucceeded, pi.Status)
			require.Equal(t, captured, pi.AmountReceived)
			require.Equal(t, 1, b.Stripe.Executed(fakestripe.OpPaymentIntentCapture))
			if tc.extra > 0 {
				require.Equal(t, service.ExtraCharged, *done.ExtraStatus)
				require.Equal(t, tc.extra, *done.ExtraCents)
				require.NotNil(t, done.ExtraChargeID)
				var extras int
				for _, p := range b.Stripe.PaymentIntents() {
					if p.ID != pi.ID && p.Customer == pi.Customer {
						extras++
						require.Equal(t, tc.extra, p.AmountReceived)
						require.Equal(t, fakestripe.PaymentIntentSucceeded, p.Status)
					}
				}
				require.Equal(t, 1, extras, "the fare above the hold is one payment")
			} else {
				require.Equal(t, service.ExtraNone, *done.ExtraStatus)
				require.Nil(t, done.ExtraCents)
			}
			require.Equal(t, 1, b.receipts(t, ride.ID), "the receipt comes with the capture")

			// The same key replays; another key with the same fare gets the
			// same completion (200); nothing is captured again.
			again, _ := complete(t, b, key, ride.ID, tc.fare)
			require.True(t, again.Replayed)
			require.Equal(t, first.Body, again.Body)
			other, same := complete(t, b, testkit.NewKey(), ride.ID, tc.fare)
			require.Equal(t, http.StatusOK, other.Status)
			require.Equal(t, done.CompletedAt, same.CompletedAt)
			require.Equal(t, 1, b.Stripe.Executed(fakestripe.OpPaymentIntentCapture))
			require.Equal(t, 1, b.receipts(t, ride.ID))
		})
	}

	t.Run("AboveTheHoldDeclinedIsABalanceThatBlocksTheNextBookingUntilPaid", func(t *testing.T) {
		t.Parallel()
		b := &testBundle{testkit.NewWith(t, testkit.Options{Capture: service.CaptureTrip})}
		// A card whose bank asks for authentication: the hold is
		// authenticated with the rider present; the fare above it, charged
		// without the rider, is declined (authentication_required).
		uid, _, _, waiting := bookWaiting(t, b, "balance@example.com", fakestripe.TokenAuthenticationRequired)
		require.NoError(t, b.Stripe.Authenticate(*waiting.PaymentID, true))
		outcomes := deliverStripe(t, b, "payment_intent.amount_capturable_updated")
		require.Contains(t, outcomes, service.RideActionAuthorized)
		ride := rideNow(t, b.Env, uid, waiting.ID)
		require.Equal(t, service.RideChargeAuthorized, ride.ChargeStatus)

		resp, done := complete(t, b, testkit.NewKey(), ride.ID, service.RideAmountCents+500)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		require.Equal(t, service.RideChargeCompleted, done.ChargeStatus)
		require.Equal(t, service.ExtraDue, *done.ExtraStatus)
		require.Equal(t, int64(500), done.BalanceDueCents)
		require.Equal(t, int64(service.RideAmountCents), *done.CapturedCents)

		// The next booking is refused, naming the ride; nothing is booked
		// and the key is left free.
		next := testkit.NewKey()
		_, err := b.Service.RideCreate(b.Ctx, uid, next, testkit.SomeRide, nil)
		e := testkit.RequireCode(t, err, service.CodeBalanceDue)
		require.Equal(t, ride.ID, e.RideID)
		require.Contains(t, e.Message, fmt.Sprint(ride.ID))
		require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2`, uid, next))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE user_id = $1`, uid))

		// Paying with the same card is declined again (402, stored); with a
		// new card the balance is paid once.
		payKey := testkit.NewKey()
		declined, err := b.Service.RideBalancePay(b.Ctx, uid, payKey, ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusPaymentRequired, declined.Status, string(declined.Body))
		_, err = b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: "balance@example.com", PaymentSource: "tok_visa"})
		require.NoError(t, err)
		paid, err := b.Service.RideBalancePay(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, paid.Status, string(paid.Body))
		paidRide := testkit.DecodeRide(t, paid.Body)
		require.Equal(t, service.ExtraPaid, *paidRide.ExtraStatus)
		require.Zero(t, paidRide.BalanceDueCents)

		// Paid: the same key books now.
		booked, err := b.Service.RideCreate(b.Ctx, uid, next, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, booked.Status, string(booked.Body))
		_, err = b.Service.RideBalancePay(b.Ctx, uid, testkit.NewKey(), testkit.DecodeRide(t, booked.Body).ID, nil)
		testkit.RequireCode(t, err, service.CodeNoBalanceDue)
	})

	t.Run("TenKeysAtOnceCaptureOnce", func(t *testing.T) {
		t.Parallel()
		b, uid := setupTrips(t, "ten-keys@example.com")
		ride := bookTrip(t, b, uid)
		var wg sync.WaitGroup
		statuses := make([]int, 10)
		for i := range statuses {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each key waits its turn on the ride's lock.
				resp, err := b.Service.RideComplete(b.Ctx, testkit.NewKey(), service.RideCompleteParams{RideID: ride.ID, FareCents: 1700, Currency: "usd"}, nil)
				if err == nil {
					statuses[i] = resp.Status
				}
			}()
		}
		wg.Wait()
		created := 0
		for _, s := range statuses {
			require.Contains(t, []int{http.StatusCreated, http.StatusOK}, s)
			if s == http.StatusCreated {
				created++
			}
		}
		require.Equal(t, 1, created)
		require.Equal(t, 1, b.Stripe.Executed(fakestripe.OpPaymentIntentCapture))
		require.Equal(t, int64(1700), intentOf(t, b, ride).AmountReceived)
		require.Equal(t, 1, b.receipts(t, ride.ID))
	})

	t.Run("BadInputWritesNothing", func(t *testing.T) {
		t.Parallel()
		b, uid := setupTrips(t, "bad-fare@example.com")
		ride := bookTrip(t, b, uid)
		for _, tc := range []struct {
			params service.RideCompleteParams
			field  string
		}{
			{service.RideCompleteParams{RideID: ride.ID, FareCents: 0, Currency: "usd"}, "body.fare_cents"},
			{service.RideCompleteParams{RideID: ride.ID, FareCents: -5, Currency: "usd"}, "body.fare_cents"},
			{service.RideCompleteParams{RideID: ride.ID, FareCents: 100, Currency: "US"}, "body.currency"},
			{service.RideCompleteParams{RideID: ride.ID, FareCents: 100, Currency: "eur"}, "body.currency"},
			{service.RideCompleteParams{RideID: ride.ID, FareCents: service.MaxFareMultiple*service.RideAmountCents + 1, Currency: "usd"}, "body.fare_cents"},
			{service.RideCompleteParams{RideID: 0, FareCents: 100, Currency: "usd"}, "path.id"},
		} {
			_, err := b.Service.RideComplete(b.Ctx, testkit.NewKey(), tc.params, nil)
			e := testkit.RequireCode(t, err, service.CodeInvalid)
			require.Equal(t, tc.field, e.Field)
		}
		_, err := b.Service.RideComplete(b.Ctx, testkit.NewKey(), service.RideCompleteParams{RideID: ride.ID + 1, FareCents: 100, Currency: "usd"}, nil)
		testkit.RequireCode(t, err, service.CodeNotFound)
		require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE flow = 'ride.complete'`))
		require.Equal(t, service.RideChargeAuthorized, rideNow(t, b.Env, uid, ride.ID).ChargeStatus)
		require.Zero(t, b.Stripe.Executed(fakestripe.OpPaymentIntentCapture))

		// The same key with another fare is the key reused; another key
		// with another fare is refused, naming the completion's fare.
		key := testkit.NewKey()
		resp, _ := complete(t, b, key, ride.ID, 1500)
		require.Equal(t, http.StatusCreated, resp.Status)
		_, err = b.Service.RideComplete(b.Ctx, key, service.RideCompleteParams{RideID: ride.ID, FareCents: 1600, Currency: "usd"}, nil)
		testkit.RequireCode(t, err, service.CodeKeyReused)
		_, err = b.Service.RideComplete(b.Ctx, testkit.NewKey(), service.RideCompleteParams{RideID: ride.ID, FareCents: 1600, Currency: "usd"}, nil)
		e := testkit.RequireCode(t, err, service.CodeNotCompletable)
		require.Contains(t, e.Message, "1500")
		require.Equal(t, 1, b.Stripe.Executed(fakestripe.OpPaymentIntentCapture))
	})

	t.Run("DuringAnOutageThe503LeavesTheRideCapturingAndTheRetryCapturesOnce", func(t *testing.T) {
		t.Parallel()
		b, uid := setupTrips(t, "outage@example.com")
		ride := bookTrip(t, b, uid)
		key := testkit.NewKey()
		b.Stripe.SetOutage(true)
		_, err := b.Service.RideComplete(b.Ctx, key, service.RideCompleteParams{RideID: ride.ID, FareCents: 1900, Currency: "usd"}, nil)
		testkit.RequireCode(t, err, service.CodeProcessorUnavailable)
		require.Equal(t, service.RideChargeCapturing, rideNow(t, b.Env, uid, ride.ID).ChargeStatus)
		k := b.key(t, b.dispatchID(t), key)
		require.Equal(t, string(service.RecoveryPointCaptureRequested), k.point)
		require.False(t, k.locked)
		// A cancellation now is refused: the trip is completed.
		_, err = b.Service.RideCancel(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		testkit.RequireCode(t, err, service.CodeNotCancellable)

		b.Stripe.SetOutage(false)
		resp, done := complete(t, b, key, ride.ID, 1900)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		require.Equal(t, service.RideChargeCompleted, done.ChargeStatus)
		require.Equal(t, int64(1900), intentOf(t, b, ride).AmountReceived)
	})

	t.Run("ACaptureWhoseAnswerWasLostIsRecognisedPastTheKeyWindow", func(t *testing.T) {
		t.Parallel()
		b, uid := setupTrips(t, "lost-capture@example.com")
		ride := bookTrip(t, b, uid)
		key := testkit.NewKey()
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCapture, Kind: fakestripe.FaultDropAfter, Times: 1})
		_, err := b.Service.RideComplete(b.Ctx, key, service.RideCompleteParams{RideID: ride.ID, FareCents: 1200, Currency: "usd"}, nil)
		testkit.RequireCode(t, err, service.CodeProcessorUnavailable)
		require.Equal(t, int64(1200), intentOf(t, b, ride).AmountReceived, "the capture was made")
		// Stripe has forgotten the capture's key: the capture is refused as
		// made already, and the PaymentIntent read says by how much.
		b.Stripe.Advance(service.ProcessorKeyWindow)
		resp, done := complete(t, b, key, ride.ID, 1200)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		require.Equal(t, int64(1200), *done.CapturedCents)
		require.Equal(t, int64(1200), intentOf(t, b, ride).AmountReceived)
	})
}

func TestTripCancel(t *testing.T) {
	t.Parallel()

	t.Run("ReleasesTheHold", func(t *testing.T) {
		t.Parallel()
		b, uid := setupTrips(t, "cancel@example.com")
		ride := bookTrip(t, b, uid)
		key := testkit.NewKey()
		resp, err := b.Service.RideCancel(b.Ctx, uid, key, ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		cancelled := testkit.DecodeRide(t, resp.Body)
		require.Equal(t, service.RideChargeCancelled, cancelled.ChargeStatus)
		require.NotNil(t, cancelled.ReleasedAt)
		pi := intentOf(t, b, ride)
		require.Equal(t, fakestripe.PaymentIntentCanceled, pi.Status)
		require.Zero(t, pi.AmountReceived)

		// By the dispatch side, under another key: the same ride, 200.
		again, err := b.Service.RideCancel(b.Ctx, 0, testkit.NewKey(), ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, again.Status)
		require.Equal(t, 1, b.Stripe.Executed(fakestripe.OpPaymentIntentCancel))

		// Completing it now is refused; so is refunding it.
		_, err = b.Service.RideComplete(b.Ctx, testkit.NewKey(), service.RideCompleteParams{RideID: ride.ID, FareCents: 100, Currency: "usd"}, nil)
		testkit.RequireCode(t, err, service.CodeNotCompletable)
		_, err = b.Service.RideRefundCreate(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		testkit.RequireCode(t, err, service.CodeNotRefundable)
		require.Zero(t, b.receipts(t, ride.ID))
	})

	t.Run("AnotherRidersRideIsNotFound", func(t *testing.T) {
		t.Parallel()
		b, uid := setupTrips(t, "owner@example.com")
		ride := bookTrip(t, b, uid)
		other := b.Rider(t, "stranger@example.com", "tok_visa").ID
		_, err := b.Service.RideCancel(b.Ctx, other, testkit.NewKey(), ride.ID, nil)
		testkit.RequireCode(t, err, service.CodeNotFound)
		require.Equal(t, service.RideChargeAuthorized, rideNow(t, b.Env, uid, ride.ID).ChargeStatus)
	})

	t.Run("AUncapturedRideIsNotRefundable", func(t *testing.T) {
		t.Parallel()
		b, uid := setupTrips(t, "uncaptured@example.com")
		ride := bookTrip(t, b, uid)
		_, err := b.Service.RideRefundCreate(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		e := testkit.RequireCode(t, err, service.CodeNotRefundable)
		require.Contains(t, e.Message, "cancel")
	})

	t.Run("ACompletedRideIsRefundedByItsCapturedFare", func(t *testing.T) {
		t.Parallel()
		b, uid := setupTrips(t, "refund-trip@example.com")
		ride := bookTrip(t, b, uid)
		complete(t, b, testkit.NewKey(), ride.ID, 1400)
		_, err := b.Service.RideCancel(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		testkit.RequireCode(t, err, service.CodeNotCancellable)
		resp, err := b.Service.RideRefundCreate(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		var r service.RideRefundResult
		require.NoError(t, json.Unmarshal(resp.Body, &r))
		require.Equal(t, int64(1400), r.AmountCents)
	})

	t.Run("RacingACompletionExactlyOneWins", func(t *testing.T) {
		t.Parallel()
		b, uid := setupTrips(t, "race@example.com")
		for i := 0; i < 5; i++ {
			ride := bookTrip(t, b, uid)
			var wg sync.WaitGroup
			var (
				completeResp, cancelResp *service.Response
				completeErr, cancelErr   error
			)
			wg.Add(2)
			go func() {
				defer wg.Done()
				completeResp, completeErr = b.Service.RideComplete(b.Ctx, testkit.NewKey(), service.RideCompleteParams{RideID: ride.ID, FareCents: 1000, Currency: "usd"}, nil)
			}()
			go func() {
				defer wg.Done()
				cancelResp, cancelErr = b.Service.RideCancel(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
			}()
			wg.Wait()
			// Exactly one wins (201); the other is refused, writing nothing.
			completed := completeErr == nil
			if completed {
				require.Equal(t, http.StatusCreated, completeResp.Status, string(completeResp.Body))
				testkit.RequireCode(t, cancelErr, service.CodeNotCancellable)
			} else {
				testkit.RequireCode(t, completeErr, service.CodeNotCompletable)
				require.NoError(t, cancelErr)
				require.Equal(t, http.StatusCreated, cancelResp.Status, string(cancelResp.Body))
			}
			pi := intentOf(t, b, ride)
			now := rideNow(t, b.Env, uid, ride.ID)
			if completed {
				require.Equal(t, service.RideChargeCompleted, now.ChargeStatus)
				require.Equal(t, fakestripe.PaymentIntentSucceeded, pi.Status)
			} else {
				require.Equal(t, service.RideChargeCancelled, now.ChargeStatus)
				require.Equal(t, fakestripe.PaymentIntentCanceled, pi.Status)
			}
		}
	})
}

func TestTripExpiry(t *testing.T) {
	t.Parallel()

	t.Run("ByTheJob", func(t *testing.T) {
		t.Parallel()
		b := &testBundle{testkit.NewWith(t, testkit.Options{Capture: service.CaptureTrip, HoldExpiry: time.Second})}
		uid := b.Rider(t, "expiry@example.com", "tok_visa").ID
		ride := bookTrip(t, b, uid)
		fresh := bookTrip(t, b, uid)
		// The first hold is past its expiry by the database's clock.
		b.Exec(t, `UPDATE rides SET hold_expires_at = now() - interval '1 second' WHERE id = $1`, ride.ID)
		b.Exec(t, `UPDATE rides SET hold_expires_at = now() + interval '1 hour' WHERE id = $1`, fresh.ID)
		n, err := b.Service.HoldsRelease(b.Ctx, 100)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		expired := rideNow(t, b.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeExpired, expired.ChargeStatus)
		require.NotNil(t, expired.ReleasedAt)
		require.Equal(t, fakestripe.PaymentIntentCanceled, intentOf(t, b, ride).Status)
		require.Equal(t, service.RideChargeAuthorized, rideNow(t, b.Env, uid, fresh.ID).ChargeStatus)
		require.Equal(t, fakestripe.PaymentIntentRequiresCapture, intentOf(t, b, fresh).Status)

		n, err = b.Service.HoldsRelease(b.Ctx, 100)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, 1, b.Stripe.Executed(fakestripe.OpPaymentIntentCancel))
		_, err = b.Service.RideCancel(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		testkit.RequireCode(t, err, service.CodeNotCancellable)
	})

	t.Run("ByTheProcessorsEvent", func(t *testing.T) {
		t.Parallel()
		b, uid := setupTrips(t, "processor-expiry@example.com")
		ride := bookTrip(t, b, uid)
		require.NoError(t, b.Stripe.ExpireHold(*ride.PaymentID))
		outcomes := deliverStripe(t, b, "charge.expired")
		require.Equal(t, []string{service.InboxOutcomeHoldReleased}, outcomes)
		require.Equal(t, []string{service.InboxOutcomeAlreadyRecorded}, deliverStripe(t, b, "payment_intent.canceled"))
		require.Equal(t, service.RideChargeExpired, rideNow(t, b.Env, uid, ride.ID).ChargeStatus)

		// Completing it now is refused, and nothing is captured.
		_, err := b.Service.RideComplete(b.Ctx, testkit.NewKey(), service.RideCompleteParams{RideID: ride.ID, FareCents: 100, Currency: "usd"}, nil)
		testkit.RequireCode(t, err, service.CodeNotCompletable)
		require.Zero(t, b.Stripe.Executed(fakestripe.OpPaymentIntentCapture))
	})

	t.Run("AHoldGoneBeforeItsCaptureIsACaptureFailure", func(t *testing.T) {
		t.Parallel()
		b, uid := setupTrips(t, "gone@example.com")
		ride := bookTrip(t, b, uid)
		require.NoError(t, b.Stripe.ExpireHold(*ride.PaymentID))
		resp, done := complete(t, b, testkit.NewKey(), ride.ID, 1500)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		require.Equal(t, service.RideChargeCaptureFailed, done.ChargeStatus)
		require.Equal(t, service.CaptureFailureHoldGone, *done.CaptureFailure)
		require.Zero(t, b.receipts(t, ride.ID))
	})
}
