package accounts

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/internal/ttlcache"
	"github.com/atomicrides/atomicrides/service/idem"
)

// DefaultAuthCacheTTL is how long Authenticate trusts a key it found in the
// database, unless Config.AuthCacheTTL says otherwise.
const DefaultAuthCacheTTL = 5 * time.Second

// JobInserter inserts background jobs in the caller's transaction (a River
// client, insert-only).
type JobInserter interface {
	InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// Config configures the accounts. Zero fields take the defaults documented
// on them.
type Config struct {
	// Engine runs the transactions, rerunning those that fail on a
	// serialization conflict. Required.
	Engine *idem.Engine
	// Pool is the database of the reads outside a transaction. Default the
	// engine's.
	Pool *pgxpool.Pool
	// Jobs inserts the job that registers a rider's payment source at the
	// processors, in the transaction that records the source. Required.
	Jobs JobInserter
	// ListenConfig is the connection ListenAPIKeyRevocations opens. It must
	// reach PostgreSQL itself: through PgBouncer's transaction pooling a
	// LISTEN lands on whichever server connection the statement got, and
	// its notifications never reach the listener, which would go on
	// trusting its cache. Default Pool's configuration.
	ListenConfig *pgx.ConnConfig
	// DevDefaultPaymentSource, for development only, registers riders who
	// send no payment source with DefaultPaymentSource (a test card).
	// Without it a payment source is required (422 naming the field).
	DevDefaultPaymentSource bool
	// AuthCacheTTL is how long Authenticate trusts an API key it found
	// without reading it again, while ListenAPIKeyRevocations runs. Default
	// DefaultAuthCacheTTL; negative disables the cache.
	AuthCacheTTL time.Duration
	// Logger receives the listener's logs. Default discarding them.
	Logger *slog.Logger
	// Clock is the cache's clock. Default time.Now.
	Clock func() time.Time
}

// Service keeps the riders, their API keys and their booking sessions. It
// is safe for concurrent use.
type Service struct {
	pool         *pgxpool.Pool
	queries      *dbgen.Queries
	engine       *idem.Engine
	jobs         JobInserter
	listenConfig *pgx.ConnConfig
	devSource    bool
	logger       *slog.Logger
	now          func() time.Time
	auth         *ttlcache.Cache[[32]byte, authEntry]
	revocations  *revocationWatch
}

// New returns the accounts of cfg.
func New(cfg Config) (*Service, error) {
	if cfg.Engine == nil || cfg.Jobs == nil {
		return nil, errors.New("accounts: Config.Engine and Jobs are required")
	}
	if cfg.Pool == nil {
		cfg.Pool = cfg.Engine.Pool()
	}
	if cfg.ListenConfig == nil {
		cfg.ListenConfig = cfg.Pool.Config().ConnConfig
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	auth := ttlcache.New[[32]byte, authEntry](cmp.Or(cfg.AuthCacheTTL, DefaultAuthCacheTTL))
	return &Service{
		pool:         cfg.Pool,
		queries:      dbgen.New(),
		engine:       cfg.Engine,
		jobs:         cfg.Jobs,
		listenConfig: cfg.ListenConfig,
		devSource:    cfg.DevDefaultPaymentSource,
		logger:       cfg.Logger,
		now:          cfg.Clock,
		auth:         auth,
		revocations:  newRevocationWatch(auth),
	}, nil
}

// inTx runs fn in one transaction of the engine, rerun on a retryable
// failure.
func (s *Service) inTx(ctx context.Context, iso pgx.TxIsoLevel, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return s.engine.InTx(ctx, iso, fn)
}
