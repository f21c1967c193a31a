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

func decodeRefund(t *testing.T, body []byte) service.RideRefundResult {
	t.Helper()
	var r service.RideRefundResult
	require.NoError(t, json.Unmarshal(body, &r))
	return r
}

// refundPosts counts refund requests that reached the fake Stripe.
func (b *testBundle) refundPosts() int { return b.Stripe.RequestCount(http.MethodPost, "/v1/refunds") }

func (b *testBundle) refundLists() int { return b.Stripe.RequestCount(http.MethodGet, "/v1/refunds") }

func (b *testBundle) keyID(t *testing.T, userID int64, key string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, b.Pool.QueryRow(b.Ctx,
		`SELECT id FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2`, userID, key).Scan(&id))
	return id
}

func (b *testBundle) refundStatus(t *testing.T, rideID int64) string {
	t.Helper()
	var status string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT status FROM refunds WHERE ride_id = $1`, rideID).Scan(&status))
	return status
}

func (b *testBundle) receiptJobs(t *testing.T, rideID int64) int {
	t.Helper()
	return b.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'refund_receipt' AND args->>'ride_id' = $1`,
		strconv.FormatInt(rideID, 10))
}

func TestRideRefundCreate(t *testing.T) {
	t.Parallel()

	t.Run("NewKeyRefundsOnceAndFinishes", func(t *testing.T) {
		t.Parallel()
		b, uid, ride := setupRide(t, "refund@example.com")
		key := testkit.NewKey()

		resp, err := b.Service.RideRefundCreate(b.Ctx, uid, key, ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		require.False(t, resp.Replayed)
		ref := decodeRefund(t, resp.Body)
		require.Equal(t, ride.ID, ref.RideID)
		require.Equal(t, service.RideRefundRefunded, ref.Status)
		require.EqualValues(t, 2000, ref.AmountCents)
		require.Equal(t, "usd", ref.Currency)

		refunds := b.Stripe.RefundsForCharge(*ride.StripeChargeID)
		require.Len(t, refunds, 1)
		require.Equal(t, ref.StripeRefundID, refunds[0].ID)
		require.EqualValues(t, 2000, refunds[0].Amount)
		refundKey := service.RefundKey(b.Service.Namespace(), *ride.StripeChargeID, 0)
		require.Equal(t, refundKey, refunds[0].Metadata["ar_key"])
		require.Equal(t, b.Service.Namespace(), refunds[0].Metadata["ar_ns"])
		require.NotEmpty(t, refunds[0].Metadata["ar_rider"])
		var keys []string
		for _, r := range b.Stripe.Requests() {
			if r.Method == http.MethodPost && r.Path == "/v1/refunds" {
				keys = append(keys, r.IdempotencyKey)
			}
		}
		require.Equal(t, []string{refundKey}, keys, "the entity-level key of the charge's first attempt")

		require.Equal(t, "refunded", b.refundStatus(t, ride.ID))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM refunds WHERE stripe_refund_id = $1 AND idempotency_key_id = $2`,
			ref.StripeRefundID, b.keyID(t, uid, key)))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'refund.requested'`))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'refund.succeeded'`))
		require.Equal(t, 1, b.receiptJobs(t, ride.ID))
		k := b.key(t, uid, key)
		require.Equal(t, "finished", k.point)
		require.False(t, k.locked)
		require.EqualValues(t, 201, *k.code)

		got, err := b.Service.RideGet(b.Ctx, uid, ride.ID)
		require.NoError(t, err)
		require.Equal(t, service.RideRefundRefunded, got.RefundStatus)
		require.Equal(t, ref.StripeRefundID, *got.StripeRefundID)
		require.Equal(t, service.RideChargeCharged, got.ChargeStatus)
	})

	t.Run("ReplayIsByteIdenticalAndNeverReachesStripe", func(t *testing.T) {
		t.Parallel()
		b, uid, ride := setupRide(t, "refund-replay@example.com")
		key := testkit.NewKey()
		first, err := b.Service.RideRefundCreate(b.Ctx, uid, key, ride.ID, nil)
		require.NoError(t, err)
		requests := len(b.Stripe.Requests())

		for range 3 {
			again, err := b.Service.RideRefundCreate(b.Ctx, uid, key, ride.ID, nil)
			require.NoError(t, err)
			require.True(t, again.Replayed)
			require.Equal(t, http.StatusCreated, again.Status)
			require.Equal(t, first.Body, again.Body)
		}
		require.Equal(t, requests, len(b.Stripe.Requests()), "a replay must not call Stripe")
		require.Len(t, b.Stripe.Refunds(), 1)
		require.Equal(t, 1, b.receiptJobs(t, ride.ID))
	})

	t.Run("OtherKeyAfterRefundGetsTheSameRefundWithoutStripe", func(t *testing.T) {
		t.Parallel()
		b, uid, ride := setupRide(t, "refund-other@example.com")
		first, err := b.Service.RideRefundCreate(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, first.Status)
		requests := len(b.Stripe.Requests())

		other := testkit.NewKey()
		second, err := b.Service.RideRefundCreate(b.Ctx, uid, other, ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, second.Status, "another key gets the existing refund")
		require.False(t, second.Replayed)
		require.Equal(t, first.Body, second.Body, "the same refund, the same representation")

		again, err := b.Service.RideRefundCreate(b.Ctx, uid, other, ride.ID, nil)
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, http.StatusOK, again.Status)
		require.Equal(t, second.Body, again.Body)

		require.Equal(t, requests, len(b.Stripe.Requests()), "no new Stripe call")
		require.Len(t, b.Stripe.Refunds(), 1)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM refunds`))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'refund.requested'`))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'refund.succeeded'`))
		require.Equal(t, 1, b.receiptJobs(t, ride.ID))
		require.Equal(t, "finished", b.key(t, uid, other).point)
	})

	t.Run("ConcurrentKeysRefundOnce", func(t *testing.T) {
		t.Parallel()
		b, uid, ride := setupRide(t, "refund-crowd@example.com")

		const n = 24
		keys := make([]string, n)
		for i := range keys {
			keys[i] = testkit.NewKey()
		}
		type result struct {
			resp *service.Response
			err  error
		}
		results := make([]result, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				resp, err := b.Service.RideRefundCreate(b.Ctx, uid, keys[i], ride.ID, nil)
				results[i] = result{resp, err}
			}()
		}
		close(start)
		wg.Wait()

		// A request that met another at Stripe (the entity key in flight)
		// got a retryable 503; everything else is answered.
		for i, r := range results {
			if r.err != nil {
				testkit.RequireCode(t, r.err, service.CodeProcessorUnavailable)
				resp, err := b.Service.RideRefundCreate(b.Ctx, uid, keys[i], ride.ID, nil)
				require.NoError(t, err)
				results[i] = result{resp, nil}
			}
		}

		require.Len(t, b.Stripe.Refunds(), 1, "one refund at Stripe")
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM refunds`))
		executed := 0
		for _, r := range b.Stripe.Requests() {
			if r.Method == http.MethodPost && r.Path == "/v1/refunds" {
				require.Equal(t, service.RefundKey(b.Service.Namespace(), *ride.StripeChargeID, 0), r.IdempotencyKey)
				if r.Status == http.StatusOK && !r.Replayed {
					executed++
				}
			}
		}
		require.Equal(t, 1, executed)
		created := 0
		for _, r := range results {
			switch r.resp.Status {
			case http.StatusCreated:
				created++
			case http.StatusOK:
			default:
				t.Fatalf("unexpected answer %d %s", r.resp.Status, r.resp.Body)
			}
			require.Equal(t, results[0].resp.Body, r.resp.Body, "every answer is the same refund")
		}
		require.Equal(t, 1, created, "exactly one key created the refund")
		require.Equal(t, b.Stripe.Refunds()[0].ID, decodeRefund(t, results[0].resp.Body).StripeRefundID)
		require.Equal(t, 1, b.receiptJobs(t, ride.ID))
		require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE locked_at IS NOT NULL OR recovery_point <> 'finished'`))
	})

	t.Run("KeysMeetingAtStripeConvergeOnOneRefund", func(t *testing.T) {
		t.Parallel()
		b, uid, ride := setupRide(t, "refund-meet@example.com")
		gate, fired := make(chan struct{}), make(chan struct{}, 1)
		release := sync.OnceFunc(func() { close(gate) })
		t.Cleanup(release)
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpRefundCreate, Kind: fakestripe.FaultLatency, Gate: gate, Fired: fired, Times: 1})

		first, second := testkit.NewKey(), testkit.NewKey()
		done := make(chan *service.Response, 1)
		go func() {
			resp, err := b.Service.RideRefundCreate(b.Ctx, uid, first, ride.ID, nil)
			if err != nil {
				t.Error(err)
			}
			done <- resp
		}()
		<-fired // the first request's refund is in flight at Stripe

		// The second key joins the pending refund and meets the first at
		// Stripe under the same entity key: Stripe refuses to run it twice.
		_, err := b.Service.RideRefundCreate(b.Ctx, uid, second, ride.ID, nil)
		testkit.RequireCode(t, err, service.CodeProcessorUnavailable)
		require.Equal(t, "refund_created", b.key(t, uid, second).point)
		require.False(t, b.key(t, uid, second).locked)

		release()
		resp := <-done
		require.Equal(t, http.StatusCreated, resp.Status)

		posts := b.refundPosts()
		again, err := b.Service.RideRefundCreate(b.Ctx, uid, second, ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, again.Status)
		require.Equal(t, resp.Body, again.Body)
		require.Equal(t, posts, b.refundPosts())
		require.Len(t, b.Stripe.Refunds(), 1)
		require.Equal(t, 2, posts, "both keys reached Stripe, one refund was made")
	})

	t.Run("StripeUnavailableIsResumedFromRefundCreated", func(t *testing.T) {
		t.Parallel()
		b, uid, ride := setupRide(t, "refund-503@example.com")
		key := testkit.NewKey()
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpRefundCreate, Kind: fakestripe.FaultStatus, Status: 503, Times: 1})

		_, err := b.Service.RideRefundCreate(b.Ctx, uid, key, ride.ID, nil)
		e := testkit.RequireCode(t, err, service.CodeProcessorUnavailable)
		require.Positive(t, e.RetryAfter)
		k := b.key(t, uid, key)
		require.Equal(t, "refund_created", k.point)
		require.False(t, k.locked)
		require.Nil(t, k.code)
		require.Equal(t, "pending", b.refundStatus(t, ride.ID))
		got, err := b.Service.RideGet(b.Ctx, uid, ride.ID)
		require.NoError(t, err)
		require.Equal(t, service.RideRefundPending, got.RefundStatus)
		require.Nil(t, got.StripeRefundID)
		require.Empty(t, b.Stripe.Refunds())
		require.Equal(t, 0, b.receiptJobs(t, ride.ID))

		resp, err := b.Service.RideRefundCreate(b.Ctx, uid, key, ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.Len(t, b.Stripe.Refunds(), 1)
		require.Equal(t, 1, b.receiptJobs(t, ride.ID))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'refund.requested'`))
	})

	t.Run("RefundMadeButAnswerLostIsAdoptedNotRepeated", func(t *testing.T) {
		t.Parallel()
		b, uid, ride := setupRide(t, "refund-lost@example.com")
		key := testkit.NewKey()
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpRefundCreate, Kind: fakestripe.FaultDropAfter, Times: 1})

		_, err := b.Service.RideRefundCreate(b.Ctx, uid, key, ride.ID, nil)
		testkit.RequireCode(t, err, service.CodeProcessorUnavailable)
		require.Len(t, b.Stripe.Refunds(), 1, "Stripe made the refund")
		require.Equal(t, "refund_created", b.key(t, uid, key).point)

		resp, err := b.Service.RideRefundCreate(b.Ctx, uid, key, ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.Equal(t, b.Stripe.Refunds()[0].ID, decodeRefund(t, resp.Body).StripeRefundID)
		require.Len(t, b.Stripe.Refunds(), 1)
	})

	t.Run("LostAnswerIsAdoptedByAnotherKeyAndTheFirstKeyFinishesWithoutStripe", func(t *testing.T) {
		t.Parallel()
		b, uid, ride := setupRide(t, "refund-lost2@example.com")
		first := testkit.NewKey()
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpRefundCreate, Kind: fakestripe.FaultDropAfter, Times: 1})
		_, err := b.Service.RideRefundCreate(b.Ctx, uid, first, ride.ID, nil)
		testkit.RequireCode(t, err, service.CodeProcessorUnavailable)

		// Another key joins the pending refund: Stripe replays the refund
		// it made under the entity key.
		second, err := b.Service.RideRefundCreate(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, second.Status)
		require.Equal(t, b.Stripe.Refunds()[0].ID, decodeRefund(t, second.Body).StripeRefundID)
		posts := b.refundPosts()

		resp, err := b.Service.RideRefundCreate(b.Ctx, uid, first, ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, "the first key asked for the refund")
		require.Equal(t, second.Body, resp.Body)
		require.Equal(t, posts, b.refundPosts(), "a recorded refund is not asked for again")
		require.Len(t, b.Stripe.Refunds(), 1)
		require.Equal(t, 1, b.receiptJobs(t, ride.ID))
	})

	t.Run("CrashBetweenStripeAndRecordIsCompletedFromTheStoredRequest", func(t *testing.T) {
		t.Parallel()
		b, uid, ride := setupRide(t, "refund-crash@example.com")
		key := testkit.NewKey()
		// Recording the refund fails after Stripe made it.
		b.Exec(t, `CREATE FUNCTION fail_refund() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'simulated failure'; END $$`)
		b.Exec(t, `CREATE TRIGGER fail_refund BEFORE UPDATE OF stripe_refund_id ON refunds
			FOR EACH ROW EXECUTE FUNCTION fail_refund()`)

		_, err := b.Service.RideRefundCreate(b.Ctx, uid, key, ride.ID, nil)
		e := testkit.RequireCode(t, err, service.CodeInternal)
		require.NotContains(t, e.Message, "simulated")
		require.Len(t, b.Stripe.Refunds(), 1)
		b.Exec(t, `DROP TRIGGER fail_refund ON refunds`)

		// The process died holding the lease: nobody may take the key over
		// until the lease runs out.
		id := b.keyID(t, uid, key)
		b.Exec(t, `UPDATE idempotency_keys SET locked_at = now(), lock_token = gen_random_uuid() WHERE id = $1`, id)
		_, err = b.Service.KeyComplete(b.Ctx, id)
		testkit.RequireCode(t, err, service.CodeKeyInUse)

		b.Age(t, b.Service.Lease()+time.Second)
		posts := b.refundPosts()
		resp, err := b.Service.KeyComplete(b.Ctx, id)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.Equal(t, b.Stripe.Refunds()[0].ID, decodeRefund(t, resp.Body).StripeRefundID)
		require.Equal(t, posts+1, b.refundPosts())
		require.True(t, b.Stripe.Requests()[len(b.Stripe.Requests())-1].Replayed, "Stripe replayed the refund it made")
		require.Len(t, b.Stripe.Refunds(), 1, "adopted, not repeated")

		// The client's retry replays what the stored request finished with.
		again, err := b.Service.RideRefundCreate(b.Ctx, uid, key, ride.ID, nil)
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, resp.Body, again.Body)
	})

	t.Run("FailureInTheRequestPhaseKeepsNothing", func(t *testing.T) {
		t.Parallel()
		b, uid, ride := setupRide(t, "refund-started@example.com")
		key := testkit.NewKey()
		b.Exec(t, `CREATE FUNCTION fail_refund() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'simulated failure'; END $$`)
		b.Exec(t, `CREATE TRIGGER fail_refund BEFORE INSERT ON refunds FOR EACH ROW EXECUTE FUNCTION fail_refund()`)

		_, err := b.Service.RideRefundCreate(b.Ctx, uid, key, ride.ID, nil)
		testkit.RequireCode(t, err, service.CodeInternal)
		require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE flow = 'ride.refund'`))
		require.Empty(t, b.Stripe.Refunds())

		b.Exec(t, `DROP TRIGGER fail_refund ON refunds`)
		resp, err := b.Service.RideRefundCreate(b.Ctx, uid, key, ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.Len(t, b.Stripe.Refunds(), 1)
	})

	t.Run("KeyOlderThanStripeWindowIsReconciledByListing", func(t *testing.T) {
		t.Parallel()
		b, uid, ride := setupRide(t, "refund-window@example.com")
		key := testkit.NewKey()
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpRefundCreate, Kind: fakestripe.FaultDropAfter, Times: 1})
		_, err := b.Service.RideRefundCreate(b.Ctx, uid, key, ride.ID, nil)
		testkit.RequireCode(t, err, service.CodeProcessorUnavailable)

		// A day later Stripe has forgotten the entity key; our refund row
		// is as old.
		b.Stripe.Advance(25 * time.Hour)
		b.Age(t, 25*time.Hour)
		posts, lists := b.refundPosts(), b.refundLists()

		resp, err := b.Service.RideRefundCreate(b.Ctx, uid, key, ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.Equal(t, lists+1, b.refundLists())
		require.Equal(t, posts, b.refundPosts(), "looked up, not asked for again")
		require.Len(t, b.Stripe.Refunds(), 1)
		require.Equal(t, b.Stripe.Refunds()[0].ID, decodeRefund(t, resp.Body).StripeRefundID)
	})

	t.Run("StripeForgotTheKeyAndAnswersAlreadyRefundedSoTheRefundIsAdopted", func(t *testing.T) {
		t.Parallel()
		b, uid, ride := setupRide(t, "refund-forgot@example.com")
		key := testkit.NewKey()
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpRefundCreate, Kind: fakestripe.FaultDropAfter, Times: 1})
		_, err := b.Service.RideRefundCreate(b.Ctx, uid, key, ride.ID, nil)
		testkit.RequireCode(t, err, service.CodeProcessorUnavailable)

		// Stripe forgets the key earlier than our margin expects.
		b.Stripe.Advance(25 * time.Hour)
		posts, lists := b.refundPosts(), b.refundLists()

		resp, err := b.Service.RideRefundCreate(b.Ctx, uid, key, ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.Equal(t, posts+1, b.refundPosts())
		require.Equal(t, lists+1, b.refundLists())
		require.Len(t, b.Stripe.Refunds(), 1)
		require.Equal(t, b.Stripe.Refunds()[0].ID, decodeRefund(t, resp.Body).StripeRefundID)
	})

	t.Run("RefusedRefundIsStored409AndALaterKeyAsksAgain", func(t *testing.T) {
		t.Parallel()
		b, uid, ride := setupRide(t, "refund-refused@example.com")
		key := testkit.NewKey()
		// Stripe saves the refusal under its idempotency key and replays it
		// for that key: a later request must come under another one.
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpRefundCreate, Kind: fakestripe.FaultRefuse, Status: 400,
			Type: "invalid_request_error", Code: "charge_disputed", Message: "Charge has been disputed.", Times: 1})

		resp, err := b.Service.RideRefundCreate(b.Ctx, uid, key, ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusConflict, resp.Status)
		var p service.Problem
		require.NoError(t, json.Unmarshal(resp.Body, &p))
		require.Equal(t, service.ProblemRefundRejected, p.Type)
		require.Contains(t, p.Detail, "charge_disputed")
		again, err := b.Service.RideRefundCreate(b.Ctx, uid, key, ride.ID, nil)
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, resp.Body, again.Body)

		require.Equal(t, "failed", b.refundStatus(t, ride.ID))
		got, err := b.Service.RideGet(b.Ctx, uid, ride.ID)
		require.NoError(t, err)
		require.Equal(t, service.RideRefundFailed, got.RefundStatus)
		require.Empty(t, b.Stripe.Refunds())
		require.Equal(t, 0, b.receiptJobs(t, ride.ID))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'refund.failed'`))

		later := testkit.NewKey()
		resp, err = b.Service.RideRefundCreate(b.Ctx, uid, later, ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, "the later request asked for the refund")
		require.Len(t, b.Stripe.Refunds(), 1)
		var refundKeys []string
		for _, r := range b.Stripe.Requests() {
			if r.Method == http.MethodPost && r.Path == "/v1/refunds" {
				refundKeys = append(refundKeys, r.IdempotencyKey)
			}
		}
		ns, charge := b.Service.Namespace(), *ride.StripeChargeID
		require.Equal(t, []string{service.RefundKey(ns, charge, 0), service.RefundKey(ns, charge, 1)}, refundKeys,
			"the refusal was recorded, so the next attempt is a new request at Stripe")
		require.Equal(t, "refunded", b.refundStatus(t, ride.ID))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM refunds WHERE idempotency_key_id = $1`, b.keyID(t, uid, later)))
		replayed, err := b.Service.RideRefundCreate(b.Ctx, uid, key, ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusConflict, replayed.Status, "the first key keeps its stored answer")
	})

	t.Run("RefusedRefundRecordedAsMadeMeanwhileIsAnsweredNotAskedAgain", func(t *testing.T) {
		t.Parallel()
		b, uid, ride := setupRide(t, "refund-meanwhile@example.com")
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpRefundCreate, Kind: fakestripe.FaultStatus, Status: 400,
			Type: "invalid_request_error", Code: "charge_disputed", Message: "Charge has been disputed.", Times: 1})
		resp, err := b.Service.RideRefundCreate(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusConflict, resp.Status)
		require.Equal(t, "failed", b.refundStatus(t, ride.ID))

		// A request under another key that was already past its request
		// phase records the refund Stripe made for it; its transaction is
		// still open when a new key asks for the refund again.
		tx, err := b.Pool.Begin(b.Ctx)
		require.NoError(t, err)
		defer tx.Rollback(b.Ctx) //nolint:errcheck // committed below
		_, err = tx.Exec(b.Ctx, `UPDATE refunds SET status = 'refunded', stripe_refund_id = 're_meanwhile', failure_code = NULL WHERE ride_id = $1`, ride.ID)
		require.NoError(t, err)

		type result struct {
			resp *service.Response
			err  error
		}
		done := make(chan result, 1)
		go func() {
			resp, err := b.Service.RideRefundCreate(b.Ctx, uid, testkit.NewKey(), ride.ID, nil)
			done <- result{resp, err}
		}()
		require.Eventually(t, func() bool {
			return b.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) == 1
		}, 10*time.Second, 5*time.Millisecond, "the new request waits for the refund's row")
		require.NoError(t, tx.Commit(b.Ctx))

		got := <-done
		require.NoError(t, got.err)
		require.Equal(t, http.StatusOK, got.resp.Status, string(got.resp.Body))
		require.Equal(t, "re_meanwhile", decodeRefund(t, got.resp.Body).StripeRefundID)
		require.Empty(t, b.Stripe.Refunds(), "the recorded refund is answered, not asked for again")
	})

	t.Run("RidesWithoutAChargeOfTheUserAreRefusedAndNothingIsKept", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		alice := b.Rider(t, "refund-alice@example.com", "tok_visa").ID
		bob := b.Rider(t, "refund-bob@example.com", "tok_visa").ID
		declinedUser := b.Rider(t, "refund-declined@example.com", "tok_chargeCustomerFail").ID
		bobsRide := b.Ride(t, bob)

		declined, err := b.Service.RideCreate(b.Ctx, declinedUser, testkit.NewKey(), testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusPaymentRequired, declined.Status)
		var declinedID int64
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT id FROM rides WHERE user_id = $1`, declinedUser).Scan(&declinedID))

		// Alice's ride stays pending: Stripe is down for its charge.
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultStatus, Status: 503, Times: 1})
		rideKey := testkit.NewKey()
		_, err = b.Service.RideCreate(b.Ctx, alice, rideKey, testkit.SomeRide, nil)
		testkit.RequireCode(t, err, service.CodeProcessorUnavailable)
		var pendingID int64
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT id FROM rides WHERE user_id = $1`, alice).Scan(&pendingID))
		before := len(b.Stripe.Requests())

		refundKey := testkit.NewKey()
		_, err = b.Service.RideRefundCreate(b.Ctx, alice, refundKey, bobsRide.ID, nil)
		testkit.RequireCode(t, err, service.CodeNotFound)
		_, err = b.Service.RideRefundCreate(b.Ctx, alice, refundKey, 1<<40, nil)
		testkit.RequireCode(t, err, service.CodeNotFound)
		_, err = b.Service.RideRefundCreate(b.Ctx, declinedUser, refundKey, declinedID, nil)
		e := testkit.RequireCode(t, err, service.CodeNotRefundable)
		require.Contains(t, e.Message, "declined")
		_, err = b.Service.RideRefundCreate(b.Ctx, alice, refundKey, pendingID, nil)
		e = testkit.RequireCode(t, err, service.CodeNotRefundable)
		require.Contains(t, e.Message, "not decided")
		_, err = b.Service.RideRefundCreate(b.Ctx, alice, refundKey, 0, nil)
		e = testkit.RequireCode(t, err, service.CodeInvalid)
		require.Equal(t, "path.id", e.Field)

		require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE flow = 'ride.refund'`), "no key kept")
		require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM refunds`))
		require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM audit_records WHERE resource_type = 'refund'`))
		require.Equal(t, before, len(b.Stripe.Requests()), "Stripe is not asked")

		// The pending ride is charged later; the same refund key now works,
		// as nothing was stored for it.
		resp, err := b.Service.RideCreate(b.Ctx, alice, rideKey, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		refund, err := b.Service.RideRefundCreate(b.Ctx, alice, refundKey, pendingID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, refund.Status)
		require.Len(t, b.Stripe.Refunds(), 1)
	})

	t.Run("KeyReusedForAnotherRideIs422", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid := b.Rider(t, "refund-reuse@example.com", "tok_visa").ID
		one, two := b.Ride(t, uid), b.Ride(t, uid)
		key := testkit.NewKey()
		_, err := b.Service.RideRefundCreate(b.Ctx, uid, key, one.ID, nil)
		require.NoError(t, err)
		_, err = b.Service.RideRefundCreate(b.Ctx, uid, key, two.ID, nil)
		testkit.RequireCode(t, err, service.CodeKeyReused)
		require.Len(t, b.Stripe.Refunds(), 1)
	})
}
