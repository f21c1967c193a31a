package jobs

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/receipts"
)

// RideReceiptWorker emails the receipt of a charged ride. The service sends
// each receipt once and records it; a retried job after a recorded send
// sends nothing.
type RideReceiptWorker struct {
	river.WorkerDefaults[service.RideReceiptArgs]
	receipts *receipts.Service
}

// Work sends the receipt. A ride that does not exist or is not charged
// cancels the job; a mail server failure is retried with River's backoff.
func (w *RideReceiptWorker) Work(ctx context.Context, job *river.Job[service.RideReceiptArgs]) error {
	_, err := w.receipts.RideSend(ctx, job.Args.RideID, completeWith(job))
	return cancelDefinitive(err)
}

// RefundReceiptWorker emails the receipt of a refunded ride, once.
type RefundReceiptWorker struct {
	river.WorkerDefaults[service.RefundReceiptArgs]
	receipts *receipts.Service
}

// Work sends the refund receipt, like RideReceiptWorker.
func (w *RefundReceiptWorker) Work(ctx context.Context, job *river.Job[service.RefundReceiptArgs]) error {
	_, err := w.receipts.RefundSend(ctx, job.Args.RideID, completeWith(job))
	return cancelDefinitive(err)
}

// completeWith completes the job in the transaction that records its
// receipt: the receipt and the job's completion commit together. A job that
// is no longer running as this attempt (rescued and taken by another) is left
// to River, and the receipt is recorded all the same.
func completeWith[T river.JobArgs](job *river.Job[T]) receipts.RecordedFunc {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		if errors.Is(err, rivertype.ErrNotFound) {
			return nil
		}
		return err
	}
}

// cancelDefinitive cancels the job on a failure that no retry can mend.
func cancelDefinitive(err error) error {
	switch service.ErrorCode(err) {
	case service.CodeNotFound, service.CodeInvalid:
		return river.JobCancel(err)
	}
	return err
}
