package service_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
)

// bookWaiting books a ride for a new rider whose card needs
// authentication, and returns the rider, the stored 202 and its ride.
func bookWaiting(t *testing.T, b *testBundle, email, source string) (uid int64, key string, resp *service.Response, ride service.Ride) {
	t.Helper()
	uid, key = b.Rider(t, email, source).ID, testkit.NewKey()
	resp, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, resp.Status, string(resp.Body))
	require.NoError(t, json.Unmarshal(resp.Body, &ride))
	return uid, key, resp, ride
}

// deliverStripe receives the fake Stripe's events of type typ, signed as
// its webhooks are, into the service's inbox, and applies each; it returns
// the outcomes.
func deliverStripe(t *testing.T, b *testBundle, typ string) []string {
	t.Helper()
	var outcomes []string
	for _, ev := range b.Stripe.Events() {
		if ev.Type != typ {
			continue
		}
		_, err := b.Service.InboxReceive(b.Ctx, service.InboxSourceStripe, ev.Payload, stripeSignature(ev.Payload))
		require.NoError(t, err)
		out, err := b.Service.InboxApply(b.Ctx, service.InboxSourceStripe, ev.ID)
		require.NoError(t, err)
		outcomes = append(outcomes, out)
	}
	return outcomes
}

func stripeSignature(payload []byte) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{
		Payload: payload, Secret: testkit.WebhookSecret, Timestamp: time.Now(),
	}).Header
}

// rideNow reads the rider's ride as GET /rides/{id} does.
func rideNow(t *testing.T, e *testkit.Env, uid, id int64) *service.Ride {
	t.Helper()
	r, err := e.Service.RideGet(e.Ctx, uid, id)
	require.NoError(t, err)
	return r
}

func (b *testBundle) receipts(t *testing.T, rideID int64) int {
	return b.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'ride_receipt' AND (args->>'ride_id')::bigint = $1`, rideID)
}

func TestRideRequiresAction(t *testing.T) {
	t.Parallel()

	t.Run("AnsweredWith202AndTheActionReplayedByteForByte", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid, key, first, ride := bookWaiting(t, b, "sca@example.com", fakestripe.TokenAuthenticationRequired)

		require.Equal(t, service.RideChargeRequiresAction, ride.ChargeStatus)
		require.NotNil(t, ride.NextAction)
		require.Equal(t, "redirect_to_url", ride.NextAction.Type)
		require.Contains(t, ride.NextAction.RedirectURL, "/_fake/challenge/")
		require.NotNil(t, ride.PaymentID)
		require.True(t, strings.HasPrefix(*ride.PaymentID, "pi_"), *ride.PaymentID)
		require.NotNil(t, ride.NextAction.ClientSecret)
		require.True(t, strings.HasPrefix(*ride.NextAction.ClientSecret, *ride.PaymentID+"_secret_"))
		require.Nil(t, ride.ChargeID)
		require.Nil(t, ride.StripeChargeID)
		require.Empty(t, b.Stripe.SucceededCharges(), "nothing is charged before the rider authenticates")
		require.Zero(t, b.receipts(t, ride.ID))
		// The deadline's job waits in River, where operators see it.
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'ride_action_expire' AND (args->>'ride_id')::bigint = $1 AND state = 'scheduled'`, ride.ID))

		again, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, http.StatusAccepted, again.Status)
		require.Equal(t, string(first.Body), string(again.Body))
		require.Len(t, b.Stripe.PaymentIntents(), 1, "one PaymentIntent, however often the booking is sent")

		// The ride as it is now says the same until it moves, and the
		// rider's list finds it by its status.
		now := rideNow(t, b.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeRequiresAction, now.ChargeStatus)
		require.Equal(t, ride.NextAction.RedirectURL, now.NextAction.RedirectURL)
		waiting, err := b.Service.RideList(b.Ctx, uid, service.RideListParams{ChargeStatus: service.RideChargeRequiresAction})
		require.NoError(t, err)
		require.Len(t, waiting.Data, 1)
		require.Equal(t, ride.ID, waiting.Data[0].ID)
	})

	t.Run("CompletedIsChargedOnceWithOneReceipt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid, key, first, ride := bookWaiting(t, b, "complete@example.com", fakestripe.TokenAuthenticationRequired)
		require.NoError(t, b.Stripe.Authenticate(*ride.PaymentID, true))

		require.Equal(t, []string{service.RideActionCharged}, deliverStripe(t, b, "payment_intent.succeeded"))
		require.Equal(t, []string{service.InboxOutcomeAlreadyRecorded}, deliverStripe(t, b, "charge.succeeded"))

		now := rideNow(t, b.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeCharged, now.ChargeStatus)
		require.Nil(t, now.NextAction)
		charges := b.Stripe.SucceededCharges()
		require.Len(t, charges, 1)
		require.Equal(t, charges[0].ID, *now.ChargeID)
		require.Equal(t, *ride.PaymentID, *now.PaymentID)
		require.Equal(t, 1, b.receipts(t, ride.ID))

		// The key's answer stays the 202 it gave.
		again, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, string(first.Body), string(again.Body))

		// The rider's return after that changes nothing.
		id, err := b.Service.RideActionReturn(b.Ctx, rideChargeKey(t, b, ride.ID), "")
		require.NoError(t, err)
		require.Equal(t, ride.ID, id)
		require.Equal(t, 1, b.receipts(t, ride.ID))
	})

	t.Run("FailedIsDeclined", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid, _, _, ride := bookWaiting(t, b, "fail@example.com", fakestripe.TokenAuthenticationRequired)
		require.NoError(t, b.Stripe.Authenticate(*ride.PaymentID, false))

		require.Equal(t, []string{service.RideActionDeclined}, deliverStripe(t, b, "payment_intent.payment_failed"))
		now := rideNow(t, b.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeDeclined, now.ChargeStatus)
		require.NotNil(t, now.DeclineCode)
		require.Equal(t, "payment_intent_authentication_failure", *now.DeclineCode)
		require.Empty(t, b.Stripe.SucceededCharges())
		require.Zero(t, b.receipts(t, ride.ID))
	})

	t.Run("AuthenticatedThenDeclinedByTheBank", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid, _, _, ride := bookWaiting(t, b, "funds@example.com", fakestripe.TokenAuthenticationRequiredChargeDeclinedInsufficientFunds)
		require.NoError(t, b.Stripe.Authenticate(*ride.PaymentID, true))

		require.Equal(t, []string{service.RideActionDeclined}, deliverStripe(t, b, "payment_intent.payment_failed"))
		now := rideNow(t, b.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeDeclined, now.ChargeStatus)
		require.Equal(t, "insufficient_funds", *now.DeclineCode)
		require.Empty(t, b.Stripe.SucceededCharges())
		require.Zero(t, b.receipts(t, ride.ID))
	})

	t.Run("AbandonedIsCancelledAtStripeAndExpires", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid, _, _, ride := bookWaiting(t, b, "abandon@example.com", fakestripe.TokenThreeDSecure2Required)

		out, err := b.Service.RideActionExpire(b.Ctx, ride.ID)
		require.NoError(t, err)
		require.Equal(t, service.RideActionExpired, out)
		now := rideNow(t, b.Env, uid, ride.ID)
		require.Equal(t, service.RideChargeExpired, now.ChargeStatus)
		require.Nil(t, now.NextAction)
		pis := b.Stripe.PaymentIntents()
		require.Len(t, pis, 1)
		require.Equal(t, "canceled", pis[0].Status)

		// The job again, Stripe's event, the rider coming back late: nothing moves.
		out, err = b.Service.RideActionExpire(b.Ctx, ride.ID)
		require.NoError(t, err)
		require.Equal(t, service.InboxOutcomeAlreadyRecorded, out)
		require.Equal(t, []string{service.InboxOutcomeAlreadyRecorded}, deliverStripe(t, b, "payment_intent.canceled"))
		require.Error(t, b.Stripe.Authenticate(*ride.PaymentID, true), "a cancelled PaymentIntent cannot be authenticated")
		require.Empty(t, b.Stripe.SucceededCharges())
		require.Zero(t, b.receipts(t, ride.ID))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE resource_id = $1 AND action = 'ride.expired'`, ride.ID))
	})

	t.Run("CompletedJustBeforeTheDeadlineIsCharged", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid, _, _, ride := bookWaiting(t, b, "late@example.com", fakestripe.TokenAuthenticationRequired)
		require.NoError(t, b.Stripe.Authenticate(*ride.PaymentID, true))

		// Every webhook lost: the deadline's job reads the PaymentIntent.
		out, err := b.Service.RideActionExpire(b.Ctx, ride.ID)
		require.NoError(t, err)
		require.Equal(t, service.RideActionCharged, out)
		require.Equal(t, service.RideChargeCharged, rideNow(t, b.Env, uid, ride.ID).ChargeStatus)
		require.Equal(t, 1, b.receipts(t, ride.ID))
		require.Equal(t, "succeeded", b.Stripe.PaymentIntents()[0].Status, "not cancelled")
	})

	t.Run("AWebhookDeliveredFiveTimesAtOnceAppliesOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid, _, _, ride := bookWaiting(t, b, "five@example.com", fakestripe.TokenAuthenticationRequired)
		require.NoError(t, b.Stripe.Authenticate(*ride.PaymentID, true))
		var ev fakestripe.Event
		for _, e := range b.Stripe.Events() {
			if e.Type == "payment_intent.succeeded" {
				ev = e
			}
		}
		require.NotEmpty(t, ev.ID)

		var wg sync.WaitGroup
		outcomes := make(chan string, 5)
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := b.Service.InboxReceive(b.Ctx, service.InboxSourceStripe, ev.Payload, stripeSignature(ev.Payload)); err != nil {
					t.Error(err)
					return
				}
				for {
					out, err := b.Service.InboxApply(b.Ctx, service.InboxSourceStripe, ev.ID)
					if service.ErrorCode(err) == service.CodeKeyInUse {
						continue
					}
					if err != nil {
						t.Error(err)
					}
					outcomes <- out
					return
				}
			}()
		}
		wg.Wait()
		close(outcomes)
		for out := range outcomes {
			require.Equal(t, service.RideActionCharged, out, "every delivery reads the one recorded outcome")
		}
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM inbox_events WHERE event_id = $1`, ev.ID))
		require.Equal(t, service.RideChargeCharged, rideNow(t, b.Env, uid, ride.ID).ChargeStatus)
		require.Equal(t, 1, b.receipts(t, ride.ID))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE resource_id = $1 AND action = 'ride.charged'`, ride.ID))
	})

	t.Run("ALostWebhookIsRecoveredByTheEventsPass", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid, _, _, ride := bookWaiting(t, b, "lost@example.com", fakestripe.TokenAuthenticationRequired)
		// The inbox has the booking's events; those of the rider's
		// authentication are lost.
		deliverStripe(t, b, "payment_intent.created")
		require.NoError(t, b.Stripe.Authenticate(*ride.PaymentID, true))

		rep, err := b.Service.EventsPass(b.Ctx)
		require.NoError(t, err)
		require.Positive(t, rep.Recorded)
		var ids []string
		rows, err := b.Pool.Query(b.Ctx, `SELECT event_id FROM inbox_events WHERE applied_at IS NULL ORDER BY event_id`)
		require.NoError(t, err)
		for rows.Next() {
			var id string
			require.NoError(t, rows.Scan(&id))
			ids = append(ids, id)
		}
		require.NoError(t, rows.Err())
		for _, id := range ids {
			_, err := b.Service.InboxApply(b.Ctx, service.InboxSourceStripe, id)
			require.NoError(t, err)
		}
		require.Equal(t, service.RideChargeCharged, rideNow(t, b.Env, uid, ride.ID).ChargeStatus)
		require.Equal(t, 1, b.receipts(t, ride.ID))
	})

	t.Run("TheRidersReturnAppliesStripesAnswer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid, _, _, ride := bookWaiting(t, b, "return@example.com", fakestripe.TokenAuthenticationRequired)
		pkey := rideChargeKey(t, b, ride.ID)

		// Back before authenticating (the rider closed the bank's page):
		// nothing moves.
		id, err := b.Service.RideActionReturn(b.Ctx, pkey, "")
		require.NoError(t, err)
		require.Equal(t, ride.ID, id)
		require.Equal(t, service.RideChargeRequiresAction, rideNow(t, b.Env, uid, ride.ID).ChargeStatus)

		require.NoError(t, b.Stripe.Authenticate(*ride.PaymentID, true))
		// Parameters a browser could forge are not read: Stripe is.
		id, err = b.Service.RideActionReturn(b.Ctx, pkey, "forged")
		require.NoError(t, err)
		require.Equal(t, ride.ID, id)
		require.Equal(t, service.RideChargeCharged, rideNow(t, b.Env, uid, ride.ID).ChargeStatus)
		require.Equal(t, 1, b.receipts(t, ride.ID))

		_, err = b.Service.RideActionReturn(b.Ctx, "ar-ch-unknown", "")
		testkit.RequireCode(t, err, service.CodeNotFound)
		_, err = b.Service.RideActionReturn(b.Ctx, "", "")
		require.Equal(t, "query.key", testkit.RequireCode(t, err, service.CodeInvalid).Field)
	})

	t.Run("ARefundOfAWaitingOrExpiredRideIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid, _, _, ride := bookWaiting(t, b, "norefund@example.com", fakestripe.TokenAuthenticationRequired)
		_, err := b.Service.RideRefundCreate(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		testkit.RequireCode(t, err, service.CodeNotRefundable)
		_, err = b.Service.RideActionExpire(b.Ctx, ride.ID)
		require.NoError(t, err)
		_, err = b.Service.RideRefundCreate(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		testkit.RequireCode(t, err, service.CodeNotRefundable)
		require.Empty(t, b.Stripe.Refunds())
	})
}

// rideChargeKey is the processor key the ride's payment was made under:
// what the return link carries.
func rideChargeKey(t *testing.T, b *testBundle, rideID int64) string {
	t.Helper()
	var k string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT charge_key FROM rides WHERE id = $1`, rideID).Scan(&k))
	return k
}
