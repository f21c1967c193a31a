package jobs_test

import (
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/jobs"
)

// TestRiverConfigDefaults: zero fields take the package's defaults, River's
// job timeout stays River's, and a job held by a dead process is rescued
// within minutes, never while a live one could still be running.
func TestRiverConfigDefaults(t *testing.T) {
	t.Parallel()
	env := testkit.New(t)
	svc := env.Service
	parts := jobs.Parts{Service: svc, Settlements: env.Settlements, Receipts: env.Receipts}
	cfg := jobs.RiverConfig(jobs.Config{}, parts)
	require.Equal(t, jobs.DefaultMaxWorkers, cfg.Queues[river.QueueDefault].MaxWorkers)
	require.Len(t, cfg.PeriodicJobs, 6) // completer, hold release, reaper, reconcile, orphan pass, events pass
	require.NotNil(t, cfg.Workers)
	require.Zero(t, cfg.JobTimeout)

	rescue := cfg.RescueStuckJobsAfter
	require.Equal(t, jobs.DefaultRescueStuckJobsAfter(0, svc.Lease()), rescue)
	require.GreaterOrEqual(t, rescue, jobs.MinRescueStuckJobsAfter)
	require.Less(t, rescue, 15*time.Minute, "within minutes, not River's hour")
	for _, timeout := range []time.Duration{river.JobTimeoutDefault, svc.Lease() + jobs.KeyCompleteTimeoutMargin, jobs.ReconcileTimeout} {
		require.Greater(t, rescue, timeout, "no live job is taken for a dead one")
	}
	require.Equal(t, 21*time.Minute, jobs.DefaultRescueStuckJobsAfter(20*time.Minute, svc.Lease()),
		"a longer job timeout pushes the rescue past it")

	cfg = jobs.RiverConfig(jobs.Config{MaxWorkers: 3, JobTimeout: time.Minute, RescueStuckJobsAfter: 2 * time.Hour}, parts)
	require.Equal(t, 3, cfg.Queues[river.QueueDefault].MaxWorkers)
	require.Equal(t, time.Minute, cfg.JobTimeout)
	require.Equal(t, 2*time.Hour, cfg.RescueStuckJobsAfter)
}
