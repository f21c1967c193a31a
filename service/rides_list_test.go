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
			e := testkit.RequireCode(t, err, service.CodeNotFound)
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
			require.Equal(t, field, testkit.RequireCode(t, err, service.CodeInvalid).Field)
		}
		_, err := b.Service.RideList(b.Ctx, uid, service.RideListParams{Limit: -1})
		require.Equal(t, "query.limit", testkit.RequireCode(t, err, service.CodeInvalid).Field)
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

	// Stripe's four created[…] bounds, alone and combined into a range
	// (the intersection of theirs, empty or not), on whole microseconds
	// whatever the fraction sent, and cursors paging within the range.
	t.Run("CreatedBounds", func(t *testing.T) {
		t.Parallel()
		b, uid, _ := setupRider(t, "created-bounds@example.com")
		ids := b.seedRides(t, uid, 30, "charged") // six times, five rides each
		page, err := b.Service.RideList(b.Ctx, uid, service.RideListParams{Limit: 100})
		require.NoError(t, err)
		require.Equal(t, ids, idsOf(page.Data))
		// at[i] is the i-th time from the newest: ids[5i:5i+5] were created
		// at it.
		var at []time.Time
		for i := 0; i < len(page.Data); i += 5 {
			at = append(at, page.Data[i].CreatedAt)
		}
		require.Len(t, at, 6)
		// between(i, j) is the rides created from at[i] back to at[j].
		between := func(i, j int) []int64 {
			if i > j {
				return []int64{}
			}
			return ids[5*i : 5*j+5]
		}
		const half = 500 * time.Nanosecond
		for _, c := range []struct {
			name string
			p    service.RideListParams
			want []int64
		}{
			{"gt", service.RideListParams{CreatedGT: at[3]}, between(0, 2)},
			{"gte", service.RideListParams{CreatedGTE: at[3]}, between(0, 3)},
			{"lt", service.RideListParams{CreatedLT: at[3]}, between(4, 5)},
			{"lte", service.RideListParams{CreatedLTE: at[3]}, between(3, 5)},
			{"gt and lt", service.RideListParams{CreatedGT: at[4], CreatedLT: at[1]}, between(2, 3)},
			{"gte and lte", service.RideListParams{CreatedGTE: at[4], CreatedLTE: at[1]}, between(1, 4)},
			{"gte and lte of one time", service.RideListParams{CreatedGTE: at[2], CreatedLTE: at[2]}, between(2, 2)},
			{"all four, the narrowest win", service.RideListParams{CreatedGT: at[5], CreatedGTE: at[4], CreatedLT: at[0], CreatedLTE: at[2]}, between(2, 4)},
			{"gt and lt of one time", service.RideListParams{CreatedGT: at[2], CreatedLT: at[2]}, between(1, 0)},
			{"gt and lte of one time", service.RideListParams{CreatedGT: at[2], CreatedLTE: at[2]}, between(1, 0)},
			{"inverted", service.RideListParams{CreatedGTE: at[1], CreatedLTE: at[4]}, between(1, 0)},
			{"gte a fraction of a microsecond after", service.RideListParams{CreatedGTE: at[3].Add(half)}, between(0, 2)},
			{"gt a fraction of a microsecond before", service.RideListParams{CreatedGT: at[3].Add(-half)}, between(0, 3)},
			{"lt a fraction of a microsecond after", service.RideListParams{CreatedLT: at[3].Add(half)}, between(3, 5)},
			{"lte a fraction of a microsecond before", service.RideListParams{CreatedLTE: at[3].Add(-half)}, between(4, 5)},
			{"a microsecond apart", service.RideListParams{CreatedGT: at[3].Add(-time.Microsecond), CreatedLT: at[3].Add(time.Microsecond)}, between(3, 3)},
			{"another time zone", service.RideListParams{CreatedGTE: at[3].In(time.FixedZone("", 5*3600+1800))}, between(0, 3)},
			{"bounds beyond every ride", service.RideListParams{CreatedGT: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), CreatedLTE: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)}, ids},
		} {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.p.Limit = 100
				page, err := b.Service.RideList(b.Ctx, uid, c.p)
				require.NoError(t, err)
				require.Equal(t, c.want, idsOf(page.Data))
				require.False(t, page.HasMore)
			})
		}

		t.Run("PagesWithinTheRange", func(t *testing.T) {
			t.Parallel()
			want := between(1, 4)
			p := service.RideListParams{Limit: 4, CreatedGT: at[5], CreatedLTE: at[1]}
			var got []int64
			for pages := 0; ; pages++ {
				require.Less(t, pages, 20)
				page, err := b.Service.RideList(b.Ctx, uid, p)
				require.NoError(t, err)
				got = append(got, idsOf(page.Data)...)
				if !page.HasMore {
					break
				}
				p.StartingAfter = got[len(got)-1]
			}
			require.Equal(t, want, got)

			p.StartingAfter, p.EndingBefore = 0, want[len(want)-1]
			var back []int64
			for pages := 0; ; pages++ {
				require.Less(t, pages, 20)
				page, err := b.Service.RideList(b.Ctx, uid, p)
				require.NoError(t, err)
				back = append(idsOf(page.Data), back...)
				if !page.HasMore {
					break
				}
				p.EndingBefore = page.Data[0].ID
			}
			require.Equal(t, want[:len(want)-1], back)

			// A cursor outside the range: the page is the range's part
			// beyond it, here nothing.
			page, err := b.Service.RideList(b.Ctx, uid, service.RideListParams{StartingAfter: ids[len(ids)-1], CreatedGTE: at[2]})
			require.NoError(t, err)
			require.Empty(t, page.Data)
			page, err = b.Service.RideList(b.Ctx, uid, service.RideListParams{EndingBefore: ids[len(ids)-1], CreatedGTE: at[2], Limit: 100})
			require.NoError(t, err)
			require.Equal(t, between(0, 2), idsOf(page.Data))
		})
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
