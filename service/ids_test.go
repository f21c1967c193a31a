package service_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service/accounts"
)

// maxID is the largest id the database draws: 2^53 - 1, exact in a
// JavaScript number.
const maxID = 1<<53 - 1

// collideOnce makes the database's next id (time_id(), the default
// of every randomly numbered table) return taken, and every later draw a
// random id as before. A sequence counts the draws: a rolled-back
// transaction does not give its draw back.
func (b *testBundle) collideOnce(t *testing.T, taken int64) {
	t.Helper()
	b.Exec(t, `CREATE SEQUENCE IF NOT EXISTS id_draws`)
	b.Exec(t, `ALTER SEQUENCE id_draws RESTART`)
	b.Exec(t, `DO $$ BEGIN
		IF to_regproc('time_id_made') IS NULL THEN
			EXECUTE format('CREATE FUNCTION time_id_made() RETURNS bigint LANGUAGE sql VOLATILE AS %L',
				(SELECT prosrc FROM pg_proc WHERE proname = 'time_id'));
		END IF;
	END $$`)
	b.Exec(t, fmt.Sprintf(`CREATE OR REPLACE FUNCTION time_id() RETURNS bigint LANGUAGE sql VOLATILE AS $$
		SELECT CASE WHEN nextval('id_draws') = 1 THEN %d ELSE time_id_made() END $$`, taken))
}

func TestRandomIDs(t *testing.T) {
	t.Parallel()

	t.Run("NumberedByDrawsNotSequences", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, table := range []string{"rides", "users", "api_keys"} {
			var def string
			var seq *string
			require.NoError(t, b.Pool.QueryRow(b.Ctx, `
				SELECT column_default, pg_get_serial_sequence($1, 'id')
				FROM information_schema.columns WHERE table_name = $1 AND column_name = 'id'`, table).Scan(&def, &seq))
			require.Equal(t, "time_id()", def, table)
			require.Nil(t, seq, "%s: no sequence a restore could replay", table)
		}

		// The ids: distinct, in [1, 2^53 - 1]; their high bits are the
		// database clock's milliseconds since 2026-01-01, never going back,
		// so a restore (which goes back in data, not in time) makes ids
		// later than every id it lost.
		var n, distinct, backwards int
		var lo, hi, firstMS, lastMS, clockMS int64
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `
			WITH d AS (SELECT i, time_id() AS id FROM generate_series(1, 20000) i)
			SELECT count(*), count(DISTINCT id), min(id), max(id),
			       min(id / 4096), max(id / 4096),
			       count(*) FILTER (WHERE id / 4096 < prev / 4096),
			       floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - 1767225600000
			FROM (SELECT id, lag(id) OVER (ORDER BY i) AS prev FROM d) x`).Scan(
			&n, &distinct, &lo, &hi, &firstMS, &lastMS, &backwards, &clockMS))
		require.Equal(t, 20000, n)
		require.Equal(t, n, distinct)
		require.GreaterOrEqual(t, lo, int64(1))
		require.LessOrEqual(t, hi, int64(maxID))
		require.Zero(t, backwards, "a later id never carries an earlier millisecond")
		require.LessOrEqual(t, lastMS, clockMS, "the milliseconds are the database clock's")
		require.Greater(t, firstMS, clockMS-60_000, "the milliseconds are the database clock's")

		// An id outside the range is refused, whoever writes it.
		_, err := b.Pool.Exec(b.Ctx, `INSERT INTO users (id, email, payment_source) VALUES ($1, 'big@example.com', 'tok_visa')`, int64(maxID)+1)
		require.ErrorContains(t, err, "users_id_range")
	})

	t.Run("RideIDDrawnTwiceIsDrawnAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid := b.Rider(t, "collide@example.com", "tok_visa").ID
		first := b.Ride(t, uid)
		b.collideOnce(t, first.ID)
		retries := b.Service.Stats().TxRetries

		key := testkit.NewKey()
		resp, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		second := testkit.DecodeRide(t, resp.Body)
		require.NotEqual(t, first.ID, second.ID)
		require.Equal(t, retries+1, b.Service.Stats().TxRetries, "the claim and the ride, run again")
		require.Equal(t, 2, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE user_id = $1`, uid))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE id = $1 AND user_id = $2`, first.ID, uid),
			"the first ride is untouched")
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE resource_type = 'ride' AND resource_id = $1 AND action = 'ride.created'`, second.ID))
		require.Equal(t, 2, b.succeededCharges(), "one charge per ride")
		require.Len(t, b.ChargesOfRide(t, second.ID), 1)
		require.Equal(t, "finished", b.key(t, uid, key).point)
	})

	t.Run("UserAndAPIKeyIDsDrawnTwiceAreDrawnAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		existing := b.Rider(t, "first@example.com", "tok_visa")
		b.collideOnce(t, existing.ID)
		retries := b.Service.Stats().TxRetries

		res, err := b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: "second@example.com"})
		require.NoError(t, err)
		require.True(t, res.Created)
		require.NotEqual(t, existing.ID, res.User.ID)
		require.NotEmpty(t, res.APIKey)
		require.Equal(t, retries+1, b.Service.Stats().TxRetries)
		require.Equal(t, 2, b.Count(t, `SELECT count(*) FROM users WHERE role = 'rider'`))

		// The next draw meets that rider's API key.
		b.collideOnce(t, res.APIKeyID)
		_, minted, err := b.Accounts.APIKeyMint(b.Ctx, "second@example.com", nil)
		require.NoError(t, err)
		require.NotEqual(t, res.APIKeyID, minted.ID)
		require.Equal(t, retries+2, b.Service.Stats().TxRetries)
		for _, secret := range []string{res.APIKey, minted.Secret} {
			u, err := b.Accounts.Authenticate(b.Ctx, secret)
			require.NoError(t, err)
			require.Equal(t, res.User.ID, u.ID)
		}
	})
}
