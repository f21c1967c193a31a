package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/riverqueue/river"

	"github.com/atomicrides/atomicrides/service"
)

// InboxApplyWorker applies one recorded inbound event (a webhook) through
// the service, exactly once however often it runs.
type InboxApplyWorker struct {
	river.WorkerDefaults[service.InboxApplyArgs]
	svc *service.Service
}

// InboxLeaseWait is how long after its event was recorded an apply job
// waits, without spending an attempt, for a request that holds the key the
// event needs (CodeKeyInUse: a booking in progress, or one whose process
// died with its lease). Past it, such a job fails its attempts like any
// other and ends as a dead letter.
const InboxLeaseWait = 10 * time.Minute

// Work applies the event. An event that is gone cancels the job. One that
// waits for a leased request is tried again a second later (or when the
// lease runs out, if sooner), for up to InboxLeaseWait, spending no
// attempt: a lease is short and bounded, and River's backoff would put the
// event minutes behind it. Anything else that fails (the processor
// unreachable while the event's object is read) is retried with River's
// backoff.
func (w *InboxApplyWorker) Work(ctx context.Context, job *river.Job[service.InboxApplyArgs]) error {
	_, err := w.svc.InboxApply(ctx, job.Args.Source, job.Args.EventID)
	var e *service.Error
	switch {
	case service.ErrorCode(err) == service.CodeNotFound:
		return river.JobCancel(err)
	case errors.As(err, &e) && e.Code == service.CodeKeyInUse && time.Since(job.CreatedAt) < InboxLeaseWait:
		wait := time.Second
		if e.RetryAfter > 0 {
			wait = min(e.RetryAfter, wait)
		}
		return river.JobSnooze(wait)
	}
	return err
}
