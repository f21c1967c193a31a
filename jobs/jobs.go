// Package jobs holds the River workers of the service. Workers call the
// service; they never touch SQL themselves, and recovery goes through the same
// service code as the HTTP requests.
package jobs

import (
	"context"

	"github.com/riverqueue/river"

	"github.com/atomicrides/atomicrides/service"
)

// Register adds every worker of the service to workers.
func Register(workers *river.Workers, svc *service.Service) {
	river.AddWorker(workers, &CustomerCreateWorker{svc: svc})
}

// CustomerCreateWorker creates a user's customer at the payment processor.
// It is safe to run any number of times: the processor sees one customer per
// user through the entity-level key, and the id is stored once.
type CustomerCreateWorker struct {
	river.WorkerDefaults[service.CustomerCreateArgs]
	svc *service.Service
}

// Work creates the customer. A definitive refusal (a declined source, an
// invalid request, a deleted user) cancels the job: retrying cannot succeed,
// and the first ride of the user will report the decline. Everything else is
// retried with River's backoff.
func (w *CustomerCreateWorker) Work(ctx context.Context, job *river.Job[service.CustomerCreateArgs]) error {
	_, err := w.svc.CustomerCreate(ctx, job.Args.UserID)
	if err == nil {
		return nil
	}
	switch {
	case service.PaymentErrorKindOf(err) == service.PaymentDeclined,
		service.PaymentErrorKindOf(err) == service.PaymentInvalid,
		service.ErrorCode(err) == service.CodeNotFound:
		return river.JobCancel(err)
	}
	return err
}
