package jobs

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/receipts"
)

// DefaultOrphanInterval is how often the orphan pass runs.
const DefaultOrphanInterval = time.Hour

// OrphanPassArgs is the periodic job of the orphan policy: it schedules the
// refund of every orphan charge older than the service's grace period.
type OrphanPassArgs struct{}

// Kind is the job's kind in River.
func (OrphanPassArgs) Kind() string { return "orphan_pass" }

// InsertOpts retries a pass the processor could not answer a few times.
func (OrphanPassArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 3}
}

// OrphanPassWorker runs one orphan pass (service.OrphanRefundsSchedule).
// Any number of passes may run at once: each orphan is recorded, with its
// refund job, once.
type OrphanPassWorker struct {
	river.WorkerDefaults[OrphanPassArgs]
	svc *service.Service
}

// Timeout is ReconcileTimeout: a pass lists what a reconciliation lists.
func (w *OrphanPassWorker) Timeout(*river.Job[OrphanPassArgs]) time.Duration {
	return ReconcileTimeout
}

// Work runs one pass.
func (w *OrphanPassWorker) Work(ctx context.Context, _ *river.Job[OrphanPassArgs]) error {
	_, err := w.svc.OrphanRefundsSchedule(ctx, w.svc.OrphanRefundAfter())
	return err
}

// OrphanRefundWorker refunds one recorded orphan charge, once.
type OrphanRefundWorker struct {
	river.WorkerDefaults[service.OrphanRefundArgs]
	svc *service.Service
}

// Work refunds the charge; a processor that could not answer is retried
// with River's backoff.
func (w *OrphanRefundWorker) Work(ctx context.Context, job *river.Job[service.OrphanRefundArgs]) error {
	_, err := w.svc.OrphanRefund(ctx, job.Args.ChargeID)
	return cancelDefinitive(err)
}

// OrphanReceiptWorker emails the rider of a refunded orphan charge, once.
type OrphanReceiptWorker struct {
	river.WorkerDefaults[service.OrphanReceiptArgs]
	receipts *receipts.Service
}

// Work sends the receipt, like RideReceiptWorker; an orphan whose rider is
// unknown cancels the job.
func (w *OrphanReceiptWorker) Work(ctx context.Context, job *river.Job[service.OrphanReceiptArgs]) error {
	_, err := w.receipts.OrphanSend(ctx, job.Args.ChargeID, completeWith(job))
	return cancelDefinitive(err)
}
