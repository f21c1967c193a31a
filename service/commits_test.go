package service_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// TestRideCommits counts the transactions a ride commits, in PostgreSQL's
// own statistics: a new ride commits three (the read of its key, a
// transaction of its own that writes nothing and so flushes nothing; the
// claim with the ride; then the charge with the stored response), a replay
// one, the read (none in the process that saw the key finish), and a replay
// writes nothing.
func TestRideCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewURL(t)
	var dbName string
	{
		cfg, err := pgx.ParseConfig(url)
		require.NoError(t, err)
		dbName = cfg.Database
	}
	admin, err := pgx.Connect(ctx, dbtest.AdminURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(ctx) })
	fake := testkit.NewStripe(t)

	// stats returns the database's committed transactions and rows written
	// so far. A backend publishes its statistics as it exits, so they are
	// read once every session has ended.
	type counts struct{ commits, writes int64 }
	stats := func() counts {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var sessions int
			var c counts
			require.NoError(t, admin.QueryRow(ctx, `
				SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'),
				       xact_commit, tup_inserted + tup_updated + tup_deleted
				FROM pg_stat_database WHERE datname = $1`, dbName).Scan(&sessions, &c.commits, &c.writes))
			if sessions == 0 {
				return c
			}
			require.True(t, time.Now().Before(deadline), "sessions of %s did not end", dbName)
			time.Sleep(10 * time.Millisecond)
		}
	}
	// withService runs fn with services (newSvc: another process, with a
	// memory of its own) on a pool of one connection, opened first, closes
	// the pool, and returns what was committed meanwhile.
	withService := func(fn func(newSvc func() *service.Service)) counts {
		before := stats()
		cfg, err := pgxpool.ParseConfig(url)
		require.NoError(t, err)
		cfg.MaxConns = 1
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		conn, err := pool.Acquire(ctx)
		require.NoError(t, err)
		conn.Release()
		fn(func() *service.Service {
			svc, err := service.New(service.Config{Pool: pool, Payments: fake.Payments()})
			require.NoError(t, err)
			return svc
		})
		pool.Close()
		after := stats()
		return counts{after.commits - before.commits, after.writes - before.writes}
	}

	var uid int64
	withService(func(newSvc func() *service.Service) {
		res, err := testkit.NewAccounts(t, newSvc(), nil).UserUpsert(ctx, accounts.UserUpsertParams{Email: "commits@example.com"})
		require.NoError(t, err)
		uid = res.User.ID
	})
	book := func(svc *service.Service, key string) *service.Response {
		res, err := svc.RideCreate(ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, res.Status)
		return res
	}
	// A fresh connection commits more than its requests: the backend's
	// start-up, and the preparation of each statement the first time it
	// is sent in a pipeline (an implicit transaction before its BEGIN).
	// A warm-up ride pays for both, and is subtracted.
	// The rider's first ride records its processor customer: done here,
	// so that every ride measured writes the same rows. Every measured run
	// starts two services, as the warm-up does, so that what a service
	// commits as it starts (the read of the deployment's namespace) is
	// subtracted with it.
	withService(func(newSvc func() *service.Service) { book(newSvc(), testkit.NewKey()) })
	warm := withService(func(newSvc func() *service.Service) {
		newSvc()
		book(newSvc(), testkit.NewKey())
	})

	key := testkit.NewKey()
	var first *service.Response
	ride := withService(func(newSvc func() *service.Service) {
		book(newSvc(), testkit.NewKey())
		first = book(newSvc(), key)
	})
	require.EqualValues(t, 3, ride.commits-warm.commits, "commits of a new ride: the read, then two that write")

	replay := withService(func(newSvc func() *service.Service) {
		book(newSvc(), testkit.NewKey())
		again, err := newSvc().RideCreate(ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, first.Body, again.Body)
	})
	require.EqualValues(t, 1, replay.commits-warm.commits, "commits of a replay")
	require.Equal(t, warm.writes, replay.writes, "rows written by a replay")

	key = testkit.NewKey()
	both := withService(func(newSvc func() *service.Service) {
		book(newSvc(), testkit.NewKey())
		svc := newSvc()
		first := book(svc, key)
		again, err := svc.RideCreate(ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, first.Body, again.Body)
		other := testkit.SomeRide
		other.TargetLat++
		_, err = svc.RideCreate(ctx, uid, key, other, nil)
		testkit.RequireCode(t, err, service.CodeKeyReused)
	})
	require.EqualValues(t, 3, both.commits-warm.commits, "commits of a ride replayed by the process that finished it")
	require.Len(t, fake.SucceededCharges(), 7)
}
