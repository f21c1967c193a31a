package bench

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/dbgen"
)

// listCost is what a page of GET /rides costs on the grown tables: the
// service's own page query (dbgen.RideListForUser, keyset on
// rides_user_id_created_at_id) at the first page of the rider with the
// most rides and at a page deep in that rider's list.
type listCost struct {
	// Rides is the rider's rides; Depth how many of them come before the
	// deep page.
	Rides, Depth int64
	// First and Deep are the medians of listRuns runs of each page's
	// query, from this process (no HTTP, no auth: the database's part).
	First, Deep time.Duration
}

// listRuns is how often each page is read; the median is kept.
const listRuns = 200

// listPageSize is the pages' limit: the API's default.
const listPageSize = 10

// measureListCost reads the first and a deep page of the busiest rider's
// list on the database at url.
func measureListCost(tb testing.TB, url string) *listCost {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(ctx)
	c := &listCost{}
	var uid int64
	if err := conn.QueryRow(ctx, `SELECT user_id, count(*) FROM rides GROUP BY user_id ORDER BY 2 DESC LIMIT 1`).Scan(&uid, &c.Rides); err != nil {
		tb.Fatal(err)
	}
	// The deep page starts below the ride a page and a half from the end
	// of the rider's list: as deep as a list goes.
	c.Depth = max(0, c.Rides-listPageSize*3/2)
	var at time.Time
	var id int64
	if err := conn.QueryRow(ctx, `SELECT created_at, id FROM rides WHERE user_id = $1 ORDER BY created_at DESC, id DESC OFFSET $2 LIMIT 1`,
		uid, c.Depth).Scan(&at, &id); err != nil {
		tb.Fatal(err)
	}
	q := dbgen.New()
	page := func(before time.Time, beforeID int64) time.Duration {
		runs := make([]time.Duration, listRuns)
		for i := range runs {
			start := time.Now()
			rows, err := q.RideListForUser(ctx, conn, dbgen.RideListForUserParams{
				UserID:         uid,
				AfterCreatedAt: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), BeforeCreatedAt: before, BeforeID: beforeID,
				RowLimit: listPageSize + 1,
			})
			runs[i] = time.Since(start)
			if err != nil {
				tb.Fatal(err)
			}
			if len(rows) == 0 {
				tb.Fatalf("list of rider %d: an empty page", uid)
			}
		}
		slices.Sort(runs)
		return runs[len(runs)/2]
	}
	c.First = page(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), 0)
	c.Deep = page(at, id)
	tb.Logf("growth: a page of GET /rides for a rider of %d rides: %s first, %s after %d rides (median of %d)",
		c.Rides, c.First.Round(time.Microsecond), c.Deep.Round(time.Microsecond), c.Depth, listRuns)
	return c
}
