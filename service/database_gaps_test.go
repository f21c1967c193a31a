package service_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// restoreWorld is a deployment whose database is restored from a backup
// taken while it served: before is the service on the original database,
// restored the service on the backup, which lost what before did after
// the backup.
type restoreWorld struct {
	*moneyWorld
	before, restored         *service.Service
	beforePool, restoredPool *pgxpool.Pool
	reg                      *prometheus.Registry
	uid                      int64
}

// newRestoreWorld serves a database (one heartbeat), lets setup write what
// the backup keeps, takes the backup, lets lost do what the restore loses,
// and restores the backup. The restored service has not beaten yet.
func newRestoreWorld(t *testing.T, email string, setup func(w *restoreWorld), lost func(w *restoreWorld)) *restoreWorld {
	t.Helper()
	w := &restoreWorld{moneyWorld: newMoneyWorld(t), reg: prometheus.NewRegistry()}
	url := dbtest.NewURL(t)
	w.beforePool = connect(t, url)
	w.before = w.service(t, w.beforePool, nil)
	_, err := w.before.Heartbeat(w.ctx)
	require.NoError(t, err)
	w.uid = w.userID(t, w.before, email)
	if setup != nil {
		setup(w)
	}
	backup := w.backup(t, w.beforePool, url)
	lost(w)
	w.restoredPool = connect(t, backup)
	// A restore takes minutes: the beat the backup holds is that old when
	// the restored database is served again.
	_, err = w.restoredPool.Exec(w.ctx, `UPDATE database_heartbeat SET beat_at = beat_at - interval '5 minutes'`)
	require.NoError(t, err)
	w.restored = w.service(t, w.restoredPool, w.reg)
	return w
}

// dayPasses moves the processor's key window by: at the fake Stripe,
// which forgets every key sent before, and on the restored database's
// clock, with the service beating meanwhile.
func (w *restoreWorld) dayPasses(t *testing.T) {
	t.Helper()
	w.fake.Advance(service.ProcessorKeyWindow)
	testkit.AgeDatabase(t, w.restoredPool, service.ProcessorKeyWindow)
}

// counter reads the counter name{labels} back from reg.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue metric
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

func gapLookups(t *testing.T, reg *prometheus.Registry, processor string) float64 {
	t.Helper()
	return counter(t, reg, "atomicrides_processor_key_lookups_total", map[string]string{"processor": processor, "reason": "database_gap"})
}

// TestRestoreLostTheKeyRetryPastTheWindowAdoptsTheCharge: a booking charged
// after the backup, its rows lost with the restore, and its client back a
// day later, when Stripe has forgotten the key. The retry's key row is
// new, but the database's gap says it may have been sent before: the
// charge is looked up by its tags first and adopted, never made twice.
func TestRestoreLostTheKeyRetryPastTheWindowAdoptsTheCharge(t *testing.T) {
	t.Parallel()
	key := testkit.NewKey()
	var first string
	w := newRestoreWorld(t, "gap-ride@example.com", nil, func(w *restoreWorld) {
		first = w.book(t, w.before, w.uid, key)
	})

	// The restored database's first beat finds the gap.
	lostFrom, err := w.restored.Heartbeat(w.ctx)
	require.NoError(t, err)
	require.NotNil(t, lostFrom, "the beat the backup holds is stale: a gap")
	require.Equal(t, 1.0, counter(t, w.reg, "atomicrides_database_gaps_open", nil))
	again, err := w.restored.Heartbeat(w.ctx)
	require.NoError(t, err)
	require.Nil(t, again, "one gap, found once")

	w.dayPasses(t)
	searches := w.fake.RequestCount(http.MethodGet, "/v1/charges/search")
	require.Equal(t, first, w.book(t, w.restored, w.uid, key), "the first charge adopted")
	require.Len(t, w.fake.SucceededCharges(), 1, "one charge")
	require.Equal(t, searches+1, w.fake.RequestCount(http.MethodGet, "/v1/charges/search"))
	require.Equal(t, 1.0, gapLookups(t, w.reg, service.ProcessorStripe))

	// A booking under a new key is charged anew, after its own look-up
	// (the gap is open) found nothing.
	other := w.book(t, w.restored, w.uid, testkit.NewKey())
	require.NotEqual(t, first, other)
	require.Len(t, w.fake.SucceededCharges(), 2)
	require.Equal(t, 2.0, gapLookups(t, w.reg, service.ProcessorStripe))
}

// TestRestoreLostTheKeyRetryBeforeAnyBeat: the client comes back before
// any process has beaten on the restored database: the stale beat itself
// marks the gap.
func TestRestoreLostTheKeyRetryBeforeAnyBeat(t *testing.T) {
	t.Parallel()
	key := testkit.NewKey()
	var first string
	w := newRestoreWorld(t, "gap-early@example.com", nil, func(w *restoreWorld) {
		first = w.book(t, w.before, w.uid, key)
	})
	// The backup is a day old, and no process has served it since.
	w.dayPasses(t)
	_, err := w.restoredPool.Exec(w.ctx, `UPDATE database_heartbeat SET beat_at = beat_at - make_interval(secs => $1)`,
		service.ProcessorKeyWindow.Seconds())
	require.NoError(t, err)

	require.Equal(t, first, w.book(t, w.restored, w.uid, key))
	require.Len(t, w.fake.SucceededCharges(), 1)
	require.Equal(t, 1.0, gapLookups(t, w.reg, service.ProcessorStripe))
}

// TestRestoreLostTheRefundRetryPastTheWindowAdoptsIt: a ride booked
// before the backup and refunded after it; the restore lost the refund.
// A day later its client retries: the refund is looked up before its key
// is sent again, and adopted.
func TestRestoreLostTheRefundRetryPastTheWindowAdoptsIt(t *testing.T) {
	t.Parallel()
	key := testkit.NewKey()
	var ride service.Ride
	var refundID string
	w := newRestoreWorld(t, "gap-refund@example.com", func(w *restoreWorld) {
		ride = w.ride(t, w.before, w.uid, testkit.NewKey())
	}, func(w *restoreWorld) {
		resp, err := w.before.RideRefundCreate(w.ctx, w.uid, key, ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		refunds := w.fake.Refunds()
		require.Len(t, refunds, 1)
		refundID = refunds[0].ID
	})
	_, err := w.restored.Heartbeat(w.ctx)
	require.NoError(t, err)
	w.dayPasses(t)

	posts := w.fake.RequestCount(http.MethodPost, "/v1/refunds")
	resp, err := w.restored.RideRefundCreate(w.ctx, w.uid, key, ride.ID, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.Contains(t, string(resp.Body), refundID, "the refund made before the restore")
	require.Equal(t, posts, w.fake.RequestCount(http.MethodPost, "/v1/refunds"), "looked up, not asked for again")
	require.Len(t, w.fake.Refunds(), 1)
	require.Equal(t, 1.0, gapLookups(t, w.reg, service.ProcessorStripe))
}

// TestNoGapNoLookup: a database that lost nothing costs a booking nothing:
// beats on a served database find no gap, and a booking looks nothing up.
func TestNoGapNoLookup(t *testing.T) {
	t.Parallel()
	w := newMoneyWorld(t)
	pool := dbtest.New(t)
	reg := prometheus.NewRegistry()
	svc := w.service(t, pool, reg)
	for range 2 {
		lost, err := svc.Heartbeat(w.ctx)
		require.NoError(t, err)
		require.Nil(t, lost, "a database never served, then served on: no gap")
	}
	uid := w.userID(t, svc, "no-gap@example.com")
	w.book(t, svc, uid, testkit.NewKey())
	require.Zero(t, w.fake.RequestCount(http.MethodGet, "/v1/charges/search"))
	require.Zero(t, gapLookups(t, reg, service.ProcessorStripe))
	var gaps int
	require.NoError(t, pool.QueryRow(w.ctx, `SELECT count(*) FROM database_gaps`).Scan(&gaps))
	require.Zero(t, gaps)
}

// TestConcurrentBeatsRecordOneGap: every process beats; after a gap the
// first beat records it and the others, waiting on the row, find the beat
// fresh.
func TestConcurrentBeatsRecordOneGap(t *testing.T) {
	t.Parallel()
	w := newMoneyWorld(t)
	pool := dbtest.New(t)
	_, err := pool.Exec(w.ctx, `UPDATE database_heartbeat SET beat_at = now() - interval '1 minute'`)
	require.NoError(t, err)
	svcs := []*service.Service{w.service(t, pool, nil), w.service(t, pool, nil), w.service(t, pool, nil), w.service(t, pool, nil)}
	var wg sync.WaitGroup
	found := make(chan *time.Time, len(svcs)*4)
	for _, svc := range svcs {
		for range 4 {
			wg.Go(func() {
				lost, err := svc.Heartbeat(w.ctx)
				require.NoError(t, err)
				found <- lost
			})
		}
	}
	wg.Wait()
	close(found)
	n := 0
	for lost := range found {
		if lost != nil {
			n++
		}
	}
	require.Equal(t, 1, n, "one beat found the gap")
	var gaps int
	require.NoError(t, pool.QueryRow(w.ctx, `SELECT count(*) FROM database_gaps`).Scan(&gaps))
	require.Equal(t, 1, gaps)
}
