package jobs

import (
	"context"
	"errors"

	"github.com/riverqueue/river"

	"github.com/atomicrides/atomicrides/service"
)

// HoldReleaseBatch is the most holds one pass releases.
const HoldReleaseBatch = 200

// HoldReleaseArgs is the periodic job that releases the holds of trips
// neither completed nor cancelled within the hold expiry.
type HoldReleaseArgs struct{}

// Kind is the job's kind in River.
func (HoldReleaseArgs) Kind() string { return "hold_release" }

// InsertOpts: one attempt; a failed pass is followed by the next period's,
// which takes the rides it left (each ride's release is once).
func (HoldReleaseArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 1}
}

// HoldReleaseWorker runs one pass of the hold release, then measures the
// trips' gauges (holds outstanding, captures waiting and failed, balances
// due) for the alerts on them.
type HoldReleaseWorker struct {
	river.WorkerDefaults[HoldReleaseArgs]
	svc *service.Service
}

// Work releases the expired holds and measures the trips, whether or not
// every release succeeded (a stuck release shows as an aging hold).
func (w *HoldReleaseWorker) Work(ctx context.Context, _ *river.Job[HoldReleaseArgs]) error {
	_, err := w.svc.HoldsRelease(ctx, HoldReleaseBatch)
	return errors.Join(err, w.svc.TripsMeasure(ctx))
}
