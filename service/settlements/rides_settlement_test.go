package settlements_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakebank"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
)

func TestRideDetailShowsTheBanksSettlement(t *testing.T) {
	t.Parallel()
	w := setupSettled(t, 2) // rides[0] is refunded
	uid := w.uid
	effective := w.lines[0].PayoutEffectiveAt

	// A ride booked after the bank's statement: never settled.
	resp, err := w.Service.RideCreate(w.Ctx, uid, testkit.NewKey(), testkit.SomeRide, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status)
	var created map[string]any
	require.NoError(t, json.Unmarshal(resp.Body, &created))
	require.NotContains(t, created, "settlement", "the stored 201 body is unchanged")
	unsettled := int64(created["id"].(float64))

	for _, r := range w.rides {
		d, err := w.Service.RideDetailGet(w.Ctx, uid, r.ID)
		require.NoError(t, err)
		require.Nil(t, d.Settlement, "nothing settled before the file is applied")
	}

	rec, err := w.Settlements.Receive(w.Ctx, "settlement_1.csv", fakebank.Render(w.lines))
	require.NoError(t, err)
	_, err = w.Settlements.Apply(w.Ctx, rec.FileID)
	require.NoError(t, err)

	payout := "po_test1"
	refunded, err := w.Service.RideDetailGet(w.Ctx, uid, w.rides[0].ID)
	require.NoError(t, err)
	require.Equal(t, w.rides[0].ID, refunded.ID)
	require.Equal(t, service.RideRefundStatus("refunded"), refunded.RefundStatus)
	require.Equal(t, &service.RideSettlement{
		SettledAt: effective, PayoutID: "po_test1",
		RefundSettledAt: &effective, RefundPayoutID: &payout,
	}, refunded.Settlement)

	charged, err := w.Service.RideDetailGet(w.Ctx, uid, w.rides[1].ID)
	require.NoError(t, err)
	require.Equal(t, &service.RideSettlement{SettledAt: effective, PayoutID: "po_test1"}, charged.Settlement)

	body, err := json.Marshal(charged)
	require.NoError(t, err)
	var shown map[string]any
	require.NoError(t, json.Unmarshal(body, &shown))
	settlement := shown["settlement"].(map[string]any)
	require.Equal(t, effective.Format("2006-01-02T15:04:05Z07:00"), settlement["settled_at"])
	for _, merchant := range []string{"gross_cents", "fee_cents", "net_cents"} {
		require.NotContains(t, settlement, merchant, "fees and net are the merchant's")
	}

	d, err := w.Service.RideDetailGet(w.Ctx, uid, unsettled)
	require.NoError(t, err)
	require.Nil(t, d.Settlement)
	body, err = json.Marshal(d)
	require.NoError(t, err)
	require.Contains(t, string(body), `"settlement":null`)

	other := w.Rider(t, "settle-other@example.com", "tok_visa").ID
	_, err = w.Service.RideDetailGet(w.Ctx, other, w.rides[1].ID)
	require.Equal(t, service.CodeNotFound, service.ErrorCode(err), "%v", err)
}
