package service_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
)

// TestReleaseOutlivesBrokenConnections: when the database drops every
// connection while a request waits at Stripe (a restart, a failover), the
// phase that records the charge fails, and the request still gives its
// lease up: the release tries again until the pool reaches the server on a
// fresh connection, so a retry need not wait for the lease to expire.
func TestReleaseOutlivesBrokenConnections(t *testing.T) {
	t.Parallel()
	b := setup(t)
	uid := b.Rider(t, "broken@example.com", "tok_visa").ID

	// A service on a pool of its own that hands idle connections out
	// unchecked, as it does with one used a moment before the failure.
	cfg, err := pgxpool.ParseConfig(b.Pool.Config().ConnString())
	require.NoError(t, err)
	cfg.MaxConns = 4
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(b.Ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	svc, err := service.New(service.Config{Pool: pool, Payments: b.Payments, Clock: b.Clock.Now,
		AbandonedAfter: testkit.AbandonedAfter})
	require.NoError(t, err)
	var pids []uint32
	var conns []*pgxpool.Conn
	for range cfg.MaxConns {
		c, err := pool.Acquire(b.Ctx)
		require.NoError(t, err)
		conns = append(conns, c)
		pids = append(pids, c.Conn().PgConn().PID())
	}
	for _, c := range conns {
		c.Release()
	}

	key := testkit.NewKey()
	gate, fired := make(chan struct{}), make(chan struct{}, 1)
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultLatency, Gate: gate, Fired: fired, Times: 1})
	errc := make(chan error, 1)
	go func() {
		_, err := svc.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		errc <- err
	}()
	<-fired // the key is claimed and its ride created; the charge is in flight

	// The server drops every connection of the pool.
	require.Equal(t, len(pids), b.Count(t, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ANY($1)) t`, pids))
	close(gate)
	require.Error(t, <-errc, "the charge's recording phase ran on a dropped connection")

	k := b.key(t, uid, key)
	require.Equal(t, "ride_created", k.point, "the recovery point stays")
	require.False(t, k.locked, "the lease was given up on a fresh connection")

	resp, err := svc.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	require.NoError(t, err, "the retry is not kept waiting for the lease")
	require.Equal(t, http.StatusCreated, resp.Status)
	require.Equal(t, 1, b.succeededCharges())
}
