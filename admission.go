package main

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/atomicrides/atomicrides/internal/limits"
	"github.com/atomicrides/atomicrides/openapi"
	"github.com/atomicrides/atomicrides/service"
)

// newLimits builds the API's admission control from the configuration:
// in-process budgets, or budgets shared through REDIS_URL, each
// credential's limit of requests in flight, and the admission limit, learnt within bounds taken from the machine and the
// pool unless LOAD_SHED_IN_FLIGHT fixes it or turns it off. stop closes
// the Redis client.
func newLimits(cfg *config, pool *pgxpool.Pool, svc *service.Service, reg prometheus.Registerer, logger *slog.Logger) (lim openapi.Limits, stop func()) {
	metrics := limits.NewMetrics(reg)
	lim = openapi.Limits{
		Writes:              policyOr(cfg.RateLimitWrites, limits.DefaultWrites),
		Reads:               policyOr(cfg.RateLimitReads, limits.DefaultReads),
		AuthFailures:        policyOr(cfg.RateLimitAuthFailures, limits.DefaultAuthFailures),
		Operator:            limits.DefaultOperator,
		Dispatch:            limits.DefaultDispatch,
		Concurrency:         limits.NewConcurrency(),
		RiderConcurrency:    limits.DefaultRiderConcurrency,
		OperatorConcurrency: limits.DefaultOperatorConcurrency,
		DispatchConcurrency: limits.DefaultDispatchConcurrency,
		Started:             limits.NewStarted(limits.DefaultStartedTTL, 1<<16),
		Metrics:             metrics,
	}
	switch {
	case cfg.RateLimitInFlight > 0:
		lim.RiderConcurrency = cfg.RateLimitInFlight
	case cfg.RateLimitInFlight < 0:
		lim.RiderConcurrency = 0
	}
	stop = func() {}
	if cfg.RedisURL != "" {
		opt, _ := limits.RedisOptions(cfg.RedisURL) // checked by config
		shared := limits.NewShared(opt, logger, metrics)
		lim.Limiter, stop = shared, func() { _ = shared.Close() }
		logger.Info("rate limits shared through Redis", "addr", opt.Addr)
	} else {
		lim.Limiter = limits.NewLocal()
	}
	if cfg.ShedInFlight < 0 {
		logger.Warn("admission limit off (LOAD_SHED_IN_FLIGHT=off): an overload queues without bound")
		return lim, stop
	}
	minLimit, maxLimit := limits.Bounds(int(pool.Config().MaxConns))
	lim.Admission = limits.NewAdmission(limits.AdmissionConfig{
		Fixed: cfg.ShedInFlight,
		Min:   minLimit,
		Max:   maxLimit,
		Signals: func() limits.Signals {
			s := pool.Stat()
			return limits.Signals{TxRetries: svc.Stats().TxRetries, Acquires: s.AcquireCount(), WaitedAcquires: s.EmptyAcquireCount()}
		},
		Metrics: metrics,
	})
	reg.MustRegister(lim.Admission.Collector())
	if cfg.ShedInFlight > 0 {
		logger.Info("admission limit fixed", "limit", cfg.ShedInFlight)
	} else {
		logger.Info("admission limit learnt", "min", minLimit, "max", maxLimit)
	}
	return lim, stop
}

func policyOr(p *limits.Policy, def limits.Policy) limits.Policy {
	if p == nil {
		return def
	}
	return *p
}
