package settlements

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/service/idem"
)

// Defaults of Config, applied to its zero fields.
const (
	// DefaultBatchLines is how many lines of a settlement file one
	// transaction applies.
	DefaultBatchLines = 500
	// DefaultMaxAge is how long a charge or refund of ours may go unsettled
	// before it is reported.
	DefaultMaxAge = 72 * time.Hour
)

// JobInserter inserts background jobs in the caller's transaction (a River
// client, insert-only).
type JobInserter interface {
	InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// Config configures the settlements. Zero fields take the defaults
// documented on them.
type Config struct {
	// Engine runs the transactions, rerunning those that fail on a
	// serialization conflict. Required.
	Engine *idem.Engine
	// Jobs inserts the job that applies a file, in the transaction that
	// records it. Required.
	Jobs JobInserter
	// Pool is the database of the reads outside a transaction. Default the
	// engine's.
	Pool *pgxpool.Pool
	// Registerer receives the settlements' collectors. Default a private
	// registry.
	Registerer prometheus.Registerer
	// BatchLines is how many lines of a file one transaction applies.
	// Default DefaultBatchLines.
	BatchLines int
	// MaxAge is how long a charge or refund of ours may go unsettled
	// before Check reports it. Default DefaultMaxAge.
	MaxAge time.Duration
}

// Service records the bank's settlement files and applies them, each line
// once, and reports what does not match. It is safe for concurrent use.
type Service struct {
	pool    *pgxpool.Pool
	queries *dbgen.Queries
	engine  *idem.Engine
	jobs    JobInserter
	metrics *settlementMetrics
	// batchLines and maxAge are the settlement policy; afterBatch, set by
	// tests only, runs after each committed batch of a file.
	batchLines int
	maxAge     time.Duration
	afterBatch func(fileID int64, cursor int)
}

// New returns the settlements of cfg, their collectors registered.
func New(cfg Config) (*Service, error) {
	if cfg.Engine == nil || cfg.Jobs == nil {
		return nil, errors.New("settlements: Config.Engine and Jobs are required")
	}
	if cfg.BatchLines < 0 || cfg.MaxAge < 0 {
		return nil, errors.New("settlements: Config.BatchLines and MaxAge must be positive")
	}
	if cfg.Pool == nil {
		cfg.Pool = cfg.Engine.Pool()
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	m := newSettlementMetrics()
	for _, c := range m.collectors() {
		if err := cfg.Registerer.Register(c); err != nil {
			return nil, err
		}
	}
	return &Service{
		pool:       cfg.Pool,
		queries:    dbgen.New(),
		engine:     cfg.Engine,
		jobs:       cfg.Jobs,
		metrics:    m,
		batchLines: cmp.Or(cfg.BatchLines, DefaultBatchLines),
		maxAge:     cmp.Or(cfg.MaxAge, DefaultMaxAge),
	}, nil
}

// inTx runs fn in one transaction of the engine, rerun on a retryable
// failure.
func (s *Service) inTx(ctx context.Context, iso pgx.TxIsoLevel, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return s.engine.InTx(ctx, iso, fn)
}
