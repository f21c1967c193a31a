package jobs_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/jobs"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/receipts"
)

func TestCustomerCreateWorker(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name       string
		source     string
		faults     int
		wantEvent  river.EventKind
		customers  int
		customerID bool
	}{
		{name: "RetriedThroughFailuresMakesOneCustomer", source: "tok_visa", faults: 2, wantEvent: river.EventKindJobCompleted, customers: 1, customerID: true},
		// A refused source is the rider's registration state: recorded, and
		// the job is done.
		{name: "DeclinedSourceIsRecordedAndTheJobDone", source: "tok_chargeDeclined", wantEvent: river.EventKindJobCompleted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if tc.faults > 0 {
				b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpCustomerCreate, Kind: fakestripe.FaultStatus, Status: 500, Times: tc.faults})
			}
			uid := b.Rider(t, "job@example.com", tc.source).ID

			final := b.waitFinal(t, service.CustomerCreateArgs{}.Kind(), 1)[0]
			require.Equal(t, tc.wantEvent, final.Kind)
			require.Equal(t, tc.faults+1, final.Job.Attempt)
			require.Len(t, b.Stripe.CustomersWithMetadata("ar_key", service.CustomerKey(b.Service.Namespace(), "job@example.com", tc.source)), tc.customers)

			var stored *string
			require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT stripe_customer_id FROM users WHERE id = $1`, uid).Scan(&stored))
			require.Equal(t, tc.customerID, stored != nil)
			want := "registered"
			if !tc.customerID {
				want = "refused"
			}
			require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM processor_registrations WHERE user_id = $1 AND processor = 'stripe' AND status = $2`, uid, want))
		})
	}
}

func TestRideReceiptWorker(t *testing.T) {
	t.Parallel()

	t.Run("OneMessagePerChargedRideThroughRefusals", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid := b.rider(t, "receipts@example.com")
		b.Sink.Refuse(2, 451) // the first two sends fail; their jobs retry

		rides := map[string]bool{}
		for i := range 3 {
			resp, err := b.Service.RideCreate(b.Ctx, uid, fmt.Sprintf("receipt-worker-key-%08d", i), testkit.SomeRide, nil)
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, resp.Status)
			var ride service.Ride
			require.NoError(t, json.Unmarshal(resp.Body, &ride))
			rides[receipts.MessageID(receipts.KindRide, ride.ID, service.DefaultMailFrom)] = true
		}
		finals := b.waitFinal(t, service.RideReceiptArgs{}.Kind(), 3)
		attempts := 0
		for _, ev := range finals {
			require.Equal(t, river.EventKindJobCompleted, ev.Kind)
			attempts += ev.Job.Attempt
		}
		require.Equal(t, 5, attempts, "two refused sends were retried")

		byID := b.Sink.CountByMessageID()
		require.Len(t, byID, 3)
		for id, n := range byID {
			require.True(t, rides[id], "unexpected message %s", id)
			require.Equal(t, 1, n, "message %s", id)
		}
		require.Equal(t, 3, b.Sink.Count())
		require.Equal(t, 3, b.Count(t, `SELECT count(*) FROM receipts WHERE kind = 'ride'`))
		// Each receipt was recorded in the transaction that completed its
		// job (river.JobCompleteTx): the two rows carry one xmin.
		require.Equal(t, 3, b.Count(t, `
			SELECT count(*) FROM receipts r JOIN river_job j
			  ON j.kind = 'ride_receipt' AND (j.args->>'ride_id')::bigint = r.ride_id
			WHERE j.state = 'completed' AND j.xmin = r.xmin`))
	})

	t.Run("SendRecordedLateIsResentWithTheSameMessageID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid := b.rider(t, "late@example.com")
		// The first record of a receipt fails after the server accepted the
		// message, as a crash between the two would.
		_, err := b.Pool.Exec(b.Ctx, `
			CREATE SEQUENCE receipt_faults; -- nextval survives the rollback it causes
			CREATE FUNCTION fail_receipt() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF nextval('receipt_faults') = 1 THEN
					RAISE EXCEPTION 'injected receipt record failure';
				END IF;
				RETURN NEW;
			END $$;
			CREATE TRIGGER fail_receipt BEFORE INSERT ON receipts FOR EACH ROW EXECUTE FUNCTION fail_receipt();`)
		require.NoError(t, err)

		resp, err := b.Service.RideCreate(b.Ctx, uid, "receipt-late-key-000000001", testkit.SomeRide, nil)
		require.NoError(t, err)
		var ride service.Ride
		require.NoError(t, json.Unmarshal(resp.Body, &ride))

		final := b.waitFinal(t, service.RideReceiptArgs{}.Kind(), 1)[0]
		require.Equal(t, river.EventKindJobCompleted, final.Kind, "job: %+v", final.Job)
		require.Equal(t, 2, final.Job.Attempt)
		// At least once over SMTP: two copies, one Message-ID, one record.
		id := receipts.MessageID(receipts.KindRide, ride.ID, service.DefaultMailFrom)
		require.Equal(t, map[string]int{id: 2}, b.Sink.CountByMessageID())
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM receipts WHERE ride_id = $1`, ride.ID))
	})
}

func TestCompleterJobs(t *testing.T) {
	t.Parallel()

	t.Run("AbandonedRideIsChargedOnceAndGetsItsReceipt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid := b.rider(t, "completer@example.com")
		keyID := b.AbandonRide(t, uid, "completer-key-0000000001")
		b.Age(t, testkit.AbandonedAfter+time.Second)

		_, err := b.client.Insert(b.Ctx, jobs.KeyCompleterArgs{}, nil)
		require.NoError(t, err)
		require.Equal(t, river.EventKindJobCompleted, b.waitFinal(t, jobs.KeyCompleterArgs{}.Kind(), 1)[0].Kind)
		done := b.waitFinal(t, service.KeyCompleteArgs{}.Kind(), 1)[0]
		require.Equal(t, river.EventKindJobCompleted, done.Kind)
		require.Equal(t, 1, done.Job.Attempt)

		var point string
		var code int
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT recovery_point, response_code FROM idempotency_keys WHERE id = $1`, keyID).Scan(&point, &code))
		require.Equal(t, "finished", point)
		require.Equal(t, http.StatusCreated, code)
		require.Len(t, b.Stripe.SucceededCharges(), 1)

		require.Equal(t, river.EventKindJobCompleted, b.waitFinal(t, service.RideReceiptArgs{}.Kind(), 1)[0].Kind)
		require.Equal(t, 1, b.Sink.Count())
	})

	t.Run("ExhaustedCompletionIsDeadLetteredAndLeftToAnOperator", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid := b.rider(t, "dead@example.com")
		keyID := b.AbandonRide(t, uid, "dead-letter-key-00000001")
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultStatus, Status: 503, Times: 1000})
		b.Age(t, testkit.AbandonedAfter+time.Second)

		n, err := b.Service.KeysAbandonedEnqueue(b.Ctx, 100)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		dead := b.waitFinal(t, service.KeyCompleteArgs{}.Kind(), 1)[0]
		require.Equal(t, river.EventKindJobFailed, dead.Kind)
		require.Equal(t, rivertype.JobStateDiscarded, dead.Job.State)
		require.Equal(t, service.KeyCompleteMaxAttempts, dead.Job.Attempt)
		require.Empty(t, b.Stripe.SucceededCharges())

		listed, err := b.Service.KeysDead(b.Ctx, 10)
		require.NoError(t, err)
		require.Len(t, listed, 1)
		require.Equal(t, keyID, listed[0].ID)
		require.True(t, listed[0].Completion.Dead())
		require.Contains(t, listed[0].Completion.LastError, "unavailable")

		n, err = b.Service.KeysAbandonedEnqueue(b.Ctx, 100)
		require.NoError(t, err)
		require.Zero(t, n, "a dead-lettered key is not queued again")

		// The operator pushes it through once Stripe is back.
		b.Stripe.ClearFaults()
		resp, err := b.Service.KeyComplete(b.Ctx, keyID)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.Len(t, b.Stripe.SucceededCharges(), 1)
		listed, err = b.Service.KeysDead(b.Ctx, 10)
		require.NoError(t, err)
		require.Empty(t, listed)
	})
}

func TestReaperJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	uid := b.rider(t, "reaperjob@example.com")
	_, err := b.Service.RideCreate(b.Ctx, uid, "reaper-job-key-000000001", testkit.SomeRide, nil)
	require.NoError(t, err)
	b.Age(t, 73*time.Hour)

	_, err = b.client.Insert(b.Ctx, jobs.KeyReaperArgs{}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobCompleted, b.waitFinal(t, jobs.KeyReaperArgs{}.Kind(), 1)[0].Kind)
	require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys`))
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE charge_status = 'charged'`))
}

// The periodic jobs as serve registers them: River's elected leader inserts
// both passes at start and they run.
func TestPeriodicJobs(t *testing.T) {
	t.Parallel()
	b := setupWith(t, options{periodic: jobs.PeriodicJobs(jobs.Config{})})
	require.Equal(t, river.EventKindJobCompleted, b.waitFinal(t, jobs.KeyCompleterArgs{}.Kind(), 1)[0].Kind)
	require.Equal(t, river.EventKindJobCompleted, b.waitFinal(t, jobs.KeyReaperArgs{}.Kind(), 1)[0].Kind)
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

func TestRefundJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	uid := b.rider(t, "refundjobs@example.com")
	resp, err := b.Service.RideCreate(b.Ctx, uid, "refund-jobs-ride-key-0001", testkit.SomeRide, nil)
	require.NoError(t, err)
	var ride service.Ride
	require.NoError(t, json.Unmarshal(resp.Body, &ride))
	b.waitFinal(t, service.RideReceiptArgs{}.Kind(), 1)

	// The refund's client gives up after a processor outage; the completer
	// finishes the refund, once, and its receipt goes out once.
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpRefundCreate, Kind: fakestripe.FaultStatus, Status: 503, Times: 1})
	_, err = b.Service.RideRefundCreate(b.Ctx, uid, "refund-jobs-refund-key-01", ride.ID, nil)
	require.Equal(t, service.CodeProcessorUnavailable, service.ErrorCode(err), "err: %v", err)
	b.Age(t, testkit.AbandonedAfter+time.Second)
	_, err = b.client.Insert(b.Ctx, jobs.KeyCompleterArgs{}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobCompleted, b.waitFinal(t, service.KeyCompleteArgs{}.Kind(), 1)[0].Kind)
	require.Len(t, b.Stripe.Refunds(), 1)

	require.Equal(t, river.EventKindJobCompleted, b.waitFinal(t, service.RefundReceiptArgs{}.Kind(), 1)[0].Kind)
	byID := b.Sink.CountByMessageID()
	require.Equal(t, map[string]int{
		receipts.MessageID(receipts.KindRide, ride.ID, service.DefaultMailFrom):   1,
		receipts.MessageID(receipts.KindRefund, ride.ID, service.DefaultMailFrom): 1,
	}, byID)
	again, err := b.Receipts.RefundSend(b.Ctx, ride.ID, nil)
	require.NoError(t, err)
	require.False(t, again)
	require.Equal(t, 2, b.Sink.Count())
}
