package limits

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The admission queue is judged by how long its requests wait, not by how
// many wait (CoDel's notion of a standing queue, with Facebook's adaptive
// LIFO). A request waits for a slot up to its own deadline: the one its
// client gave (WithWaitDeadline: its timeout, less the time the service
// takes to serve it, at most maxQueueWait), its context's, or
// defaultQueueWait when it gave none, whichever is sooner: a burst the
// service drains within its requests' timeouts is the good queue it is,
// and is served whole. Once the queue has lasted an interval (a flood,
// not a burst), a request that would wait past its deadline (the waiters
// before it, at the rate the queue is served; never while fewer are before
// it than its class has slots) is refused as it arrives:
// the queue holds no more than its slots can serve in time, and a flood
// costs the service a refusal per request, not a connection held to its
// deadline for nothing. A wait is judged against what the service is
// serving: the target is queueTarget or the mean time the
// service takes to serve an admitted request, whichever is longer, so that
// a slow machine's queue of a few requests is not taken for a standing
// one. The queue stands when, over a whole queueInterval, every request it
// served waited at least the target (the oldest waiter's wait when it
// served none) and its
// backlog did not drain (it shed less than a quarter of what it served
// from its peak): arrivals keep it as long as it is. A standing queue is
// kept until it empties: the newest waiter is served first and a waiter
// gives up after the target (priority work aside: it is served first from
// every slot freed, and waits to its deadline). The memory the waiters hold
// is bounded by maxQueued, a cap only an attack reaches; at the cap a
// request of a higher class takes the place of the newest waiter of the
// lowest class, and any other is refused.
const (
	queueTarget   = 5 * time.Millisecond
	queueInterval = 250 * time.Millisecond
	// defaultQueueWait is the wait of a request that gave no deadline:
	// half the shortest timeout a client commonly has (a second), so that
	// a request admitted late still answers within it.
	defaultQueueWait = 500 * time.Millisecond
	maxQueueWait     = 30 * time.Second
	maxQueued        = 10_000
)

// Reasons a request is refused by the admission control, the label of the
// admission refusals.
const (
	// RefusedFull: the queue held maxQueued waiters of its class or higher.
	RefusedFull = "full"
	// RefusedQueueTimeout: it waited in the queue past its wait (its
	// deadline, or the target in a standing queue), or would have: the
	// waiters before it would take longer than its deadline allows.
	RefusedQueueTimeout = "queue_timeout"
	// RefusedClientGone: its client went away while it waited.
	RefusedClientGone = "client_gone"
)

// Bounds derives the limit's bounds from the machine and the database
// pool. The least is what keeps every CPU busy: twice the CPUs, and never
// below 4. The most is what the pool could serve if every request also
// waited elsewhere (at a payment processor) most of its time: 64 requests
// per pooled connection, and at least 16 times the least.
func Bounds(poolConns int) (minLimit, maxLimit int) {
	minLimit = max(2*runtime.GOMAXPROCS(0), 4)
	return minLimit, max(64*poolConns, 16*minLimit)
}

// AdmissionConfig configures an Admission.
type AdmissionConfig struct {
	// Fixed, when positive, fixes the limit (LOAD_SHED_IN_FLIGHT=N); zero
	// learns it within [Min, Max].
	Fixed int
	// Min and Max bound the learnt limit (Bounds).
	Min, Max int
	// Signals, when set, reads the counters the limit backs off on.
	Signals func() Signals
	// Metrics counts admissions, refusals and back-offs; nil counts
	// nothing.
	Metrics *Metrics
	// Now and Rand replace the clock and the randomness (Rand returns a
	// uniform int in [0, n)); nil means the real ones.
	Now  func() time.Time
	Rand func(n int) int
}

// Admission admits requests by class within a concurrency limit it learns
// from their latency (or a fixed one), queues a burst briefly, and refuses
// the rest at once with a Retry-After that spreads their clients. Nothing
// here reads the database: a refused request has done nothing.
type Admission struct {
	cfg     AdmissionConfig
	now     func() time.Time
	rand    func(n int) int
	metrics *Metrics

	exempt atomic.Int64 // exempt requests in flight

	mu       sync.Mutex
	grad     *gradient
	inFlight [numClasses]int
	total    int
	queues   [numClasses][]*waiter
	queued   int
	exc      excess
	// The queue's interval: when it began, the least wait of the waiters
	// it served (-1: none yet), how many it served, its longest length,
	// and whether the queue stands.
	intervalStart  time.Time
	intervalMin    time.Duration
	intervalServed int
	intervalPeak   int
	stands         bool
	// queueSince is when the queue last began (it was empty before), and
	// queueServed how many of its waiters were served since.
	queueSince  time.Time
	queueServed int
	// served is the mean time an admitted request took to be served
	// (moving, the last eight or so weighing most); zero before the first.
	served time.Duration
}

// waiter is a request in the queue; mu guards its fields.
type waiter struct {
	class Class
	at    time.Time
	// deadline is when it gives up waiting (see Admit).
	deadline time.Time
	// reason is why it was refused, set before a nil is sent on ch.
	reason string
	// ch receives the decision once: a ticket, or nil when it timed out.
	ch chan *Ticket
}

// Ticket is an admitted request; Done ends it.
type Ticket struct {
	a     *Admission
	class Class
	start time.Time
	gen   uint64
	once  sync.Once
}

// Outcome is how an admitted request ended, to the limit.
type Outcome int

const (
	// Served: the operation did its work; its latency is a sample of the
	// limit.
	Served Outcome = iota
	// Answered: answered without the operation's work (a refusal, a bad
	// request, a conflict): no sample.
	Answered
	// ClientGone: the client went away before the answer: the limit backs
	// off.
	ClientGone
)

// Refusal is a request the admission control refused.
type Refusal struct {
	// Reason is one of the Refused constants.
	Reason string
	// RetryAfter is when to come back, in whole seconds.
	RetryAfter int
}

// NewAdmission returns an admission control of cfg.
func NewAdmission(cfg AdmissionConfig) *Admission {
	a := &Admission{cfg: cfg, now: cfg.Now, rand: cfg.Rand, metrics: cfg.Metrics}
	if a.now == nil {
		a.now = time.Now
	}
	if a.rand == nil {
		a.rand = rand.IntN
	}
	now := a.now()
	a.intervalStart, a.intervalMin = now, -1
	if cfg.Fixed <= 0 {
		a.cfg.Min, a.cfg.Max = max(cfg.Min, 1), max(cfg.Max, cfg.Min, 1)
		a.grad = newGradient(a.cfg.Min, a.cfg.Max, now, a.rand, cfg.Signals, a.metrics.backoff)
	}
	return a
}

// Admit admits a request of class c at once, after a wait in the queue
// (never past ctx, nor past ctx's deadline), or refuses it. An admitted
// request calls Done on its ticket when it ends. A request whose client
// left while it waited is refused, never handed a slot.
func (a *Admission) Admit(ctx context.Context, c Class) (*Ticket, *Refusal) {
	if c == Exempt {
		// Counted for the record only, without the lock: exempt requests
		// are the cheapest the service serves.
		a.exempt.Add(1)
		return &Ticket{a: a, class: c}, nil
	}
	if ctx.Err() != nil {
		return nil, a.refuseLocked(c, RefusedClientGone, RefusedClientGone)
	}
	now := a.now()
	deadline, _ := ctx.Deadline()
	a.mu.Lock()
	if d, ok := ctx.Value(waitDeadlineKey{}).(time.Time); ok {
		// Its client waits until d: it may wait for a slot until the
		// service would still answer in time.
		d = d.Add(-a.served)
		if limit := now.Add(maxQueueWait); limit.Before(d) {
			d = limit
		}
		if deadline.IsZero() || d.Before(deadline) {
			deadline = d
		}
	} else if d := now.Add(defaultQueueWait); deadline.IsZero() || d.Before(deadline) {
		deadline = d
	}
	t, w, r := a.admit(c, now, deadline)
	a.mu.Unlock()
	if w == nil {
		return t, r
	}
	reason := RefusedQueueTimeout
	var got *Ticket
	decided := false
	// The waiter wakes at its deadline, and at least once an interval
	// meanwhile, so that a queue judged standing is cut even when no
	// request arrives or ends to judge it.
	timer := time.NewTimer(min(w.deadline.Sub(now), queueInterval))
	defer timer.Stop()
wait:
	for {
		select {
		case got = <-w.ch:
			decided = true
			break wait
		case <-ctx.Done():
			if ctx.Err() != context.DeadlineExceeded {
				reason = RefusedClientGone
			}
			break wait
		case <-timer.C:
			// expire refuses it past its deadline or in a standing
			// queue, and dispatch hands any slot free meanwhile.
			now = a.now()
			a.mu.Lock()
			a.expire(now)
			a.dispatch(now)
			a.mu.Unlock()
			timer.Reset(min(max(w.deadline.Sub(now), time.Millisecond), queueInterval))
		}
	}
	if got != nil {
		if ctx.Err() == nil {
			return got, nil
		}
		// Its client left as it got the slot: the slot goes to the next.
		got.Done("", Answered)
		return nil, a.refuseLocked(c, RefusedClientGone, RefusedClientGone)
	}
	if decided {
		// Refused by expire or displace, which counted it.
		return nil, a.refuseLocked(c, "", w.reason)
	}
	a.mu.Lock()
	if a.withdraw(w) {
		defer a.mu.Unlock()
		return nil, a.refuse(c, reason, a.now())
	}
	a.mu.Unlock()
	// Decided meanwhile.
	if got = <-w.ch; got == nil {
		return nil, a.refuseLocked(c, "", w.reason)
	}
	if reason != RefusedClientGone {
		return got, nil
	}
	got.Done("", Answered)
	return nil, a.refuseLocked(c, reason, reason)
}

type waitDeadlineKey struct{}

// WithWaitDeadline returns ctx carrying the time its request's client
// stops waiting for the answer (its Request-Timeout), which Admit queues
// the request against instead of defaultQueueWait.
func WithWaitDeadline(ctx context.Context, d time.Time) context.Context {
	return context.WithValue(ctx, waitDeadlineKey{}, d)
}

// refuseLocked is refuse with mu taken, for reason; an empty count counts
// nothing (the refusal was counted when it was decided).
func (a *Admission) refuseLocked(c Class, count, reason string) *Refusal {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if count == "" {
		return a.refusal(reason, now)
	}
	return a.refuse(c, count, now)
}

// limit is the limit now; mu held.
func (a *Admission) limit() int {
	if a.grad == nil {
		return a.cfg.Fixed
	}
	return a.grad.current()
}

// room reports whether a request of class c fits the limit; mu held.
func (a *Admission) room(c Class, limit int) bool {
	return a.total == 0 || float64(a.total+1) <= c.Share()*float64(limit)
}

// observe judges the queue at the end of each interval; mu held. An
// empty queue does not stand; a standing one stands until it empties.
func (a *Admission) observe(now time.Time) {
	if a.queued == 0 {
		a.stands = false
		a.newInterval(now)
		return
	}
	a.intervalPeak = max(a.intervalPeak, a.queued)
	if now.Sub(a.intervalStart) < queueInterval {
		return
	}
	if !a.stands {
		least := a.intervalMin
		if least < 0 {
			least = a.oldestWait(now)
		}
		// A queue that served nothing waits for its deadlines: nothing
		// tells a standing queue from a slow answer.
		drained := 4*(a.intervalPeak-a.queued) >= a.intervalServed
		a.stands = least >= a.target() && !drained
	}
	a.newInterval(now)
}

// target is the wait a standing queue is judged by and cut at: queueTarget,
// or the mean time a request takes to be served when longer; mu held.
func (a *Admission) target() time.Duration {
	return max(queueTarget, a.served)
}

// newInterval begins the queue's interval at now; mu held.
func (a *Admission) newInterval(now time.Time) {
	a.intervalStart, a.intervalMin, a.intervalServed, a.intervalPeak = now, -1, 0, a.queued
}

// oldestWait is the wait of the oldest waiter; mu held.
func (a *Admission) oldestWait(now time.Time) time.Duration {
	var oldest time.Duration
	for _, c := range Classes {
		if q := a.queues[c]; len(q) > 0 {
			oldest = max(oldest, now.Sub(q[0].at))
		}
	}
	return oldest
}

// admit decides a request of class c whose context ends at deadline (zero:
// never): a ticket, a waiter queued, or a refusal; mu held.
func (a *Admission) admit(c Class, now, deadline time.Time) (*Ticket, *waiter, *Refusal) {
	if a.grad != nil {
		a.grad.tick(now)
	}
	a.expire(now)
	a.dispatch(now)
	// dispatch left no waiter the limit has room for, and a waiter of a
	// class as high as c would have had room first: the queue holds
	// nobody this request would pass.
	limit := a.limit()
	if a.room(c, limit) {
		return a.ticket(c, now), nil, nil
	}
	if a.grad != nil {
		a.grad.wanted()
	}
	if deadline.IsZero() {
		deadline = now.Add(defaultQueueWait)
	}
	if now.Add(a.expectedWait(c, limit, now)).After(deadline) {
		// It would wait past its deadline: refused now, at the cost of a
		// refusal, rather than holding its connection for nothing.
		return nil, nil, a.refuse(c, RefusedQueueTimeout, now)
	}
	if a.queued >= maxQueued && !a.displace(c, now) {
		return nil, nil, a.refuse(c, RefusedFull, now)
	}
	if a.queued == 0 {
		a.newInterval(now)
		a.queueSince, a.queueServed = now, 0
	}
	w := &waiter{class: c, at: now, deadline: deadline, ch: make(chan *Ticket, 1)}
	a.queues[c] = append(a.queues[c], w)
	a.queued++
	a.intervalPeak = max(a.intervalPeak, a.queued)
	return nil, w, nil
}

// expectedWait is how long a request of class c joining the queue now
// would wait for a slot, zero when nothing tells: while the queue is
// younger than an interval (a burst is queued whole, its wait bounded by
// its deadlines alone), in a standing queue (which serves the newest
// first), before the service has served anything, and while fewer waiters
// are before it than its class has slots (a slot freed always finds a
// waiter: refusing those would leave slots idle, however slow the service).
// Otherwise it is the shorter of two estimates of the time the waiters
// served before it (those of its class and higher, itself included) take
// to be served: at the service's mean time per request on the slots its
// class may fill, and at the rate the queue was served since it last was
// empty; mu held.
func (a *Admission) expectedWait(c Class, limit int, now time.Time) time.Duration {
	age := now.Sub(a.queueSince)
	if a.queued == 0 || a.stands || age < queueInterval {
		return 0
	}
	ahead := 1
	for _, k := range Classes {
		ahead += len(a.queues[k])
		if k == c {
			break
		}
	}
	slots := max(math.Floor(c.Share()*float64(limit)), 1)
	if float64(ahead) <= slots {
		return 0
	}
	wait := time.Duration(math.MaxInt64)
	if a.served > 0 {
		wait = time.Duration(float64(ahead) / slots * float64(a.served))
	}
	if a.queueServed > 0 {
		wait = min(wait, time.Duration(float64(ahead)/float64(a.queueServed)*float64(age)))
	}
	if wait == math.MaxInt64 {
		return 0
	}
	return wait
}

// displace refuses the newest waiter of the lowest class below c, to make
// room for a request of class c in a full queue, and reports whether there
// was one; mu held.
func (a *Admission) displace(c Class, now time.Time) bool {
	for i := len(Classes) - 1; i >= 0 && Classes[i] != c; i-- {
		k := Classes[i]
		if q := a.queues[k]; len(q) > 0 {
			w := q[len(q)-1]
			q[len(q)-1] = nil
			a.queues[k] = q[:len(q)-1]
			a.queued--
			a.refuse(k, RefusedFull, now)
			w.reason = RefusedFull
			w.ch <- nil
			return true
		}
	}
	return false
}

// ticket admits a request of class c; mu held.
func (a *Admission) ticket(c Class, now time.Time) *Ticket {
	a.inFlight[c]++
	a.total++
	t := &Ticket{a: a, class: c, start: now}
	if a.grad != nil {
		t.gen = a.grad.admitted(a.total)
	}
	a.metrics.admitted(c)
	return t
}

// refuse counts a refusal and draws its Retry-After; mu held.
func (a *Admission) refuse(c Class, reason string, now time.Time) *Refusal {
	a.exc.refused(now)
	a.metrics.admissionRefused(c, reason)
	return &Refusal{Reason: reason, RetryAfter: spread(a.exc.base(now, a.queued), a.rand)}
}

// refusal draws the Retry-After of a refusal already counted; mu held.
func (a *Admission) refusal(reason string, now time.Time) *Refusal {
	return &Refusal{Reason: reason, RetryAfter: spread(a.exc.base(now, a.queued), a.rand)}
}

// withdraw takes w out of the queue, reporting false when it was no longer
// there (decided meanwhile); mu held.
func (a *Admission) withdraw(w *waiter) bool {
	q := a.queues[w.class]
	for i, x := range q {
		if x == w {
			a.queues[w.class] = append(q[:i], q[i+1:]...)
			a.queued--
			return true
		}
	}
	return false
}

// expire refuses the waiters past their deadline, and in a standing
// queue those that waited the target, but for priority work; mu held.
func (a *Admission) expire(now time.Time) {
	a.observe(now)
	if a.queued == 0 {
		return
	}
	for _, c := range Classes {
		// Priority work is served first from every slot freed: it waits
		// to its deadline even in a standing queue.
		short := a.stands && c != Priority
		target := a.target()
		q := a.queues[c][:0]
		for _, w := range a.queues[c] {
			if !now.Before(w.deadline) || short && now.Sub(w.at) >= target {
				a.queued--
				a.exc.refused(now)
				a.metrics.admissionRefused(c, RefusedQueueTimeout)
				w.reason = RefusedQueueTimeout
				w.ch <- nil
				continue
			}
			q = append(q, w)
		}
		clear(a.queues[c][len(q):])
		a.queues[c] = q
	}
	a.observe(now)
}

// dispatch admits waiters while the limit has room for them, the highest
// class first, the oldest first (the newest while the queue stands); mu
// held.
func (a *Admission) dispatch(now time.Time) {
	for a.queued > 0 {
		limit := a.limit()
		var w *waiter
		for _, c := range Classes {
			q := a.queues[c]
			if len(q) == 0 || !a.room(c, limit) {
				continue
			}
			if a.stands {
				w, a.queues[c] = q[len(q)-1], q[:len(q)-1]
			} else {
				w, a.queues[c] = q[0], q[1:]
			}
			break
		}
		if w == nil {
			return
		}
		a.queued--
		a.intervalServed++
		a.queueServed++
		if wait := now.Sub(w.at); a.intervalMin < 0 || wait < a.intervalMin {
			a.intervalMin = wait
		}
		w.ch <- a.ticket(w.class, now)
	}
	a.observe(now)
}

// Done ends an admitted request with its outcome; op names its operation,
// whose answers share a baseline latency. Later calls do nothing.
func (t *Ticket) Done(op string, outcome Outcome) {
	t.once.Do(func() { t.a.done(t, op, outcome) })
}

func (a *Admission) done(t *Ticket, op string, outcome Outcome) {
	if t.class == Exempt {
		a.exempt.Add(-1)
		return
	}
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inFlight[t.class]--
	a.total--
	a.exc.served(now)
	if outcome == Served {
		if d := now.Sub(t.start); a.served == 0 {
			a.served = d
		} else {
			a.served += (d - a.served) / 8
		}
	}
	if a.grad != nil {
		switch outcome {
		case Served:
			a.grad.sample(now, op, now.Sub(t.start), t.gen)
		case ClientGone:
			a.grad.backoff(SignalClientGone)
		}
	}
	a.expire(now)
	a.dispatch(now)
}

// AdmissionStats is a snapshot of an Admission.
type AdmissionStats struct {
	// Limit is the limit now; Min and Max its bounds (all three the fixed
	// limit when it is fixed).
	Limit, Min, Max int
	// InFlight and Queued count the requests by class.
	InFlight, Queued map[Class]int
	// RetryAfter is the base of the Retry-After a refusal gets now, before
	// its spread.
	RetryAfter int
}

// Stats returns a snapshot of a.
func (a *Admission) Stats() AdmissionStats {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	s := AdmissionStats{Limit: a.limit(), Min: a.cfg.Min, Max: a.cfg.Max,
		InFlight: map[Class]int{}, Queued: map[Class]int{}, RetryAfter: a.exc.base(now, a.queued)}
	if a.grad == nil {
		s.Min, s.Max = a.cfg.Fixed, a.cfg.Fixed
	}
	for _, c := range Classes {
		s.InFlight[c] = a.inFlight[c]
		s.Queued[c] = len(a.queues[c])
	}
	s.InFlight[Exempt] = int(a.exempt.Load())
	return s
}
