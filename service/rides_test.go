package service_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
)

func TestRideCreate(t *testing.T) {
	t.Parallel()

	t.Run("NewKeyChargesOnceAndFinishes", func(t *testing.T) {
		t.Parallel()
		b, uid, key := setupRider(t, "new@example.com")

		resp, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.False(t, resp.Replayed)
		ride := testkit.DecodeRide(t, resp.Body)
		require.Equal(t, service.RideChargeCharged, ride.ChargeStatus)
		require.NotNil(t, ride.StripeChargeID)
		require.EqualValues(t, 2000, ride.AmountCents)

		charges := b.ChargesOfRide(t, ride.ID)
		require.Len(t, charges, 1)
		require.Equal(t, *ride.StripeChargeID, charges[0].ID)
		require.EqualValues(t, 2000, charges[0].Amount)

		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE user_id = $1 AND charge_status = 'charged'`, uid))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'ride.created' AND resource_id = $1`, ride.ID))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'ride_receipt' AND args->>'ride_id' = $1`, strconv.FormatInt(ride.ID, 10)))
		k := b.key(t, uid, key)
		require.Equal(t, "finished", k.point)
		require.False(t, k.locked)
		require.EqualValues(t, 201, *k.code)
	})

	t.Run("ReplayIsByteIdenticalAndNeverReachesStripe", func(t *testing.T) {
		t.Parallel()
		b, uid, key := setupRider(t, "replay@example.com")
		first, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		requests := len(b.Stripe.Requests())

		for range 3 {
			again, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
			require.NoError(t, err)
			require.True(t, again.Replayed)
			require.Equal(t, first.Status, again.Status)
			require.Equal(t, first.Body, again.Body)
		}
		require.Equal(t, requests, len(b.Stripe.Requests()), "a replay must not call Stripe")
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides`))
		require.Equal(t, 1, b.succeededCharges())
	})

	t.Run("DeclinedIsStored402AndReplayed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid := b.Rider(t, "declined@example.com", "tok_chargeCustomerFail").ID
		key := testkit.NewKey()

		resp, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusPaymentRequired, resp.Status)
		var p service.Problem
		require.NoError(t, json.Unmarshal(resp.Body, &p))
		require.Equal(t, service.ProblemCardDeclined, p.Type)

		again, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, resp.Body, again.Body)

		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE charge_status = 'declined' AND stripe_charge_id IS NULL`))
		require.Equal(t, 1, len(b.Stripe.Charges()), "one declined attempt")
		require.Equal(t, 0, b.succeededCharges())
		require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'ride_receipt'`))
		require.Equal(t, "finished", b.key(t, uid, key).point)
	})

	t.Run("KeyReusedWithDifferentRequestIs422", func(t *testing.T) {
		t.Parallel()
		b, uid, key := setupRider(t, "mismatch@example.com")
		_, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)

		other := testkit.SomeRide
		other.TargetLat = 0
		_, err = b.Service.RideCreate(b.Ctx, uid, key, other, nil)
		testkit.RequireCode(t, err, service.CodeKeyReused)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides`))
	})

	t.Run("KeysAreScopedPerUser", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		alice := b.Rider(t, "alice@example.com", "tok_visa").ID
		bob := b.Rider(t, "bob@example.com", "tok_visa").ID
		key := testkit.NewKey()

		a, err := b.Service.RideCreate(b.Ctx, alice, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		bb, err := b.Service.RideCreate(b.Ctx, bob, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.False(t, bb.Replayed, "bob must not get alice's response")
		require.NotEqual(t, testkit.DecodeRide(t, a.Body).ID, testkit.DecodeRide(t, bb.Body).ID)
		require.Equal(t, 2, b.succeededCharges())
	})

	t.Run("LockedKeyIs409WithRetryAfter", func(t *testing.T) {
		t.Parallel()
		b, uid, key := setupRider(t, "locked@example.com")
		gate, fired := make(chan struct{}), make(chan struct{}, 1)
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultLatency, Gate: gate, Fired: fired, Times: 1})

		done := make(chan *service.Response)
		go func() {
			resp, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
			if err != nil {
				t.Error(err)
			}
			done <- resp
		}()
		<-fired // the first request holds the lease and waits at Stripe

		_, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		e := testkit.RequireCode(t, err, service.CodeKeyInUse)
		require.Positive(t, e.RetryAfter)

		close(gate)
		resp := <-done
		require.Equal(t, http.StatusCreated, resp.Status)
		require.Equal(t, 1, b.succeededCharges())
	})

	t.Run("StaleLeaseIsTakenOverAndFenced", func(t *testing.T) {
		t.Parallel()
		b, uid, key := setupRider(t, "stale@example.com")
		gate, fired := make(chan struct{}), make(chan struct{}, 1)
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultLatency, Gate: gate, Fired: fired, Times: 1})

		firstErr := make(chan error)
		go func() {
			_, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
			firstErr <- err
		}()
		<-fired // A holds the lease, its charge is in flight at Stripe

		// A's lease runs out while it waits.
		b.Age(t, b.Service.Lease()+time.Second)

		// B takes the key over; Stripe reports the charge key in use, so B
		// answers 503 and gives the lease up.
		_, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		testkit.RequireCode(t, err, service.CodeProcessorUnavailable)
		require.False(t, b.key(t, uid, key).locked)

		// A's charge goes through, but A lost its lease: it writes nothing.
		close(gate)
		testkit.RequireCode(t, <-firstErr, service.CodeKeyInUse)
		require.Equal(t, "ride_created", b.key(t, uid, key).point)

		// A retry adopts the charge Stripe made for A, through Stripe's key.
		resp, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.Equal(t, 1, b.succeededCharges())
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides`))
	})

	t.Run("TransientStripeFailureIsRetryableFromRideCreated", func(t *testing.T) {
		t.Parallel()
		b, uid, key := setupRider(t, "transient@example.com")
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultStatus, Status: 503, Times: 1})

		_, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		e := testkit.RequireCode(t, err, service.CodeProcessorUnavailable)
		require.Positive(t, e.RetryAfter)
		k := b.key(t, uid, key)
		require.Equal(t, "ride_created", k.point)
		require.False(t, k.locked, "the lease is released on the way out")
		require.Nil(t, k.code, "an indeterminate outcome is not stored")

		resp, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.False(t, resp.Replayed)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides`))
		require.Equal(t, 1, b.succeededCharges())
	})

	t.Run("ChargeMadeButAnswerLostIsAdoptedNotRepeated", func(t *testing.T) {
		t.Parallel()
		b, uid, key := setupRider(t, "lost@example.com")
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultDropAfter, Times: 1})

		_, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		testkit.RequireCode(t, err, service.CodeProcessorUnavailable)
		require.Equal(t, 1, b.succeededCharges(), "Stripe made the charge")

		resp, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		ride := testkit.DecodeRide(t, resp.Body)
		require.Equal(t, b.Stripe.SucceededCharges()[0].ID, *ride.StripeChargeID)
		require.Equal(t, 1, b.succeededCharges())
	})

	t.Run("KeyOlderThanStripeWindowIsReconciledByLookup", func(t *testing.T) {
		t.Parallel()
		b, uid, key := setupRider(t, "window@example.com")
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultDropAfter, Times: 1})
		_, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		testkit.RequireCode(t, err, service.CodeProcessorUnavailable)

		// A day later Stripe has forgotten the key; our key is as old, and
		// so is the rider (registered before booking): the customer made
		// for the first attempt is found again, and its PaymentIntents
		// listed.
		b.Stripe.Advance(25 * time.Hour)
		b.Exec(t, `UPDATE idempotency_keys SET created_at = created_at - interval '25 hours'`)
		b.Exec(t, `UPDATE users SET created_at = created_at - interval '26 hours'`)
		searches := b.Stripe.RequestCount(http.MethodGet, "/v1/payment_intents")

		resp, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.Equal(t, searches+1, b.Stripe.RequestCount(http.MethodGet, "/v1/payment_intents"))
		require.Equal(t, 1, b.succeededCharges(), "the charge is adopted, not made again")
		require.Equal(t, b.Stripe.SucceededCharges()[0].ID, *testkit.DecodeRide(t, resp.Body).StripeChargeID)
	})

	t.Run("KeyOlderThanStripeWindowWithoutChargeIsCharged", func(t *testing.T) {
		t.Parallel()
		b, uid, key := setupRider(t, "window2@example.com")
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultDropBefore, Times: 1})
		_, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		testkit.RequireCode(t, err, service.CodeProcessorUnavailable)
		b.Exec(t, `UPDATE idempotency_keys SET created_at = created_at - interval '25 hours'`)

		resp, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.Equal(t, 1, b.succeededCharges())
	})

	t.Run("InternalErrorUnlocksKeyAndRetrySucceeds", func(t *testing.T) {
		t.Parallel()
		b, uid, key := setupRider(t, "internal@example.com")
		// Recording the charge fails, after Stripe charged.
		b.Exec(t, `CREATE FUNCTION fail_charge() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'simulated failure'; END $$`)
		b.Exec(t, `CREATE TRIGGER fail_charge BEFORE UPDATE OF stripe_charge_id ON rides
			FOR EACH ROW EXECUTE FUNCTION fail_charge()`)

		_, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		e := testkit.RequireCode(t, err, service.CodeInternal)
		require.Positive(t, e.RetryAfter)
		require.NotContains(t, e.Message, "simulated", "internal detail is not shown")
		k := b.key(t, uid, key)
		require.False(t, k.locked)
		require.Equal(t, "ride_created", k.point)

		b.Exec(t, `DROP TRIGGER fail_charge ON rides`)
		resp, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.Equal(t, 1, b.succeededCharges())
	})

	t.Run("SerializationFailureIsRetriedInside", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid := b.Rider(t, "serial@example.com", "tok_visa").ID
		// The first two attempts to create a ride fail as a serialization
		// failure would. A sequence counts them: it is not rolled back.
		b.Exec(t, `CREATE SEQUENCE serial_attempts`)
		b.Exec(t, `CREATE FUNCTION fail_serial() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF nextval('serial_attempts') <= 2 THEN
					RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001';
				END IF;
				RETURN NEW;
			END $$`)
		b.Exec(t, `CREATE TRIGGER fail_serial BEFORE INSERT ON rides FOR EACH ROW EXECUTE FUNCTION fail_serial()`)
		retries := b.Service.Stats().TxRetries

		key := testkit.NewKey()
		resp, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.Equal(t, retries+2, b.Service.Stats().TxRetries)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides`))
		require.False(t, b.key(t, uid, key).locked)
	})

	t.Run("PersistentSerializationFailureUnlocksKey", func(t *testing.T) {
		t.Parallel()
		b, uid, key := setupRider(t, "serial2@example.com")
		// The ride is created, then recording the charge keeps failing.
		b.Exec(t, `CREATE FUNCTION fail_serial() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001'; END $$`)
		b.Exec(t, `CREATE TRIGGER fail_serial BEFORE UPDATE OF stripe_charge_id ON rides FOR EACH ROW EXECUTE FUNCTION fail_serial()`)

		_, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
		testkit.RequireCode(t, err, service.CodeInternal)
		k := b.key(t, uid, key)
		require.False(t, k.locked)
		require.Equal(t, "ride_created", k.point)
	})

	t.Run("ConcurrentRequestsWithOneKeyChargeOnce", func(t *testing.T) {
		t.Parallel()
		b, uid, key := setupRider(t, "crowd@example.com")

		const n = 100
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			created   [][]byte
			conflicts int
			others    []string
		)
		start := make(chan struct{})
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				resp, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil && service.ErrorCode(err) == service.CodeKeyInUse:
					conflicts++
				case err != nil:
					others = append(others, err.Error())
				case resp.Status != http.StatusCreated:
					others = append(others, string(resp.Body))
				default:
					created = append(created, resp.Body)
				}
			}()
		}
		close(start)
		wg.Wait()

		require.Empty(t, others)
		require.Equal(t, n, len(created)+conflicts)
		require.NotEmpty(t, created)
		for _, body := range created {
			require.Equal(t, created[0], body, "every 201 is the same response")
		}
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides`))
		require.Equal(t, 1, b.succeededCharges())
		require.False(t, b.key(t, uid, key).locked)
	})

	t.Run("InvalidInputWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid := b.Rider(t, "invalid@example.com", "tok_visa").ID
		for _, p := range []service.RideCreateParams{
			{OriginLat: 90.0001},
			{OriginLon: -180.5},
			{TargetLat: -91},
			{TargetLon: 181},
		} {
			_, err := b.Service.RideCreate(b.Ctx, uid, testkit.NewKey(), p, nil)
			e := testkit.RequireCode(t, err, service.CodeInvalid)
			require.Contains(t, e.Field, "body.")
		}
		// Bounds are inclusive.
		resp, err := b.Service.RideCreate(b.Ctx, uid, testkit.NewKey(), service.RideCreateParams{OriginLat: 90, OriginLon: -180, TargetLat: -90, TargetLon: 180}, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM idempotency_keys`))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides`))
	})
}

func TestRideGet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.Rider(t, "get-alice@example.com", "tok_visa").ID
	bob := b.Rider(t, "get-bob@example.com", "tok_visa").ID
	resp, err := b.Service.RideCreate(b.Ctx, alice, testkit.NewKey(), testkit.SomeRide, nil)
	require.NoError(t, err)
	created := testkit.DecodeRide(t, resp.Body)

	got, err := b.Service.RideGet(b.Ctx, alice, created.ID)
	require.NoError(t, err)
	require.Equal(t, created.ID, got.ID)
	require.Equal(t, created.StripeChargeID, got.StripeChargeID)

	_, err = b.Service.RideGet(b.Ctx, bob, created.ID)
	testkit.RequireCode(t, err, service.CodeNotFound)
}

func TestParseIdempotencyKey(t *testing.T) {
	t.Parallel()
	long := make([]byte, 256)
	for i := range long {
		long[i] = 'k'
	}
	for _, tc := range []struct {
		header, want string
		ok           bool
	}{
		{"0123456789abcdefghij", "0123456789abcdefghij", true},
		{`"0123456789abcdefghij"`, "0123456789abcdefghij", true},
		{`"0123456789abcdefgh\"j"`, `0123456789abcdefgh"j`, true},
		{string(long[:255]), string(long[:255]), true},
		{string(long), "", false},
		{"", "", false},
		{"too-short", "", false},
		{"0123456789 abcdefghij", "", false},
		{"0123456789abcdefghij\x7f", "", false},
		{`"0123456789abcdefghij`, "", false},
		{`"0123456789abc"defghij"`, "", false},
	} {
		got, err := service.ParseIdempotencyKey(tc.header)
		if tc.ok {
			require.NoError(t, err, tc.header)
			require.Equal(t, tc.want, got)
		} else {
			testkit.RequireCode(t, err, service.CodeKeyInvalid)
		}
	}
}

// TestReplayFromMemory: a process answers replays of a key it saw finished
// from memory, for Config.ReplayCacheTTL, and from the database after that.
func TestReplayFromMemory(t *testing.T) {
	t.Parallel()
	b, uid, key := setupRider(t, "memory@example.com")
	first, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	require.NoError(t, err)

	// The key's row is gone (as if reaped): the process still replays what
	// it saw finish …
	b.Exec(t, `DELETE FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2`, uid, key)
	again, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.Body, again.Body)
	require.Equal(t, 1, b.succeededCharges())

	// … until the entry expires; then the database decides: a new request
	// (reaped keys are older than Stripe's key window, so Stripe has
	// forgotten the processor key too).
	b.Clock.Advance(service.DefaultReplayCacheTTL)
	b.Stripe.Advance(25 * time.Hour)
	fresh, err := b.Service.RideCreate(b.Ctx, uid, key, testkit.SomeRide, nil)
	require.NoError(t, err)
	require.False(t, fresh.Replayed)
	require.NotEqual(t, first.Body, fresh.Body)
	require.Equal(t, 2, b.succeededCharges())
}
