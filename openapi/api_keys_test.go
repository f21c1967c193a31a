package openapi_test

import (
	"encoding/base64"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/openapi"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// instance is one server on a shared database, as another process would
// run it: its own pool, service (caches included) and revocation listener.
func instance(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	svc, acc := testkit.Instance(t, pool)
	testkit.ListenRevocations(t, acc)
	return testkit.ServeAPI(t, openapi.NewHandler(openapi.Config{Service: svc, Accounts: acc, AdminToken: adminToken, Logger: slog.New(slog.DiscardHandler)}))
}

// get answers GET path on the server at base with the bearer token.
func get(t *testing.T, base, path, token string) reply {
	t.Helper()
	return testkit.Do(t, http.MethodGet, base+path, testkit.Bearer(token), "")
}

func TestAPIKeysHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)

	created := b.do(t, http.MethodPut, "/users/keys@example.com", admin(), "")
	require.Equal(t, http.StatusCreated, created.Status, string(created.Body))
	first := created.JSON(t)
	firstID := int64(first["api_key_id"].(float64))
	require.NotZero(t, firstID)
	firstKey := first["api_key"].(string)

	minted := b.do(t, http.MethodPost, "/users/keys@example.com/api_keys", admin(), "")
	require.Equal(t, http.StatusCreated, minted.Status, string(minted.Body))
	secondID := int64(minted.JSON(t)["api_key_id"].(float64))
	secondKey := minted.JSON(t)["api_key"].(string)
	require.NotEqual(t, secondID, firstID)

	// The first key is used; the listing shows it, and no secret.
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/rides/1", rider(firstKey, ""), "").Status)
	b.do(t, http.MethodGet, "/users/keys@example.com/api_keys", nil, "").Problem(t, http.StatusUnauthorized)
	b.do(t, http.MethodGet, "/users/keys@example.com/api_keys", rider(firstKey, ""), "").Problem(t, http.StatusUnauthorized)
	list := b.do(t, http.MethodGet, "/users/KEYS@example.com/api_keys", admin(), "")
	require.Equal(t, http.StatusOK, list.Status, string(list.Body))
	require.NotContains(t, string(list.Body), firstKey)
	require.NotContains(t, string(list.Body), secondKey)
	require.NotContains(t, string(list.Body), "ark_")
	keys := list.JSON(t)["api_keys"].([]any)
	require.Len(t, keys, 2)
	k0, k1 := keys[0].(map[string]any), keys[1].(map[string]any)
	require.EqualValues(t, firstID, k0["id"])
	require.NotNil(t, k0["last_used_at"])
	require.Nil(t, k0["revoked_at"])
	require.EqualValues(t, secondID, k1["id"])
	require.Nil(t, k1["last_used_at"])
	require.NotEmpty(t, k1["created_at"])
	require.ElementsMatch(t, []string{"id", "created_at", "last_used_at", "revoked_at"}, keysOf(k0))

	revoke := "/users/keys@example.com/api_keys/" + strconv.FormatInt(firstID, 10)
	b.do(t, http.MethodDelete, revoke, nil, "").Problem(t, http.StatusUnauthorized)
	b.do(t, http.MethodDelete, revoke, rider(secondKey, ""), "").Problem(t, http.StatusUnauthorized)
	del := b.do(t, http.MethodDelete, revoke, admin(), "")
	require.Equal(t, http.StatusNoContent, del.Status, string(del.Body))
	require.Empty(t, del.Body)
	b.do(t, http.MethodGet, "/rides/1", rider(firstKey, ""), "").Problem(t, http.StatusUnauthorized)
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/rides/1", rider(secondKey, ""), "").Status, "the other key still works")
	require.Equal(t, http.StatusNoContent, b.do(t, http.MethodDelete, revoke, admin(), "").Status, "revoking again answers 204")
	list = b.do(t, http.MethodGet, "/users/keys@example.com/api_keys", admin(), "")
	require.NotNil(t, list.JSON(t)["api_keys"].([]any)[0].(map[string]any)["revoked_at"])

	// Unknown keys, other riders' keys and unknown riders are 404.
	other := b.do(t, http.MethodPut, "/users/other@example.com", admin(), "")
	otherID := strconv.FormatInt(int64(other.JSON(t)["api_key_id"].(float64)), 10)
	b.do(t, http.MethodDelete, "/users/keys@example.com/api_keys/"+otherID, admin(), "").Problem(t, http.StatusNotFound)
	b.do(t, http.MethodDelete, "/users/keys@example.com/api_keys/999999", admin(), "").Problem(t, http.StatusNotFound)
	b.do(t, http.MethodDelete, "/users/nobody@example.com/api_keys/"+otherID, admin(), "").Problem(t, http.StatusNotFound)
	b.do(t, http.MethodGet, "/users/nobody@example.com/api_keys", admin(), "").Problem(t, http.StatusNotFound)
	require.Equal(t, []string{"path.id"}, b.do(t, http.MethodDelete, "/users/keys@example.com/api_keys/0", admin(), "").Problem(t, http.StatusUnprocessableEntity))
	require.Equal(t, []string{"path.id"}, b.do(t, http.MethodDelete, "/users/keys@example.com/api_keys/abc", admin(), "").Problem(t, http.StatusUnprocessableEntity))
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM api_keys WHERE revoked_at IS NOT NULL`))
}

func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestAPIKeyRevokedOnEveryInstance: a key revoked through one server is
// refused by another, which had it cached, within a second.
func TestAPIKeyRevokedOnEveryInstance(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	a, other := instance(t, pool), instance(t, pool)

	created := put(t, a, "/users/everywhere@example.com")
	require.Equal(t, http.StatusCreated, created.Status, string(created.Body))
	key := created.JSON(t)["api_key"].(string)
	id := int64(created.JSON(t)["api_key_id"].(float64))
	for _, base := range []string{a, other} {
		require.Equal(t, http.StatusNotFound, get(t, base, "/rides/1", key).Status)
	}

	req, err := http.NewRequest(http.MethodDelete, a+"/users/everywhere@example.com/api_keys/"+strconv.FormatInt(id, 10), nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)

	require.Eventually(t, func() bool {
		return get(t, other, "/rides/1", key).Status == http.StatusUnauthorized
	}, time.Second, 5*time.Millisecond, "another instance accepts the key a second after its revocation")
	require.Equal(t, http.StatusUnauthorized, get(t, a, "/rides/1", key).Status)
}

// put answers PUT path on the server at base as the operator.
func put(t *testing.T, base, path string) reply {
	t.Helper()
	return testkit.Do(t, http.MethodPut, base+path, admin(), "")
}

// TestOneRiderPerMailbox: addresses are compared and stored lower-cased;
// control, formatting and non-ASCII characters are refused naming the field.
func TestOneRiderPerMailbox(t *testing.T) {
	t.Parallel()
	b := setup(t)

	created := b.do(t, http.MethodPut, "/users/Alice@Example.COM", admin(), "")
	require.Equal(t, http.StatusCreated, created.Status, string(created.Body))
	user := created.JSON(t)["user"].(map[string]any)
	require.Equal(t, "alice@example.com", user["email"])
	again := b.do(t, http.MethodPut, "/users/alice@example.com", admin(), "")
	require.Equal(t, http.StatusOK, again.Status, string(again.Body))
	require.Equal(t, user["id"], again.JSON(t)["user"].(map[string]any)["id"])
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/users/ALICE@EXAMPLE.COM/api_keys", admin(), "").Status)
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM users WHERE role = 'rider'`))
	require.Equal(t, 2, b.Count(t, `SELECT count(*) FROM api_keys`))

	for _, email := range []string{
		"alice%E2%80%AE@example.com", // U+202E RIGHT-TO-LEFT OVERRIDE
		"bob%E2%80%8B@example.com",   // U+200B ZERO WIDTH SPACE (Cf)
		"bob%07@example.com",         // BEL
		"bob%00@example.com",
		"b%C3%B6b@example.com", // non-ASCII: needs SMTPUTF8
		"bob@%E4%BE%8B%E3%81%88.jp",
	} {
		r := b.do(t, http.MethodPut, "/users/"+email, admin(), "")
		require.Equal(t, []string{"path.email"}, r.Problem(t, http.StatusUnprocessableEntity), email)
	}
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM users WHERE role = 'rider'`))
}

// raw sends a request with exactly the given headers: no Content-Type is
// added.
func raw(t *testing.T, method, url string, headers map[string]string, body string) reply {
	t.Helper()
	return testkit.DoRaw(t, method, url, headers, body)
}

func TestContentTypeRequired(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.newRider(t, "typed@example.com")

	ride := rider(key, "content-type-key-0000000001")
	require.Equal(t, []string{"header.Content-Type"}, raw(t, http.MethodPost, b.url+"/rides", ride, rideBody).Problem(t, http.StatusUnsupportedMediaType))
	require.Equal(t, []string{"header.Content-Type"}, raw(t, http.MethodPost, b.url+"/rides", ride, "").Problem(t, http.StatusUnsupportedMediaType), "the body is required")
	ride["Content-Type"] = "text/plain"
	raw(t, http.MethodPost, b.url+"/rides", ride, rideBody).Problem(t, http.StatusUnsupportedMediaType)
	require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM idempotency_keys`))
	require.Empty(t, b.Stripe.SucceededCharges())
	ride["Content-Type"] = "application/json"
	require.Equal(t, http.StatusCreated, raw(t, http.MethodPost, b.url+"/rides", ride, rideBody).Status)

	require.Equal(t, []string{"header.Content-Type"}, raw(t, http.MethodPut, b.url+"/users/typed2@example.com", admin(), `{"payment_source":"tok_visa"}`).Problem(t, http.StatusUnsupportedMediaType))
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM users WHERE role = 'rider'`))
	require.Equal(t, http.StatusCreated, raw(t, http.MethodPut, b.url+"/users/typed2@example.com", admin(), "").Status, "no body needs no Content-Type")
	require.Equal(t, http.StatusCreated, raw(t, http.MethodPost, b.url+"/users/typed2@example.com/api_keys", admin(), "").Status)
}

func TestNoSniffEverywhere(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.newRider(t, "sniff@example.com")
	for _, r := range []reply{
		b.do(t, http.MethodPut, "/users/sniff@example.com", admin(), ""),                                // 200 JSON
		b.do(t, http.MethodPost, "/rides", rider(key, "nosniff-key-000000000001"), rideBody),            // stored 201
		b.do(t, http.MethodPost, "/rides", rider(key, "nosniff-key-000000000001"), rideBody),            // replay
		b.do(t, http.MethodGet, "/rides/999", rider(key, ""), ""),                                       // Huma problem
		b.do(t, http.MethodGet, "/rides/1", nil, ""),                                                    // 401
		b.do(t, http.MethodGet, "/no/such/route", nil, ""),                                              // unmatched
		b.do(t, http.MethodPost, "/rides", rider(key, "short"), rideBody),                               // 400
		b.do(t, http.MethodPut, "/users/"+strings.Repeat("x", 300), admin(), ""),                        // 422
		b.do(t, http.MethodGet, "/openapi.yaml", nil, ""),                                               // spec
		b.do(t, http.MethodGet, "/healthz", nil, ""),                                                    // health
		b.do(t, http.MethodGet, "/riverui/", nil, ""),                                                   // operator 401
		b.do(t, http.MethodGet, "/riverui/", map[string]string{"Authorization": basic(adminToken)}, ""), // River UI
		b.do(t, http.MethodDelete, "/users/sniff@example.com/api_keys/999", admin(), ""),                // 404
	} {
		require.Equal(t, "nosniff", r.Header.Get("X-Content-Type-Options"), "status %d: %s", r.Status, r.Body)
	}
}

// basic is an HTTP Basic Authorization header with any user name.
func basic(password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte("operator:"+password))
}
