package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/bankinbox"
	"github.com/atomicrides/atomicrides/service/settlements"
)

// DefaultSettlementInterval is how often the bank's inbox is fetched.
const DefaultSettlementInterval = time.Hour

// SettlementFetchTimeout bounds one fetch of the bank's inbox: listing,
// reading and archiving its files.
const SettlementFetchTimeout = 3 * time.Minute

// SettlementApplyTimeout bounds one run of applying a settlement file
// (batches of a few hundred lines take well under a second each). A run
// stopped by it resumes from the file's cursor at its next attempt, so it
// is kept short: River takes the job of a dead process over only once its
// timeout has passed.
const SettlementApplyTimeout = time.Minute

// settlementCheckRows bounds the lists of the check a fetch ends with.
const settlementCheckRows = 1000

// SettlementFetchArgs is the periodic job that fetches the bank's inbox.
type SettlementFetchArgs struct{}

// Kind is the job's kind in River.
func (SettlementFetchArgs) Kind() string { return "settlement_fetch" }

// InsertOpts retries a fetch the bank's server did not answer a few times;
// then it ends discarded, and the next period tries again.
func (SettlementFetchArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{MaxAttempts: 3} }

// SettlementFetchWorker fetches the bank's inbox over SFTP. For each
// complete file it reads the file (network, no transaction open), records
// it with its apply job in one transaction (settlements.Service.Receive),
// and only then moves it to the archive folder. A pass that dies anywhere
// is safe to repeat: a file recorded but not archived is recorded again as
// a duplicate (nothing written) and archived then.
type SettlementFetchWorker struct {
	river.WorkerDefaults[SettlementFetchArgs]
	st    *settlements.Service
	inbox bankinbox.Config
}

// NewSettlementFetchWorker returns the worker fetching the inbox of cfg.
func NewSettlementFetchWorker(st *settlements.Service, cfg bankinbox.Config) *SettlementFetchWorker {
	return &SettlementFetchWorker{st: st, inbox: cfg}
}

// Timeout is SettlementFetchTimeout.
func (w *SettlementFetchWorker) Timeout(*river.Job[SettlementFetchArgs]) time.Duration {
	return SettlementFetchTimeout
}

// Work runs one fetch, then the settlement check that sets the gauges.
func (w *SettlementFetchWorker) Work(ctx context.Context, _ *river.Job[SettlementFetchArgs]) error {
	if err := SettlementFetch(ctx, w.st, w.inbox); err != nil {
		return err
	}
	if _, err := w.st.Check(ctx, settlementCheckRows); err != nil {
		return err
	}
	w.st.Fetched(time.Now())
	return nil
}

// SettlementFetch fetches the inbox of cfg once: every complete file is
// recorded (with its apply job) and then archived. A file that changed
// since it was listed is left for the next pass.
func SettlementFetch(ctx context.Context, st *settlements.Service, cfg bankinbox.Config) error {
	inbox, err := bankinbox.Dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer inbox.Close()
	files, err := inbox.List()
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		content, err := inbox.Read(f.Name, settlements.MaxFileBytes)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := st.Receive(ctx, f.Name, content); err != nil {
			errs = append(errs, fmt.Errorf("record %s: %w", f.Name, err))
			continue
		}
		if err := inbox.Archive(f, content); err != nil && !errors.Is(err, bankinbox.ErrChanged) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SettlementApplyWorker applies a recorded settlement file
// (settlements.Service.Apply). A run that fails or dies resumes from the
// file's cursor; after its last attempt the job ends discarded, River's
// dead letters, for an operator.
type SettlementApplyWorker struct {
	river.WorkerDefaults[settlements.ApplyArgs]
	st *settlements.Service
}

// Timeout is SettlementApplyTimeout.
func (w *SettlementApplyWorker) Timeout(*river.Job[settlements.ApplyArgs]) time.Duration {
	return SettlementApplyTimeout
}

// Work applies the file. A file that does not exist cancels the job.
func (w *SettlementApplyWorker) Work(ctx context.Context, job *river.Job[settlements.ApplyArgs]) error {
	_, err := w.st.Apply(ctx, job.Args.FileID)
	if service.ErrorCode(err) == service.CodeNotFound {
		return river.JobCancel(err)
	}
	return err
}
