package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/atomicrides/atomicrides/dbgen"
)

// DefaultLease is how long a claim holds a key unless Config.Lease says
// otherwise: the longest a request may work on it before another may take
// it over.
const DefaultLease = time.Minute

// DefaultReplayTTL is how long an engine answers replays of a finished
// key from memory, unless Config.ReplayTTL says otherwise.
const DefaultReplayTTL = time.Minute

// Config configures an Engine.
type Config struct {
	// Pool is the database holding the idempotency_keys table. Required.
	Pool *pgxpool.Pool
	// Lease bounds the work of one claim (Engine.Lease). Default
	// DefaultLease.
	Lease time.Duration
	// ReplayTTL is how long the responses of keys this engine saw finish
	// are answered from memory; negative disables it. Default
	// DefaultReplayTTL.
	ReplayTTL time.Duration
	// Now is the process's clock, which only the in-memory replays are
	// judged by (leases and ages go by the database's). Default time.Now.
	Now func() time.Time
	// Observer is told what the engine does, for metrics. Default: no one.
	Observer Observer
	// Tracer starts a span per atomic phase. Default: no spans.
	Tracer trace.Tracer
	// Logger receives what the engine cannot return (a lease it failed to
	// release). Default slog.Default().
	Logger *slog.Logger
	// Retryable adds to the failures that rerun a transaction from its
	// start (serialization failures and deadlocks always do): those a
	// rerun cures, such as a random id the database drew twice.
	Retryable func(err error) bool
}

// Observer is told what an engine does. Its methods must be quick and
// safe for concurrent use.
type Observer interface {
	// Replayed: a request was answered with a finished key's response.
	Replayed()
	// Conflicted: a request was refused because another held the key.
	Conflicted()
	// PhaseDone: the atomic phase of flow leaving from committed, in d.
	PhaseDone(flow string, from RecoveryPoint, d time.Duration)
	// TxRetried: a transaction is run again from its start.
	TxRetried()
}

type noObserver struct{}

func (noObserver) Replayed()                                      {}
func (noObserver) Conflicted()                                    {}
func (noObserver) PhaseDone(string, RecoveryPoint, time.Duration) {}
func (noObserver) TxRetried()                                     {}

// Engine serves flows under idempotency keys. Use New; it is safe for
// concurrent use, and several engines (processes) may share one database.
type Engine struct {
	pool      *pgxpool.Pool
	queries   *dbgen.Queries
	lease     time.Duration
	replays   *replayCache
	now       func() time.Time
	obs       Observer
	tracer    trace.Tracer
	logger    *slog.Logger
	retryable func(error) bool

	mu      sync.RWMutex
	runners map[string]runner
}

// New returns an Engine for cfg.
func New(cfg Config) (*Engine, error) {
	if cfg.Pool == nil {
		return nil, errors.New("idem: Config.Pool is required")
	}
	e := &Engine{
		pool: cfg.Pool, queries: dbgen.New(), lease: cfg.Lease, now: cfg.Now, obs: cfg.Observer,
		tracer: cfg.Tracer, logger: cfg.Logger, retryable: cfg.Retryable, runners: map[string]runner{},
	}
	if e.lease <= 0 {
		e.lease = DefaultLease
	}
	ttl := cfg.ReplayTTL
	if ttl == 0 {
		ttl = DefaultReplayTTL
	}
	e.replays = newReplayCache(ttl)
	if e.now == nil {
		e.now = time.Now
	}
	if e.obs == nil {
		e.obs = noObserver{}
	}
	if e.tracer == nil {
		e.tracer = noop.NewTracerProvider().Tracer("idem")
	}
	if e.logger == nil {
		e.logger = slog.Default()
	}
	if e.retryable == nil {
		e.retryable = func(error) bool { return false }
	}
	return e, nil
}

// Lease is how long a claim holds a key.
func (e *Engine) Lease() time.Duration { return e.lease }

// Register makes f's stored requests drivable by Complete. Every flow a
// deployment serves is registered once, before any request.
func Register[S any](e *Engine, f *Flow[S]) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runners[f.Name] = func(ctx context.Context, row *dbgen.IdempotencyKey) (*Response, error) {
		req := Request{
			UserID: row.UserID,
			Key:    row.IdempotencyKey,
			Method: row.RequestMethod,
			Path:   row.RequestPath,
			IP:     row.RequestIP,
		}
		return serve(ctx, e, f, req, row.RequestParams, row.RequestFingerprint)
	}
}

// runner drives a stored request of one flow from its key row.
type runner func(ctx context.Context, row *dbgen.IdempotencyKey) (*Response, error)

// Complete drives the stored request of key keyID to completion through its
// flow (Register), from its recovery point, with the request as first
// stored, exactly as a retry of its client would: it never touches a key
// under a live lease (*KeyInUseError), and a failed call leaves the key
// where it was. A finished key answers its stored response, Replayed.
// ErrKeyNotFound: no such key.
func (e *Engine) Complete(ctx context.Context, keyID int64) (*Response, error) {
	row, err := e.queries.IdempotencyKeyGetByID(ctx, e.pool, keyID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrKeyNotFound
	} else if err != nil {
		return nil, err
	}
	if RecoveryPoint(row.RecoveryPoint) == Finished {
		return &Response{Status: int(*row.ResponseCode), Body: row.ResponseBody, Replayed: true}, nil
	}
	e.mu.RLock()
	run, ok := e.runners[row.Flow]
	e.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("key %d: unknown flow %q", keyID, row.Flow)
	}
	return run(ctx, row)
}

// Abandoned returns, in tx, up to limit keys whose requests were abandoned:
// unfinished, with no live lease, idle for idle. The completer drives each
// with Complete (through a job inserted in tx, so that the search and the
// jobs commit together).
func (e *Engine) Abandoned(ctx context.Context, tx pgx.Tx, idle time.Duration, limit int) ([]int64, error) {
	return e.queries.IdempotencyKeyListAbandoned(ctx, tx, dbgen.IdempotencyKeyListAbandonedParams{
		IdleSeconds:  idle.Seconds(),
		LeaseSeconds: e.lease.Seconds(),
		MaxKeys:      int32(limit),
	})
}

// Reap deletes finished keys created more than retention ago by the
// database's clock, in batches of batch keys, each its own short
// transaction; onBatch is told each batch's count. It returns how many it
// deleted and how many unfinished keys are older than retention: those are
// never deleted, and an operator must look at them.
func (e *Engine) Reap(ctx context.Context, retention time.Duration, batch int, onBatch func(deleted int64)) (deleted, unfinished int64, err error) {
	for {
		n, err := e.queries.IdempotencyKeyDeleteFinished(ctx, e.pool, retention.Seconds(), int32(batch))
		if err != nil {
			return deleted, 0, err
		}
		deleted += n
		if onBatch != nil {
			onBatch(n)
		}
		if n < int64(batch) {
			break
		}
	}
	unfinished, err = e.queries.IdempotencyKeyCountUnfinishedBefore(ctx, e.pool, retention.Seconds())
	return deleted, unfinished, err
}

// Pool returns the database the engine's transactions run on.
func (e *Engine) Pool() *pgxpool.Pool { return e.pool }
