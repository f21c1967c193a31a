package jobs_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/jobs"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/mail"
	"github.com/atomicrides/atomicrides/service/mail/mailsink"
	"github.com/atomicrides/atomicrides/service/payments"
	"github.com/atomicrides/atomicrides/service/payments/fakestripe"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// quickRetry retries failed jobs at once, so that a test sees River's retries
// without waiting for its production backoff.
type quickRetry struct{}

func (quickRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now() }

// testBundle is one isolated world: a database, the fake Stripe, a mail
// sink, the service and a started River client running every worker.
type testBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	fake   *fakestripe.Server
	sink   *mailsink.Sink
	svc    *service.Service
	client *river.Client[pgx.Tx]
	events <-chan *river.Event
	// early holds the events read while waiting for other jobs, so that no
	// final event is lost to a wait for another kind.
	early []*river.Event
}

// options vary a bundle.
type options struct {
	// periodic are registered on the River client, as serve registers them.
	periodic []*river.PeriodicJob
}

const abandonedAfter = 5 * time.Minute

func setup(t *testing.T) *testBundle {
	t.Helper()
	return setupWith(t, options{})
}

func setupWith(t *testing.T, opts options) *testBundle {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.New(t)
	fake := fakestripe.New(fakestripe.Options{})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DisableKeepAlives = true

	sink := mailsink.New(mailsink.Options{})
	sinkURL, stopSink, err := sink.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = stopSink(ctx) })
	mailer, err := mail.New(mail.Config{URL: sinkURL, Timeout: 5 * time.Second})
	require.NoError(t, err)

	svc, err := service.New(service.Config{
		Pool: pool,
		Payments: payments.New(payments.Config{
			APIBase: srv.URL, SecretKey: "sk_test_jobs", MaxNetworkRetries: -1, Timeout: 5 * time.Second,
			HTTPClient: &http.Client{Transport: transport},
		}),
		Mailer:         mailer,
		AbandonedAfter: abandonedAfter,
	})
	require.NoError(t, err)

	workers := river.NewWorkers()
	jobs.Register(workers, svc)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		Workers:           workers,
		RetryPolicy:       quickRetry{},
		FetchPollInterval: 20 * time.Millisecond,
		FetchCooldown:     10 * time.Millisecond,
		PeriodicJobs:      opts.periodic,
	})
	require.NoError(t, err)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed)
	t.Cleanup(cancel)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { _ = client.Stop(ctx) })
	return &testBundle{ctx: ctx, pool: pool, fake: fake, sink: sink, svc: svc, client: client, events: events}
}

// waitFinal waits for n jobs of kind to reach a final state (completed,
// cancelled or discarded) and returns their last events. Events of other
// jobs read meanwhile are kept for later waits.
func (b *testBundle) waitFinal(t *testing.T, kind string, n int) []*river.Event {
	t.Helper()
	final := func(ev *river.Event) bool {
		// A failed job that is not discarded will be retried.
		return ev.Job.Kind == kind && (ev.Kind != river.EventKindJobFailed || ev.Job.State == rivertype.JobStateDiscarded)
	}
	var finals []*river.Event
	early := b.early[:0]
	for _, ev := range b.early {
		if final(ev) && len(finals) < n {
			finals = append(finals, ev)
		} else {
			early = append(early, ev)
		}
	}
	b.early = early
	timeout := time.After(60 * time.Second)
	for len(finals) < n {
		select {
		case ev := <-b.events:
			switch {
			case final(ev):
				finals = append(finals, ev)
			case ev.Job.Kind != kind:
				b.early = append(b.early, ev)
			}
		case <-timeout:
			t.Fatalf("%d of %d %s jobs finished", len(finals), n, kind)
		}
	}
	return finals
}

// user creates a rider paying with source.
func (b *testBundle) user(t *testing.T, email, source string) int64 {
	t.Helper()
	res, err := b.svc.UserUpsert(b.ctx, service.UserUpsertParams{Email: email, PaymentSource: source})
	require.NoError(t, err)
	return res.User.ID
}

func (b *testBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, query, args...).Scan(&n))
	return n
}

// age makes the service's records older by d, as if d had passed on the
// database's clock, which judges leases, idle times and ages.
func (b *testBundle) age(t *testing.T, d time.Duration) {
	t.Helper()
	for _, q := range []string{
		`UPDATE idempotency_keys SET created_at = created_at - make_interval(secs => $1),
			last_run_at = last_run_at - make_interval(secs => $1), locked_at = locked_at - make_interval(secs => $1)`,
		`UPDATE refunds SET created_at = created_at - make_interval(secs => $1), updated_at = updated_at - make_interval(secs => $1)`,
		`UPDATE rides SET created_at = created_at - make_interval(secs => $1)`,
		`UPDATE users SET created_at = created_at - make_interval(secs => $1)`,
	} {
		_, err := b.pool.Exec(b.ctx, q, d.Seconds())
		require.NoError(t, err)
	}
}
