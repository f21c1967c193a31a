package limits

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// Bounds of the shared limiter's calls to Redis: a limiter that answers late
// would slow every request down, so a slow Redis counts as an unreachable
// one.
const (
	redisTimeout = 250 * time.Millisecond
	// redisRetryAfter is how long the limiter keeps to its in-process
	// buckets after Redis failed, before it tries Redis again.
	redisRetryAfter = 2 * time.Second
)

// Shared is the Limiter of replicas that share one budget through Redis
// (GCRA, github.com/go-redis/redis_rate). When Redis fails to answer, it
// falls back to its own in-process buckets (Local) at once, logs the change
// once, sets the fallback metric, and tries Redis again every couple of
// seconds; no request fails for it.
type Shared struct {
	client  *redis.Client
	redis   *redis_rate.Limiter
	local   *Local
	logger  *slog.Logger
	metrics *Metrics

	// timeout bounds each call: a dial and an answer.
	timeout time.Duration

	mu        sync.Mutex
	downSince time.Time
	downUntil time.Time
	down      bool
}

// quietRedis drops go-redis's own log lines (a failed dial, each time): the
// shared limiter reports Redis' state itself, once per change.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

var quietOnce sync.Once

// RedisOptions parses a REDIS_URL (redis://[user:password@]host:port[/db],
// or rediss:// for TLS) into the client options the shared limiter uses.
func RedisOptions(url string) (*redis.Options, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opt.DialTimeout = redisTimeout
	opt.ReadTimeout = redisTimeout
	opt.WriteTimeout = redisTimeout
	opt.MaxRetries = -1 // one attempt: the fallback is the retry
	opt.PoolSize = 32
	return opt, nil
}

// NewShared returns a limiter over the Redis of opt (see RedisOptions).
// Close closes its client.
func NewShared(opt *redis.Options, logger *slog.Logger, metrics *Metrics) *Shared {
	if logger == nil {
		logger = slog.Default()
	}
	quietOnce.Do(func() { redis.SetLogger(quietRedis{}) })
	client := redis.NewClient(opt)
	return &Shared{client: client, redis: redis_rate.NewLimiter(client), local: NewLocal(), logger: logger, metrics: metrics,
		timeout: opt.DialTimeout + opt.ReadTimeout}
}

// Close closes the Redis client.
func (s *Shared) Close() error { return s.client.Close() }

// Fallback reports whether the limiter is on its in-process buckets.
func (s *Shared) Fallback() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}

func (s *Shared) useRedis(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.down || now.After(s.downUntil)
}

// observe records whether a call started at started reached Redis, logging
// and counting a change. Only a call started after Redis was found
// unreachable may find it back, so that the late answers of calls already
// under way do not toggle the state.
func (s *Shared) observe(started time.Time, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err != nil && !s.down:
		s.down, s.downSince = true, time.Now()
		s.logger.Warn("rate limits: Redis unreachable, each replica enforces its own in-process budgets until it answers", "err", err)
		s.metrics.setFallback(true)
	case err == nil && s.down && started.After(s.downSince):
		s.down = false
		s.logger.Info("rate limits: Redis answers again, budgets are shared")
		s.metrics.setFallback(false)
	}
	if err != nil {
		s.downUntil = time.Now().Add(redisRetryAfter)
	}
}

func limitOf(p Policy) redis_rate.Limit {
	return redis_rate.Limit{Rate: p.Quota, Burst: p.Quota, Period: p.Window}
}

func (s *Shared) allowN(ctx context.Context, p Policy, key string, n int) (*redis_rate.Result, bool) {
	if !s.useRedis(time.Now()) {
		return nil, false
	}
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	res, err := s.redis.AllowN(ctx, p.Name+":"+key, limitOf(p), n)
	s.observe(started, err)
	return res, err == nil
}

// Allow implements Limiter.
func (s *Shared) Allow(ctx context.Context, p Policy, key string) Decision {
	if p.Off() {
		return Decision{Allowed: true, Remaining: 1}
	}
	res, ok := s.allowN(ctx, p, key, 1)
	if !ok {
		return s.local.Allow(ctx, p, key)
	}
	d := Decision{Allowed: res.Allowed > 0, Remaining: res.Remaining, Reset: max(res.ResetAfter, 0)}
	if !d.Allowed {
		d.RetryAfter = max(res.RetryAfter, 0)
	}
	return d
}

// Spent implements Limiter. It asks Redis for a charge of nothing, which
// answers the budget left without spending it.
func (s *Shared) Spent(ctx context.Context, p Policy, key string) (bool, time.Duration) {
	if p.Off() {
		return false, 0
	}
	res, ok := s.allowN(ctx, p, key, 0)
	if !ok {
		return s.local.Spent(ctx, p, key)
	}
	if res.Remaining < 1 {
		return true, max(res.ResetAfter-p.Window+p.Interval(), p.Interval()/10)
	}
	return false, 0
}
