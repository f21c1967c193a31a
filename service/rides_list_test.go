package service_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
)

// seedRides inserts n charged rides of the rider, created in the past in
// groups of five sharing one created_at (so that ties are broken by id),
// and returns their ids in list order: newest first, by (created_at, id).
func (b *testBundle) seedRides(t *testing.T, uid int64, n int, status string) []int64 {
	t.Helper()
	// Ids drawn uniformly from [1, 2^53 - 1]: the service's random_id()
	// would see its draws of one statement meet within a millisecond.
	b.Exec(t, `INSERT INTO rides (id, created_at, origin_lat, origin_lon, target_lat, target_lon, amount_cents, currency, user_id, charge_status, stripe_charge_id, payment_source)
		SELECT 1 + floor(random() * 9007199254740990)::bigint,
		       now() - interval '1 day' + ((i - 1) / 5) * interval '1 second', 1, 2, 3, 4, 2000, 'usd', $1::bigint, $3::text,
		       CASE WHEN $3::text = 'charged' THEN 'ch_seed_' || $1::bigint || '_' || i END, 'tok_visa'
		FROM generate_series(1, $2::int) AS i`, uid, n, status)
	return b.rideIDs(t, uid)
}

// rideIDs is every ride of the rider, in list order.
func (b *testBundle) rideIDs(t *testing.T, uid int64) []int64 {
	t.Helper()
	rows, err := b.Pool.Query(b.Ctx, `SELECT id FROM rides WHERE user_id = $1 ORDER BY created_at DESC, id DESC`, uid)
	require.NoError(t, err)
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

func idsOf(rides []*service.Ride) []int64 {
	ids := make([]int64, len(rides))
	for i, r := range rides {
		ids[i] = r.ID
	}
	return ids
}

func TestRideList(t *testing.T) {
	t.Parallel()

	// Pages read with starting_after from each page's last ride concatenate
	// to exactly the rider's rides, in order, while the rider and another
	// rider book new rides between the pages; paging back with
	// ending_before from the last ride gives them again, reversed, and then
	// the rides booked meanwhile.
	t.Run("PagesConcatenateWhileBooking", func(t *testing.T) {
		t.Parallel()
		b, uid, _ := setupRider(t, "pages@example.com")
		other := b.Rider(t, "other-pages@example.com", "tok_visa").ID
		want := b.seedRides(t, uid, 250, "charged")
		b.seedRides(t, other, 30, "charged")
		require.Len(t, want, 250)

		var got []int64
		var booked []int64
		params := service.RideListParams{Limit: 7}
		for pages := 0; ; pages++ {
			require.Less(t, pages, 100, "paging must end")
			page, err := b.Service.RideList(b.Ctx, uid, params)
			require.NoError(t, err)
			require.LessOrEqual(t, len(page.Data), 7)
			for _, r := range page.Data {
				require.Equal(t, service.RideChargeCharged, r.ChargeStatus)
				require.Equal(t, service.RideRefundNone, r.RefundStatus)
			}
			got = append(got, idsOf(page.Data)...)
			if !page.HasMore {
				break
			}
			require.Len(t, page.Data, 7, "a page with more after it is full")
			params.StartingAfter = page.Data[len(page.Data)-1].ID
			// New rides between pages: the rider's and another's.
			booked = append(booked, b.Ride(t, uid).ID)
			b.Ride(t, other)
		}
		require.Equal(t, want, got, "every ride once, in order, none of the new ones")

		// Back from the oldest ride to the newest: everything newer than it.
		var back []int64
		params = service.RideListParams{Limit: 9, EndingBefore: want[len(want)-1]}
		for pages := 0; ; pages++ {
			require.Less(t, pages, 100, "paging must end")
			page, err := b.Service.RideList(b.Ctx, uid, params)
			require.NoError(t, err)
			back = append(idsOf(page.Data), back...)
			if !page.HasMore {
				break
			}
			params.EndingBefore = page.Data[0].ID
		}
		all := b.rideIDs(t, uid)
		require.Len(t, all, 250+len(booked))
		require.Equal(t, all[:len(all)-1], back, "every ride newer than the oldest, the new ones first")
		require.ElementsMatch(t, booked, all[:len(booked)], "the rides booked while paging are the newest")
	})

	t.Run("FirstPageDefaultsToTenWithMore", func(t *testing.T) {
		t.Parallel()
		b, uid, _ := setupRider(t, "default@example.com")
		want := b.seedRides(t, uid, 11, "charged")
		page, err := b.Service.RideList(b.Ctx, uid, service.RideListParams{})
		require.NoError(t, err)
		require.True(t, page.HasMore)
		require.Equal(t, want[:10], idsOf(page.Data))

		page, err = b.Service.RideList(b.Ctx, uid, service.RideListParams{Limit: 100})
		require.NoError(t, err)
		require.False(t, page.HasMore)
		require.Equal(t, want, idsOf(page.Data))
	})

	t.Run("NoRidesIsAnEmptyPage", func(t *testing.T) {
		t.Parallel()
		b, uid, _ := setupRider(t, "none@example.com")
		page, err := b.Service.RideList(b.Ctx, uid, service.RideListParams{})
		require.NoError(t, err)
		require.False(t, page.HasMore)
		require.NotNil(t, page.Data)
		require.Empty(t, page.Data)
		body, err := json.Marshal(page)
		require.NoError(t, err)
		require.JSONEq(t, `{"data":[],"has_more":false}`, string(body))
	})

	// Another rider's ride, or no ride, is no cursor: 404 naming the
	// parameter, and nothing of the other rider shows.
	t.Run("OtherRidersCursorIsNotFound", func(t *testing.T) {
		t.Parallel()
		b, uid, _ := setupRider(t, "mine@example.com")
		other := b.Rider(t, "theirs@example.com", "tok_visa").ID
		b.seedRides(t, uid, 3, "charged")
		theirs := b.seedRides(t, other, 3, "charged")

		for _, p := range []service.RideListParams{
			{StartingAfter: theirs[0]}, {EndingBefore: theirs[0]}, {StartingAfter: 1 << 52},
		} {
			_, err := b.Service.RideList(b.Ctx, uid, p)
			e := requireCode(t, err, service.CodeNotFound)
			if p.StartingAfter != 0 {
				require.Equal(t, "query.starting_after", e.Field)
			} else {
				require.Equal(t, "query.ending_before", e.Field)
			}
		}
		page, err := b.Service.RideList(b.Ctx, uid, service.RideListParams{Limit: 100})
		require.NoError(t, err)
		require.Len(t, page.Data, 3)
		for _, id := range idsOf(page.Data) {
			require.NotContains(t, theirs, id)
		}
	})

	t.Run("BadParametersNameTheField", func(t *testing.T) {
		t.Parallel()
		b, uid, _ := setupRider(t, "bad@example.com")
		mine := b.seedRides(t, uid, 2, "charged")
		for field, p := range map[string]service.RideListParams{
			"query.limit":          {Limit: 101},
			"query.starting_after": {StartingAfter: -1},
			"query.ending_before":  {StartingAfter: mine[0], EndingBefore: mine[1]},
			"query.charge_status":  {ChargeStatus: "refunded"},
		} {
			_, err := b.Service.RideList(b.Ctx, uid, p)
			require.Equal(t, field, requireCode(t, err, service.CodeInvalid).Field)
		}
		_, err := b.Service.RideList(b.Ctx, uid, service.RideListParams{Limit: -1})
		require.Equal(t, "query.limit", requireCode(t, err, service.CodeInvalid).Field)
	})

	// The filters narrow the list and paging within them: by charge status,
	// and by creation time, a lower bound inclusive and an upper one
	// exclusive.
	t.Run("Filters", func(t *testing.T) {
		t.Parallel()
		b, uid, _ := setupRider(t, "filters@example.com")
		charged := b.seedRides(t, uid, 20, "charged")
		declined := b.Ride(t, uid) // charged too, booked now
		b.Exec(t, `UPDATE rides SET charge_status = 'declined', stripe_charge_id = NULL WHERE id = $1`, declined.ID)

		page, err := b.Service.RideList(b.Ctx, uid, service.RideListParams{ChargeStatus: service.RideChargeDeclined})
		require.NoError(t, err)
		require.Equal(t, []int64{declined.ID}, idsOf(page.Data))
		require.False(t, page.HasMore)

		page, err = b.Service.RideList(b.Ctx, uid, service.RideListParams{ChargeStatus: service.RideChargeCharged, Limit: 15})
		require.NoError(t, err)
		require.Equal(t, charged[:15], idsOf(page.Data))
		require.True(t, page.HasMore)
		page, err = b.Service.RideList(b.Ctx, uid, service.RideListParams{ChargeStatus: service.RideChargeCharged, Limit: 15, StartingAfter: charged[14]})
		require.NoError(t, err)
		require.Equal(t, charged[15:], idsOf(page.Data))
		require.False(t, page.HasMore)

		// The seeded rides share a created_at five by five: the bounds
		// are times, not rides.
		var at []time.Time
		for _, id := range charged {
			r, err := b.Service.RideGet(b.Ctx, uid, id)
			require.NoError(t, err)
			at = append(at, r.CreatedAt)
		}
		// charged[5:10] share one time, charged[10:15] the one before.
		require.True(t, at[5].Equal(at[9]) && at[10].Before(at[9]))
		page, err = b.Service.RideList(b.Ctx, uid, service.RideListParams{CreatedGTE: at[14], CreatedLT: at[0], Limit: 100})
		require.NoError(t, err)
		require.Equal(t, charged[5:15], idsOf(page.Data))

		page, err = b.Service.RideList(b.Ctx, uid, service.RideListParams{CreatedGTE: at[0], Limit: 100})
		require.NoError(t, err)
		require.Equal(t, append([]int64{declined.ID}, charged[:5]...), idsOf(page.Data))

		page, err = b.Service.RideList(b.Ctx, uid, service.RideListParams{CreatedGTE: at[0], CreatedLT: at[0]})
		require.NoError(t, err)
		require.Empty(t, page.Data)
	})

	// A ride in the list reads as GET /rides/{id} reads it: refund and all.
	t.Run("ListedAsGot", func(t *testing.T) {
		t.Parallel()
		b, uid, ride := setupRide(t, "listed@example.com")
		resp, err := b.Service.RideRefundCreate(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))

		got, err := b.Service.RideGet(b.Ctx, uid, ride.ID)
		require.NoError(t, err)
		require.Equal(t, service.RideRefundRefunded, got.RefundStatus)
		require.NotNil(t, got.StripeRefundID)
		page, err := b.Service.RideList(b.Ctx, uid, service.RideListParams{})
		require.NoError(t, err)
		require.Equal(t, []*service.Ride{got}, page.Data)
	})
}

// A declined booking's stored 402 names the ride it created, replayed byte
// for byte, and the ride reads declined with the reason the rider was
// shown.
func TestRideDeclinedNamesItsRide(t *testing.T) {
	t.Parallel()
	b := setup(t)
	uid := b.Rider(t, "declined-ride@example.com", "tok_chargeCustomerFail").ID
	key := testkit.NewKey()

	resp, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusPaymentRequired, resp.Status)
	var p service.Problem
	require.NoError(t, json.Unmarshal(resp.Body, &p))
	require.Equal(t, service.ProblemCardDeclined, p.Type)
	require.NotZero(t, p.RideID)
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE id = $1 AND user_id = $2`, p.RideID, uid))

	again, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, resp.Body, again.Body, "the 402 is replayed byte for byte, ride id and all")

	ride, err := b.Service.RideGet(b.Ctx, uid, p.RideID)
	require.NoError(t, err)
	require.Equal(t, service.RideChargeDeclined, ride.ChargeStatus)
	require.Nil(t, ride.StripeChargeID)
	require.NotNil(t, ride.DeclineCode)
	require.Equal(t, "card_declined", *ride.DeclineCode)
	require.NotNil(t, ride.DeclineMessage)
	require.Equal(t, "the card was declined: "+*ride.DeclineMessage, p.Detail, "the ride says what the 402 said")

	page, err := b.Service.RideList(b.Ctx, uid, service.RideListParams{ChargeStatus: service.RideChargeDeclined})
	require.NoError(t, err)
	require.Equal(t, []*service.Ride{ride}, page.Data)
}
