package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/openapi/client"
)

// RideAll follows the cursors from page to page: it yields every ride of
// the rider once, newest first, none of another rider's, and stops at
// the first failure.
func TestRideAllFollowsCursors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c := b.rider(t, "all@example.com", "tok_visa")
	other := b.rider(t, "other-all@example.com", "tok_visa")
	r := &client.Retrier{Client: c}

	var want []int64
	for range 7 {
		res, err := r.RideCreate(ctx, "", someRide)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, res.StatusCode)
		want = append([]int64{res.Reply.JSON201.ID}, want...)
	}
	_, err := (&client.Retrier{Client: other}).RideCreate(ctx, "", someRide)
	require.NoError(t, err)

	limit := int64(3)
	var got []int64
	for ride, err := range client.RideAll(ctx, c, client.RideListParams{Limit: &limit}) {
		require.NoError(t, err)
		got = append(got, ride.ID)
	}
	require.Equal(t, want, got, "seven rides over three pages, in order")

	// Starting below a ride, with a filter.
	charged := client.RideListParamsChargeStatus("charged")
	got = got[:0]
	for ride, err := range client.RideAll(ctx, c, client.RideListParams{Limit: &limit, StartingAfter: &want[1], ChargeStatus: &charged}) {
		require.NoError(t, err)
		got = append(got, ride.ID)
	}
	require.Equal(t, want[2:], got)

	// Breaking off ends the reading.
	n := 0
	for range client.RideAll(ctx, c, client.RideListParams{Limit: &limit}) {
		n++
		if n == 4 {
			break
		}
	}
	require.Equal(t, 4, n)

	// Another rider's cursor: the 404, as a *ListError.
	theirs := want[0]
	for _, err := range client.RideAll(ctx, other, client.RideListParams{StartingAfter: &theirs}) {
		var le *client.ListError
		require.ErrorAs(t, err, &le)
		require.Equal(t, http.StatusNotFound, le.Status)
	}
	for _, err := range client.RideAll(ctx, c, client.RideListParams{EndingBefore: &theirs}) {
		require.True(t, errors.Is(err, client.ErrListBackwards))
	}
}
