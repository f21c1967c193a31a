package openapi_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/openapi"
	"github.com/atomicrides/atomicrides/service"
)

// bookRide books and charges a ride for the rider and returns its id.
func (b *testBundle) bookRide(t *testing.T, apiKey, idemKey string) int64 {
	t.Helper()
	r := b.do(t, http.MethodPost, "/rides", rider(apiKey, idemKey), rideBody)
	require.Contains(t, []int{http.StatusCreated, http.StatusPaymentRequired}, r.Status, string(r.Body))
	var id int64
	require.NoError(t, b.Pool.QueryRow(t.Context(),
		`SELECT resource_id FROM audit_records WHERE action = 'ride.created' ORDER BY id DESC LIMIT 1`).Scan(&id))
	return id
}

func TestRefundsHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	apiKey := b.newRider(t, "refunder@example.com")
	id := b.bookRide(t, apiKey, "http-refund-ride-000001")
	path := "/rides/" + itoa(id) + "/refund"
	key := "http-refund-key-0000001"

	b.do(t, http.MethodPost, path, map[string]string{"Idempotency-Key": key}, "").Problem(t, http.StatusUnauthorized)
	require.Equal(t, []string{"header.Idempotency-Key"}, b.do(t, http.MethodPost, path, rider(apiKey, ""), "").Problem(t, http.StatusBadRequest))
	require.Equal(t, []string{"header.Idempotency-Key"}, b.do(t, http.MethodPost, path, rider(apiKey, "short"), "").Problem(t, http.StatusBadRequest))
	require.Contains(t, b.do(t, http.MethodPost, "/rides/0/refund", rider(apiKey, key), "").Problem(t, http.StatusUnprocessableEntity), "path.id")
	b.do(t, http.MethodPost, "/rides/abc/refund", rider(apiKey, key), "").Problem(t, http.StatusUnprocessableEntity)
	other := b.newRider(t, "bystander@example.com")
	b.do(t, http.MethodPost, path, rider(other, key), "").Problem(t, http.StatusNotFound)
	b.do(t, http.MethodPost, "/rides/999999/refund", rider(apiKey, key), "").Problem(t, http.StatusNotFound)
	require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE flow = 'ride.refund'`), "refused requests keep nothing")
	require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM refunds`))

	first := b.do(t, http.MethodPost, path, rider(apiKey, `"`+key+`"`), "")
	require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
	require.Equal(t, "application/json", first.Header.Get("Content-Type"))
	require.Empty(t, first.Header.Get("Idempotent-Replayed"))
	refund := first.JSON(t)
	require.Equal(t, "refunded", refund["status"])
	require.EqualValues(t, id, refund["ride_id"])
	require.EqualValues(t, 2000, refund["amount_cents"])

	replay := b.do(t, http.MethodPost, path, rider(apiKey, key), "")
	require.Equal(t, http.StatusCreated, replay.Status)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.True(t, bytes.Equal(first.Body, replay.Body), "byte-identical replay")

	key2 := "http-refund-key-0000002"
	second := b.do(t, http.MethodPost, path, rider(apiKey, key2), "")
	require.Equal(t, http.StatusOK, second.Status, string(second.Body))
	require.Empty(t, second.Header.Get("Idempotent-Replayed"))
	require.True(t, bytes.Equal(first.Body, second.Body), "the existing refund")
	again := b.do(t, http.MethodPost, path, rider(apiKey, key2), "")
	require.Equal(t, http.StatusOK, again.Status)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.True(t, bytes.Equal(second.Body, again.Body))
	require.Len(t, b.Stripe.Refunds(), 1)
	require.Equal(t, 1, b.Stripe.RequestCount(http.MethodPost, "/v1/refunds"))

	got := b.do(t, http.MethodGet, "/rides/"+itoa(id), rider(apiKey, ""), "")
	require.Equal(t, http.StatusOK, got.Status)
	require.Equal(t, "refunded", got.JSON(t)["refund_status"])
	require.Equal(t, refund["stripe_refund_id"], got.JSON(t)["stripe_refund_id"])
	require.Equal(t, b.Stripe.Refunds()[0].ID, refund["stripe_refund_id"])

	// Stripe without a definitive answer: 503 with Retry-After, not stored.
	id2 := b.bookRide(t, apiKey, "http-refund-ride-000002")
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpRefundCreate, Kind: fakestripe.FaultStatus, Status: 502, Times: 1})
	key3 := "http-refund-key-0000003"
	down := b.do(t, http.MethodPost, "/rides/"+itoa(id2)+"/refund", rider(apiKey, key3), "")
	down.Problem(t, http.StatusServiceUnavailable)
	require.NotEmpty(t, down.Header.Get("Retry-After"))
	pending := b.do(t, http.MethodGet, "/rides/"+itoa(id2), rider(apiKey, ""), "")
	require.Equal(t, "pending", pending.JSON(t)["refund_status"])
	require.Nil(t, pending.JSON(t)["stripe_refund_id"])
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/rides/"+itoa(id2)+"/refund", rider(apiKey, key3), "").Status)
	require.Len(t, b.Stripe.Refunds(), 2)
}

func TestRefundRefusalsHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// A declined ride has nothing to refund: 409, not stored.
	r := b.do(t, http.MethodPut, "/users/declined@example.com", admin(), `{"payment_source":"tok_chargeCustomerFail"}`)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	declinedKey, _ := r.JSON(t)["api_key"].(string)
	declined := b.bookRide(t, declinedKey, "http-refund-ride-000003")
	key := "http-refund-key-0000004"
	refused := b.do(t, http.MethodPost, "/rides/"+itoa(declined)+"/refund", rider(declinedKey, key), "")
	refused.Problem(t, http.StatusConflict)
	require.Equal(t, openapi.ProblemRideNotRefundable, refused.JSON(t)["type"])
	require.Empty(t, refused.Header.Get("Retry-After"))
	require.Empty(t, refused.Header.Get("Idempotent-Replayed"))
	require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE flow = 'ride.refund'`))

	// The processor refuses the refund: 409, stored and replayed.
	apiKey := b.newRider(t, "disputed@example.com")
	id := b.bookRide(t, apiKey, "http-refund-ride-000004")
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpRefundCreate, Kind: fakestripe.FaultStatus, Status: 400,
		Type: "invalid_request_error", Code: "charge_disputed", Times: 1})
	path := "/rides/" + itoa(id) + "/refund"
	rejected := b.do(t, http.MethodPost, path, rider(apiKey, key), "")
	rejected.Problem(t, http.StatusConflict)
	require.Equal(t, service.ProblemRefundRejected, rejected.JSON(t)["type"])
	replay := b.do(t, http.MethodPost, path, rider(apiKey, key), "")
	replay.Problem(t, http.StatusConflict)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.True(t, bytes.Equal(rejected.Body, replay.Body))
	got := b.do(t, http.MethodGet, "/rides/"+itoa(id), rider(apiKey, ""), "")
	require.Equal(t, "failed", got.JSON(t)["refund_status"])
	require.Empty(t, b.Stripe.Refunds())
}

func TestRefundSpec(t *testing.T) {
	t.Parallel()
	spec, err := openapi.Spec()
	require.NoError(t, err)
	for _, want := range []string{"/rides/{id}/refund:", "operationId: ride-refund", "RideRefundResult:", "refund_status:",
		"/problems/ride-not-refundable", "/problems/refund-rejected"} {
		require.Contains(t, string(spec), want)
	}
}
