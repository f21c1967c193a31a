package jobs_test

import (
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/jobs"
)

// TestRiverConfigDefaults: zero fields take the package's defaults, and
// River's own defaults stay River's.
func TestRiverConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg := jobs.RiverConfig(jobs.Config{}, nil)
	require.Equal(t, jobs.DefaultMaxWorkers, cfg.Queues[river.QueueDefault].MaxWorkers)
	require.Len(t, cfg.PeriodicJobs, 2)
	require.NotNil(t, cfg.Workers)
	require.Zero(t, cfg.JobTimeout)
	require.Zero(t, cfg.RescueStuckJobsAfter)

	cfg = jobs.RiverConfig(jobs.Config{MaxWorkers: 3, JobTimeout: time.Minute, RescueStuckJobsAfter: 2 * time.Hour}, nil)
	require.Equal(t, 3, cfg.Queues[river.QueueDefault].MaxWorkers)
	require.Equal(t, time.Minute, cfg.JobTimeout)
	require.Equal(t, 2*time.Hour, cfg.RescueStuckJobsAfter)
}
