package openapi

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
)

// TestRideReplayFromMemory serves POST /rides as registered, on a real
// service, with a count of the requests that reached the operation: a
// replay of a key the process saw finish is answered before it, with the
// bytes the operation answers; every other request reaches it with its body
// whole.
func TestRideReplayFromMemory(t *testing.T) {
	t.Parallel()
	env := testkit.New(t)
	rider := env.Rider(t, "replay@example.com", "")

	mux := http.NewServeMux()
	config := huma.DefaultConfig("replays", "1")
	config.CreateHooks = nil
	config.Formats = jsonFormatsWithSelfDecoding(config.Formats)
	api := humago.New(mux, config)
	var lim Limits
	h := &handlers{svc: env.Service, acc: env.Accounts, api: api, logger: slog.New(slog.DiscardHandler), limits: &lim, guard: authGuard{lim: &lim}}
	api.UseMiddleware(h.requireContentType)
	var reached atomic.Int64
	huma.Register(api, h.rideCreateOperation(), func(ctx context.Context, in *rideCreateInput) (*storedOutput, error) {
		reached.Add(1)
		return h.rideCreate(ctx, in)
	})
	// As NewHandler serves it: paymentDeadlines reads the body first.
	srv := httptest.NewServer(paymentDeadlines(mux, time.Minute, mux))
	t.Cleanup(srv.Close)

	type answer struct {
		status int
		header http.Header
		body   string
	}
	post := func(t *testing.T, key, contentType, body string) answer {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/rides", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+rider.APIKey)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", contentType)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Header.Del("Date")
		return answer{resp.StatusCode, resp.Header, string(b)}
	}
	const json = "application/json"
	key := testkit.NewKey()

	booked := post(t, key, json, testkit.SomeRideJSON)
	require.Equal(t, http.StatusCreated, booked.status, booked.body)
	require.Empty(t, booked.header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 1, reached.Load())

	// Answered from memory: the operation is not reached.
	fast := post(t, key, json, testkit.SomeRideJSON)
	require.Equal(t, http.StatusCreated, fast.status)
	require.Equal(t, "true", fast.header.Get("Idempotent-Replayed"))
	require.Equal(t, booked.body, fast.body)
	require.EqualValues(t, 1, reached.Load())
	reordered := post(t, key, json, " {\"target_lon\": -122.2712, \"target_lat\": 37.8044,\n\"origin_lon\": -122.4194, \"origin_lat\": 37.7749} ")
	require.Equal(t, fast, reordered)
	exponent := post(t, key, json, `{"origin_lat":3.77749e1,"origin_lon":-122.4194,"target_lat":37.8044,"target_lon":-122.2712}`)
	require.Equal(t, fast, exponent)
	require.EqualValues(t, 1, reached.Load())

	// The same replay in forms only the operation reads: the same answer,
	// byte for byte, from the operation.
	for i, c := range []struct{ name, key, contentType, body string }{
		{"quoted key", `"` + key + `"`, json, testkit.SomeRideJSON},
		{"escaped field name", key, json, `{"origin\u005flat":37.7749,"origin_lon":-122.4194,"target_lat":37.8044,"target_lon":-122.2712}`},
		{"media type with a parameter", key, "application/json; charset=utf-8", testkit.SomeRideJSON},
	} {
		got := post(t, c.key, c.contentType, c.body)
		require.Equal(t, fast, got, c.name)
		require.EqualValues(t, 2+i, reached.Load(), c.name)
	}
	n := reached.Load()

	// Another trip under the key: refused by the operation.
	reused := post(t, key, json, `{"origin_lat":1,"origin_lon":2,"target_lat":3,"target_lon":4}`)
	require.Equal(t, http.StatusUnprocessableEntity, reused.status, reused.body)
	require.Contains(t, reused.body, "already used with a different request")
	require.Equal(t, n+1, reached.Load())

	// A key the process has not seen finish reaches the operation with its
	// body: booked.
	other := post(t, testkit.NewKey(), json, testkit.SomeRideJSON)
	require.Equal(t, http.StatusCreated, other.status, other.body)
	require.Empty(t, other.header.Get("Idempotent-Replayed"))
	require.Equal(t, n+2, reached.Load())
	require.Equal(t, 2, env.Count(t, `SELECT count(*) FROM rides WHERE user_id = $1`, rider.ID))

	// No rider, no answer from memory.
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/rides", strings.NewReader(testkit.SomeRideJSON))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", json)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, n+2, reached.Load())
}

func TestBareIdempotencyKey(t *testing.T) {
	t.Parallel()
	for key, bare := range map[string]bool{
		strings.Repeat("a", 20):          true,
		strings.Repeat("~", 255):         true,
		"!" + strings.Repeat("#", 19):    true,
		strings.Repeat("a", 19):          false,
		strings.Repeat("a", 256):         false,
		`"` + strings.Repeat("a", 20):    false,
		strings.Repeat("a", 19) + " ":    false,
		strings.Repeat("a", 19) + "\x7f": false,
		strings.Repeat("é", 10):          false,
	} {
		require.Equal(t, bare, bareIdempotencyKey(key), key)
	}
}
