package service_test

import (
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
)

func TestCompleter(t *testing.T) {
	t.Parallel()

	t.Run("AbandonedKeyIsQueuedAfterItsGraceAndFinishedOnce", func(t *testing.T) {
		t.Parallel()
		b, uid, key := setupRider(t, "abandoned@example.com")
		b.AbandonRide(t, uid, key)
		id := b.keyID(t, uid, key)

		n, err := b.Service.KeysAbandonedEnqueue(b.Ctx, 100)
		require.NoError(t, err)
		require.Zero(t, n, "the client gets its grace period to retry first")

		b.Age(t, testkit.AbandonedAfter+time.Second)
		n, err = b.Service.KeysAbandonedEnqueue(b.Ctx, 100)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		n, err = b.Service.KeysAbandonedEnqueue(b.Ctx, 100)
		require.NoError(t, err)
		require.Zero(t, n, "one completion job per key")
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'key_complete' AND (args->>'key_id')::bigint = $1`, id))

		resp, err := b.Service.KeyComplete(b.Ctx, id)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.False(t, resp.Replayed)
		ride := testkit.DecodeRide(t, resp.Body)
		require.Equal(t, service.RideChargeCharged, ride.ChargeStatus)
		require.Equal(t, 1, b.succeededCharges())
		require.Len(t, b.ChargesOfRide(t, ride.ID), 1)

		// The client's late retry gets the same bytes; so does a second
		// completion.
		again, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, resp.Body, again.Body)
		twice, err := b.Service.KeyComplete(b.Ctx, id)
		require.NoError(t, err)
		require.True(t, twice.Replayed)
		require.Equal(t, resp.Body, twice.Body)
		require.Equal(t, 1, b.succeededCharges())

		n, err = b.Service.KeysAbandonedEnqueue(b.Ctx, 100)
		require.NoError(t, err)
		require.Zero(t, n, "finished keys are not abandoned")
	})

	t.Run("LiveLeaseIsNeverTouched", func(t *testing.T) {
		t.Parallel()
		b, uid, key := setupRider(t, "leased@example.com")
		gate, fired := make(chan struct{}), make(chan struct{}, 1)
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultLatency, Gate: gate, Fired: fired, Times: 1})
		done := make(chan error, 1)
		go func() {
			_, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
			done <- err
		}()
		<-fired // the request holds the lease and waits at Stripe
		id := b.keyID(t, uid, key)
		// Idle for long by its last run, but the lease is live.
		b.Exec(t, `UPDATE idempotency_keys SET last_run_at = last_run_at - interval '1 hour' WHERE id = $1`, id)

		n, err := b.Service.KeysAbandonedEnqueue(b.Ctx, 100)
		require.NoError(t, err)
		require.Zero(t, n)
		_, err = b.Service.KeyComplete(b.Ctx, id)
		testkit.RequireCode(t, err, service.CodeKeyInUse)

		close(gate)
		require.NoError(t, <-done)
		require.Equal(t, 1, b.succeededCharges())
		require.Equal(t, "finished", b.key(t, uid, key).point)
	})

	t.Run("ProcessorOutageLeavesTheKeyResumable", func(t *testing.T) {
		t.Parallel()
		b, uid, key := setupRider(t, "outage@example.com")
		b.AbandonRide(t, uid, key)
		id := b.keyID(t, uid, key)

		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultStatus, Status: 500, Times: 1})
		_, err := b.Service.KeyComplete(b.Ctx, id)
		testkit.RequireCode(t, err, service.CodeProcessorUnavailable)
		k := b.key(t, uid, key)
		require.Equal(t, "ride_created", k.point)
		require.False(t, k.locked, "a failed completion releases the lease")

		resp, err := b.Service.KeyComplete(b.Ctx, id)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.Equal(t, 1, b.succeededCharges())
	})

	t.Run("PastTheProcessorKeyWindowTheChargeIsLookedUpFirst", func(t *testing.T) {
		t.Parallel()
		b, uid, key := setupRider(t, "window@example.com")
		// Stripe made the charge, but its answer was lost; the client gave up.
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultDropAfter, Times: 1})
		_, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		testkit.RequireCode(t, err, service.CodeProcessorUnavailable)
		require.Equal(t, 1, b.succeededCharges())
		id := b.keyID(t, uid, key)

		// A day later Stripe has forgotten the idempotency key: the completer
		// must adopt the charge, not make another.
		b.Age(t, service.ProcessorKeyWindow)
		b.Stripe.Advance(service.ProcessorKeyWindow)
		searches := b.Stripe.RequestCount(http.MethodGet, "/v1/payment_intents")
		resp, err := b.Service.KeyComplete(b.Ctx, id)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.Equal(t, searches+1, b.Stripe.RequestCount(http.MethodGet, "/v1/payment_intents"))
		require.Equal(t, 1, b.succeededCharges())
		require.Equal(t, b.Stripe.SucceededCharges()[0].ID, *testkit.DecodeRide(t, resp.Body).StripeChargeID)
	})

	t.Run("UnknownKeyIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.Service.KeyComplete(b.Ctx, 424242)
		testkit.RequireCode(t, err, service.CodeNotFound)
	})
}

func TestReaper(t *testing.T) {
	t.Parallel()
	b := setup(t)
	uid := b.Rider(t, "reaper@example.com", "tok_visa").ID
	var rides []int64
	for range 3 {
		resp, err := b.Service.RideCreate(b.Ctx, uid, testkit.NewKey(), testkit.SomeRide, nil)
		require.NoError(t, err)
		rides = append(rides, testkit.DecodeRide(t, resp.Body).ID)
	}
	stuck := testkit.NewKey()
	b.AbandonRide(t, uid, stuck)

	res, err := b.Service.KeysReap(b.Ctx, 2)
	require.NoError(t, err)
	require.Equal(t, service.ReapResult{}, res, "nothing is old enough yet")

	b.Age(t, 72*time.Hour+time.Minute)
	res, err = b.Service.KeysReap(b.Ctx, 2)
	require.NoError(t, err)
	require.Equal(t, service.ReapResult{Deleted: 3, UnfinishedPastRetention: 1}, res)

	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM idempotency_keys`))
	require.Equal(t, "ride_created", b.key(t, uid, stuck).point, "unfinished keys are never deleted")
	require.Equal(t, 4, b.Count(t, `SELECT count(*) FROM rides`), "rides keep their rows")
	require.Equal(t, 3, b.Count(t, `SELECT count(*) FROM rides WHERE id = ANY($1) AND idempotency_key_id IS NULL AND charge_status = 'charged'`, rides))

	listed, err := b.Service.KeysStuck(b.Ctx, 10)
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, stuck, listed[0].IdempotencyKey)
	require.Equal(t, service.RecoveryPoint("ride_created"), listed[0].RecoveryPoint)
	require.Nil(t, listed[0].Completion)
	var params service.RideCreateParams
	require.NoError(t, json.Unmarshal(listed[0].Params, &params))
	require.Equal(t, testkit.SomeRide, params)
}

// TestSweepQueriesUseTheirIndexes proves that the completer's and the
// reaper's searches can be served by their partial indexes (with sequential
// scans disabled, so that the verdict does not depend on table size).
func TestSweepQueriesUseTheirIndexes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src, err := os.ReadFile("../sql/queries/idempotency_keys.sql")
	require.NoError(t, err)
	for name, index := range map[string]string{
		"IdempotencyKeyListAbandoned":  "idempotency_keys_unfinished",
		"IdempotencyKeyDeleteFinished": "idempotency_keys_finished_created_at",
	} {
		query := namedQuery(t, string(src), name)
		tx, err := b.Pool.Begin(b.Ctx)
		require.NoError(t, err)
		_, err = tx.Exec(b.Ctx, `SET LOCAL enable_seqscan = off`)
		require.NoError(t, err)
		plan := explain(t, b, tx, query)
		require.NoError(t, tx.Rollback(b.Ctx))
		require.Contains(t, plan, index, "%s plan:\n%s", name, plan)
	}
}

// namedQuery extracts a query from a sqlc file, with its parameters replaced
// by plausible literals.
func namedQuery(t *testing.T, src, name string) string {
	t.Helper()
	_, rest, ok := strings.Cut(src, "-- name: "+name+" ")
	require.True(t, ok, "query %s", name)
	if i := strings.Index(rest, "-- name: "); i >= 0 {
		rest = rest[:i]
	}
	var lines []string
	for _, l := range strings.Split(rest, "\n")[1:] {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			lines = append(lines, l)
		}
	}
	q := strings.Join(lines, "\n")
	q = regexp.MustCompile(`@\w+::timestamptz`).ReplaceAllString(q, "now()")
	return regexp.MustCompile(`@\w+`).ReplaceAllString(q, "100")
}

func explain(t *testing.T, b *testBundle, tx pgx.Tx, query string) string {
	t.Helper()
	rows, err := tx.Query(b.Ctx, "EXPLAIN "+strings.TrimSuffix(strings.TrimSpace(query), ";"))
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}
