package service_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/adyen"
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
	return newRestoreWorldOf(t, nil, email, setup, lost)
}

// newTripRestoreWorld is newRestoreWorld whose services hold a booking's
// fare (service.CaptureTrip).
func newTripRestoreWorld(t *testing.T, email string, setup func(w *restoreWorld), lost func(w *restoreWorld)) *restoreWorld {
	t.Helper()
	return newRestoreWorldOf(t, nil, email, setup, lost, func(w *restoreWorld) { w.capture = service.CaptureTrip })
}

// newRestoreWorldOf is newRestoreWorld with services made by mk (nil: on
// the world's fake Stripe).
func newRestoreWorldOf(t *testing.T, mk func(t *testing.T, pool *pgxpool.Pool, reg prometheus.Registerer) *service.Service,
	email string, setup func(w *restoreWorld), lost func(w *restoreWorld), opts ...func(w *restoreWorld)) *restoreWorld {
	t.Helper()
	w := &restoreWorld{moneyWorld: newMoneyWorld(t), reg: prometheus.NewRegistry()}
	for _, o := range opts {
		o(w)
	}
	if mk == nil {
		mk = w.service
	}
	url := dbtest.NewURL(t)
	w.beforePool = connect(t, url)
	w.before = mk(t, w.beforePool, nil)
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
	w.restored = mk(t, w.restoredPool, w.reg)
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
	searches := w.fake.RequestCount(http.MethodGet, "/v1/payment_intents")
	require.Equal(t, first, w.book(t, w.restored, w.uid, key), "the first charge adopted")
	require.Len(t, w.fake.SucceededCharges(), 1, "one charge")
	require.Equal(t, searches+1, w.fake.RequestCount(http.MethodGet, "/v1/payment_intents"))
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
	require.Zero(t, w.fake.RequestCount(http.MethodGet, "/v1/payment_intents"))
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

// gapsOpen counts the restored database's open gaps.
func (w *restoreWorld) gapsOpen(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, w.restoredPool.QueryRow(w.ctx, `SELECT count(*) FROM database_gaps WHERE resolved_at IS NULL`).Scan(&n))
	return n
}

// TestOrphanPassResolvesGaps: a gap in which nothing was lost is closed by
// the next orphan pass that has listed it; a gap that lost a charge stays
// open until the orphan policy has recorded that charge (past the grace),
// and the lost booking's client, back after that, is answered that its
// booking was refunded, never charged again.
func TestOrphanPassResolvesGaps(t *testing.T) {
	t.Parallel()
	const grace = service.DefaultOrphanRefundAfter

	t.Run("NothingLost", func(t *testing.T) {
		t.Parallel()
		w := newRestoreWorld(t, "gap-empty@example.com", nil, func(*restoreWorld) {})
		_, err := w.restored.Heartbeat(w.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, w.gapsOpen(t))

		_, err = w.restored.OrphanRefundsSchedule(w.ctx, grace)
		require.NoError(t, err)
		require.Zero(t, w.gapsOpen(t), "no charge in the gap: closed")
		lost, err := w.restored.Heartbeat(w.ctx)
		require.NoError(t, err)
		require.Nil(t, lost)
		require.Zero(t, counter(t, w.reg, "atomicrides_database_gaps_open", nil), "the next beat shows it")
	})

	t.Run("ChargeLost", func(t *testing.T) {
		t.Parallel()
		key := testkit.NewKey()
		var first string
		w := newRestoreWorld(t, "gap-orphan@example.com", nil, func(w *restoreWorld) {
			first = w.book(t, w.before, w.uid, key)
		})
		_, err := w.restored.Heartbeat(w.ctx)
		require.NoError(t, err)

		_, err = w.restored.OrphanRefundsSchedule(w.ctx, grace)
		require.NoError(t, err)
		require.Equal(t, 1, w.gapsOpen(t), "a charge no ride records was made in the gap")

		// Past the grace (a pass with a grace already over stands for
		// one two days later, by both clocks): the orphan policy records
		// the charge, and the gap is covered.
		n, err := w.restored.OrphanRefundsSchedule(w.ctx, time.Millisecond)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Zero(t, w.gapsOpen(t))
		o, err := w.restored.OrphanRefund(w.ctx, first)
		require.NoError(t, err)
		require.Equal(t, service.OrphanRefundRefunded, o.Status)

		resp, err := w.restored.RideCreate(w.ctx, w.uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusConflict, resp.Status, "%s", resp.Body)
		require.Contains(t, string(resp.Body), service.ProblemBookingRefunded)
		require.Len(t, w.fake.Charges(), 1, "never charged again")
	})
}

// adyenService is a service on pool that books at the fake Adyen a only,
// whose key window is the fake's, and receives its notifications.
func adyenService(t *testing.T, pool *pgxpool.Pool, a *testkit.Adyen, reg prometheus.Registerer) *service.Service {
	t.Helper()
	return adyenServiceWith(t, pool, a, reg, service.CaptureBooking)
}

// adyenServiceWith is adyenService taking a booking's money as capture
// says.
func adyenServiceWith(t *testing.T, pool *pgxpool.Pool, a *testkit.Adyen, reg prometheus.Registerer, capture service.Capture) *service.Service {
	t.Helper()
	notes, err := adyen.NewNotifications([]string{testkit.AdyenHMACKey}, testkit.AdyenMerchantAccount)
	require.NoError(t, err)
	svc, err := service.New(service.Config{
		Pool:       pool,
		Registerer: reg,
		Processors: []service.Processor{{Name: service.ProcessorAdyen, Payments: a.Client()}},
		Inbound:    map[string]service.EventSource{service.InboxSourceAdyen: notes},
		Capture:    capture,
	})
	require.NoError(t, err)
	return svc
}

// TestRestoreLostTheAdyenPaymentRetryPastTheWindowAdoptsIt: the same at
// Adyen, which lists no payments: its AUTHORISATION notification, resent
// after the restore as the operator does, is what the look-up finds.
func TestRestoreLostTheAdyenPaymentRetryPastTheWindowAdoptsIt(t *testing.T) {
	t.Parallel()
	const window = time.Hour
	ady := testkit.NewAdyenWith(t, fakeadyen.Options{KeyLifetime: window})
	key := testkit.NewKey()
	var first string
	w := newRestoreWorldOf(t, adyenOf(ady), "gap-adyen@example.com", registerAtAdyen(t), func(w *restoreWorld) {
		first = w.book(t, w.before, w.uid, key)
	})
	lostFrom, err := w.restored.Heartbeat(w.ctx)
	require.NoError(t, err)
	require.NotNil(t, lostFrom)
	// The operator resends Adyen's notifications.
	require.Equal(t, []string{service.InboxOutcomeOrphanCharge}, adyenNotify(t, w.restored, ady, fakeadyen.EventAuthorisation))

	ady.Advance(window)
	testkit.AgeDatabase(t, w.restoredPool, window)
	require.Equal(t, first, w.book(t, w.restored, w.uid, key), "the first payment adopted")
	require.Len(t, ady.AuthorisedPayments(), 1, "one payment at Adyen")
	require.Equal(t, 1.0, gapLookups(t, w.reg, service.ProcessorAdyen))
}

// adyenOf makes services that book at the fake Adyen a (adyenService).
func adyenOf(a *testkit.Adyen) func(t *testing.T, pool *pgxpool.Pool, reg prometheus.Registerer) *service.Service {
	return func(t *testing.T, pool *pgxpool.Pool, reg prometheus.Registerer) *service.Service {
		return adyenService(t, pool, a, reg)
	}
}

// registerAtAdyen stores the rider's card at Adyen before the backup.
func registerAtAdyen(t *testing.T) func(w *restoreWorld) {
	return func(w *restoreWorld) {
		_, err := w.before.CustomerCreate(w.ctx, w.uid, "")
		require.NoError(t, err)
	}
}

// adyenNotify passes the fake's notifications of code through the inbox
// of svc, as delivered or resent, and returns what applying each did.
func adyenNotify(t *testing.T, svc *service.Service, a *testkit.Adyen, code string) []string {
	t.Helper()
	var outcomes []string
	for _, it := range a.NotificationItems() {
		if it.EventCode != code {
			continue
		}
		body, err := fakeadyen.NotificationBody(testkit.AdyenHMACKey, it)
		require.NoError(t, err)
		_, err = svc.InboxReceive(context.Background(), service.InboxSourceAdyen, body, "")
		require.NoError(t, err)
		out, err := svc.InboxApply(context.Background(), service.InboxSourceAdyen, it.PSPReference+":"+it.EventCode+":"+it.Success)
		require.NoError(t, err)
		outcomes = append(outcomes, out)
	}
	return outcomes
}

// TestRestoreLostARefundedAdyenRideBookedAgainShowsItsRefund: a ride
// booked and refunded at Adyen after the backup, both lost. The refund's
// notification reaches the restored database before the rider's client
// books again (no ride has the payment: nothing to record it on); the
// booking's retry gets the same payment back from Adyen, which holds its
// refund. The orphan pass records that refund on the ride, once: the
// ride's refund state is its processor's.
func TestRestoreLostARefundedAdyenRideBookedAgainShowsItsRefund(t *testing.T) {
	t.Parallel()
	ady := testkit.NewAdyen(t)
	key := testkit.NewKey()
	var lost service.Ride
	var refund string
	w := newRestoreWorldOf(t, adyenOf(ady), "gap-adyen-refund@example.com", registerAtAdyen(t), func(w *restoreWorld) {
		lost = w.ride(t, w.before, w.uid, key)
		resp, err := w.before.RideRefundCreate(w.ctx, w.uid, testkit.NewKey(), lost.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		require.Len(t, ady.Refunds(), 1)
		refund = ady.Refunds()[0].PSPReference
	})
	ctx, restored, uid := w.ctx, w.restored, w.uid

	require.Equal(t, []string{service.InboxOutcomeUnknownCharge}, adyenNotify(t, restored, ady, fakeadyen.EventRefund),
		"no ride has the payment yet")
	again := w.ride(t, restored, uid, key)
	require.Equal(t, *lost.StripeChargeID, *again.StripeChargeID, "Adyen answers the key with its payment")
	require.Equal(t, service.RideRefundNone, again.RefundStatus)

	rep, err := restored.Reconcile(ctx, time.Hour)
	require.NoError(t, err)
	require.Len(t, rep.OrphanRefunds, 1, "%+v", rep)
	require.Equal(t, refund, rep.OrphanRefunds[0].ID)
	for range 2 {
		_, err = restored.OrphanRefundsSchedule(ctx, service.DefaultOrphanRefundAfter)
		require.NoError(t, err)
	}
	got, err := restored.RideGet(ctx, uid, again.ID)
	require.NoError(t, err)
	require.Equal(t, service.RideRefundRefunded, got.RefundStatus)
	require.Equal(t, refund, *got.StripeRefundID)
	require.Len(t, ady.Refunds(), 1, "nothing refunded again")

	// The notification resent later is a duplicate: nothing twice.
	require.Equal(t, []string{service.InboxOutcomeUnknownCharge}, adyenNotify(t, restored, ady, fakeadyen.EventRefund))
	rep, err = restored.Reconcile(ctx, time.Hour)
	require.NoError(t, err)
	require.Empty(t, rep.OrphanRefunds, "%+v", rep)
}
