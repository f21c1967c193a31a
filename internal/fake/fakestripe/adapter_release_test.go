package fakestripe_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/payments"
)

// The adapter reads Stripe's record of a released hold as a release, never
// as an accepted refund: listed by charge and by date, and in the
// charge.refunded event, which reads as the hold's release.
func TestAdapterReadsAReleasedHoldAsNoRefund(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	c := e.client(payments.Config{})
	ctx := context.Background()
	cus := e.customer(t, 1, "tok_visa")
	events, err := payments.NewEvents([]string{"whsec_adapter"}, 0)
	require.NoError(t, err)
	hold := func(key string) *service.Charge {
		p := chargeParams(key, cus)
		p.API, p.ManualCapture = service.PaymentAPIIntents, true
		ch, err := c.ChargeCreate(ctx, p)
		require.NoError(t, err)
		require.Equal(t, service.ChargeAuthorized, ch.Status)
		return ch
	}
	releaseListed := func(chargeID string) *service.Refund {
		t.Helper()
		listed, err := c.RefundList(ctx, chargeID)
		require.NoError(t, err)
		require.Len(t, listed, 1)
		r := listed[0]
		require.True(t, r.Release, "a released hold is no refund")
		require.False(t, r.Accepted())
		since, err := c.RefundListSince(ctx, r.Created)
		require.NoError(t, err)
		for _, s := range since {
			if s.ID == r.ID {
				require.True(t, s.Release)
			}
		}
		return r
	}
	lastRefundedEvent := func() *service.InboundEvent {
		t.Helper()
		evs := e.fake.Events()
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].Type == "charge.refunded" {
				ev, err := events.Parse(evs[i].Payload)
				require.NoError(t, err)
				return ev
			}
		}
		t.Fatal("no charge.refunded event")
		return nil
	}

	cancelled := hold("ride-1-hold")
	_, err = c.PaymentCancel(ctx, service.PaymentCancelParams{IdempotencyKey: "ride-1-release", PaymentID: cancelled.PaymentID, Hold: true})
	require.NoError(t, err)
	releaseListed(cancelled.ID)
	ev := lastRefundedEvent()
	require.Equal(t, service.InboundPayment, ev.Kind, "read as the hold released, like charge.expired")
	require.Equal(t, service.ChargeCanceled, ev.Charge.Status)
	require.Equal(t, cancelled.PaymentID, ev.Charge.PaymentID)
	require.Equal(t, cancelled.ID, ev.ChargeID)

	lapsed := hold("ride-2-hold")
	require.NoError(t, e.fake.ExpireHold(lapsed.PaymentID))
	releaseListed(lapsed.ID)
	require.Equal(t, service.InboundPayment, lastRefundedEvent().Kind)

	// A partial capture's rest is no refund either; a refund of what was
	// captured is one.
	partial := hold("ride-3-hold")
	_, err = c.PaymentCapture(ctx, service.PaymentCaptureParams{IdempotencyKey: "ride-3-capture", PaymentID: partial.PaymentID, AmountCents: 1000})
	require.NoError(t, err)
	listed, err := c.RefundList(ctx, partial.ID)
	require.NoError(t, err)
	require.Empty(t, listed)
	ref, err := c.RefundCreate(ctx, service.RefundCreateParams{IdempotencyKey: "ride-3-refund", ChargeID: partial.ID,
		PaymentID: partial.PaymentID, Tag: testTag("ride-3-refund")})
	require.NoError(t, err)
	require.EqualValues(t, 1000, ref.AmountCents)
	listed, err = c.RefundList(ctx, partial.ID)
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.False(t, listed[0].Release)
	require.True(t, listed[0].Accepted())
	ev = lastRefundedEvent()
	require.Equal(t, service.InboundRefund, ev.Kind, "a captured charge's refund is a refund")

	// An expanded charge is what tells them apart: the wire says so.
	res, body := e.get(t, "/v1/refunds?charge="+cancelled.ID+"&expand[]=data.charge")
	require.Equal(t, 200, res.StatusCode, string(body))
	var page struct {
		Data []struct {
			Charge struct {
				ID       string `json:"id"`
				Captured bool   `json:"captured"`
			} `json:"charge"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &page))
	require.Len(t, page.Data, 1)
	require.Equal(t, cancelled.ID, page.Data[0].Charge.ID)
	require.False(t, page.Data[0].Charge.Captured)
}
