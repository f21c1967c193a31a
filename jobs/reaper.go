package jobs

import (
	"context"

	"github.com/riverqueue/river"

	"github.com/atomicrides/atomicrides/service"
)

// ReaperBatch is the number of keys the reaper deletes per transaction.
const ReaperBatch = 1000

// KeyReaperArgs is the periodic job of the reaper.
type KeyReaperArgs struct{}

// Kind is the job's kind in River.
func (KeyReaperArgs) Kind() string { return "key_reaper" }

// InsertOpts retries a failed pass a few times.
func (KeyReaperArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 3}
}

// KeyReaperWorker deletes finished keys past their retention. Unfinished
// keys are never deleted; the pass counts and logs those past retention.
type KeyReaperWorker struct {
	river.WorkerDefaults[KeyReaperArgs]
	svc *service.Service
}

// Work runs one pass of the reaper.
func (w *KeyReaperWorker) Work(ctx context.Context, _ *river.Job[KeyReaperArgs]) error {
	_, err := w.svc.KeysReap(ctx, ReaperBatch)
	return err
}
