package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/service"
)

// Age makes the world's records older by d, as if d had passed on the
// database's clock, which alone judges leases, idle times and ages. Tests
// move time past leases, grace periods and retention this way; Clock moves
// only what the process keeps in memory (its caches) and receipt dates.
func (e *Env) Age(t testing.TB, d time.Duration) {
	t.Helper()
	AgeDatabase(t, e.Pool, d)
}

// AgeDatabase makes the records of the database behind pool older by d,
// as Env.Age does. The database's heartbeat is left as it is: the service
// beat on while d passed (a database_gaps row, found earlier, ages).
func AgeDatabase(t testing.TB, pool *pgxpool.Pool, d time.Duration) {
	t.Helper()
	for _, q := range []string{
		`UPDATE idempotency_keys SET created_at = created_at - make_interval(secs => $1),
			last_run_at = last_run_at - make_interval(secs => $1), locked_at = locked_at - make_interval(secs => $1)`,
		`UPDATE refunds SET created_at = created_at - make_interval(secs => $1), updated_at = updated_at - make_interval(secs => $1)`,
		`UPDATE rides SET created_at = created_at - make_interval(secs => $1)`,
		`UPDATE users SET created_at = created_at - make_interval(secs => $1)`,
		`UPDATE settlement_files SET created_at = created_at - make_interval(secs => $1), updated_at = updated_at - make_interval(secs => $1)`,
		`UPDATE settlement_lines SET created_at = created_at - make_interval(secs => $1)`,
		`UPDATE notified_charges SET charged_at = charged_at - make_interval(secs => $1)`,
		`UPDATE database_gaps SET lost_from = lost_from - make_interval(secs => $1), found_at = found_at - make_interval(secs => $1),
			resolved_at = resolved_at - make_interval(secs => $1)`,
	} {
		_, err := pool.Exec(context.Background(), q, d.Seconds())
		require.NoError(t, err, "%s", q)
	}
}

// ChargesOfRide returns the charge attempts at the fake Stripe made under
// the processor key of the ride's request (metadata ar_key).
func (e *Env) ChargesOfRide(t testing.TB, rideID int64) []fakestripe.Charge {
	t.Helper()
	var key, email string
	require.NoError(t, e.Pool.QueryRow(e.Ctx, `
		SELECT k.idempotency_key, u.email FROM rides r
		JOIN idempotency_keys k ON k.id = r.idempotency_key_id
		JOIN users u ON u.id = r.user_id WHERE r.id = $1`, rideID).Scan(&key, &email))
	return e.Stripe.ChargesWithMetadata("ar_key", service.ChargeKey(e.Service.Namespace(), email, key))
}
