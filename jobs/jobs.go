// Package jobs holds the River workers of the service. Workers call the
// service; they never touch SQL themselves, and recovery goes through the same
// service code as the HTTP requests.
package jobs

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/bankinbox"
	"github.com/atomicrides/atomicrides/service/receipts"
	"github.com/atomicrides/atomicrides/service/settlements"
)

// Parts are the domain's parts whose jobs the workers work.
type Parts struct {
	// Service works the jobs of the flows still in package service.
	Service *service.Service
	// Settlements applies the settlement files.
	Settlements *settlements.Service
	// Receipts sends the receipts.
	Receipts *receipts.Service
}

// Register adds every worker of the service to workers.
func Register(workers *river.Workers, p Parts) {
	svc := p.Service
	river.AddWorker(workers, &CustomerCreateWorker{svc: svc})
	river.AddWorker(workers, &RideReceiptWorker{receipts: p.Receipts})
	river.AddWorker(workers, &RideActionExpireWorker{svc: svc})
	river.AddWorker(workers, &HoldReleaseWorker{svc: svc})
	river.AddWorker(workers, &RefundReceiptWorker{receipts: p.Receipts})
	river.AddWorker(workers, &KeyCompleterWorker{svc: svc})
	river.AddWorker(workers, &KeyCompleteWorker{svc: svc})
	river.AddWorker(workers, &KeyReaperWorker{svc: svc})
	river.AddWorker(workers, &ReconcileWorker{svc: svc})
	river.AddWorker(workers, &InboxApplyWorker{svc: svc})
	river.AddWorker(workers, &OrphanPassWorker{svc: svc})
	river.AddWorker(workers, &EventsPassWorker{svc: svc})
	river.AddWorker(workers, &OrphanRefundWorker{svc: svc})
	river.AddWorker(workers, &OrphanReceiptWorker{receipts: p.Receipts})
	river.AddWorker(workers, &SettlementApplyWorker{st: p.Settlements})
}

// Defaults of Config, applied to its zero fields.
const (
	// DefaultCompleterInterval is how often the completer runs.
	DefaultCompleterInterval = time.Minute
	// DefaultHoldReleaseInterval is how often the holds of trips past their
	// expiry are released.
	DefaultHoldReleaseInterval = time.Minute
	// DefaultReaperInterval is how often the reaper runs.
	DefaultReaperInterval = time.Hour
	// DefaultReconcileInterval is how often the reconciliation runs.
	DefaultReconcileInterval = 24 * time.Hour
	// DefaultMaxWorkers is how many jobs a process works at once.
	DefaultMaxWorkers = 20
)

// Config configures the service's River client: its workers, its periodic
// jobs and its limits. Zero fields take the defaults documented on them.
type Config struct {
	// CompleterInterval is how often the completer looks for abandoned
	// requests. Default DefaultCompleterInterval.
	CompleterInterval time.Duration
	// HoldReleaseInterval is how often the holds of trips past their expiry
	// are released. Default DefaultHoldReleaseInterval.
	HoldReleaseInterval time.Duration
	// ReaperInterval is how often the reaper deletes old finished keys.
	// Default DefaultReaperInterval.
	ReaperInterval time.Duration
	// ReconcileInterval is how often the service is reconciled with the
	// payment processor, over the last ReconcileWindow. Default
	// DefaultReconcileInterval.
	ReconcileInterval time.Duration
	// OrphanInterval is how often the orphan pass schedules the refunds of
	// orphan charges past the service's grace period. Default
	// service.OrphanPassInterval of the grace (DefaultOrphanInterval for
	// the default grace).
	OrphanInterval time.Duration
	// EventsPassInterval is how often the events pass reads the
	// processor's events again through the inbox. Default
	// DefaultEventsPassInterval.
	EventsPassInterval time.Duration
	// SettlementInbox is the bank's SFTP inbox of settlement files; nil
	// turns the fetching of settlement files off (files already recorded
	// are still applied).
	SettlementInbox *bankinbox.Config
	// SettlementInterval is how often the inbox is fetched. Default
	// DefaultSettlementInterval.
	SettlementInterval time.Duration
	// MaxWorkers is how many jobs of the default queue one process works
	// at once. Default DefaultMaxWorkers.
	MaxWorkers int
	// JobTimeout bounds a job whose worker sets no timeout of its own.
	// Default River's (river.JobTimeoutDefault, one minute).
	JobTimeout time.Duration
	// RescueStuckJobsAfter is how long a job may stay running before River
	// takes it for abandoned (its process died) and retries it; it must
	// outlast every job's timeout. Default DefaultRescueStuckJobsAfter of
	// JobTimeout and the service's lease: a few minutes, so that the jobs a
	// killed process held are retried soon after it restarts (River's own
	// default is an hour).
	RescueStuckJobsAfter time.Duration
	// Logger receives River's logs. Default River's.
	Logger *slog.Logger
}

// MinRescueStuckJobsAfter is the shortest default of
// Config.RescueStuckJobsAfter.
const MinRescueStuckJobsAfter = 5 * time.Minute

// DefaultRescueStuckJobsAfter is the default of Config.RescueStuckJobsAfter
// for a River JobTimeout (zero: River's default) and a service whose
// requests hold their key for lease: MinRescueStuckJobsAfter, or a minute
// more than the longest job timeout (JobTimeout, a completion's, the
// reconciliation's) when that is longer, so that no live job is ever taken
// for a dead one.
func DefaultRescueStuckJobsAfter(jobTimeout, lease time.Duration) time.Duration {
	if jobTimeout == 0 {
		jobTimeout = river.JobTimeoutDefault
	}
	longest := max(jobTimeout, lease+KeyCompleteTimeoutMargin, ReconcileTimeout, EventsPassTimeout, SettlementApplyTimeout, SettlementFetchTimeout)
	return max(MinRescueStuckJobsAfter, longest+time.Minute)
}

// RiverConfig returns the configuration of the River client that works the
// service's jobs: every worker (Register), the periodic jobs
// (PeriodicJobs), and cfg's limits with their defaults.
func RiverConfig(cfg Config, p Parts) *river.Config {
	svc := p.Service
	if cfg.MaxWorkers == 0 {
		cfg.MaxWorkers = DefaultMaxWorkers
	}
	if cfg.RescueStuckJobsAfter == 0 {
		cfg.RescueStuckJobsAfter = DefaultRescueStuckJobsAfter(cfg.JobTimeout, svc.Lease())
	}
	if cfg.OrphanInterval == 0 {
		cfg.OrphanInterval = service.OrphanPassInterval(svc.OrphanRefundAfter())
	}
	workers := river.NewWorkers()
	Register(workers, p)
	if cfg.SettlementInbox != nil {
		river.AddWorker(workers, NewSettlementFetchWorker(p.Settlements, *cfg.SettlementInbox))
	}
	return &river.Config{
		Logger:               cfg.Logger,
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.MaxWorkers}},
		Workers:              workers,
		PeriodicJobs:         PeriodicJobs(cfg),
		JobTimeout:           cfg.JobTimeout,
		RescueStuckJobsAfter: cfg.RescueStuckJobsAfter,
	}
}

// PeriodicJobs returns the completer, the reaper, the reconciliation, the
// orphan pass, the events pass and, when the bank's inbox is configured, the settlement fetch as
// River periodic jobs, at cfg's intervals. River runs periodic jobs on its
// elected leader only, so any number of processes may register them. Each
// is unique within one period of its interval, so a pass held by a process
// that died never keeps the next one from running.
func PeriodicJobs(cfg Config) []*river.PeriodicJob {
	if cfg.CompleterInterval == 0 {
		cfg.CompleterInterval = DefaultCompleterInterval
	}
	if cfg.ReaperInterval == 0 {
		cfg.ReaperInterval = DefaultReaperInterval
	}
	if cfg.ReconcileInterval == 0 {
		cfg.ReconcileInterval = DefaultReconcileInterval
	}
	if cfg.OrphanInterval == 0 {
		cfg.OrphanInterval = DefaultOrphanInterval
	}
	if cfg.EventsPassInterval == 0 {
		cfg.EventsPassInterval = DefaultEventsPassInterval
	}
	periodic := []*river.PeriodicJob{
		river.NewPeriodicJob(river.PeriodicInterval(cfg.CompleterInterval),
			func() (river.JobArgs, *river.InsertOpts) {
				return KeyCompleterArgs{}, onePassPerPeriod(cfg.CompleterInterval)
			},
			&river.PeriodicJobOpts{ID: "key_completer", RunOnStart: true}),
		river.NewPeriodicJob(river.PeriodicInterval(cmp.Or(cfg.HoldReleaseInterval, DefaultHoldReleaseInterval)),
			func() (river.JobArgs, *river.InsertOpts) {
				return HoldReleaseArgs{}, onePassPerPeriod(cmp.Or(cfg.HoldReleaseInterval, DefaultHoldReleaseInterval))
			},
			&river.PeriodicJobOpts{ID: "hold_release", RunOnStart: true}),
		river.NewPeriodicJob(river.PeriodicInterval(cfg.ReaperInterval),
			func() (river.JobArgs, *river.InsertOpts) {
				return KeyReaperArgs{}, onePassPerPeriod(cfg.ReaperInterval)
			},
			&river.PeriodicJobOpts{ID: "key_reaper", RunOnStart: true}),
		river.NewPeriodicJob(river.PeriodicInterval(cfg.ReconcileInterval),
			func() (river.JobArgs, *river.InsertOpts) {
				return ReconcileArgs{}, onePassPerPeriod(cfg.ReconcileInterval)
			},
			&river.PeriodicJobOpts{ID: "reconcile"}),
		river.NewPeriodicJob(river.PeriodicInterval(cfg.OrphanInterval),
			func() (river.JobArgs, *river.InsertOpts) {
				return OrphanPassArgs{}, onePassPerPeriod(cfg.OrphanInterval)
			},
			&river.PeriodicJobOpts{ID: "orphan_pass", RunOnStart: true}),
		river.NewPeriodicJob(river.PeriodicInterval(cfg.EventsPassInterval),
			func() (river.JobArgs, *river.InsertOpts) {
				return EventsPassArgs{}, onePassPerPeriod(cfg.EventsPassInterval)
			},
			&river.PeriodicJobOpts{ID: "events_pass", RunOnStart: true}),
	}
	if cfg.SettlementInbox != nil {
		interval := cmp.Or(cfg.SettlementInterval, DefaultSettlementInterval)
		periodic = append(periodic, river.NewPeriodicJob(river.PeriodicInterval(interval),
			func() (river.JobArgs, *river.InsertOpts) {
				return SettlementFetchArgs{}, onePassPerPeriod(interval)
			},
			&river.PeriodicJobOpts{ID: "settlement_fetch", RunOnStart: true}))
	}
	return periodic
}

// CustomerCreateWorker registers a user's payment source at the payment
// processors. It is safe to run any number of times: each processor sees one
// customer per user and source through the entity-level key, and the id is
// stored once.
type CustomerCreateWorker struct {
	river.WorkerDefaults[service.CustomerCreateArgs]
	svc *service.Service
}

// Work creates the customer. A definitive refusal (a declined source, an
// invalid request, a deleted user) cancels the job: retrying cannot succeed,
// and the first ride of the user will report the decline. Everything else is
// retried with River's backoff.
func (w *CustomerCreateWorker) Work(ctx context.Context, job *river.Job[service.CustomerCreateArgs]) error {
	_, err := w.svc.CustomerCreate(ctx, job.Args.UserID, job.Args.PaymentSource)
	if err == nil {
		return nil
	}
	if service.PaymentFinal(err) != nil || service.ErrorCode(err) == service.CodeNotFound {
		return river.JobCancel(err)
	}
	return err
}
