package jobs

import (
	"context"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/atomicrides/atomicrides/internal/failpoint"
	"github.com/atomicrides/atomicrides/service"
)

// CompleterBatch is the most abandoned requests one completer pass queues.
const CompleterBatch = 500

// onePassPerPeriod makes a periodic job unique within one period of its
// interval while it is queued or running. A pass left running by a process
// that died counts only for its own period: the next period's pass is
// inserted and runs, whatever River's rescuer has yet to do with the dead
// one. (River insists that uniqueness by state counts running jobs; the
// period is what keeps a dead pass from blocking every later one.)
func onePassPerPeriod(interval time.Duration) *river.InsertOpts {
	return &river.InsertOpts{UniqueOpts: river.UniqueOpts{
		ByArgs:   true,
		ByPeriod: max(interval, time.Second),
		ByState: []rivertype.JobState{
			rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
			rivertype.JobStateRetryable, rivertype.JobStateScheduled,
		},
	}}
}

// KeyCompleterArgs is the periodic job of the completer.
type KeyCompleterArgs struct{}

// Kind is the job's kind in River.
func (KeyCompleterArgs) Kind() string { return "key_completer" }

// InsertOpts: one attempt; a failed pass is followed by the next period's.
func (KeyCompleterArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 1}
}

// KeyCompleterWorker queues a completion job for every abandoned request.
type KeyCompleterWorker struct {
	river.WorkerDefaults[KeyCompleterArgs]
	svc *service.Service
}

// Work runs one pass of the completer.
func (w *KeyCompleterWorker) Work(ctx context.Context, _ *river.Job[KeyCompleterArgs]) error {
	if failpoint.Enabled {
		// A build with failpoints can die here, holding the pass as running.
		failpoint.Hit("jobs:key_completer:work")
	}
	if _, err := w.svc.KeysAbandonedEnqueue(ctx, CompleterBatch); err != nil {
		return err
	}
	// The dead letters gauge follows the pass, for the alert on them, and
	// so does the gauge of rides waiting for their rider.
	if _, err := w.svc.DeadLettersMeasure(ctx); err != nil {
		return err
	}
	_, err := w.svc.RidesWaitingMeasure(ctx)
	return err
}

// KeyCompleteWorker drives one abandoned request to completion through the
// service, exactly as a retry of its client would.
type KeyCompleteWorker struct {
	river.WorkerDefaults[service.KeyCompleteArgs]
	svc *service.Service
}

// KeyCompleteTimeoutMargin is how much longer than a request's lease a
// completion may run.
const KeyCompleteTimeoutMargin = 10 * time.Second

// Timeout lets the job outlast one request's lease, its processor calls
// included.
func (w *KeyCompleteWorker) Timeout(*river.Job[service.KeyCompleteArgs]) time.Duration {
	return w.svc.Lease() + KeyCompleteTimeoutMargin
}

// Work completes the key. A finished key (by its client or an earlier
// attempt) completes the job; a vanished key cancels it; anything else — a
// live lease, a processor outage, an internal error — fails the attempt and
// River retries with its backoff, discarding the job after
// service.KeyCompleteMaxAttempts.
func (w *KeyCompleteWorker) Work(ctx context.Context, job *river.Job[service.KeyCompleteArgs]) error {
	_, err := w.svc.KeyComplete(ctx, job.Args.KeyID)
	if service.ErrorCode(err) == service.CodeNotFound {
		return river.JobCancel(err)
	}
	return err
}
