package openapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakebank"
)

func TestRideGetShowsSettlementHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	apiKey := b.newRider(t, "settled@example.com")

	created := b.do(t, http.MethodPost, "/rides", rider(apiKey, "settle-http-key-00000001"), rideBody)
	require.Equal(t, http.StatusCreated, created.Status, string(created.Body))
	require.NotContains(t, created.JSON(t), "settlement", "the 201 body has no settlement member")
	id := int64(created.JSON(t)["id"].(float64))

	got := b.do(t, http.MethodGet, "/rides/"+itoa(id), rider(apiKey, ""), "")
	require.Equal(t, http.StatusOK, got.Status, string(got.Body))
	body := got.JSON(t)
	require.Contains(t, body, "settlement")
	require.Nil(t, body["settlement"], "null until the bank settles the charge")

	lines := fakebank.Statement(b.Stripe.Charges(), b.Stripe.Refunds(), "po_http1", time.Now())
	rec, err := b.Settlements.Receive(b.Ctx, "settlement_http.csv", fakebank.Render(lines))
	require.NoError(t, err)
	_, err = b.Settlements.Apply(b.Ctx, rec.FileID)
	require.NoError(t, err)

	got = b.do(t, http.MethodGet, "/rides/"+itoa(id), rider(apiKey, ""), "")
	require.Equal(t, http.StatusOK, got.Status, string(got.Body))
	require.Equal(t, map[string]any{
		"settled_at":        lines[0].PayoutEffectiveAt.Format(time.RFC3339),
		"payout_id":         "po_http1",
		"refund_settled_at": nil,
		"refund_payout_id":  nil,
	}, got.JSON(t)["settlement"], "when and in which payout; no fee or net")

	replay := b.do(t, http.MethodPost, "/rides", rider(apiKey, "settle-http-key-00000001"), rideBody)
	require.Equal(t, string(created.Body), string(replay.Body), "the stored answer is unchanged by the settlement")
}
