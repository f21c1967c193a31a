package limits

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Decision is a limiter's answer to one request.
type Decision struct {
	// Allowed says whether the request may proceed; a request that may not
	// was not charged to the budget.
	Allowed bool
	// Remaining is how many more requests the budget allows at once.
	Remaining int
	// Reset is the time until the budget is full again.
	Reset time.Duration
	// RetryAfter, when the request was refused, is the time until the
	// budget allows one more.
	RetryAfter time.Duration
}

// Limiter keeps budgets by key (a rider, an address).
type Limiter interface {
	// Allow charges one request to key's budget under p, unless the budget
	// is spent.
	Allow(ctx context.Context, p Policy, key string) Decision
	// Spent reports, without charging anything, whether key's budget under p
	// is spent, and when it will allow one more.
	Spent(ctx context.Context, p Policy, key string) (spent bool, retryAfter time.Duration)
}

// Local is the in-process Limiter: a token bucket per policy and key. Buckets
// that have refilled are dropped, so memory follows the keys active within
// a window.
type Local struct {
	now func() time.Time

	mu      sync.Mutex
	buckets map[bucketKey]*rate.Limiter
	calls   int
}

type bucketKey struct{ policy, key string }

// sweepEvery is how many calls pass between two sweeps of full buckets.
const sweepEvery = 4096

// NewLocal returns an empty in-process limiter.
func NewLocal() *Local { return NewLocalAt(time.Now) }

// NewLocalAt returns an empty in-process limiter on the clock now.
func NewLocalAt(now func() time.Time) *Local {
	return &Local{now: now, buckets: map[bucketKey]*rate.Limiter{}}
}

func (l *Local) bucket(p Policy, key string, now time.Time) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if l.calls%sweepEvery == 0 {
		for k, b := range l.buckets {
			if b.TokensAt(now) >= float64(b.Burst()) {
				delete(l.buckets, k)
			}
		}
	}
	k := bucketKey{p.Name, key}
	b, ok := l.buckets[k]
	if !ok || b.Burst() != p.Quota {
		b = rate.NewLimiter(rate.Every(p.Interval()), p.Quota)
		l.buckets[k] = b
	}
	return b
}

// Allow implements Limiter.
func (l *Local) Allow(_ context.Context, p Policy, key string) Decision {
	if p.Off() {
		return Decision{Allowed: true, Remaining: 1}
	}
	now := l.now()
	b := l.bucket(p, key, now)
	r := b.ReserveN(now, 1)
	if d := r.DelayFrom(now); !r.OK() || d > 0 {
		r.CancelAt(now)
		tokens := b.TokensAt(now)
		return Decision{RetryAfter: d, Reset: refill(p, tokens)}
	}
	tokens := b.TokensAt(now)
	return Decision{Allowed: true, Remaining: int(tokens), Reset: refill(p, tokens)}
}

// Spent implements Limiter.
func (l *Local) Spent(_ context.Context, p Policy, key string) (bool, time.Duration) {
	if p.Off() {
		return false, 0
	}
	now := l.now()
	l.mu.Lock()
	b, ok := l.buckets[bucketKey{p.Name, key}]
	l.mu.Unlock()
	if !ok {
		return false, 0
	}
	if tokens := b.TokensAt(now); tokens < 1 {
		return true, time.Duration((1 - tokens) * float64(p.Interval()))
	}
	return false, 0
}

// refill is the time until a bucket holding tokens is full.
func refill(p Policy, tokens float64) time.Duration {
	missing := float64(p.Quota) - max(tokens, 0)
	return time.Duration(missing * float64(p.Interval()))
}
