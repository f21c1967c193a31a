package service_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
)

// testBundle is one isolated world (its own database, fake Stripe, mail
// sink, clock and service) with the helpers of these tests.
type testBundle struct{ *testkit.Env }

func setup(t *testing.T) *testBundle {
	t.Helper()
	return &testBundle{testkit.New(t)}
}

// setupRider is setup with one rider paying by card, and a fresh
// idempotency key for the rider's request.
func setupRider(t *testing.T, email string) (b *testBundle, uid int64, key string) {
	t.Helper()
	b = setup(t)
	return b, b.Rider(t, email, "tok_visa").ID, testkit.NewKey()
}

// setupRide is setup with one rider paying by card and one ride of the
// rider's, charged.
func setupRide(t *testing.T, email string) (b *testBundle, uid int64, ride service.Ride) {
	t.Helper()
	b = setup(t)
	uid = b.Rider(t, email, "tok_visa").ID
	return b, uid, b.Ride(t, uid)
}

// keyRow is what a test inspects of an idempotency key.
type keyRow struct {
	point  string
	locked bool
	code   *int32
}

func (b *testBundle) key(t *testing.T, userID int64, key string) keyRow {
	t.Helper()
	var r keyRow
	require.NoError(t, b.Pool.QueryRow(b.Ctx,
		`SELECT recovery_point, locked_at IS NOT NULL, response_code FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2`,
		userID, key).Scan(&r.point, &r.locked, &r.code))
	return r
}

func (b *testBundle) succeededCharges() int { return len(b.Stripe.SucceededCharges()) }
