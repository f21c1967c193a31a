package service_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
)

// bookWaitingAtAdyen books, in a world that prefers Adyen, a ride for a
// new rider whose card needs authentication, and returns the rider, the
// ride and the processor key its payment was made under (the merchant
// reference, and what the return link carries).
func bookWaitingAtAdyen(t *testing.T, w *testkit.TwoProcessors, email, source string) (uid int64, ride service.Ride, pkey string) {
	t.Helper()
	uid = w.Rider(t, email, source).ID
	resp, err := book(t, w, uid, testkit.NewKey())
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, resp.Status, string(resp.Body))
	require.NoError(t, json.Unmarshal(resp.Body, &ride))
	require.Equal(t, service.ProcessorAdyen, ride.Processor)
	require.NoError(t, w.Pool.QueryRow(w.Ctx, `SELECT charge_key FROM rides WHERE id = $1`, ride.ID).Scan(&pkey))
	return uid, ride, pkey
}

func TestRideRequiresActionAtAdyen(t *testing.T) {
	t.Parallel()

	t.Run("TheRidersReturnSubmitsTheRedirectResult", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewAdyenFirst(t, 5, time.Hour)
		uid, ride, pkey := bookWaitingAtAdyen(t, w, "adyen-return@example.com", fakeadyen.TokenAuthenticationRequired)
		require.Equal(t, service.RideChargeRequiresAction, ride.ChargeStatus)
		require.NotNil(t, ride.NextAction)
		require.Contains(t, ride.NextAction.RedirectURL, "/_fake/challenge/")
		require.Nil(t, ride.NextAction.ClientSecret, "Adyen has no client secret")
		require.Empty(t, w.Adyen.AuthorisedPayments())

		result, err := w.Adyen.Authenticate(pkey, true)
		require.NoError(t, err)
		for range 2 { // a link hit twice
			id, err := w.Service.RideActionReturn(w.Ctx, pkey, result)
			require.NoError(t, err)
			require.Equal(t, ride.ID, id)
		}
		now := rideNow(t, w.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeCharged, now.ChargeStatus)
		paid := w.Adyen.AuthorisedPayments()
		require.Len(t, paid, 1)
		require.Equal(t, paid[0].PSPReference, *now.ChargeID)
		require.Equal(t, paid[0].PSPReference, *now.PaymentID)
		require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'ride_receipt' AND (args->>'ride_id')::bigint = $1`, ride.ID))

		// The AUTHORISATION notification, racing the return, finds it done.
		require.Equal(t, []string{service.InboxOutcomeAlreadyRecorded}, notify(t, w, fakeadyen.EventAuthorisation))
		require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'ride_receipt' AND (args->>'ride_id')::bigint = $1`, ride.ID))
	})

	t.Run("TheNotificationMovesARideWhoseRiderNeverCameBack", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewAdyenFirst(t, 5, time.Hour)
		uid, ride, pkey := bookWaitingAtAdyen(t, w, "adyen-notified@example.com", fakeadyen.TokenAuthenticationRequired)
		_, err := w.Adyen.Authenticate(pkey, true)
		require.NoError(t, err)

		require.Equal(t, []string{service.RideActionCharged}, notify(t, w, fakeadyen.EventAuthorisation))
		now := rideNow(t, w.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeCharged, now.ChargeStatus)
		require.Equal(t, w.Adyen.AuthorisedPayments()[0].PSPReference, *now.ChargeID)
		require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'ride_receipt' AND (args->>'ride_id')::bigint = $1`, ride.ID))
	})

	t.Run("FailedIsDeclined", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewAdyenFirst(t, 5, time.Hour)
		uid, ride, pkey := bookWaitingAtAdyen(t, w, "adyen-fail@example.com", fakeadyen.TokenAuthenticationRequired)
		result, err := w.Adyen.Authenticate(pkey, false)
		require.NoError(t, err)
		_, err = w.Service.RideActionReturn(w.Ctx, pkey, result)
		require.NoError(t, err)
		now := rideNow(t, w.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeDeclined, now.ChargeStatus)
		require.Equal(t, "3D Not Authenticated", *now.DeclineMessage)
		require.Empty(t, w.Adyen.AuthorisedPayments())
		require.Equal(t, []string{service.InboxOutcomeAlreadyRecorded}, notify(t, w, fakeadyen.EventAuthorisation))
		require.Zero(t, w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'ride_receipt'`))
	})

	t.Run("AForgedOrAnotherPaymentsResultMovesNothing", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewAdyenFirst(t, 5, time.Hour)
		uidA, rideA, pkeyA := bookWaitingAtAdyen(t, w, "adyen-a@example.com", fakeadyen.TokenAuthenticationRequired)
		uidB, rideB, pkeyB := bookWaitingAtAdyen(t, w, "adyen-b@example.com", fakeadyen.TokenAuthenticationRequired)

		_, err := w.Service.RideActionReturn(w.Ctx, pkeyA, "forged-redirect-result")
		require.Equal(t, "query.redirectResult", requireCode(t, err, service.CodeInvalid).Field)
		_, err = w.Service.RideActionReturn(w.Ctx, pkeyA, "")
		require.Equal(t, "query.redirectResult", requireCode(t, err, service.CodeInvalid).Field)

		resultB, err := w.Adyen.Authenticate(pkeyB, true)
		require.NoError(t, err)
		_, err = w.Service.RideActionReturn(w.Ctx, pkeyA, resultB)
		e := requireCode(t, err, service.CodeInvalid)
		require.Equal(t, "query.redirectResult", e.Field)
		require.True(t, strings.Contains(e.Message, "another payment"), e.Message)
		require.Equal(t, service.RideChargeRequiresAction, rideNow(t, w.Env, uidA, rideA.ID).ChargeStatus, "A is not moved by B's result")
		require.Equal(t, service.RideChargeRequiresAction, rideNow(t, w.Env, uidB, rideB.ID).ChargeStatus, "nor is B, by a return through A's link")
	})

	t.Run("AbandonedIsCancelledAtAdyenAndExpires", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewAdyenFirst(t, 5, time.Hour)
		uid, ride, pkey := bookWaitingAtAdyen(t, w, "adyen-abandon@example.com", fakeadyen.TokenThreeDSecure2Required)
		out, err := w.Service.RideActionExpire(w.Ctx, ride.ID)
		require.NoError(t, err)
		require.Equal(t, service.RideActionCancelRequested, out)
		// Adyen took the cancel on; its CANCELLATION decides.
		require.Equal(t, service.RideChargeRequiresAction, rideNow(t, w.Env, uid, ride.ID).ChargeStatus)
		require.Equal(t, []string{service.RideActionExpired}, notify(t, w, fakeadyen.EventCancellation))
		require.Equal(t, service.RideChargeExpired, rideNow(t, w.Env, uid, ride.ID).ChargeStatus)
		mods := w.Adyen.Modifications()
		require.Len(t, mods, 1)
		require.Equal(t, fakeadyen.ModificationCancel, mods[0].Kind)
		_, err = w.Adyen.Authenticate(pkey, true)
		require.Error(t, err, "a cancelled payment's challenge cannot complete")
		require.Empty(t, w.Adyen.AuthorisedPayments())
		require.Zero(t, w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'ride_receipt'`))
	})

	t.Run("ARefusalUnreportedAtTheDeadlineIsDeclinedNotExpired", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewAdyenFirst(t, 5, time.Hour)
		uid, ride, pkey := bookWaitingAtAdyen(t, w, "adyen-late@example.com", fakeadyen.TokenAuthenticationRequired)
		// The rider failed the challenge and never came back; the
		// AUTHORISATION is still on its way when the deadline comes.
		_, err := w.Adyen.Authenticate(pkey, false)
		require.NoError(t, err)
		out, err := w.Service.RideActionExpire(w.Ctx, ride.ID)
		require.NoError(t, err)
		require.Equal(t, service.RideActionCancelRequested, out)
		require.Equal(t, []string{service.RideActionWaiting}, notify(t, w, fakeadyen.EventCancellation), "the cancel came too late")
		require.Equal(t, []string{service.RideActionDeclined}, notify(t, w, fakeadyen.EventAuthorisation))
		require.Equal(t, service.RideChargeDeclined, rideNow(t, w.Env, uid, ride.ID).ChargeStatus)
	})
}

// TestAdyenWithoutNotificationsStaysMerchantInitiated: without Adyen's
// notifications the service could not learn the outcome of a payment whose
// shopper never comes back, so its Adyen payments stay merchant-initiated:
// a card whose bank insists on authentication is declined (402), never left
// waiting.
func TestAdyenWithoutNotificationsStaysMerchantInitiated(t *testing.T) {
	t.Parallel()
	env := testkit.New(t)
	ady := testkit.NewAdyen(t)
	svc, err := service.New(service.Config{
		Pool: env.Pool, Processors: []service.Processor{{Name: service.ProcessorAdyen, Payments: ady.Client()}},
		DevDefaultPaymentSource: true,
	})
	require.NoError(t, err)
	res, err := svc.UserUpsert(env.Ctx, service.UserUpsertParams{Email: "no-notes@example.com", PaymentSource: fakeadyen.TokenAuthenticationRequired})
	require.NoError(t, err)
	resp, err := svc.RideCreate(env.Ctx, res.User.ID, testkit.NewKey(), testkit.SomeRide, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusPaymentRequired, resp.Status, string(resp.Body))
	require.Contains(t, string(resp.Body), "Authentication required")
	payments := ady.Payments()
	require.Len(t, payments, 1)
	require.Equal(t, fakeadyen.InteractionContAuth, payments[0].ShopperInteraction)
	require.Empty(t, ady.PendingChallenges())
}
