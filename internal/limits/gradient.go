package limits

import (
	"math"
	"slices"
	"time"
)

// Tuning of the gradient. None of these is a setting: they shape how the
// limit follows the latency, and the limit itself is what a deployment
// would otherwise have to tune.
const (
	// gradientWindow is how often the limit moves: a window closes once it
	// lasted this long and saw gradientMinSamples answers (or ten times as
	// long with fewer).
	gradientWindow     = 100 * time.Millisecond
	gradientMinSamples = 8
	// gradientTolerance is how far the window's mean latency may rise above
	// the baseline (as a multiple of it) before the limit comes down.
	gradientTolerance = 1.5
	// gradientSmoothing is the weight of a window's higher limit against
	// the current one; a lower one applies at once.
	gradientSmoothing = 0.2
	// backoffFactor is what a back-off signal multiplies the limit by, at
	// most once a window.
	backoffFactor = 0.9
	// probeEvery is the mean interval between two measurements of the
	// baselines (jittered by a sixth either way, so that replicas started
	// together do not probe together); probeSamples and probeMax end a
	// probe.
	probeEvery   = 30 * time.Second
	probeSamples = 16
	probeMax     = 500 * time.Millisecond
	// probeSoon is when a probe follows an operation first seen outside
	// one, whose baseline is only provisional.
	probeSoon = time.Second
	// ratioCap bounds one answer's weight in a window's mean.
	ratioCap = 10.0
)

// Back-off signals, the label of the back-off metric.
const (
	SignalLatency    = "latency"
	SignalClientGone = "client_gone"
	SignalTxRetries  = "tx_retries"
	SignalPoolWait   = "pool_wait"
)

// Signals are cumulative counters the limit backs off on, read once a
// window.
type Signals struct {
	// TxRetries counts transactions rerun after a serialization failure or
	// a deadlock.
	TxRetries int64
	// Acquires counts the database connections acquired from the pool, and
	// WaitedAcquires those that had to wait for one.
	Acquires, WaitedAcquires int64
}

// gradient learns a concurrency limit from the latency of the requests it
// admitted, as the gradient limiters of Netflix's concurrency-limits and
// Envoy's adaptive concurrency filter do. Each answer is compared with the
// baseline of its operation (its median latency at the lowest limit); once
// a window, the limit is multiplied by tolerance ÷ the window's mean ratio
// (kept within [0.5, 2]) and given a headroom of its square root; it
// comes down at once and goes up smoothed. It grows only while requests wait or are refused, or fill half
// of it. Every probeEvery or so it falls to its minimum until it has
// measured the baselines again, so that a baseline raised by a standing
// queue cannot carry the limit up with it. It starts at four times its
// minimum, and probes a second after an operation is first answered. The caller serialises every
// call (Admission's mutex).
type gradient struct {
	min, max float64
	limit    float64
	rand     func(n int) int
	backoffs func(signal string)

	// The window.
	winStart time.Time
	sum      float64
	n        int
	demand   bool
	peak     int
	backed   bool

	// The baselines, by operation, and the probe that measures them (the
	// latencies of the answers admitted since it began, by operation).
	base        map[string]baseline
	probing     bool
	probeStart  time.Time
	saved       float64
	gen         uint64
	probeRTT    map[string][]time.Duration
	probeN      int
	nextProbe   time.Time
	signals     func() Signals
	lastSignals Signals
}

// baseline is an operation's latency when nothing queues.
type baseline struct {
	rtt time.Duration
	// measured is false until a probe measures it: the operation's fastest
	// answer stands in.
	measured bool
}

func newGradient(minLimit, maxLimit int, now time.Time, rand func(n int) int, signals func() Signals, backoffs func(string)) *gradient {
	g := &gradient{
		min: float64(minLimit), max: float64(maxLimit), rand: rand, signals: signals, backoffs: backoffs,
		base: map[string]baseline{}, probeRTT: map[string][]time.Duration{},
	}
	g.limit = min(g.max, 4*g.min)
	if signals != nil {
		g.lastSignals = signals()
	}
	// The first answers of each operation give it a provisional baseline
	// and bring the first probe (sample).
	g.winStart, g.nextProbe = now, now.Add(probeEvery)
	return g
}

// current is the limit admissions follow now.
func (g *gradient) current() int {
	if g.probing {
		return int(g.min)
	}
	return int(math.Round(g.limit))
}

// admitted notes an admission with in flight requests (itself included)
// and returns the generation the answer will carry.
func (g *gradient) admitted(inFlight int) uint64 {
	g.peak = max(g.peak, inFlight)
	return g.gen
}

// wanted notes a request that had to wait or was refused: there is
// demand beyond the limit.
func (g *gradient) wanted() { g.demand = true }

// sample takes the latency of an answer of op admitted in generation gen.
func (g *gradient) sample(now time.Time, op string, rtt time.Duration, gen uint64) {
	if g.probing {
		if gen == g.gen {
			g.probeRTT[op] = append(g.probeRTT[op], rtt)
			g.probeN++
		}
		if g.probeN >= probeSamples || now.Sub(g.probeStart) >= probeMax {
			g.endProbe(now)
		}
		return
	}
	b, ok := g.base[op]
	if !ok {
		// First seen outside a probe: a probe follows soon.
		g.nextProbe = minTime(g.nextProbe, now.Add(probeSoon))
	}
	if !b.measured && (!ok || rtt < b.rtt) {
		b.rtt = max(rtt, time.Microsecond)
		g.base[op] = b
	}
	g.sum += min(float64(rtt)/float64(b.rtt), ratioCap)
	g.n++
	g.maybeClose(now)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// maybeClose closes the window when it is due, moving the limit.
func (g *gradient) maybeClose(now time.Time) {
	age := now.Sub(g.winStart)
	if age < gradientWindow || g.n < gradientMinSamples && age < 10*gradientWindow {
		return
	}
	if g.n > 0 {
		ratio := g.sum / float64(g.n)
		grad := min(max(gradientTolerance/ratio, 0.5), 2)
		next := g.limit*grad + math.Sqrt(g.limit)
		if !g.demand && float64(g.peak) < g.limit/2 {
			next = min(next, g.limit)
		}
		was := g.limit
		if next < g.limit {
			// Down at once, up smoothly: a queue builds faster than a
			// limit could follow it up.
			g.limit = g.clamp(next)
		} else {
			g.limit = g.clamp((1-gradientSmoothing)*g.limit + gradientSmoothing*next)
		}
		if g.limit < was && !g.backed {
			g.backed = true
			g.backoffs(SignalLatency)
		}
	}
	if g.signals != nil {
		s := g.signals()
		d := Signals{TxRetries: s.TxRetries - g.lastSignals.TxRetries, Acquires: s.Acquires - g.lastSignals.Acquires,
			WaitedAcquires: s.WaitedAcquires - g.lastSignals.WaitedAcquires}
		g.lastSignals = s
		// A serialization failure in more than one answer in fifty, or a
		// pool with no idle connection for nine acquires in ten: a
		// standing queue inside, which more concurrency only lengthens.
		if d.TxRetries > 0 && float64(d.TxRetries) >= 0.02*float64(max(g.n, 1)) {
			g.backoff(SignalTxRetries)
		}
		if d.Acquires >= 10 && float64(d.WaitedAcquires) >= 0.9*float64(d.Acquires) {
			g.backoff(SignalPoolWait)
		}
	}
	g.winStart, g.sum, g.n, g.demand, g.peak, g.backed = now, 0, 0, false, 0, false
	if !now.Before(g.nextProbe) {
		g.startProbe(now)
	}
}

// backoff lowers the limit at once for signal, at most once a window.
func (g *gradient) backoff(signal string) {
	if g.backed || g.probing {
		return
	}
	g.backed = true
	g.limit = g.clamp(g.limit * backoffFactor)
	g.backoffs(signal)
}

func (g *gradient) clamp(l float64) float64 { return min(max(l, g.min), g.max) }

// startProbe holds the limit at its minimum until the baselines are
// measured again by the answers admitted from now on.
func (g *gradient) startProbe(now time.Time) {
	g.probing, g.probeStart, g.saved = true, now, g.limit
	g.gen++
	g.probeN = 0
	for op := range g.probeRTT {
		g.probeRTT[op] = g.probeRTT[op][:0]
	}
}

// endProbe takes each measured operation's median as its baseline and
// gives the limit back.
func (g *gradient) endProbe(now time.Time) {
	for op, rtts := range g.probeRTT {
		if len(rtts) == 0 {
			continue
		}
		slices.Sort(rtts)
		g.base[op] = baseline{rtt: max(rtts[len(rtts)/2], time.Microsecond), measured: true}
	}
	g.probing, g.limit = false, g.saved
	g.winStart, g.sum, g.n, g.demand, g.peak, g.backed = now, 0, 0, false, 0, false
	jitter := time.Duration(g.rand(int(probeEvery/3))) - probeEvery/6
	g.nextProbe = now.Add(probeEvery + jitter)
}

// tick ends a probe that lasted its longest, even with no answer of its
// own to end it.
func (g *gradient) tick(now time.Time) {
	if g.probing && now.Sub(g.probeStart) >= probeMax {
		g.endProbe(now)
	}
}
