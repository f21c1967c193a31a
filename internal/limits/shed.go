package limits

import (
	"sync"
	"sync/atomic"
	"time"
)

// Class is what a request is to the shedder, from the work it must never
// starve to the work it sheds first.
type Class int

const (
	// Critical work is never shed: health and readiness probes, metrics,
	// refunds, operators' pages.
	Critical Class = iota
	// Continuation is a booking already past a recovery point (its key is
	// Underway): it may use the reserved share.
	Continuation
	// Ordinary is any other request: reads, operators' API.
	Ordinary
	// NewBooking is a booking whose key the process has not seen under
	// way: shed first.
	NewBooking
)

// Defaults of the shedder.
const (
	// DefaultInFlight is how many requests (critical ones aside) may be in
	// flight at once; more are answered 503 at once.
	DefaultInFlight = 256
	// DefaultReserved is the share of DefaultInFlight that new bookings may
	// not take: continuations and ordinary requests keep it.
	DefaultReserved = 0.25
	// DefaultDBWait is the budget of the wait for a database connection:
	// when the recent mean wait exceeds it, new bookings are answered 503,
	// and ordinary requests too past twice the budget.
	DefaultDBWait = 500 * time.Millisecond
	// DefaultRetryAfter is the Retry-After of a shed request.
	DefaultRetryAfter = time.Second
)

// ShedConfig configures a Shedder; zero fields take the defaults.
type ShedConfig struct {
	// InFlight is the in-flight threshold; negative turns the in-flight
	// limit off.
	InFlight int
	// Reserved is the share of InFlight new bookings may not take, in [0, 1).
	Reserved float64
	// DBWait is the budget of the wait for a database connection; negative
	// turns the check off.
	DBWait time.Duration
	// PoolWait reports the recent mean wait for a database connection
	// (PoolWait.Mean); nil measures nothing.
	PoolWait func() time.Duration
}

// Shedder admits requests by class, refusing at once (503 Retry-After)
// what would otherwise queue.
type Shedder struct {
	cfg       ShedConfig
	newLimit  int64
	inFlight  atomic.Int64
	inFlightC atomic.Int64 // critical, counted for the record only
}

// NewShedder returns a shedder of cfg.
func NewShedder(cfg ShedConfig) *Shedder {
	if cfg.InFlight == 0 {
		cfg.InFlight = DefaultInFlight
	}
	if cfg.Reserved == 0 {
		cfg.Reserved = DefaultReserved
	}
	if cfg.DBWait == 0 {
		cfg.DBWait = DefaultDBWait
	}
	s := &Shedder{cfg: cfg}
	s.newLimit = int64(float64(cfg.InFlight) * (1 - cfg.Reserved))
	if cfg.InFlight > 0 {
		s.newLimit = max(s.newLimit, 1)
	}
	return s
}

// InFlight is the number of admitted requests in flight, critical ones
// aside.
func (s *Shedder) InFlight() int { return int(s.inFlight.Load()) }

// Admit admits a request of class c, or refuses it and names why (one of
// the Reason constants). An admitted request calls release when it ends.
func (s *Shedder) Admit(c Class) (release func(), reason string) {
	if c == Critical {
		s.inFlightC.Add(1)
		return func() { s.inFlightC.Add(-1) }, ""
	}
	if s.cfg.DBWait > 0 && s.cfg.PoolWait != nil && c != Continuation {
		budget := s.cfg.DBWait
		if c == Ordinary {
			budget *= 2
		}
		if s.cfg.PoolWait() > budget {
			return nil, ReasonDBWait
		}
	}
	n := s.inFlight.Add(1)
	if s.cfg.InFlight > 0 {
		limit := int64(s.cfg.InFlight)
		if c == NewBooking {
			limit = s.newLimit
		}
		if n > limit {
			s.inFlight.Add(-1)
			return nil, ReasonInFlight
		}
	}
	var once sync.Once
	return func() { once.Do(func() { s.inFlight.Add(-1) }) }, ""
}

// PoolWait estimates the wait for a database connection from a pool's
// cumulative counters (pgxpool.Stat: AcquireCount and
// EmptyAcquireWaitTime): the mean wait per acquire over the last sampling
// period. Reading it is cheap; it samples at most every period.
type PoolWait struct {
	stat   func() (acquires int64, waited time.Duration)
	period time.Duration

	mu       sync.Mutex
	at       time.Time
	acquires int64
	waited   time.Duration
	mean     time.Duration
}

// NewPoolWait returns an estimator over stat, sampled at most every period.
func NewPoolWait(stat func() (acquires int64, waited time.Duration), period time.Duration) *PoolWait {
	a, w := stat()
	return &PoolWait{stat: stat, period: period, at: time.Now(), acquires: a, waited: w}
}

// Mean is the mean wait per acquire over the last sampling period.
func (p *PoolWait) Mean() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); now.Sub(p.at) >= p.period {
		a, w := p.stat()
		if da := a - p.acquires; da > 0 {
			p.mean = (w - p.waited) / time.Duration(da)
		} else {
			p.mean = 0
		}
		p.at, p.acquires, p.waited = now, a, w
	}
	return p.mean
}

// Underway remembers the bookings this process started and that have not
// ended with a stored answer, so that their retries count as continuations
// of work past a recovery point rather than new bookings. It is a bounded
// in-memory record: a retry that reaches another replica, or comes after
// the record forgot the key, is taken for a new booking, which costs it
// only its priority, never its exactly-once.
type Underway struct {
	ttl time.Duration
	max int

	mu   sync.Mutex
	keys map[string]time.Time
}

// DefaultUnderwayTTL is how long Underway remembers a booking.
const DefaultUnderwayTTL = 15 * time.Minute

// NewUnderway returns an empty record of at most max keys, each kept ttl.
func NewUnderway(ttl time.Duration, max int) *Underway {
	return &Underway{ttl: ttl, max: max, keys: map[string]time.Time{}}
}

// Begin records key as under way.
func (u *Underway) Begin(key string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := time.Now()
	if len(u.keys) >= u.max {
		for k, exp := range u.keys {
			if now.After(exp) {
				delete(u.keys, k)
			}
		}
		if len(u.keys) >= u.max {
			return
		}
	}
	u.keys[key] = now.Add(u.ttl)
}

// End forgets key: its booking ended with a stored answer.
func (u *Underway) End(key string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.keys, key)
}

// Has reports whether key is under way.
func (u *Underway) Has(key string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	exp, ok := u.keys[key]
	return ok && time.Now().Before(exp)
}
