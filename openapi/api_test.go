package openapi_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/openapi"
)

const adminToken = "test-admin-token"

// testBundle is the API's handler served over one isolated world (its own
// database, fake Stripe and service), with River UI stubbed.
type testBundle struct {
	*testkit.Env
	url string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	env := testkit.New(t)
	riverUI := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "river ui") })
	url := testkit.ServeAPI(t, openapi.NewHandler(openapi.Config{
		Service: env.Service, Accounts: env.Accounts, AdminToken: adminToken, RiverUI: riverUI, Logger: slog.New(slog.DiscardHandler),
	}))
	return &testBundle{Env: env, url: url}
}

// reply is an answer of the API, read whole.
type reply = testkit.Reply

// do sends a request to the API; a non-empty body is sent as JSON.
func (b *testBundle) do(t *testing.T, method, path string, headers map[string]string, body string) reply {
	t.Helper()
	return testkit.Do(t, method, b.url+path, headers, body)
}

func admin() map[string]string { return map[string]string{"Authorization": "Bearer " + adminToken} }

func rider(apiKey, idemKey string) map[string]string {
	h := map[string]string{"Authorization": "Bearer " + apiKey}
	if idemKey != "" {
		h["Idempotency-Key"] = idemKey
	}
	return h
}

func (b *testBundle) newRider(t *testing.T, email string) string {
	t.Helper()
	r := b.do(t, http.MethodPut, "/users/"+email, admin(), "")
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	key, _ := r.JSON(t)["api_key"].(string)
	require.NotEmpty(t, key)
	return key
}

const rideBody = testkit.SomeRideJSON

func TestUsersHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)

	b.do(t, http.MethodPut, "/users/a@example.com", nil, "").Problem(t, http.StatusUnauthorized)
	b.do(t, http.MethodPut, "/users/a@example.com", map[string]string{"Authorization": "Bearer wrong"}, "").Problem(t, http.StatusUnauthorized)

	created := b.do(t, http.MethodPut, "/users/a@example.com", admin(), `{"payment_source":"tok_visa"}`)
	require.Equal(t, http.StatusCreated, created.Status, string(created.Body))
	require.NotEmpty(t, created.JSON(t)["api_key"])

	again := b.do(t, http.MethodPut, "/users/a@example.com", admin(), "")
	require.Equal(t, http.StatusOK, again.Status)
	require.NotContains(t, again.JSON(t), "api_key")

	minted := b.do(t, http.MethodPost, "/users/a@example.com/api_keys", admin(), "")
	require.Equal(t, http.StatusCreated, minted.Status, string(minted.Body))
	b.do(t, http.MethodPost, "/users/nobody@example.com/api_keys", admin(), "").Problem(t, http.StatusNotFound)

	require.Equal(t, []string{"path.email"}, b.do(t, http.MethodPut, "/users/not-an-email", admin(), "").Problem(t, http.StatusUnprocessableEntity))
	require.Equal(t, []string{"path.email"}, b.do(t, http.MethodPut, "/users/"+strings.Repeat("a", 250)+"@example.com", admin(), "").Problem(t, http.StatusUnprocessableEntity))
	require.Contains(t, b.do(t, http.MethodPut, "/users/b@example.com", admin(), `{"bogus":1}`).Problem(t, http.StatusUnprocessableEntity), "body.bogus")
	// null is no string: the field is left out to keep a rider's source.
	require.Equal(t, []string{"body.payment_source"}, b.do(t, http.MethodPut, "/users/b@example.com", admin(), `{"payment_source":null}`).Problem(t, http.StatusUnprocessableEntity))
	require.Equal(t, []string{"body.payment_source"}, b.do(t, http.MethodPut, "/users/a@example.com", admin(), `{"payment_source":null}`).Problem(t, http.StatusUnprocessableEntity))
	b.do(t, http.MethodPut, "/users/b@example.com", admin(), `{"payment_source":`).Problem(t, http.StatusBadRequest)
	b.do(t, http.MethodPut, "/users/b@example.com", admin(), `{"payment_source":"`+strings.Repeat("x", 20000)+`"}`).Problem(t, http.StatusRequestEntityTooLarge)
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM users WHERE role = 'rider'`), "bad input writes nothing")
}

func TestRidesHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	apiKey := b.newRider(t, "rider@example.com")
	key := "http-test-key-0000000001"

	b.do(t, http.MethodPost, "/rides", map[string]string{"Idempotency-Key": key}, rideBody).Problem(t, http.StatusUnauthorized)
	b.do(t, http.MethodPost, "/rides", rider("ark_nope", key), rideBody).Problem(t, http.StatusUnauthorized)
	require.Equal(t, []string{"header.Idempotency-Key"}, b.do(t, http.MethodPost, "/rides", rider(apiKey, ""), rideBody).Problem(t, http.StatusBadRequest))
	require.Equal(t, []string{"header.Idempotency-Key"}, b.do(t, http.MethodPost, "/rides", rider(apiKey, "short"), rideBody).Problem(t, http.StatusBadRequest))
	require.Equal(t, []string{"header.Idempotency-Key"}, b.do(t, http.MethodPost, "/rides", rider(apiKey, strings.Repeat("k", 256)), rideBody).Problem(t, http.StatusBadRequest))
	b.do(t, http.MethodPost, "/rides", rider(apiKey, key), `{"origin_lat":`).Problem(t, http.StatusBadRequest)
	b.do(t, http.MethodPost, "/rides", rider(apiKey, key), `{"origin_lat":NaN,"origin_lon":0,"target_lat":0,"target_lon":0}`).Problem(t, http.StatusBadRequest)
	require.Contains(t, b.do(t, http.MethodPost, "/rides", rider(apiKey, key), `{"origin_lat":"1","origin_lon":0,"target_lat":0,"target_lon":0}`).Problem(t, http.StatusUnprocessableEntity), "body.origin_lat")
	require.Contains(t, b.do(t, http.MethodPost, "/rides", rider(apiKey, key), `{"origin_lat":0,"origin_lon":180.01,"target_lat":0,"target_lon":0}`).Problem(t, http.StatusUnprocessableEntity), "body.origin_lon")
	missing := b.do(t, http.MethodPost, "/rides", rider(apiKey, key), `{"origin_lat":0,"origin_lon":0,"target_lat":0}`)
	missing.Problem(t, http.StatusUnprocessableEntity)
	require.Contains(t, string(missing.Body), "target_lon")
	require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM idempotency_keys`), "bad input writes nothing")
	require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM rides`))

	first := b.do(t, http.MethodPost, "/rides", rider(apiKey, `"`+key+`"`), rideBody)
	require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
	require.Equal(t, "application/json", first.Header.Get("Content-Type"))
	require.Empty(t, first.Header.Get("Idempotent-Replayed"))

	replay := b.do(t, http.MethodPost, "/rides", rider(apiKey, key), rideBody)
	require.Equal(t, http.StatusCreated, replay.Status)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.True(t, bytes.Equal(first.Body, replay.Body), "byte-identical replay")

	b.do(t, http.MethodPost, "/rides", rider(apiKey, key), strings.Replace(rideBody, "37.8044", "0", 1)).Problem(t, http.StatusUnprocessableEntity)

	id := int64(first.JSON(t)["id"].(float64))
	got := b.do(t, http.MethodGet, "/rides/"+itoa(id), rider(apiKey, ""), "")
	require.Equal(t, http.StatusOK, got.Status)
	require.Equal(t, "charged", got.JSON(t)["charge_status"])
	other := b.newRider(t, "other@example.com")
	b.do(t, http.MethodGet, "/rides/"+itoa(id), rider(other, ""), "").Problem(t, http.StatusNotFound)

	// An indeterminate answer from Stripe: 503 with Retry-After, not stored.
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultStatus, Status: 502, Times: 1})
	key2 := "http-test-key-0000000002"
	down := b.do(t, http.MethodPost, "/rides", rider(apiKey, key2), rideBody)
	down.Problem(t, http.StatusServiceUnavailable)
	require.NotEmpty(t, down.Header.Get("Retry-After"))
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/rides", rider(apiKey, key2), rideBody).Status)
	require.Len(t, b.Stripe.SucceededCharges(), 2)
}

func TestOperatorsHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.do(t, http.MethodGet, "/riverui/", nil, "").Problem(t, http.StatusUnauthorized)
	req, err := http.NewRequest(http.MethodGet, b.url+"/riverui/", nil)
	require.NoError(t, err)
	req.SetBasicAuth("operator", adminToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	b.do(t, http.MethodGet, "/no/such/route", nil, "").Problem(t, http.StatusNotFound)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/healthz", nil, "").Status)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/readyz", nil, "").Status)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/openapi.json", nil, "").Status)
}

// The committed spec is what clients are built from: it must be current
// and document every status of the booking operation.
func TestSpecIsCommittedAndComplete(t *testing.T) {
	t.Parallel()
	spec, err := openapi.Spec()
	require.NoError(t, err)
	committed, err := os.ReadFile("openapi.yaml")
	require.NoError(t, err)
	require.Equal(t, string(committed), string(spec), "openapi/openapi.yaml is stale: run go tool task generate")
	for _, want := range []string{"Idempotent-Replayed", "Retry-After", `"402":`, `"409":`, `"503":`, "application/problem+json"} {
		require.Contains(t, string(spec), want)
	}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// TestUnreachableDatabaseIsRetryable: when the API keys cannot be read (no
// database, or no primary during a failover), the answer is a 500 with
// Retry-After, never a 401 that would tell a rider its key is wrong.
func TestUnreachableDatabaseIsRetryable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.newRider(t, "unreachable@example.com")
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/rides/1", rider(key, ""), "").Status)
	b.Env.Pool.Close()
	r := b.do(t, http.MethodGet, "/rides/1", rider(key, ""), "")
	require.Equal(t, http.StatusInternalServerError, r.Status, "%s", r.Body)
	require.Equal(t, "1", r.Header.Get("Retry-After"))
}
