package openapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUserSourceReplacementHTTP: PUT /users/{email} with another
// payment_source answers 200 with the new source and its registrations
// reset; the same source again is 200 and changes nothing; a bad source is
// 422 naming body.payment_source and writes nothing.
func TestUserSourceReplacementHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := b.do(t, http.MethodPut, "/users/swap@example.com", admin(), `{"payment_source":"tok_visa"}`)
	require.Equal(t, http.StatusCreated, created.Status, string(created.Body))

	replaced := b.do(t, http.MethodPut, "/users/swap@example.com", admin(), `{"payment_source":"tok_mastercard"}`)
	require.Equal(t, http.StatusOK, replaced.Status, string(replaced.Body))
	body := replaced.JSON(t)
	require.NotContains(t, body, "api_key")
	user := body["user"].(map[string]any)
	require.Equal(t, "tok_mastercard", user["payment_source"])
	require.Nil(t, user["stripe_customer_id"])
	require.Equal(t, []any{}, user["registrations"])

	same := b.do(t, http.MethodPut, "/users/swap@example.com", admin(), `{"payment_source":"tok_mastercard"}`)
	require.Equal(t, http.StatusOK, same.Status, string(same.Body))
	require.Equal(t, "tok_mastercard", same.JSON(t)["user"].(map[string]any)["payment_source"])

	require.Equal(t, []string{"body.payment_source"},
		b.do(t, http.MethodPut, "/users/swap@example.com", admin(), `{"payment_source":"tok visa"}`).Problem(t, http.StatusUnprocessableEntity))
	require.Equal(t, []string{"body.payment_source"},
		b.do(t, http.MethodPut, "/users/swap@example.com", admin(), `{"payment_source":""}`).Problem(t, http.StatusUnprocessableEntity))

	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'user.payment_source_replaced'`))
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM users WHERE payment_source = 'tok_mastercard'`))
	require.Equal(t, 2, b.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'customer_create'`))
}
