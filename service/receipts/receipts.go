package receipts

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/idem"
)

// recordTimeout bounds the record of a sent receipt, which must commit
// after the caller's context ends: the message is out.
const recordTimeout = 5 * time.Second

// Config configures the receipts. Zero fields take the defaults documented
// on them.
type Config struct {
	// Engine runs the transactions that record a sent receipt. Required.
	Engine *idem.Engine
	// Pool is the database of the reads outside a transaction. Default the
	// engine's.
	Pool *pgxpool.Pool
	// Mailer sends the receipts. Without one, every send fails and its job
	// is retried: receipts are delayed, never lost.
	Mailer service.Mailer
	// From is the sender of receipts. Default service.DefaultMailFrom.
	From string
	// Clock dates the messages. Default time.Now.
	Clock func() time.Time
	// Registerer receives the receipts' collectors. Default a private
	// registry.
	Registerer prometheus.Registerer
}

// Service sends the receipts of rides, refunds and refunded orphan charges,
// each once. It is safe for concurrent use.
type Service struct {
	pool    *pgxpool.Pool
	queries *dbgen.Queries
	engine  *idem.Engine
	mailer  service.Mailer
	from    string
	now     func() time.Time
	metrics *prometheus.CounterVec
}

// New returns the receipts of cfg, their collectors registered.
func New(cfg Config) (*Service, error) {
	if cfg.Engine == nil {
		return nil, errors.New("receipts: Config.Engine is required")
	}
	if cfg.Pool == nil {
		cfg.Pool = cfg.Engine.Pool()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	m := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "atomicrides_receipts_total",
		Help: "Receipt sends by kind and outcome (sent, already_sent, error).",
	}, []string{"kind", "outcome"})
	for _, kind := range []Kind{KindRide, KindRefund} {
		for _, outcome := range []string{"sent", "already_sent", "error"} {
			m.WithLabelValues(string(kind), outcome)
		}
	}
	if err := cfg.Registerer.Register(m); err != nil {
		return nil, err
	}
	return &Service{
		pool:    cfg.Pool,
		queries: dbgen.New(),
		engine:  cfg.Engine,
		mailer:  cfg.Mailer,
		from:    cmp.Or(cfg.From, service.DefaultMailFrom),
		now:     cfg.Clock,
		metrics: m,
	}, nil
}

// counted counts a send of kind by its outcome.
func (s *Service) counted(kind Kind, sent bool, err error) {
	outcome := "already_sent"
	switch {
	case err != nil:
		outcome = "error"
	case sent:
		outcome = "sent"
	}
	s.metrics.WithLabelValues(string(kind), outcome).Inc()
}

// record runs, once the mail server took a message, one transaction that
// outlives the caller's context (the message is out): what the caller
// records (recorded, may be nil), then write, the receipt's own record.
func (s *Service) record(ctx context.Context, recorded RecordedFunc, write func(ctx context.Context, tx pgx.Tx) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	return s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if recorded != nil {
			if err := recorded(ctx, tx); err != nil {
				return err
			}
		}
		return write(ctx, tx)
	})
}

// inTx runs fn in one transaction of the engine, rerun on a retryable
// failure.
func (s *Service) inTx(ctx context.Context, iso pgx.TxIsoLevel, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return s.engine.InTx(ctx, iso, fn)
}
