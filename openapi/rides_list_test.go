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
		"starting_after=":           "query.starting_after",
		"charge_status=":            "query.charge_status",
		"limit=10&created%5Blt%5D=": "query.created[lt]",
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

// GET /rides takes Stripe's four created[…] bounds, alone or together as
// one range that cursors page within, and refuses any other query
// parameter and any parameter given twice, naming it.
func TestRideListQueryHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	apiKey := b.newRider(t, "query-lister@example.com")
	var uid int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT id FROM users WHERE email = 'query-lister@example.com'`).Scan(&uid))

	// Two rides at each of six whole seconds T0 … T5.
	base := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	b.Exec(t, `INSERT INTO rides (id, created_at, origin_lat, origin_lon, target_lat, target_lon, amount_cents, currency, user_id, charge_status, stripe_charge_id, payment_source)
		SELECT 1 + floor(random() * 9007199254740990)::bigint, $2::timestamptz + ((i - 1) / 2) * interval '1 second',
		       1, 2, 3, 4, 2000, 'usd', $1::bigint, 'charged', 'ch_query_' || i, 'tok_visa'
		FROM generate_series(1, 12) AS i`, uid, base)
	all := b.list(t, apiKey, url.Values{"limit": {"100"}}).Data
	require.Len(t, all, 12)
	// rides(from, to) is the ids of the rides created at T[from] … T[to],
	// in list order (newest first).
	rides := func(from, to int) []int64 {
		ids := []int64{}
		for _, r := range all {
			if !r.CreatedAt.Before(at(from)) && !r.CreatedAt.After(at(to)) {
				ids = append(ids, r.ID)
			}
		}
		return ids
	}
	ts := func(i int, d time.Duration) string { return at(i).Add(d).Format(time.RFC3339Nano) }
	const half = 500 * time.Nanosecond

	for _, c := range []struct {
		name  string
		query url.Values
		want  []int64
	}{
		{"gt", url.Values{"created[gt]": {ts(2, 0)}}, rides(3, 5)},
		{"gte", url.Values{"created[gte]": {ts(2, 0)}}, rides(2, 5)},
		{"lt", url.Values{"created[lt]": {ts(2, 0)}}, rides(0, 1)},
		{"lte", url.Values{"created[lte]": {ts(2, 0)}}, rides(0, 2)},
		{"gt and lte", url.Values{"created[gt]": {ts(1, 0)}, "created[lte]": {ts(4, 0)}}, rides(2, 4)},
		{"gte and lt", url.Values{"created[gte]": {ts(1, 0)}, "created[lt]": {ts(4, 0)}}, rides(1, 3)},
		{"gte and lte of one time", url.Values{"created[gte]": {ts(3, 0)}, "created[lte]": {ts(3, 0)}}, rides(3, 3)},
		{"all four", url.Values{"created[gt]": {ts(0, 0)}, "created[gte]": {ts(2, 0)}, "created[lt]": {ts(5, 0)}, "created[lte]": {ts(4, 0)}}, rides(2, 4)},
		{"gt is the stronger of gt and gte", url.Values{"created[gt]": {ts(2, 0)}, "created[gte]": {ts(2, 0)}}, rides(3, 5)},
		{"gt and lt of one time: empty", url.Values{"created[gt]": {ts(3, 0)}, "created[lt]": {ts(3, 0)}}, []int64{}},
		{"inverted range: empty", url.Values{"created[gte]": {ts(4, 0)}, "created[lte]": {ts(2, 0)}}, []int64{}},
		{"with charge_status", url.Values{"created[gte]": {ts(4, 0)}, "charge_status": {"charged"}}, rides(4, 5)},
		{"another offset", url.Values{"created[gte]": {at(2).In(time.FixedZone("", -7*3600)).Format(time.RFC3339)}}, rides(2, 5)},
		// Times finer than the microseconds a creation time is stored to.
		{"gte half a microsecond after", url.Values{"created[gte]": {ts(2, half)}}, rides(3, 5)},
		{"gt half a microsecond before", url.Values{"created[gt]": {ts(2, -half)}}, rides(2, 5)},
		{"lt half a microsecond after", url.Values{"created[lt]": {ts(2, half)}}, rides(0, 2)},
		{"lte half a microsecond before", url.Values{"created[lte]": {ts(2, -half)}}, rides(0, 1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.query.Set("limit", "100")
			require.Equal(t, c.want, idsOfPage(b.list(t, apiKey, c.query)))
		})
	}

	// Unencoded brackets are the same parameter.
	r := b.do(t, http.MethodGet, "/rides?created[gt]="+ts(2, 0)+"&limit=100", rider(apiKey, ""), "")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var page listPage
	require.NoError(t, json.Unmarshal(r.Body, &page))
	require.Equal(t, rides(3, 5), idsOfPage(page))

	// Cursors page within a range, forwards and back.
	t.Run("PagesWithinARange", func(t *testing.T) {
		t.Parallel()
		want := rides(1, 4)
		q := url.Values{"limit": {"3"}, "created[gt]": {ts(0, 0)}, "created[lte]": {ts(4, 0)}}
		var got []int64
		for pages := 0; ; pages++ {
			require.Less(t, pages, 10)
			p := b.list(t, apiKey, q)
			got = append(got, idsOfPage(p)...)
			if !p.HasMore {
				break
			}
			q.Set("starting_after", itoa(got[len(got)-1]))
		}
		require.Equal(t, want, got)

		q.Del("starting_after")
		q.Set("ending_before", itoa(want[len(want)-1]))
		var back []int64
		for pages := 0; ; pages++ {
			require.Less(t, pages, 10)
			p := b.list(t, apiKey, q)
			back = append(idsOfPage(p), back...)
			if !p.HasMore {
				break
			}
			q.Set("ending_before", itoa(p.Data[0].ID))
		}
		require.Equal(t, want[:len(want)-1], back, "every ride of the range newer than its oldest")
	})

	// Refusals: 422, each parameter at fault named once, in the query's
	// order, with what is wrong with it.
	gt := url.QueryEscape("created[gt]")
	for _, c := range []struct {
		query string
		want  map[string]string // location: message; nil: only the locations are checked
		locs  []string
	}{
		{query: "limit=1&limit=2", want: map[string]string{"query.limit": "must be given at most once"}},
		{query: "limit=1&limit=1&limit=1", want: map[string]string{"query.limit": "must be given at most once"}},
		{query: gt + "=" + ts(1, 0) + "&" + gt + "=" + ts(2, 0), want: map[string]string{"query.created[gt]": "must be given at most once"}},
		{query: "starting_after=" + itoa(all[0].ID) + "&starting_after=" + itoa(all[1].ID), want: map[string]string{"query.starting_after": "must be given at most once"}},
		{query: "limit=&limit=5", want: map[string]string{"query.limit": "must not be empty: give a value, or leave the parameter out; must be given at most once"}},
		{query: "foo=1", want: map[string]string{"query.foo": "unknown query parameter"}},
		{query: "foo=", want: map[string]string{"query.foo": "unknown query parameter"}},
		{query: "foo=1&foo=2", want: map[string]string{"query.foo": "unknown query parameter"}},
		{query: "Limit=5", want: map[string]string{"query.Limit": "unknown query parameter"}},
		{query: "created=" + ts(1, 0), want: map[string]string{"query.created": "unknown query parameter"}},
		{query: url.QueryEscape("created[after]") + "=" + ts(1, 0), want: map[string]string{"query.created[after]": "unknown query parameter"}},
		{query: "created[eq]=" + ts(1, 0), want: map[string]string{"query.created[eq]": "unknown query parameter"}},
		{query: "foo=1&limit=1&limit=2&bar=&charge_status=charged", locs: []string{"query.foo", "query.limit", "query.bar"}},
		{query: "limit=%zz", locs: []string{"query.limit"}},
		{query: "limit=5;foo=1", locs: []string{"query.limit"}},
		{query: "limit=%zz&limit=5", locs: []string{"query.limit"}},
		{query: gt + "=tomorrow", locs: []string{"query.created[gt]"}},
		{query: url.QueryEscape("created[gte]") + "=2026-11-22", locs: []string{"query.created[gte]"}},
		{query: url.QueryEscape("created[lt]") + "=1764547200", want: map[string]string{"query.created[lt]": "invalid date/time for format " + time.RFC3339Nano}},
		{query: url.QueryEscape("created[lte]") + "=2026-11-22T00:00:00", locs: []string{"query.created[lte]"}},
		{query: gt + "=2026-11-22T00:00:00Z&" + url.QueryEscape("created[lte]") + "=2026-13-01T00:00:00Z", locs: []string{"query.created[lte]"}},
	} {
		t.Run(c.query, func(t *testing.T) {
			t.Parallel()
			r := b.do(t, http.MethodGet, "/rides?"+c.query, rider(apiKey, ""), "")
			locs := r.Problem(t, http.StatusUnprocessableEntity)
			if c.want == nil {
				require.Equal(t, c.locs, locs, string(r.Body))
				return
			}
			got := map[string]string{}
			for _, e := range r.JSON(t)["errors"].([]any) {
				e := e.(map[string]any)
				got[e["location"].(string)] = e["message"].(string)
			}
			require.Equal(t, c.want, got, string(r.Body))
		})
	}

	// Authentication comes first: a client that may not list learns
	// nothing of the parameters.
	b.do(t, http.MethodGet, "/rides?foo=1&limit=1&limit=2", nil, "").Problem(t, http.StatusUnauthorized)
}

func idsOfPage(p listPage) []int64 {
	ids := []int64{}
	for _, r := range p.Data {
		ids = append(ids, r.ID)
	}
	return ids
}
