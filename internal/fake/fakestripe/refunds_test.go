package fakestripe_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/payments"
)

// refundParams is the full refund of a ride's charge under the ride's
// entity-level key.
func refundParams(chargeID string, rideID int64) service.RefundCreateParams {
	key := "ride-" + strconv.FormatInt(rideID, 10) + "-refund"
	return service.RefundCreateParams{IdempotencyKey: key, ChargeID: chargeID, Tag: testTag(key)}
}

func TestRefundListFollowsPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	c := e.client(payments.Config{})
	ctx := context.Background()
	cus := e.customer(t, 1, "tok_visa")
	ch, err := c.ChargeCreate(ctx, chargeParams("ride-1-charge", cus))
	require.NoError(t, err)
	other, err := c.ChargeCreate(ctx, chargeParams("ride-2-charge", cus))
	require.NoError(t, err)

	none, err := c.RefundList(ctx, ch.ID)
	require.NoError(t, err)
	require.Empty(t, none)

	// More partial refunds than one page of the adapter's list holds.
	const n = 105
	for range n {
		res, body := e.post(t, "/v1/refunds", testKey, "", url.Values{"charge": {ch.ID}, "amount": {"1"}})
		require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	}
	_, err = c.RefundCreate(ctx, refundParams(other.ID, 2))
	require.NoError(t, err)

	listed, err := c.RefundList(ctx, ch.ID)
	require.NoError(t, err)
	recorded := e.fake.RefundsForCharge(ch.ID)
	require.Len(t, recorded, n)
	require.Len(t, listed, n)
	for i, r := range listed {
		require.Equal(t, recorded[n-1-i].ID, r.ID, "newest first")
		require.Equal(t, ch.ID, r.ChargeID)
		require.EqualValues(t, 1, r.AmountCents)
		require.Zero(t, r.Tag, "no metadata")
	}
	require.Equal(t, 1+2, e.fake.RequestCount(http.MethodGet, "/v1/refunds"), "the empty list, then two pages")

	mine, err := c.RefundList(ctx, other.ID)
	require.NoError(t, err)
	require.Len(t, mine, 1)
	require.Equal(t, testTag("ride-2-refund"), mine[0].Tag)
	require.True(t, mine[0].Accepted())
}

func TestRefundListWire(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	cus := customerID(t, e, "tok_visa")
	_, body := e.post(t, "/v1/charges", testKey, "", chargeForm(cus, "900"))
	var ch struct{ ID string }
	require.NoError(t, json.Unmarshal(body, &ch))
	var ids []string
	for range 3 {
		_, body = e.post(t, "/v1/refunds", testKey, "", url.Values{"charge": {ch.ID}, "amount": {"100"}})
		var re struct{ ID string }
		require.NoError(t, json.Unmarshal(body, &re))
		ids = append(ids, re.ID)
	}

	type list struct {
		Object  string
		HasMore bool `json:"has_more"`
		Data    []struct{ ID, Object string }
	}
	res, body := e.get(t, "/v1/refunds?charge="+ch.ID+"&limit=2")
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	var page list
	require.NoError(t, json.Unmarshal(body, &page))
	require.Equal(t, "list", page.Object)
	require.True(t, page.HasMore)
	require.Len(t, page.Data, 2)
	require.Equal(t, []string{ids[2], ids[1]}, []string{page.Data[0].ID, page.Data[1].ID})
	require.Equal(t, "refund", page.Data[0].Object)

	res, body = e.get(t, "/v1/refunds?charge="+ch.ID+"&limit=2&starting_after="+ids[1])
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	page = list{}
	require.NoError(t, json.Unmarshal(body, &page))
	require.False(t, page.HasMore)
	require.Len(t, page.Data, 1)
	require.Equal(t, ids[0], page.Data[0].ID)

	res, _ = e.get(t, "/v1/refunds?charge="+ch.ID+"&starting_after=re_missing")
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	res, _ = e.get(t, "/v1/refunds?limit=0")
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	res, _ = e.get(t, "/v1/refunds?bogus=1")
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
}

func TestRefundAnswerLostThenRetryReplays(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	ctx := context.Background()
	ch, err := e.client(payments.Config{}).ChargeCreate(ctx, chargeParams("ride-1-charge", e.customer(t, 1, "tok_visa")))
	require.NoError(t, err)
	c := e.client(payments.Config{
		MaxNetworkRetries: payments.NoRetries,
		HTTPClient:        &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
	})
	e.fake.Inject(fakestripe.Fault{Op: fakestripe.OpRefundCreate, Kind: fakestripe.FaultDropAfter, Times: 1})

	_, err = c.RefundCreate(ctx, refundParams(ch.ID, 1))
	paymentError(t, err, service.PaymentClassUnavailable)
	made := e.fake.Refunds()
	require.Len(t, made, 1, "the refund was made although its answer was lost")

	ref, err := c.RefundCreate(ctx, refundParams(ch.ID, 1))
	require.NoError(t, err)
	require.Equal(t, made[0].ID, ref.ID)
	require.Len(t, e.fake.Refunds(), 1)
}

func TestRefundStatusFaultMakesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	ctx := context.Background()
	ch, err := e.client(payments.Config{}).ChargeCreate(ctx, chargeParams("ride-1-charge", e.customer(t, 1, "tok_visa")))
	require.NoError(t, err)
	c := e.client(payments.Config{MaxNetworkRetries: payments.NoRetries})
	e.fake.Inject(fakestripe.Fault{Op: fakestripe.OpRefundCreate, Kind: fakestripe.FaultStatus, Status: http.StatusServiceUnavailable, Times: 1})
	e.fake.Inject(fakestripe.Fault{Op: fakestripe.OpRefundList, Kind: fakestripe.FaultStatus, Status: http.StatusBadGateway, Times: 1})

	_, err = c.RefundCreate(ctx, refundParams(ch.ID, 1))
	require.Equal(t, http.StatusServiceUnavailable, paymentError(t, err, service.PaymentClassUnavailable).HTTPStatus)
	_, err = c.RefundList(ctx, ch.ID)
	require.Equal(t, http.StatusBadGateway, paymentError(t, err, service.PaymentClassUnavailable).HTTPStatus)
	require.Empty(t, e.fake.Refunds())

	ref, err := c.RefundCreate(ctx, refundParams(ch.ID, 1))
	require.NoError(t, err)
	require.Equal(t, e.fake.Refunds()[0].ID, ref.ID)
}

func TestRefundKeyInUseWhileFirstIsHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	ctx := context.Background()
	ch, err := e.client(payments.Config{}).ChargeCreate(ctx, chargeParams("ride-1-charge", e.customer(t, 1, "tok_visa")))
	require.NoError(t, err)

	gate := make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	held := make(chan struct{}, 1)
	e.fake.Inject(fakestripe.Fault{Op: fakestripe.OpRefundCreate, Kind: fakestripe.FaultLatency, Gate: gate, Fired: held, Times: 1})

	first := make(chan error, 1)
	go func() {
		_, err := e.client(payments.Config{}).RefundCreate(ctx, refundParams(ch.ID, 1))
		first <- err
	}()
	<-held

	_, err = e.client(payments.Config{MaxNetworkRetries: payments.NoRetries}).RefundCreate(ctx, refundParams(ch.ID, 1))
	pe := paymentError(t, err, service.PaymentClassUnavailable)
	require.Equal(t, http.StatusConflict, pe.HTTPStatus)
	require.Equal(t, "idempotency_key_in_use", pe.Code)

	release()
	require.NoError(t, <-first)
	require.Len(t, e.fake.Refunds(), 1)
}
