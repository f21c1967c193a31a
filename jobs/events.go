package jobs

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/atomicrides/atomicrides/service"
)

// DefaultEventsPassInterval is how often the events pass runs: a
// deployment that went back in time (a restore, a failover that lost
// commits) and was not restarted learns what the processor did in the lost
// commits within this long.
const DefaultEventsPassInterval = 10 * time.Minute

// EventsPassTimeout bounds one events pass: a listing of the processor's
// events and one short transaction per event.
const EventsPassTimeout = 5 * time.Minute

// EventsPassArgs is the periodic job that reads the processor's events
// again through the inbox (service.EventsPass).
type EventsPassArgs struct{}

// Kind is the job's kind in River.
func (EventsPassArgs) Kind() string { return "events_pass" }

// InsertOpts retries a pass the processor could not answer a few times.
func (EventsPassArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 3}
}

// EventsPassWorker runs one events pass. Any number may run at once: the
// inbox records each event once.
type EventsPassWorker struct {
	river.WorkerDefaults[EventsPassArgs]
	svc *service.Service
}

// Timeout is EventsPassTimeout.
func (w *EventsPassWorker) Timeout(*river.Job[EventsPassArgs]) time.Duration {
	return EventsPassTimeout
}

// Work runs one pass.
func (w *EventsPassWorker) Work(ctx context.Context, _ *river.Job[EventsPassArgs]) error {
	_, err := w.svc.EventsPass(ctx)
	return err
}
