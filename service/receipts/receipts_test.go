package receipts_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/receipts"
)

func TestRideReceiptSend(t *testing.T) {
	t.Parallel()

	t.Run("SendsOnceWithADeterministicMessageID", func(t *testing.T) {
		t.Parallel()
		b := testkit.New(t)
		uid := b.Rider(t, "receipt@example.com", "tok_visa").ID
		resp, err := b.Service.RideCreate(b.Ctx, uid, testkit.NewKey(), testkit.SomeRide, nil)
		require.NoError(t, err)
		ride := testkit.DecodeRide(t, resp.Body)

		for i := range 3 {
			sent, err := b.Receipts.RideSend(b.Ctx, ride.ID, nil)
			require.NoError(t, err)
			require.Equal(t, i == 0, sent, "only the first send sends")
		}
		msgs := b.Sink.Messages()
		require.Len(t, msgs, 1)
		wantID := fmt.Sprintf("receipt.ride-%d@atomicrides.localhost", ride.ID)
		require.Equal(t, wantID, msgs[0].MessageID)
		require.Equal(t, receipts.MessageID(receipts.KindRide, ride.ID, service.DefaultMailFrom), wantID)
		require.Equal(t, []string{"receipt@example.com"}, msgs[0].To)
		require.Equal(t, "receipts@atomicrides.localhost", msgs[0].From)
		require.Equal(t, fmt.Sprintf("Your receipt for ride %d", ride.ID), msgs[0].Subject)
		require.Contains(t, string(msgs[0].Data), *ride.StripeChargeID)
		require.Contains(t, string(msgs[0].Data), "20.00 USD")
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM receipts WHERE ride_id = $1 AND kind = 'ride' AND message_id = $2`, ride.ID, wantID))
	})

	t.Run("RefusedByTheServerIsNotRecordedAndSendsOnRetry", func(t *testing.T) {
		t.Parallel()
		b := testkit.New(t)
		uid := b.Rider(t, "refused@example.com", "tok_visa").ID
		resp, err := b.Service.RideCreate(b.Ctx, uid, testkit.NewKey(), testkit.SomeRide, nil)
		require.NoError(t, err)
		ride := testkit.DecodeRide(t, resp.Body)

		b.Sink.Refuse(1, 451)
		_, err = b.Receipts.RideSend(b.Ctx, ride.ID, nil)
		require.Error(t, err)
		require.True(t, strings.Contains(err.Error(), "451"), "err: %v", err)
		require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM receipts`))

		sent, err := b.Receipts.RideSend(b.Ctx, ride.ID, nil)
		require.NoError(t, err)
		require.True(t, sent)
		require.Equal(t, 1, b.Sink.Count())
	})

	t.Run("DeclinedRideHasNoReceipt", func(t *testing.T) {
		t.Parallel()
		b := testkit.New(t)
		uid := b.Rider(t, "noreceipt@example.com", "tok_chargeCustomerFail").ID
		resp, err := b.Service.RideCreate(b.Ctx, uid, testkit.NewKey(), testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusPaymentRequired, resp.Status)
		var rideID int64
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT id FROM rides WHERE user_id = $1`, uid).Scan(&rideID))

		_, err = b.Receipts.RideSend(b.Ctx, rideID, nil)
		testkit.RequireCode(t, err, service.CodeInvalid)
		_, err = b.Receipts.RideSend(b.Ctx, 1<<53, nil) // above every id drawn
		testkit.RequireCode(t, err, service.CodeNotFound)
		require.Equal(t, 0, b.Sink.Count())
	})
}
