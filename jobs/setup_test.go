package jobs_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/jobs"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/bankinbox"
)

// quickRetry retries failed jobs at once, so that a test sees River's retries
// without waiting for its production backoff.
type quickRetry struct{}

func (quickRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now() }

// testBundle is one isolated world (testkit.Env: a database, the fake
// Stripe, a mail sink, a clock and the service) with a started River client
// running every worker.
type testBundle struct {
	*testkit.Env
	client *river.Client[pgx.Tx]
	events <-chan *river.Event
	// early holds the events read while waiting for other jobs, so that no
	// final event is lost to a wait for another kind.
	early []*river.Event
	// adyen is the fake Adyen of a world with options.adyenFirst.
	adyen *testkit.Adyen
}

// options vary a bundle.
type options struct {
	// periodic are registered on the River client, as serve registers them.
	periodic []*river.PeriodicJob
	// inbox, when set, registers the settlement fetch of that inbox.
	inbox *bankinbox.Config
	// adyenFirst builds the world of testkit.NewAdyenFirst (Adyen, then
	// Stripe; Adyen's notifications received).
	adyenFirst bool
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return setupWith(t, options{})
}

func setupWith(t *testing.T, opts options) *testBundle {
	t.Helper()
	var env *testkit.Env
	var ady *testkit.Adyen
	if opts.adyenFirst {
		w := testkit.NewAdyenFirst(t, 5, time.Hour)
		env, ady = w.Env, w.Adyen
	} else {
		env = testkit.New(t)
	}
	workers := river.NewWorkers()
	jobs.Register(workers, jobs.Parts{Service: env.Service, Settlements: env.Settlements, Receipts: env.Receipts})
	if opts.inbox != nil {
		river.AddWorker(workers, jobs.NewSettlementFetchWorker(env.Settlements, *opts.inbox))
	}
	client, err := river.NewClient(riverpgxv5.New(env.Pool), &river.Config{
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
	require.NoError(t, client.Start(env.Ctx))
	t.Cleanup(func() { _ = client.Stop(env.Ctx) })
	return &testBundle{Env: env, client: client, events: events, adyen: ady}
}

// rider creates a rider paying by card, waits until the job creating the
// rider's Stripe customer has ended, and returns the rider's id.
func (b *testBundle) rider(t *testing.T, email string) int64 {
	t.Helper()
	uid := b.Rider(t, email, "tok_visa").ID
	b.waitFinal(t, service.CustomerCreateArgs{}.Kind(), 1)
	return uid
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
