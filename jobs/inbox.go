package jobs

import (
	"context"

	"github.com/riverqueue/river"

	"github.com/atomicrides/atomicrides/service"
)

// InboxApplyWorker applies one recorded inbound event (a webhook) through
// the service, exactly once however often it runs.
type InboxApplyWorker struct {
	river.WorkerDefaults[service.InboxApplyArgs]
	svc *service.Service
}

// Work applies the event. An event that is gone cancels the job; anything
// else that fails (the processor unreachable while the event's object is
// read, a request still leased) is retried with River's backoff.
func (w *InboxApplyWorker) Work(ctx context.Context, job *river.Job[service.InboxApplyArgs]) error {
	_, err := w.svc.InboxApply(ctx, job.Args.Source, job.Args.EventID)
	if service.ErrorCode(err) == service.CodeNotFound {
		return river.JobCancel(err)
	}
	return err
}
