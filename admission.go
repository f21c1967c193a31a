package main

import (
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/atomicrides/atomicrides/internal/limits"
	"github.com/atomicrides/atomicrides/openapi"
)

// poolWaitPeriod is how often the shedder samples the pool's wait.
const poolWaitPeriod = 100 * time.Millisecond

// newLimits builds the API's admission control from the configuration:
// in-process budgets, or budgets shared through REDIS_URL, and the shedder
// over the pool's connection wait. stop closes the Redis client.
func newLimits(cfg *config, pool *pgxpool.Pool, reg prometheus.Registerer, logger *slog.Logger) (lim openapi.Limits, stop func()) {
	metrics := limits.NewMetrics(reg)
	lim = openapi.Limits{
		Writes:       policyOr(cfg.RateLimitWrites, limits.DefaultWrites),
		Reads:        policyOr(cfg.RateLimitReads, limits.DefaultReads),
		AuthFailures: policyOr(cfg.RateLimitAuthFailures, limits.DefaultAuthFailures),
		Underway:     limits.NewUnderway(limits.DefaultUnderwayTTL, 1<<16),
		Metrics:      metrics,
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
	wait := limits.NewPoolWait(func() (int64, time.Duration) {
		s := pool.Stat()
		return s.AcquireCount(), s.EmptyAcquireWaitTime()
	}, poolWaitPeriod)
	lim.Shedder = limits.NewShedder(limits.ShedConfig{
		InFlight: cfg.ShedInFlight,
		Reserved: cfg.ShedReserved,
		DBWait:   cfg.ShedDBWait,
		PoolWait: wait.Mean,
	})
	return lim, stop
}

func policyOr(p *limits.Policy, def limits.Policy) limits.Policy {
	if p == nil {
		return def
	}
	return *p
}
