package openapi_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/limits"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/openapi"
)

// setupLimited is setup with the admission control lim, on the world's
// clock when lim has no limiter of its own.
func setupLimited(t *testing.T, lim openapi.Limits) *testBundle {
	t.Helper()
	env := testkit.New(t)
	if lim.Limiter == nil {
		lim.Limiter = limits.NewLocalAt(env.Clock.Now)
	}
	riverUI := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "river ui") })
	url := testkit.ServeAPI(t, openapi.NewHandler(openapi.Config{
		Service: env.Service, Accounts: env.Accounts, AdminToken: adminToken, RiverUI: riverUI, Logger: slog.New(slog.DiscardHandler),
		Metrics: prometheus.NewRegistry(), Limits: lim,
	}))
	return &testBundle{Env: env, url: url}
}

func (b *testBundle) keyRows(t *testing.T, key string) int {
	t.Helper()
	return b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1`, key)
}

// TestRiderWriteLimit: a rider over its writes budget is answered 429 with
// Retry-After and the RateLimit fields before its key is touched; the same
// key after the wait is charged once; a replay is counted; reads have their
// own budget; other riders are unaffected.
func TestRiderWriteLimit(t *testing.T) {
	t.Parallel()
	// One write every 30 minutes: the test moves the limiter's clock, and
	// its own run time refills nothing measurable.
	writes := limits.Policy{Name: "writes", Quota: 2, Window: time.Hour}
	b := setupLimited(t, openapi.Limits{Writes: writes, Reads: limits.Policy{Name: "reads", Quota: 10, Window: 10 * time.Second}})
	alice, bob := b.newRider(t, "alice@example.com"), b.newRider(t, "bob@example.com")

	k1, k2, k3 := testkit.NewKey(), testkit.NewKey(), testkit.NewKey()
	r1 := b.do(t, http.MethodPost, "/rides", rider(alice, k1), rideBody)
	require.Equal(t, http.StatusCreated, r1.Status, string(r1.Body))
	require.Equal(t, `"writes";q=2;w=3600`, r1.Header.Get("RateLimit-Policy"))
	require.Equal(t, `"writes";r=1;t=1800`, r1.Header.Get("RateLimit"))
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/rides", rider(alice, k2), rideBody).Status)

	limited := b.do(t, http.MethodPost, "/rides", rider(alice, k3), rideBody)
	limited.Problem(t, http.StatusTooManyRequests)
	require.Equal(t, openapi.ProblemRateLimited, limited.JSON(t)["type"])
	wait, err := strconv.Atoi(limited.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.InDelta(t, 1795, wait, 5, "the next write is due 30 minutes after the first")
	require.Equal(t, `"writes";q=2;w=3600`, limited.Header.Get("RateLimit-Policy"))
	require.Equal(t, `"writes";r=0;t=3600`, limited.Header.Get("RateLimit"))
	require.Zero(t, b.keyRows(t, k3), "a limited request leaves its key unused")
	require.Len(t, b.Stripe.Charges(), 2)

	// Reads and other riders have budgets of their own.
	ride := testkit.DecodeRide(t, r1.Body)
	got := b.do(t, http.MethodGet, "/rides/"+itoa(ride.ID), rider(alice, ""), "")
	require.Equal(t, http.StatusOK, got.Status, string(got.Body))
	require.Equal(t, `"reads";q=10;w=10`, got.Header.Get("RateLimit-Policy"))
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/rides", rider(bob, testkit.NewKey()), rideBody).Status)

	// After Retry-After, the same key runs as if first sent: charged once.
	b.Clock.Advance(30 * time.Minute)
	again := b.do(t, http.MethodPost, "/rides", rider(alice, k3), rideBody)
	require.Equal(t, http.StatusCreated, again.Status, string(again.Body))
	require.Empty(t, again.Header.Get("Idempotent-Replayed"))
	rideID := testkit.DecodeRide(t, again.Body).ID
	require.Len(t, b.ChargesOfRide(t, rideID), 1)

	// A replay is cheap but counted: the budget is spent again.
	b.do(t, http.MethodPost, "/rides", rider(alice, k3), rideBody).Problem(t, http.StatusTooManyRequests)
	b.Clock.Advance(30 * time.Minute)
	replay := b.do(t, http.MethodPost, "/rides", rider(alice, k3), rideBody)
	require.Equal(t, http.StatusCreated, replay.Status, string(replay.Body))
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, again.Body, replay.Body)
	require.Len(t, b.ChargesOfRide(t, rideID), 1)
	require.Len(t, b.Stripe.Charges(), 4, "alice's three bookings and bob's, each charged once")
}

// TestRiderLimitConcurrent: riders flooding at once get exactly their
// budget through; every refused key stays unused and every admitted one is
// charged once.
func TestRiderLimitConcurrent(t *testing.T) {
	t.Parallel()
	b := setupLimited(t, openapi.Limits{Writes: limits.Policy{Name: "writes", Quota: 4, Window: time.Hour}})
	alice := b.newRider(t, "alice@example.com")
	// The first booking, alone, makes the rider's Stripe customer.
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/rides", rider(alice, testkit.NewKey()), rideBody).Status)
	const n = 12
	keys := make([]string, n)
	statuses := make(chan int, n)
	for i := range keys {
		keys[i] = testkit.NewKey()
	}
	done := make(chan struct{})
	for _, k := range keys {
		go func() {
			defer func() { done <- struct{}{} }()
			r := b.do(t, http.MethodPost, "/rides", rider(alice, k), rideBody)
			if r.Status != http.StatusCreated && r.Status != http.StatusTooManyRequests {
				t.Errorf("%d %s", r.Status, r.Body)
			}
			statuses <- r.Status
		}()
	}
	for range keys {
		<-done
	}
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	require.Equal(t, map[int]int{http.StatusCreated: 3, http.StatusTooManyRequests: n - 3}, count)
	require.Equal(t, 4, b.Count(t, `SELECT count(*) FROM idempotency_keys`))
	require.Len(t, b.Stripe.Charges(), 4)
}

// fromAddr is an HTTP client whose connections come from the loopback
// address local (Linux answers all of 127.0.0.0/8).
func fromAddr(local string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
	}, Timeout: 10 * time.Second}
}

// send sends a request through client and reads the answer whole.
func send(t *testing.T, client *http.Client, method, url string, header http.Header) testkit.Reply {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	req.Header = header
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return testkit.Reply{Status: resp.StatusCode, Header: resp.Header, Body: body}
}

// TestFailedAuthLimit: failures from one address, whichever credential was
// wrong (API key, operator token, River UI password), spend the address's
// budget; then every request from it that presents credentials, right or
// wrong, gets the same 429, while other addresses and authorised scrapes of
// /metrics are unaffected.
func TestFailedAuthLimit(t *testing.T) {
	t.Parallel()
	b := setupLimited(t, openapi.Limits{AuthFailures: limits.Policy{Name: "auth-failures", Quota: 3, Window: time.Hour}})
	aliceKey := b.newRider(t, "alice@example.com")
	flood, other := fromAddr("127.0.0.2"), fromAddr("127.0.0.3")
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	basic := func(pass string) http.Header {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.SetBasicAuth("ops", pass)
		return r.Header
	}

	// Three failures, one of each kind: 401 each.
	send(t, flood, http.MethodGet, b.url+"/rides/1", bearer("ar_not-a-key")).Problem(t, http.StatusUnauthorized)
	send(t, flood, http.MethodGet, b.url+"/users/alice@example.com/api_keys", bearer("wrong-admin")).Problem(t, http.StatusUnauthorized)
	send(t, flood, http.MethodGet, b.url+"/riverui/", basic("wrong-password")).Problem(t, http.StatusUnauthorized)

	// Now every credential from the address is refused alike.
	var details []string
	for _, r := range []testkit.Reply{
		send(t, flood, http.MethodGet, b.url+"/rides/1", bearer("ar_not-a-key")),
		send(t, flood, http.MethodGet, b.url+"/rides/1", bearer(aliceKey)),
		send(t, flood, http.MethodGet, b.url+"/users/alice@example.com/api_keys", bearer(adminToken)),
		send(t, flood, http.MethodGet, b.url+"/riverui/", basic(adminToken)),
		send(t, flood, http.MethodGet, b.url+"/riverui/", basic("wrong-password")),
	} {
		r.Problem(t, http.StatusTooManyRequests)
		require.Equal(t, openapi.ProblemAuthLimited, r.JSON(t)["type"])
		after := r.Header.Get("Retry-After")
		require.NotEmpty(t, after)
		require.Regexp(t, `^"auth-failures";q=\d+;w=\d+$`, r.Header.Get("RateLimit-Policy"))
		require.Equal(t, `"auth-failures";r=0;t=`+after, r.Header.Get("RateLimit"), "the budget is spent until Retry-After")
		require.Empty(t, r.Header.Get("WWW-Authenticate"))
		details = append(details, r.JSON(t)["detail"].(string))
	}
	for _, d := range details {
		require.Regexp(t, `^too many failed authentications from this address; retry after \d+ s$`, d)
	}

	// A request without credentials is not a guess: 401 as ever.
	send(t, flood, http.MethodGet, b.url+"/rides/1", http.Header{}).Problem(t, http.StatusUnauthorized)
	// An authorised scrape is never limited.
	require.Equal(t, http.StatusOK, send(t, flood, http.MethodGet, b.url+"/metrics", bearer(adminToken)).Status)

	// Another address is unaffected: its failures are 401, its riders served.
	send(t, other, http.MethodGet, b.url+"/rides/1", bearer("ar_not-a-key")).Problem(t, http.StatusUnauthorized)
	send(t, other, http.MethodGet, b.url+"/rides/1", bearer(aliceKey)).Problem(t, http.StatusNotFound)
	require.Equal(t, http.StatusOK, send(t, other, http.MethodGet, b.url+"/users/alice@example.com/api_keys", bearer(adminToken)).Status)
}
