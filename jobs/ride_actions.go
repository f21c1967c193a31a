package jobs

import (
	"context"

	"github.com/riverqueue/river"

	"github.com/atomicrides/atomicrides/service"
)

// RideActionExpireWorker ends the wait of a ride for its rider at its
// deadline: the payment, if still undecided, is cancelled at the processor
// and the ride expires; one decided meanwhile is applied as it is. Each is
// once, however often the job runs.
type RideActionExpireWorker struct {
	river.WorkerDefaults[service.RideActionExpireArgs]
	svc *service.Service
}

// Work ends the ride's wait. A processor that does not answer is retried
// with River's backoff; a ride that does not exist cancels the job.
func (w *RideActionExpireWorker) Work(ctx context.Context, job *river.Job[service.RideActionExpireArgs]) error {
	_, err := w.svc.RideActionExpire(ctx, job.Args.RideID)
	return cancelDefinitive(err)
}
