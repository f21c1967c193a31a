package jobs

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/atomicrides/atomicrides/service"
)

// ReconcileWindow is how far back the periodic reconciliation looks: two
// days, so that a daily pass overlaps the one before it.
const ReconcileWindow = 48 * time.Hour

// ReconcileArgs is the periodic job of the reconciliation with the payment
// processor.
type ReconcileArgs struct{}

// Kind is the job's kind in River.
func (ReconcileArgs) Kind() string { return "reconcile" }

// InsertOpts retries a pass the processor could not answer a few times.
func (ReconcileArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 3}
}

// ReconcileWorker lists what the processor holds for this deployment and
// no ride records, and what rides record that the processor lacks; the
// service sets the gauges and logs the findings. Findings are for an
// operator (keys reconcile lists them); they do not fail the job.
type ReconcileWorker struct {
	river.WorkerDefaults[ReconcileArgs]
	svc *service.Service
}

// ReconcileTimeout bounds one reconciliation: listing two days' charges and
// refunds page by page. River's rescue of jobs held by a dead process must
// wait longer than this.
const ReconcileTimeout = 3 * time.Minute

// Timeout is ReconcileTimeout.
func (w *ReconcileWorker) Timeout(*river.Job[ReconcileArgs]) time.Duration { return ReconcileTimeout }

// Work runs one reconciliation.
func (w *ReconcileWorker) Work(ctx context.Context, _ *river.Job[ReconcileArgs]) error {
	_, err := w.svc.Reconcile(ctx, ReconcileWindow)
	return err
}
