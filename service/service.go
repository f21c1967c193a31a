package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/trace"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/internal/telemetry"
	"github.com/atomicrides/atomicrides/service/idem"
)

// Defaults of Config, applied to its zero fields.
const (
	// DefaultProcessorKeyMargin is subtracted from ProcessorKeyWindow when
	// judging whether the processor may have forgotten a key.
	DefaultProcessorKeyMargin = time.Hour
	// DefaultAbandonedAfter is how long an unfinished request is idle
	// before the completer drives it on.
	DefaultAbandonedAfter = 5 * time.Minute
	// DefaultKeyRetention is how long finished keys are kept.
	DefaultKeyRetention = 72 * time.Hour
	// leaseSlack is what the default lease adds to twice the processor's
	// budget.
	leaseSlack = 30 * time.Second
)

// Config configures a Service. Zero fields take the defaults documented on
// them.
type Config struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// Payments is the Stripe adapter: the one processor when Processors is
	// empty. Required unless Processors is set.
	Payments Payments
	// Processors are the payment processors in order of preference (e.g.
	// Stripe, then Adyen): a new booking goes to the first whose circuit
	// is closed. Empty means Stripe alone, through Payments.
	Processors []Processor
	// BreakerFailures is how many consecutive indeterminate outcomes open
	// a processor's circuit. Default DefaultBreakerFailures.
	BreakerFailures uint32
	// BreakerOpenFor is how long an open circuit stays open before real
	// traffic tries the processor again. Default DefaultBreakerOpenFor.
	BreakerOpenFor time.Duration
	// Logger receives the service's logs. Defaults to discarding them.
	Logger *slog.Logger
	// Clock returns the current time for the process's own caches (replays,
	// API keys) and the Date of receipts. Defaults to time.Now. Leases, idle
	// times and ages of keys are judged by the database's clock, never by
	// this one.
	Clock func() time.Time
	// Lease is how long a request holds an idempotency key before another
	// may take it over. It must outlast Payments.Budget(); the default is
	// twice the budget plus 30 seconds.
	Lease time.Duration
	// ProcessorKeyMargin is subtracted from ProcessorKeyWindow when deciding
	// whether the processor may have forgotten a key. Default
	// DefaultProcessorKeyMargin.
	ProcessorKeyMargin time.Duration
	// AbandonedAfter is how long an unfinished request must be idle (and its
	// lease expired) before the completer drives it on, so that its client
	// gets to retry first. Default DefaultAbandonedAfter.
	AbandonedAfter time.Duration
	// KeyRetention is how long finished idempotency keys are kept before the
	// reaper deletes them; it must outlast ProcessorKeyWindow. Default
	// DefaultKeyRetention.
	KeyRetention time.Duration
	// OrphanRefundAfter is the orphan grace period: how old a charge that
	// no ride records must be before the orphan policy refunds it
	// (orphans.go). It must outlast the processor's key window in
	// production (config.go refuses less); tests set it short. Default
	// DefaultOrphanRefundAfter.
	OrphanRefundAfter time.Duration
	// Registerer receives the service's Prometheus collectors. Default a
	// private registry.
	Registerer prometheus.Registerer
	// ReplayCacheTTL is how long the process answers replays of a key it
	// saw finished from memory. Default DefaultReplayCacheTTL; negative
	// disables the cache.
	ReplayCacheTTL time.Duration
	// TracerProvider receives the spans of atomic phases and processor
	// calls, and of the jobs the service inserts. Default the global
	// provider (a no-op unless the program set one).
	TracerProvider trace.TracerProvider
	// PublicURL is where riders reach the service (PUBLIC_URL): their bank
	// sends them back to its ReturnPath after they authenticate a payment.
	// Default http://localhost:8080.
	PublicURL string
	// ActionDeadline is how long a ride waits for its rider to
	// authenticate the payment before the payment is cancelled and the
	// ride expires. Default DefaultActionDeadline.
	ActionDeadline time.Duration
	// Capture is when a new booking's money is taken: CaptureTrip (a hold
	// at booking, the fare captured when the trip is completed) or
	// CaptureBooking (charged in full at booking). Default CaptureBooking.
	Capture Capture
	// HoldExpiry is how long a ride's hold is kept when its trip is
	// neither completed nor cancelled: then the hold is released and the
	// ride expires. Default DefaultHoldExpiry; at most MaxHoldExpiry.
	HoldExpiry time.Duration
	// Inbound are the sources of inbound messages (webhooks) by source name
	// (InboxSourceStripe, …). A source without one is not received: its
	// route answers 404.
	Inbound map[string]EventSource
}

// Service is the domain: every transaction of the application begins and
// commits here. It is safe for concurrent use.
type Service struct {
	// namespace is the deployment's, read from the database once at start.
	namespace string
	pool      *pgxpool.Pool
	queries   *dbgen.Queries
	// processors are the configured processors by name; order is their
	// order of preference.
	processors map[string]*processor
	order      []string
	jobs       *river.Client[pgx.Tx]
	logger     *slog.Logger
	now        func() time.Time
	lease      time.Duration
	margin     time.Duration
	metrics    *metrics
	tracer     trace.Tracer
	// abandonedAfter and retention are the completer's and reaper's policy.
	abandonedAfter time.Duration
	retention      time.Duration
	// orphanRefundAfter is the orphan policy's grace period.
	orphanRefundAfter time.Duration
	// returnBase is the public URL riders come back to after
	// authenticating; actionDeadline is how long a ride waits for them.
	returnBase     string
	actionDeadline time.Duration
	// capture is when new bookings take their money; holdExpiry how long a
	// trip's hold is kept.
	capture    Capture
	holdExpiry time.Duration
	// dispatchID is the dispatch side's account (0020_trips.sql): its
	// idempotency keys are its own.
	dispatchID int64
	// engine serves the flows under idempotency keys (package idem).
	engine  *idem.Engine
	rides   *idem.Flow[rideState]
	refunds *idem.Flow[refundState]
	// completions, cancellations and balances are a trip's flows
	// (trips.go, ride_cancel.go, balances.go).
	completions   *idem.Flow[completionState]
	cancellations *idem.Flow[cancelState]
	balances      *idem.Flow[balanceState]
	inbound       map[string]EventSource
	// rawPayments is the Stripe adapter itself, for what only some adapters
	// offer (EventLister).
	rawPayments Payments
}

// namespaceReadTimeout bounds the read of the deployment's namespace in New.
const namespaceReadTimeout = 10 * time.Second

// New returns a Service. It reads the deployment's namespace from the
// database (made by the migrations; New fails on a database without one),
// and inserts background jobs through an insert-only River client on the
// same pool, always inside the caller's transaction.
func New(cfg Config) (*Service, error) {
	if cfg.Pool == nil {
		return nil, errors.New("service: Config.Pool is required")
	}
	if len(cfg.Processors) == 0 {
		if cfg.Payments == nil {
			return nil, errors.New("service: Config.Payments or Config.Processors is required")
		}
		cfg.Processors = []Processor{{Name: ProcessorStripe, Payments: cfg.Payments}}
	}
	var budget time.Duration
	names := make([]string, 0, len(cfg.Processors))
	for _, p := range cfg.Processors {
		if p.Payments == nil || (p.Name != ProcessorStripe && p.Name != ProcessorAdyen) || slices.Contains(names, p.Name) {
			return nil, fmt.Errorf("service: Config.Processors: %q is not a known processor with an adapter, or is listed twice", p.Name)
		}
		names = append(names, p.Name)
		budget = max(budget, p.Payments.Budget())
	}
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = DefaultBreakerFailures
	}
	if cfg.BreakerOpenFor == 0 {
		cfg.BreakerOpenFor = DefaultBreakerOpenFor
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Lease == 0 {
		cfg.Lease = 2*budget + leaseSlack
	}
	if cfg.Lease <= budget {
		return nil, errors.New("service: Config.Lease must outlast every processor's Budget()")
	}
	if cfg.ProcessorKeyMargin == 0 {
		cfg.ProcessorKeyMargin = DefaultProcessorKeyMargin
	}
	if cfg.AbandonedAfter == 0 {
		cfg.AbandonedAfter = DefaultAbandonedAfter
	}
	if cfg.KeyRetention == 0 {
		cfg.KeyRetention = DefaultKeyRetention
	}
	if cfg.KeyRetention <= ProcessorKeyWindow {
		return nil, errors.New("service: Config.KeyRetention must outlast the processor's key window")
	}
	if cfg.OrphanRefundAfter == 0 {
		cfg.OrphanRefundAfter = DefaultOrphanRefundAfter
		// Twice the window of a Stripe-compatible test API that forgets
		// keys sooner (STRIPE_KEY_WINDOW).
		for _, p := range cfg.Processors {
			if w, ok := p.Payments.(keyWindowed); ok && p.Name == ProcessorStripe && w.KeyWindow() < ProcessorKeyWindow {
				cfg.OrphanRefundAfter = 2 * w.KeyWindow()
			}
		}
	}
	if cfg.ActionDeadline < 0 {
		return nil, errors.New("service: Config.ActionDeadline must not be negative")
	}
	if cfg.HoldExpiry < 0 || cfg.HoldExpiry > MaxHoldExpiry {
		return nil, fmt.Errorf("service: Config.HoldExpiry must be between 0 and %v", MaxHoldExpiry)
	}
	switch cfg.Capture {
	case "", CaptureBooking, CaptureTrip:
	default:
		return nil, fmt.Errorf("service: Config.Capture %q is neither %q nor %q", cfg.Capture, CaptureBooking, CaptureTrip)
	}
	if cfg.OrphanRefundAfter < 0 {
		return nil, errors.New("service: Config.OrphanRefundAfter must not be negative")
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	m, err := newMetrics(cfg.Registerer, names)
	if err != nil {
		return nil, err
	}
	tracer := telemetry.Tracer(cfg.TracerProvider)
	procs := map[string]*processor{}
	list := make([]*processor, 0, len(cfg.Processors))
	for _, p := range cfg.Processors {
		procs[p.Name] = newProcessor(p, len(cfg.Processors) == 1, m, tracer, cfg.Logger, cfg.BreakerFailures, cfg.BreakerOpenFor)
		list = append(list, procs[p.Name])
	}
	if err := cfg.Registerer.Register(newCircuitCollector(list)); err != nil {
		return nil, err
	}
	if cfg.ReplayCacheTTL == 0 {
		cfg.ReplayCacheTTL = DefaultReplayCacheTTL
	}
	jobs, err := river.NewClient(riverpgxv5.New(cfg.Pool), &river.Config{
		Logger: cfg.Logger,
		// Jobs carry the trace of the phase that inserts them.
		Plugins: []rivertype.Plugin{telemetry.NewRiverMiddleware(cfg.TracerProvider)},
	})
	if err != nil {
		return nil, err
	}
	queries := dbgen.New()
	ctx, cancel := context.WithTimeout(context.Background(), namespaceReadTimeout)
	defer cancel()
	namespace, err := queries.DeploymentNamespace(ctx, cfg.Pool)
	if err != nil {
		return nil, fmt.Errorf("service: read the deployment namespace (is the database migrated?): %w", err)
	}
	dispatch, err := queries.UserGetDispatch(ctx, cfg.Pool)
	if err != nil {
		return nil, fmt.Errorf("service: read the dispatch account (is the database migrated?): %w", err)
	}
	s := &Service{
		namespace:         namespace,
		dispatchID:        dispatch.ID,
		pool:              cfg.Pool,
		queries:           queries,
		processors:        procs,
		order:             names,
		jobs:              jobs,
		logger:            cfg.Logger,
		now:               cfg.Clock,
		lease:             cfg.Lease,
		margin:            cfg.ProcessorKeyMargin,
		metrics:           m,
		tracer:            telemetry.Tracer(cfg.TracerProvider),
		abandonedAfter:    cfg.AbandonedAfter,
		retention:         cfg.KeyRetention,
		inbound:           cfg.Inbound,
		rawPayments:       stripeAdapter(cfg.Processors),
		orphanRefundAfter: cfg.OrphanRefundAfter,
		returnBase:        strings.TrimRight(cmp.Or(cfg.PublicURL, DefaultPublicURL), "/"),
		actionDeadline:    cmp.Or(cfg.ActionDeadline, DefaultActionDeadline),
		capture:           cmp.Or(cfg.Capture, CaptureBooking),
		holdExpiry:        cmp.Or(cfg.HoldExpiry, DefaultHoldExpiry),
	}
	if s.engine, err = idem.New(idem.Config{
		Pool: cfg.Pool, Lease: cfg.Lease, ReplayTTL: cfg.ReplayCacheTTL, Now: cfg.Clock,
		Observer: engineObserver{m}, Tracer: tracer, Logger: cfg.Logger, Retryable: isRetryable,
	}); err != nil {
		return nil, err
	}
	s.rides = s.rideFlow()
	s.refunds = s.refundFlow()
	s.completions = s.completionFlow()
	s.cancellations = s.cancelFlow()
	s.balances = s.balanceFlow()
	idem.Register(s.engine, s.rides)
	idem.Register(s.engine, s.refunds)
	idem.Register(s.engine, s.completions)
	idem.Register(s.engine, s.cancellations)
	idem.Register(s.engine, s.balances)
	return s, nil
}

// stripeAdapter is the Stripe adapter among processors, nil when Stripe is
// not configured.
func stripeAdapter(processors []Processor) Payments {
	for _, p := range processors {
		if p.Name == ProcessorStripe {
			return p.Payments
		}
	}
	return nil
}

// Namespace returns the deployment's namespace at the payment processor.
func (s *Service) Namespace() string { return s.namespace }

// Lease returns how long a request holds an idempotency key.
func (s *Service) Lease() time.Duration { return s.lease }

// Stats are counters of what the service did since it started.
type Stats struct {
	// TxRetries counts transactions rerun after a serialization failure, a
	// deadlock or a random id drawn twice.
	TxRetries int64
	// Replays counts responses replayed from finished keys.
	Replays int64
	// Conflicts counts requests refused because another held the key.
	Conflicts int64
}

// Stats returns a snapshot of the service's counters.
func (s *Service) Stats() Stats {
	return Stats{
		TxRetries: s.metrics.txRetries.Load(),
		Replays:   s.metrics.replays.Load(),
		Conflicts: s.metrics.conflicts.Load(),
	}
}

// Engine returns the idempotency engine the service's transactions run in,
// for the domain packages composed beside it.
func (s *Service) Engine() *idem.Engine { return s.engine }

// Jobs returns the insert-only River client the service inserts jobs with,
// always inside the caller's transaction.
func (s *Service) Jobs() *river.Client[pgx.Tx] { return s.jobs }
