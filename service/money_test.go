package service_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
	"github.com/atomicrides/atomicrides/service/receipts"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// moneyWorld is one fake Stripe account, over HTTP, that several
// deployments (databases, services) may share.
type moneyWorld struct {
	ctx  context.Context
	fake *testkit.Stripe
	// capture is when the world's services take a booking's money.
	capture service.Capture
}

func newMoneyWorld(t *testing.T) *moneyWorld {
	t.Helper()
	return &moneyWorld{ctx: context.Background(), fake: testkit.NewStripe(t)}
}

// service is a fresh service over pool on the world's Stripe account.
func (w *moneyWorld) service(t *testing.T, pool *pgxpool.Pool, reg prometheus.Registerer) *service.Service {
	t.Helper()
	svc, err := service.New(service.Config{Pool: pool, Registerer: reg, Payments: w.fake.Payments(), Capture: w.capture})
	require.NoError(t, err)
	return svc
}

func (w *moneyWorld) userID(t *testing.T, svc *service.Service, email string) int64 {
	t.Helper()
	res, err := testkit.NewAccounts(t, svc, nil).UserUpsert(w.ctx, accounts.UserUpsertParams{Email: email})
	require.NoError(t, err)
	return res.User.ID
}

// book books testkit.SomeRide under key and returns its charge.
func (w *moneyWorld) book(t *testing.T, svc *service.Service, uid int64, key string) string {
	t.Helper()
	return *w.ride(t, svc, uid, key).StripeChargeID
}

// ride books testkit.SomeRide under key and returns the charged ride.
func (w *moneyWorld) ride(t *testing.T, svc *service.Service, uid int64, key string) service.Ride {
	t.Helper()
	resp, err := svc.RideCreate(w.ctx, uid, key, testkit.SomeRide, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	ride := testkit.DecodeRide(t, resp.Body)
	require.NotNil(t, ride.StripeChargeID)
	return ride
}

// chargesPerKey counts the succeeded charges at the fake per processor key.
func (w *moneyWorld) chargesPerKey() map[string]int {
	n := map[string]int{}
	for _, ch := range w.fake.SucceededCharges() {
		n[ch.Metadata["ar_key"]]++
	}
	return n
}

// backup copies the database at url, whose pool is pool, as it is now
// (CREATE DATABASE … TEMPLATE), and returns the copy's URL: the backup a
// restore starts from. The copy is dropped when t ends.
func (w *moneyWorld) backup(t *testing.T, pool *pgxpool.Pool, url string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	name := cfg.Database + "_backup"
	pool.Reset() // CREATE DATABASE … TEMPLATE needs the template idle
	admin, err := pgx.Connect(w.ctx, dbtest.AdminURL(t))
	require.NoError(t, err)
	defer admin.Close(w.ctx)
	ident := pgx.Identifier{name}.Sanitize()
	_, err = admin.Exec(w.ctx, `CREATE DATABASE `+ident+` TEMPLATE `+pgx.Identifier{cfg.Database}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), dbtest.AdminURL(t))
		require.NoError(t, err)
		defer c.Close(context.Background())
		_, err = c.Exec(context.Background(), `DROP DATABASE IF EXISTS `+ident+` WITH (FORCE)`)
		require.NoError(t, err)
	})
	return dbtest.DatabaseURL(t, name)
}

func connect(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func TestTwoDeploymentsShareOneStripeAccount(t *testing.T) {
	t.Parallel()
	w := newMoneyWorld(t)
	staging, production := dbtest.New(t), dbtest.New(t)
	// Test databases are clones of one template; a real deployment gets its
	// namespace from its own migration.
	_, err := staging.Exec(w.ctx, `UPDATE deployment SET namespace = md5(gen_random_uuid()::text)`)
	require.NoError(t, err)
	a, b := w.service(t, staging, nil), w.service(t, production, nil)
	require.NotEqual(t, a.Namespace(), b.Namespace())

	// The first rider of each has the same email and the same user id (ids
	// drawn at random never meet, but riders numbered by the sequence before
	// migration 0007 do: each deployment has a rider 1), and the clients send
	// the same idempotency key.
	for _, pool := range []*pgxpool.Pool{staging, production} {
		_, err := pool.Exec(w.ctx, `INSERT INTO users (id, email, payment_source) VALUES (1, 'first@example.com', 'tok_visa')`)
		require.NoError(t, err)
	}
	ua, ub := w.userID(t, a, "first@example.com"), w.userID(t, b, "first@example.com")
	require.Equal(t, int64(1), ua)
	require.Equal(t, ua, ub)
	key := testkit.NewKey()
	chA, chB := w.book(t, a, ua, key), w.book(t, b, ub, key)
	require.NotEqual(t, chA, chB, "each deployment charges its own rider")
	_, err = a.CustomerCreate(w.ctx, ua, "")
	require.NoError(t, err)

	require.Len(t, w.fake.SucceededCharges(), 2)
	require.Len(t, w.fake.Customers(), 2, "one customer per deployment")
	for _, ch := range w.fake.SucceededCharges() {
		require.Contains(t, []string{a.Namespace(), b.Namespace()}, ch.Metadata["ar_ns"])
	}
	for _, r := range w.fake.Requests() {
		require.Less(t, r.Status, 400, "no request refused: %+v", r)
	}
}

// TestRestoredBackupNeitherChargesTwiceNorAnswersWithAnotherCharge restores
// a backup taken before two bookings: their clients retry and get their
// original charges, a new booking gets a new charge, and reconciliation
// lists the charges of the lost commits until their clients retry.
func TestRestoredBackupNeitherChargesTwiceNorAnswersWithAnotherCharge(t *testing.T) {
	t.Parallel()
	w := newMoneyWorld(t)
	originalURL := dbtest.NewURL(t)
	original := connect(t, originalURL)
	uid := w.userID(t, w.service(t, original, nil), "restored@example.com")

	backupURL := w.backup(t, original, originalURL)

	// Two bookings after the backup.
	before := w.service(t, original, nil)
	k1, k2 := testkit.NewKey(), testkit.NewKey()
	ch1, ch2 := w.book(t, before, uid, k1), w.book(t, before, uid, k2)

	// The database is restored: a fresh service on the backup.
	restoredPool := connect(t, backupURL)
	restored := w.service(t, restoredPool, nil)
	require.Equal(t, before.Namespace(), restored.Namespace(), "the namespace is restored with the data")

	rep, err := restored.Reconcile(w.ctx, time.Hour)
	require.NoError(t, err)
	require.False(t, rep.Clean())
	orphans := []string{}
	for _, o := range rep.OrphanCharges {
		orphans = append(orphans, o.ID)
	}
	require.ElementsMatch(t, []string{ch1, ch2}, orphans, "the charges of the lost commits")
	require.Empty(t, rep.MissingCharges)

	// A new booking first: it must not be answered with an earlier charge.
	ch3 := w.book(t, restored, uid, testkit.NewKey())
	require.NotContains(t, []string{ch1, ch2}, ch3)
	// The clients of the lost bookings retry and get their charges.
	require.Equal(t, ch1, w.book(t, restored, uid, k1))
	require.Equal(t, ch2, w.book(t, restored, uid, k2))

	require.Len(t, w.fake.SucceededCharges(), 3)
	for key, n := range w.chargesPerKey() {
		require.Equal(t, 1, n, "one charge per processor key %s", key)
	}
	rep, err = restored.Reconcile(w.ctx, time.Hour)
	require.NoError(t, err)
	require.True(t, rep.Clean(), "%+v", rep)
	require.Equal(t, 3, rep.Charges)
}

// TestRestoredBackupRefundOfALostRideRefundsNoOther restores a backup taken
// before a ride was booked and refunded. The rider books again on the
// restored database, as the first ride after the backup (which a sequence
// would number as the lost ride), then retries the lost refund with its key:
// the ride it names is unknown, so the answer is not found, nothing is
// stored, and the new ride is not refunded. The lost ride's own client then
// comes back, gets its charge again on a new ride, and refunding that ride
// adopts the refund Stripe already made.
func TestRestoredBackupRefundOfALostRideRefundsNoOther(t *testing.T) {
	t.Parallel()
	w := newMoneyWorld(t)
	originalURL := dbtest.NewURL(t)
	original := connect(t, originalURL)
	uid := w.userID(t, w.service(t, original, nil), "lost-refund@example.com")
	backupURL := w.backup(t, original, originalURL)

	// After the backup: a ride, and its refund.
	before := w.service(t, original, nil)
	bookKey, refundKey := testkit.NewKey(), testkit.NewKey()
	lost := w.ride(t, before, uid, bookKey)
	resp, err := before.RideRefundCreate(w.ctx, uid, refundKey, lost.ID, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	lostRefund := decodeRefund(t, resp.Body)
	require.Equal(t, lost.ID, lostRefund.RideID)

	// Restored: the rider's next ride is the first one the database numbers
	// since the backup.
	restoredPool := connect(t, backupURL)
	restored := w.service(t, restoredPool, nil)
	next := w.ride(t, restored, uid, testkit.NewKey())
	require.NotEqual(t, lost.ID, next.ID, "a ride id is never handed out again")
	require.NotEqual(t,
		receipts.MessageID(receipts.KindRide, lost.ID, service.DefaultMailFrom),
		receipts.MessageID(receipts.KindRide, next.ID, service.DefaultMailFrom),
		"nor is a receipt's Message-ID")

	// The refund's client retries with its key: the ride it names is gone.
	_, err = restored.RideRefundCreate(w.ctx, uid, refundKey, lost.ID, nil)
	testkit.RequireCode(t, err, service.CodeNotFound)
	var stored int
	require.NoError(t, restoredPool.QueryRow(w.ctx, `SELECT count(*) FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2`,
		uid, refundKey).Scan(&stored))
	require.Zero(t, stored, "not found is not stored: the key stays free")
	got, err := restored.RideGet(w.ctx, uid, next.ID)
	require.NoError(t, err)
	require.Equal(t, service.RideRefundNone, got.RefundStatus, "the new ride is not refunded")
	require.Len(t, w.fake.Refunds(), 1, "Stripe made the lost refund only")
	require.Equal(t, *lost.StripeChargeID, w.fake.Refunds()[0].Charge)

	// Until the lost ride's client comes back, its charge and refund are
	// orphans for reconciliation.
	rep, err := restored.Reconcile(w.ctx, time.Hour)
	require.NoError(t, err)
	require.Len(t, rep.OrphanCharges, 1)
	require.Equal(t, *lost.StripeChargeID, rep.OrphanCharges[0].ID)
	require.Len(t, rep.OrphanRefunds, 1)
	require.Equal(t, lostRefund.StripeRefundID, rep.OrphanRefunds[0].ID)

	// It comes back: the same charge, on a ride with a new id; the old id
	// still names nothing.
	again := w.ride(t, restored, uid, bookKey)
	require.Equal(t, *lost.StripeChargeID, *again.StripeChargeID)
	require.NotEqual(t, lost.ID, again.ID)
	_, err = restored.RideRefundCreate(w.ctx, uid, refundKey, lost.ID, nil)
	testkit.RequireCode(t, err, service.CodeNotFound)

	// Refunding the ride again reaches Stripe under the charge's refund key
	// and gets the refund Stripe made before the restore.
	resp, err = restored.RideRefundCreate(w.ctx, uid, testkit.NewKey(), again.ID, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.Equal(t, lostRefund.StripeRefundID, decodeRefund(t, resp.Body).StripeRefundID)
	require.Len(t, w.fake.Refunds(), 1, "one refund at Stripe, however often it is asked for")
	got, err = restored.RideGet(w.ctx, uid, next.ID)
	require.NoError(t, err)
	require.Equal(t, service.RideRefundNone, got.RefundStatus)

	rep, err = restored.Reconcile(w.ctx, time.Hour)
	require.NoError(t, err)
	require.True(t, rep.Clean(), "%+v", rep)
}

func TestReconcileFindsAMissingCharge(t *testing.T) {
	t.Parallel()
	w := newMoneyWorld(t)
	pool := dbtest.New(t)
	svc := w.service(t, pool, nil)
	uid := w.userID(t, svc, "missing@example.com")
	charge := w.book(t, svc, uid, testkit.NewKey())
	kept := w.book(t, svc, uid, testkit.NewKey())

	rep, err := svc.Reconcile(w.ctx, time.Hour)
	require.NoError(t, err)
	require.True(t, rep.Clean(), "%+v", rep)

	// A ride records a charge Stripe does not have (another account's, a
	// hand edit); the charge it should record is now an orphan.
	_, err = pool.Exec(w.ctx, `UPDATE rides SET stripe_charge_id = 'ch_elsewhere' WHERE stripe_charge_id = $1`, charge)
	require.NoError(t, err)
	rep, err = svc.Reconcile(w.ctx, time.Hour)
	require.NoError(t, err)
	require.Len(t, rep.MissingCharges, 1)
	require.Equal(t, "ch_elsewhere", rep.MissingCharges[0].ChargeID)
	require.Len(t, rep.OrphanCharges, 1)
	require.Equal(t, charge, rep.OrphanCharges[0].ID)
	require.NotEqual(t, kept, rep.OrphanCharges[0].ID)

	out, err := json.Marshal(rep)
	require.NoError(t, err)
	require.Contains(t, string(out), `"missing_charges":[{"ride_id":`)
}

// TestResourceMissingIsRetryableNeverStored: a customer unknown to the
// account (deleted in the dashboard, a test key against live data) is our
// configuration, not the rider's decline.
func TestResourceMissingIsRetryableNeverStored(t *testing.T) {
	t.Parallel()
	w := newMoneyWorld(t)
	pool := dbtest.New(t)
	reg := prometheus.NewRegistry()
	svc := w.service(t, pool, reg)
	uid := w.userID(t, svc, "deleted@example.com")
	_, err := pool.Exec(w.ctx, `UPDATE users SET stripe_customer_id = 'cus_deleted_in_dashboard' WHERE id = $1`, uid)
	require.NoError(t, err)
	key := testkit.NewKey()

	_, err = svc.RideCreate(w.ctx, uid, key, testkit.SomeRide, nil)
	e := testkit.RequireCode(t, err, service.CodeProcessorUnavailable)
	require.Positive(t, e.RetryAfter)
	var point string
	var code *int32
	require.NoError(t, pool.QueryRow(w.ctx, `SELECT recovery_point, response_code FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2`,
		uid, key).Scan(&point, &code))
	require.Equal(t, "ride_created", point, "nothing stored: the key stays resumable")
	require.Nil(t, code)
	require.Empty(t, w.fake.Charges())
	require.InDelta(t, 1, configErrors(t, reg, "charge_create"), 0, "counted for operators to alert on")

	// The operator clears the stale customer; the client's retry charges once.
	_, err = pool.Exec(w.ctx, `UPDATE users SET stripe_customer_id = NULL WHERE id = $1`, uid)
	require.NoError(t, err)
	w.book(t, svc, uid, key)
	require.Len(t, w.fake.SucceededCharges(), 1)
}

// configErrors reads atomicrides_stripe_config_errors_total{operation}
// back from reg.
func configErrors(t *testing.T, reg *prometheus.Registry, operation string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "atomicrides_stripe_config_errors_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operation" && l.GetValue() == operation {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
