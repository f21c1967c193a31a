// Package jobs holds the River workers of the service. Workers call the
// service; they never touch SQL themselves, and recovery goes through the same
// service code as the HTTP requests.
package jobs

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/atomicrides/atomicrides/service"
)

// Register adds every worker of the service to workers.
func Register(workers *river.Workers, svc *service.Service) {
	river.AddWorker(workers, &CustomerCreateWorker{svc: svc})
	river.AddWorker(workers, &RideReceiptWorker{svc: svc})
	river.AddWorker(workers, &RefundReceiptWorker{svc: svc})
	river.AddWorker(workers, &KeyCompleterWorker{svc: svc})
	river.AddWorker(workers, &KeyCompleteWorker{svc: svc})
	river.AddWorker(workers, &KeyReaperWorker{svc: svc})
}

// Config sets how often the periodic jobs run.
type Config struct {
	// CompleterInterval is how often the completer looks for abandoned
	// requests. Default one minute.
	CompleterInterval time.Duration
	// ReaperInterval is how often the reaper deletes old finished keys.
	// Default one hour.
	ReaperInterval time.Duration
}

// PeriodicJobs returns the completer and the reaper as River periodic jobs.
// River runs periodic jobs on its elected leader only, so any number of
// processes may register them.
func PeriodicJobs(cfg Config) []*river.PeriodicJob {
	if cfg.CompleterInterval == 0 {
		cfg.CompleterInterval = time.Minute
	}
	if cfg.ReaperInterval == 0 {
		cfg.ReaperInterval = time.Hour
	}
	return []*river.PeriodicJob{
		river.NewPeriodicJob(river.PeriodicInterval(cfg.CompleterInterval),
			func() (river.JobArgs, *river.InsertOpts) { return KeyCompleterArgs{}, nil },
			&river.PeriodicJobOpts{ID: "key_completer", RunOnStart: true}),
		river.NewPeriodicJob(river.PeriodicInterval(cfg.ReaperInterval),
			func() (river.JobArgs, *river.InsertOpts) { return KeyReaperArgs{}, nil },
			&river.PeriodicJobOpts{ID: "key_reaper", RunOnStart: true}),
	}
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
	if service.PaymentFinal(err) != nil || service.ErrorCode(err) == service.CodeNotFound {
		return river.JobCancel(err)
	}
	return err
}
