package service_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
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
		require.Equal(t, "query.redirectResult", testkit.RequireCode(t, err, service.CodeInvalid).Field)
		_, err = w.Service.RideActionReturn(w.Ctx, pkeyA, "")
		require.Equal(t, "query.redirectResult", testkit.RequireCode(t, err, service.CodeInvalid).Field)

		resultB, err := w.Adyen.Authenticate(pkeyB, true)
		require.NoError(t, err)
		_, err = w.Service.RideActionReturn(w.Ctx, pkeyA, resultB)
		e := testkit.RequireCode(t, err, service.CodeInvalid)
		require.Equal(t, "query.redirectResult", e.Field)
		require.True(t, strings.Contains(e.Message, "another payment"), e.Message)
		require.Equal(t, service.RideChargeRequiresAction, rideNow(t, w.Env, uidA, rideA.ID).ChargeStatus, "A is not moved by B's result")
		require.Equal(t, service.RideChargeRequiresAction, rideNow(t, w.Env, uidB, rideB.ID).ChargeStatus, "nor is B, by a return through A's link")
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
		// The cancel came too late: it failed, and the ride waits for
		// the payment's own outcome.
		require.Equal(t, []string{service.InboxOutcomeCancelFailed}, notify(t, w, fakeadyen.EventTechnicalCancel))
		require.NotNil(t, rideNow(t, w.Env, uid, ride.ID).CancelFailure)
		require.Equal(t, []string{service.RideActionDeclined}, notify(t, w, fakeadyen.EventAuthorisation))
		now := rideNow(t, w.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeDeclined, now.ChargeStatus)
		require.Nil(t, now.CancelFailure, "shown only while the ride waits")
	})
}

// TestRideAbandonedAtAdyen: a rider who walks away from Adyen's challenge.
// At the deadline the service cancels the payment by its merchant
// reference (POST /cancels); Adyen tells the outcome in a TECHNICAL_CANCEL
// notification, whichever comes first of it and the service's own record
// of the cancel.
func TestRideAbandonedAtAdyen(t *testing.T) {
	t.Parallel()

	// requireExpiredOnce asserts that the abandoned ride expired, that its
	// payment is cancelled at Adyen and can no longer be authenticated,
	// and that a redelivered TECHNICAL_CANCEL changes nothing.
	requireExpiredOnce := func(t *testing.T, w *testkit.TwoProcessors, uid int64, ride service.Ride, pkey string) {
		t.Helper()
		now := rideNow(t, w.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeExpired, now.ChargeStatus)
		require.Nil(t, now.NextAction)
		require.Nil(t, now.CancelFailure)
		require.Equal(t, service.RideRefundNone, now.RefundStatus)
		mods := w.Adyen.Modifications()
		require.Len(t, mods, 1, "one cancel")
		require.Equal(t, fakeadyen.ModificationCancel, mods[0].Kind)
		require.True(t, mods[0].Success)
		require.Equal(t, pkey, mods[0].PaymentReference)
		_, err := w.Adyen.Authenticate(pkey, true)
		require.Error(t, err, "a cancelled payment's challenge cannot complete")
		require.Empty(t, w.Adyen.AuthorisedPayments())
		dups, outcomes := redeliver(t, w, fakeadyen.EventTechnicalCancel)
		require.Equal(t, []bool{true}, dups)
		require.Equal(t, []string{service.RideActionExpired}, outcomes)
		require.Equal(t, service.RideChargeExpired, rideNow(t, w.Env, uid, ride.ID).ChargeStatus)
		require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'ride.expired' AND resource_id = $1`, ride.ID))
		require.Zero(t, w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'ride_receipt'`))
		require.Zero(t, w.Count(t, `SELECT count(*) FROM inbox_events WHERE outcome = 'ignored_type'`))
	}

	t.Run("TheServiceRecordsItsCancelThenTECHNICAL_CANCELExpiresIt", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewAdyenFirst(t, 5, time.Hour)
		uid, ride, pkey := bookWaitingAtAdyen(t, w, "adyen-abandon@example.com", fakeadyen.TokenThreeDSecure2Required)
		out, err := w.Service.RideActionExpire(w.Ctx, ride.ID)
		require.NoError(t, err)
		require.Equal(t, service.RideActionCancelRequested, out)
		// Adyen only took the cancel on: the ride waits for its outcome.
		require.Equal(t, service.RideChargeRequiresAction, rideNow(t, w.Env, uid, ride.ID).ChargeStatus)
		require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM rides WHERE id = $1 AND cancel_requested_at IS NOT NULL`, ride.ID))
		require.Empty(t, notify(t, w, fakeadyen.EventCancellation), "a cancel by reference is told in TECHNICAL_CANCEL")

		require.Equal(t, []string{service.RideActionExpired}, notify(t, w, fakeadyen.EventTechnicalCancel))
		requireExpiredOnce(t, w, uid, ride, pkey)

		// The job again (a retry): nothing more is asked of Adyen.
		out, err = w.Service.RideActionExpire(w.Ctx, ride.ID)
		require.NoError(t, err)
		require.Equal(t, service.InboxOutcomeAlreadyRecorded, out)
		require.Len(t, w.Adyen.Modifications(), 1)
	})

	t.Run("TECHNICAL_CANCELBeforeTheServiceRecordedItsCancel", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewAdyenFirst(t, 5, time.Hour)
		uid, ride, pkey := bookWaitingAtAdyen(t, w, "adyen-abandon-first@example.com", fakeadyen.TokenThreeDSecure2Required)
		// Adyen takes the cancel on, and every answer to it is lost: the
		// job fails before it records anything, and Adyen's notification
		// comes first.
		w.Adyen.Inject(fakeadyen.Fault{Op: fakeadyen.OpCancel, Kind: fakeadyen.FaultDropAfter, Times: 100})
		_, err := w.Service.RideActionExpire(w.Ctx, ride.ID)
		require.Error(t, err)
		w.Adyen.ClearFaults()
		require.Equal(t, service.RideChargeRequiresAction, rideNow(t, w.Env, uid, ride.ID).ChargeStatus)
		require.Zero(t, w.Count(t, `SELECT count(*) FROM rides WHERE id = $1 AND cancel_requested_at IS NOT NULL`, ride.ID))

		require.Equal(t, []string{service.RideActionExpired}, notify(t, w, fakeadyen.EventTechnicalCancel))
		requireExpiredOnce(t, w, uid, ride, pkey)

		// The job's retry finds the ride ended, and records nothing.
		out, err := w.Service.RideActionExpire(w.Ctx, ride.ID)
		require.NoError(t, err)
		require.Equal(t, service.InboxOutcomeAlreadyRecorded, out)
		require.Zero(t, w.Count(t, `SELECT count(*) FROM rides WHERE id = $1 AND cancel_requested_at IS NOT NULL`, ride.ID))
		require.Len(t, w.Adyen.Modifications(), 1)
	})

	t.Run("AfterAForgedRedirectResult", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewAdyenFirst(t, 5, time.Hour)
		uid, ride, pkey := bookWaitingAtAdyen(t, w, "adyen-forged@example.com", fakeadyen.TokenAuthenticationRequired)
		_, err := w.Service.RideActionReturn(w.Ctx, pkey, "forged-redirect-result")
		require.Equal(t, "query.redirectResult", testkit.RequireCode(t, err, service.CodeInvalid).Field)
		out, err := w.Service.RideActionExpire(w.Ctx, ride.ID)
		require.NoError(t, err)
		require.Equal(t, service.RideActionCancelRequested, out)
		require.Equal(t, []string{service.RideActionExpired}, notify(t, w, fakeadyen.EventTechnicalCancel))
		requireExpiredOnce(t, w, uid, ride, pkey)
	})

	t.Run("AFailedTECHNICAL_CANCELIsTheOperators", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		w := testkit.NewTwoProcessorsWith(t, testkit.TwoProcessorsOptions{
			Failures: 5, OpenFor: time.Hour, AdyenFirst: true, Registerer: reg,
		})
		uid, ride, pkey := bookWaitingAtAdyen(t, w, "adyen-cancel-failed@example.com", fakeadyen.TokenAuthenticationRequired)
		// The rider failed the challenge at the deadline: the cancel
		// fails, and the AUTHORISATION that tells the payment's outcome
		// is late.
		_, err := w.Adyen.Authenticate(pkey, false)
		require.NoError(t, err)
		out, err := w.Service.RideActionExpire(w.Ctx, ride.ID)
		require.NoError(t, err)
		require.Equal(t, service.RideActionCancelRequested, out)
		require.False(t, w.Adyen.Modifications()[0].Success)
		require.Equal(t, service.RideChargeRequiresAction, rideNow(t, w.Env, uid, ride.ID).ChargeStatus)

		require.Equal(t, []string{service.InboxOutcomeCancelFailed}, notify(t, w, fakeadyen.EventTechnicalCancel))
		now := rideNow(t, w.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeRequiresAction, now.ChargeStatus, "visible to the operator, not moved")
		require.NotNil(t, now.CancelFailure)
		require.Equal(t, 1.0, counter(t, reg, "atomicrides_cancels_failed_total", map[string]string{"processor": service.ProcessorAdyen}))
		require.NoError(t, w.Service.TripsMeasure(w.Ctx))
		require.Equal(t, 1.0, counter(t, reg, "atomicrides_rides_cancel_failed", nil))

		dups, outcomes := redeliver(t, w, fakeadyen.EventTechnicalCancel)
		require.Equal(t, []bool{true}, dups)
		require.Equal(t, []string{service.InboxOutcomeCancelFailed}, outcomes)
		require.Equal(t, 1.0, counter(t, reg, "atomicrides_cancels_failed_total", map[string]string{"processor": service.ProcessorAdyen}))
		require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'ride.cancel_failed' AND resource_id = $1`, ride.ID))

		// The payment's own outcome ends the wait, and the operator's
		// gauge with it.
		require.Equal(t, []string{service.RideActionDeclined}, notify(t, w, fakeadyen.EventAuthorisation))
		require.Equal(t, service.RideChargeDeclined, rideNow(t, w.Env, uid, ride.ID).ChargeStatus)
		require.NoError(t, w.Service.TripsMeasure(w.Ctx))
		require.Zero(t, counter(t, reg, "atomicrides_rides_cancel_failed", nil))
	})

	t.Run("BadAndForeignNotifications", func(t *testing.T) {
		t.Parallel()
		w := testkit.NewAdyenFirst(t, 5, time.Hour)
		uid, ride, _ := bookWaitingAtAdyen(t, w, "adyen-foreign@example.com", fakeadyen.TokenAuthenticationRequired)
		// A TECHNICAL_CANCEL, successful and failed, of payments no ride
		// of ours made, and one of another merchant account: read (2xx to
		// Adyen), and nothing moves.
		items := []struct {
			account, success, want string
		}{
			{testkit.AdyenMerchantAccount, "true", service.InboxOutcomeUnknownCharge},
			{testkit.AdyenMerchantAccount, "false", service.InboxOutcomeUnknownCharge},
			{"AnotherMerchantAccount", "true", service.InboxOutcomeForeignAccount},
		}
		for i, c := range items {
			it := fakeadyen.NotificationItem{
				EventCode: fakeadyen.EventTechnicalCancel, Success: c.success, MerchantAccountCode: c.account,
				EventDate: time.Now().UTC().Format(time.RFC3339), Reason: "",
				MerchantReference: fmt.Sprintf("someone-elses-%d", i), OriginalReference: fmt.Sprintf("QFQTPCQ8HXSKGK8%d", i),
				PSPReference: fmt.Sprintf("TC000000000000%d", i), Amount: fakeadyen.NotifiedAmount{Currency: "USD", Value: 1000},
			}
			body, err := fakeadyen.NotificationBody(testkit.AdyenHMACKey, it)
			require.NoError(t, err)
			for range 2 { // delivered twice
				_, err = w.Service.InboxReceive(w.Ctx, service.InboxSourceAdyen, body, "")
				require.NoError(t, err)
				out, err := w.Service.InboxApply(w.Ctx, service.InboxSourceAdyen, it.PSPReference+":"+it.EventCode+":"+it.Success)
				require.NoError(t, err)
				require.Equal(t, c.want, out, "item %d", i)
			}
		}
		require.Equal(t, service.RideChargeRequiresAction, rideNow(t, w.Env, uid, ride.ID).ChargeStatus)
		require.Zero(t, w.Count(t, `SELECT count(*) FROM rides WHERE cancel_failure IS NOT NULL`))
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
	})
	require.NoError(t, err)
	res, err := testkit.NewAccounts(t, svc, nil).UserUpsert(env.Ctx, accounts.UserUpsertParams{Email: "no-notes@example.com", PaymentSource: fakeadyen.TokenAuthenticationRequired})
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
