package openapi_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
)

// listPage is the body of GET /rides.
type listPage struct {
	Data    []service.Ride `json:"data"`
	HasMore bool           `json:"has_more"`
}

func (b *testBundle) list(t *testing.T, apiKey string, query url.Values) listPage {
	t.Helper()
	r := b.do(t, http.MethodGet, "/rides?"+query.Encode(), rider(apiKey, ""), "")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	var p listPage
	require.NoError(t, json.Unmarshal(r.Body, &p))
	require.NotNil(t, p.Data, "data is an array, never null")
	return p
}

func TestRideListHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	apiKey := b.newRider(t, "lister@example.com")
	otherKey := b.newRider(t, "other-lister@example.com")
	require.JSONEq(t, `{"data":[],"has_more":false}`, string(b.do(t, http.MethodGet, "/rides", rider(apiKey, ""), "").Body))

	var ids []int64
	for i := range 3 {
		r := b.do(t, http.MethodPost, "/rides", rider(apiKey, "list-http-key-000000000"+itoa(int64(i))), rideBody)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		ids = append([]int64{int64(r.JSON(t)["id"].(float64))}, ids...)
	}
	theirs := b.do(t, http.MethodPost, "/rides", rider(otherKey, "list-http-key-other0001"), rideBody)
	require.Equal(t, http.StatusCreated, theirs.Status)
	theirID := itoa(int64(theirs.JSON(t)["id"].(float64)))

	first := b.list(t, apiKey, url.Values{"limit": {"2"}})
	require.True(t, first.HasMore)
	require.Equal(t, []int64{ids[0], ids[1]}, []int64{first.Data[0].ID, first.Data[1].ID})
	require.Equal(t, service.RideChargeCharged, first.Data[0].ChargeStatus)
	next := b.list(t, apiKey, url.Values{"limit": {"2"}, "starting_after": {itoa(ids[1])}})
	require.False(t, next.HasMore)
	require.Len(t, next.Data, 1)
	require.Equal(t, ids[2], next.Data[0].ID)
	back := b.list(t, apiKey, url.Values{"limit": {"1"}, "ending_before": {itoa(ids[1])}})
	require.False(t, back.HasMore)
	require.Equal(t, ids[0], back.Data[0].ID)

	// Filters, in Stripe's bracketed form.
	require.Empty(t, b.list(t, apiKey, url.Values{"charge_status": {"declined"}}).Data)
	require.Len(t, b.list(t, apiKey, url.Values{"charge_status": {"charged"}, "created[gte]": {first.Data[1].CreatedAt.Format(time.RFC3339Nano)}}).Data, 2)
	require.Len(t, b.list(t, apiKey, url.Values{"created[lt]": {first.Data[1].CreatedAt.Format(time.RFC3339Nano)}}).Data, 1)

	// Bad parameters: 422 naming each; another rider's cursor: 404.
	for q, loc := range map[string]string{
		"limit=0":                   "query.limit",
		"limit=101":                 "query.limit",
		"limit=ten":                 "query.limit",
		"starting_after=0":          "query.starting_after",
		"charge_status=refunded":    "query.charge_status",
		"created%5Bgte%5D=tomorrow": "query.created[gte]",
		"starting_after=" + itoa(ids[0]) + "&ending_before=" + itoa(ids[1]): "query.ending_before",
	} {
		require.Equal(t, []string{loc}, b.do(t, http.MethodGet, "/rides?"+q, rider(apiKey, ""), "").Problem(t, http.StatusUnprocessableEntity), q)
	}
	require.Equal(t, []string{"query.starting_after"}, b.do(t, http.MethodGet, "/rides?starting_after="+theirID, rider(apiKey, ""), "").Problem(t, http.StatusNotFound))
	require.Equal(t, []string{"query.ending_before"}, b.do(t, http.MethodGet, "/rides?ending_before="+theirID, rider(apiKey, ""), "").Problem(t, http.StatusNotFound))
	b.do(t, http.MethodGet, "/rides", nil, "").Problem(t, http.StatusUnauthorized)
	theirList := b.list(t, otherKey, nil)
	require.Len(t, theirList.Data, 1)
	require.Equal(t, theirID, itoa(theirList.Data[0].ID))
}

// Over HTTP, a declined booking's 402 names its ride, replayed byte for
// byte, and the ride reads declined with the reason shown.
func TestRideDeclinedHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, http.MethodPut, "/users/declined@example.com", admin(), `{"payment_source":"tok_chargeCustomerFail"}`)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	apiKey := r.JSON(t)["api_key"].(string)
	key := testkit.NewKey()

	declined := b.do(t, http.MethodPost, "/rides", rider(apiKey, key), rideBody)
	declined.Problem(t, http.StatusPaymentRequired)
	p := declined.JSON(t)
	require.Equal(t, service.ProblemCardDeclined, p["type"])
	rideID := int64(p["ride_id"].(float64))
	require.NotZero(t, rideID)
	replay := b.do(t, http.MethodPost, "/rides", rider(apiKey, key), rideBody)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, string(declined.Body), string(replay.Body))

	got := b.do(t, http.MethodGet, "/rides/"+itoa(rideID), rider(apiKey, ""), "")
	require.Equal(t, http.StatusOK, got.Status, string(got.Body))
	ride := got.JSON(t)
	require.Equal(t, "declined", ride["charge_status"])
	require.Equal(t, "card_declined", ride["decline_code"])
	require.Equal(t, "the card was declined: "+ride["decline_message"].(string), p["detail"])
	require.Nil(t, ride["stripe_charge_id"])
	require.Equal(t, rideID, b.list(t, apiKey, url.Values{"charge_status": {"declined"}}).Data[0].ID)
}
