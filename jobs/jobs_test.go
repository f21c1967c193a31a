package jobs_test

import (
	"context"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/jobs"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/payments"
	"github.com/atomicrides/atomicrides/service/payments/fakestripe"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// quickRetry retries failed jobs at once, so that a test sees River's retries
// without waiting for its production backoff.
type quickRetry struct{}

func (quickRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now() }

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
		{name: "DeclinedSourceCancelsTheJob", source: "tok_chargeDeclined", wantEvent: river.EventKindJobCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := dbtest.New(t)
			fake := fakestripe.New(fakestripe.Options{})
			srv := httptest.NewServer(fake)
			t.Cleanup(srv.Close)
			if tc.faults > 0 {
				fake.Inject(fakestripe.Fault{Op: fakestripe.OpCustomerCreate, Kind: fakestripe.FaultStatus, Status: 500, Times: tc.faults})
			}
			svc, err := service.New(service.Config{Pool: pool, Payments: payments.New(payments.Config{
				APIBase: srv.URL, SecretKey: "sk_test_jobs", MaxNetworkRetries: -1,
			})})
			require.NoError(t, err)

			workers := river.NewWorkers()
			jobs.Register(workers, svc)
			client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
				Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
				Workers:           workers,
				RetryPolicy:       quickRetry{},
				FetchPollInterval: 20 * time.Millisecond,
				FetchCooldown:     10 * time.Millisecond,
			})
			require.NoError(t, err)
			events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed)
			t.Cleanup(cancel)
			require.NoError(t, client.Start(ctx))
			var stopOnce sync.Once
			t.Cleanup(func() { stopOnce.Do(func() { _ = client.Stop(ctx) }) })

			res, err := svc.UserUpsert(ctx, service.UserUpsertParams{Email: "job@example.com", PaymentSource: tc.source})
			require.NoError(t, err)

			var final *river.Event
			timeout := time.After(30 * time.Second)
			for final == nil {
				select {
				case ev := <-events:
					if ev.Kind != river.EventKindJobFailed {
						final = ev
					}
				case <-timeout:
					t.Fatal("the customer job did not finish")
				}
			}
			require.Equal(t, tc.wantEvent, final.Kind)
			require.Equal(t, (service.CustomerCreateArgs{}).Kind(), final.Job.Kind)
			require.Equal(t, tc.faults+1, final.Job.Attempt)
			require.Len(t, fake.CustomersForUser(itoa(res.User.ID)), tc.customers)

			var stored *string
			require.NoError(t, pool.QueryRow(ctx, `SELECT stripe_customer_id FROM users WHERE id = $1`, res.User.ID).Scan(&stored))
			require.Equal(t, tc.customerID, stored != nil)
		})
	}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }
