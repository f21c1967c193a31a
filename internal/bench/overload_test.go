package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/openapi/client"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// The overload run, a test of metastability: does the service come back
// once an overload is over, or do the retries it caused keep it
// overloaded? On one serve process of trips (CAPTURE=trip, the dispatch
// side completing rides), the admission control at its defaults:
//
//  1. a closed-loop sweep finds the saturated throughput S and the
//     saturating clients N;
//  2. then, without a restart, three phases of the run's duration each: N
//     clients, ten times N, and N again. Each client books key after key:
//     a request times out after 1 s and is sent again at once with the
//     same key; a 429, a 503 (or a 409: a retry meeting its own first
//     attempt still running) is sent again with the same key after
//     client.RetryAfterWait of its Retry-After, as the shipped clients do;
//     a 201 moves it to a new key; after overloadMaxAttempts attempts it
//     gives the booking up. When the ten times N end, the clients that
//     came with them take no new key but finish the booking under way (up
//     to its attempts): the retries an overload leaves behind are part of
//     what the service must come back from;
//  3. then an open loop: new bookings arrive at 10 × S per second (Poisson
//     arrivals), each its own client with the same retries, so that the
//     load does not slow down when the service does;
//  4. throughout, a few priority requests of each kind, paced: completions
//     of rides booked in the run (the dispatch side), refunds of completed
//     ones (the rider), and replays of finished keys (the same key and
//     body, answered 201 with Idempotent-Replayed: true).
//
// Every 100 ms the run counts attempts, admissions, refusals, timeouts and
// 201s, and samples the server's admission limit from /metrics; the
// server's admission counters are read at every phase boundary. Last, the
// server stops and the fake Stripe's ledger is read: no key may have two
// PaymentIntents or charges.
//
// The per-rider budget of writes and limit of requests in flight are off
// in this run (RATE_LIMIT_WRITES=off, RATE_LIMIT_IN_FLIGHT=off, documented
// settings): with the defaults the riders could not saturate the machine,
// and the run would measure the budgets (the noisy-neighbour, flood and
// burst runs do) instead of the admission control. Everything else is at
// its default.

// Targets of the overload run, judged against the saturated throughput S
// measured on the same process in the same run.
const (
	targetOverloadFactor     = 10   // clients, and the open loop's arrivals: ten times
	targetGoodputRatio       = 0.85 // goodput during the overload ≥ 0.85 × S
	targetTimeoutShare       = 0.005
	targetGaveUpWorkShare    = 0.01
	targetPrioritySuccess    = 0.99
	targetPriorityP99Ratio   = 2.0
	targetAttemptsCV         = 0.5
	targetAttemptsPerBooking = 3.0
	targetRecoveryRatio      = 0.95 // back at 1 ×: goodput ≥ 0.95 × S …
	targetRecoveryWithin     = 5 * time.Second
	targetRefusedAt1x        = 0.005
	// overloadSaturating: the saturating clients are the fewest of the
	// sweep reaching this share of its best rides/s, so that the 1 ×
	// phases book about S, and the recovery target means what it says.
	overloadSaturating    = 0.95
	overloadClientTimeout = time.Second
	overloadMaxAttempts   = client.DefaultMaxAttempts
	overloadBucket        = 100 * time.Millisecond
	// overloadPriorityRate is each priority kind's operations per second.
	overloadPriorityRate = 20
	// overloadPriorityDrain is how long after the run's end a priority
	// operation under way may still retry: the dispatch side and the
	// riders do not stop when the benchmark does, and an operation cut by
	// the end would say nothing of its success.
	overloadPriorityDrain = 3 * time.Second
	// overloadMaxOutstanding bounds the open loop's bookings under way; an
	// arrival beyond it is dropped (counted, not sent).
	overloadMaxOutstanding = 16384
	// overloadProblem is the problem type of a capacity refusal.
	overloadProblem = "/problems/overloaded"
)

// overloadSpec is the shape of an overload run.
type overloadSpec struct {
	// SweepFrom and SweepTo bound the closed-loop sweep (doubling) that
	// finds the saturating clients: it stops when doubling gains less than
	// a tenth.
	SweepFrom, SweepTo int
	// Factor multiplies the saturating clients, and S for the open loop.
	Factor int
	// Timeout is each request's timeout; MaxAttempts the attempts of one
	// operation before its client gives it up.
	Timeout     time.Duration
	MaxAttempts int
	// PriorityRate is each priority kind's operations per second.
	PriorityRate float64
}

// defaultOverloadSpec is the run of BenchmarkRides.
var defaultOverloadSpec = overloadSpec{SweepFrom: 2, SweepTo: 64, Factor: targetOverloadFactor,
	Timeout: overloadClientTimeout, MaxAttempts: overloadMaxAttempts, PriorityRate: overloadPriorityRate}

// opKind is what an operation of the run does.
type opKind int

const (
	kindBooking    opKind = iota // POST /rides, a new key
	kindCompletion               // POST /rides/{id}/complete, the dispatch side
	kindRefund                   // POST /rides/{id}/refund, the rider, a completed ride
	kindReplay                   // POST /rides, a finished key again
	numKinds
)

var kindNames = [numKinds]string{"booking", "completion", "refund", "replay"}

func (k opKind) String() string { return kindNames[k] }

// priorityKinds are the kinds the admission control serves first.
var priorityKinds = []opKind{kindCompletion, kindRefund, kindReplay}

// Phases of the run, in order.
const (
	phaseBase     = iota // N clients
	phaseOverload        // Factor × N clients
	phaseBack            // N clients again
	phaseOpen            // the open loop
	numPhases
)

// overloadRun is what an overload run measured.
type overloadRun struct {
	Spec overloadSpec
	// Sweep is the calibration: new bookings, closed loop, at each
	// concurrency tried, beside the priority requests at their rate.
	Sweep []sweepPoint
	// Saturated is the best rides/s of the sweep, S; SaturatingClients the
	// fewest clients that reached overloadSaturating of it, N.
	SaturatingClients int
	Saturated         float64
	// Phases are the 1 ×, 10 ×, 1 × and open-loop phases, in order.
	Phases []*overloadPhase
	// Series is the run from the first phase's start, per 100 ms.
	Series overloadSeries
	// Recovery is how long after the return to 1 × the goodput over one
	// second first reached targetRecoveryRatio × S; -1: not within the
	// phase. RecoveryBase is the same against the first 1 × phase's
	// goodput instead of S.
	Recovery, RecoveryBase time.Duration
	// At the fake Stripe's ledger once the server stopped: ChargedKeys the
	// client keys (metadata ar_key) with a PaymentIntent or a charge, in
	// any status; ChargedTwice those with more than one; SweepKeys the keys
	// the warm-up and the sweep booked; KeysBooked the keys answered 201
	// in the whole run (sweep included).
	ChargedKeys, ChargedTwice, SweepKeys, KeysBooked int
	// Missing counts priority operations not sent for want of a ride to
	// act on (none booked, or completed, yet), by kind.
	Missing map[string]int
	// ErrorSample describes the first few answers of the run that were not
	// a 2xx, a 429 or a 503 with Retry-After, and transport errors.
	ErrorSample []string
}

// sweepPoint is one concurrency of the calibration.
type sweepPoint struct {
	Clients int
	// Goodput is the keys answered 201 within the window, per second of
	// it; P50 and P99 the latencies of the bookings' answers; Booked the
	// keys answered 201, Other the bookings' other answers and failures.
	Goodput       float64
	P50, P99      time.Duration
	Booked, Other int
	ErrorSample   []string
}

// overloadPhase is one phase of the run.
type overloadPhase struct {
	Name string
	// Clients is the closed-loop clients (0 for the open loop); Rate the
	// open loop's arrivals per second.
	Clients int
	Rate    float64
	// Start is the phase's start from the first phase's; Window its
	// length. Requests are counted in the phase they were sent in, 201s in
	// the phase they were answered in.
	Start, Window time.Duration
	// Attempts counts every booking request sent (priority requests
	// apart); Created the fresh 201s, Replayed the replayed ones (a retry
	// whose earlier attempt booked), Shed the capacity 503s
	// (/problems/overloaded), Unavailable other 503s with Retry-After,
	// Refused the 429s with Retry-After, Conflicts the 409s (a retry
	// meeting its own first attempt), Bad other answers (a 429 or 503
	// without Retry-After included), Timeouts the requests unanswered
	// within the timeout, Failed other transport errors.
	Attempts, Created, Replayed, Shed, Unavailable, Refused, Conflicts, Bad, Timeouts, Failed int
	// KeysInWindow is the keys answered 201 within the phase.
	KeysInWindow int
	// Bookings are the bookings started in the phase (their first
	// attempt): Booked answered 201, GaveUp given up after MaxAttempts,
	// Cut ended by the end of the run's last closed-loop phase or the open
	// loop with no 201, WorkAfterLoss booked by an attempt whose client
	// had given up on it (an attempt that timed out, or failed, and a
	// later one answered with the replayed 201).
	Bookings, Booked, GaveUp, Cut, WorkAfterLoss int
	// Dropped counts the open loop's arrivals not sent (too many under
	// way).
	Dropped int
	// P50, P99 and Max are the latencies of the bookings' answers.
	P50, P99, Max time.Duration
	// AttemptsCV is the coefficient of variation of the attempts (all
	// kinds) per 100 ms.
	AttemptsCV float64
	// RetryAfter counts the capacity 503s by their Retry-After, in seconds.
	RetryAfter map[int]int
	// Priority is what each priority kind did (operations started in the
	// phase).
	Priority map[string]*priorityStats
	// CPU is what each process spent over the phase (the harness's own
	// process is the load generator), over CPUWindow.
	CPU       cpuShare
	CPUWindow time.Duration
	// Admission is the server's admission counters over the phase
	// (atomicrides_admission_*_total and atomicrides_http_refused_total,
	// by their full names), and its gauges at the phase's end.
	Admission map[string]float64
}

// priorityStats is what the operations of one priority kind did in a phase.
type priorityStats struct {
	// Ops were started, OK succeeded (a 2xx within MaxAttempts), Attempts
	// their requests, Refused those answered 429 or 503.
	Ops, OK, Attempts, Refused int
	// P50 and P99 are the latencies of the successful operations, from
	// their first request to their 2xx, retries and waits included.
	P50, P99 time.Duration
}

// Goodput is the keys answered 201 within the phase, per second of it.
func (p *overloadPhase) Goodput() float64 {
	if p.Window <= 0 {
		return 0
	}
	return float64(p.KeysInWindow) / p.Window.Seconds()
}

// refusedShare is the share of the booking attempts refused (429 or a
// capacity 503).
func (p *overloadPhase) refusedShare() float64 {
	return ratio(float64(p.Shed+p.Refused), float64(p.Attempts))
}

func (p *overloadPhase) timeoutShare() float64 {
	return ratio(float64(p.Timeouts), float64(p.Attempts))
}

func (p *overloadPhase) attemptsPerBooking() float64 {
	return ratio(float64(p.Attempts), float64(p.KeysInWindow))
}

func (p *overloadPhase) workAfterLossShare() float64 {
	return ratio(float64(p.WorkAfterLoss), float64(p.Booked))
}

// overloadSeries is the run per 100 ms (Bucket) from the first phase's
// start: requests of every kind counted when sent (Attempts) or answered
// (the others).
type overloadSeries struct {
	Bucket time.Duration
	// Attempts counts the requests sent; Admitted the answers other than
	// a capacity 503; Shed the capacity 503s; Refused the 429s; Timeouts
	// the requests unanswered within the timeout; Created the bookings'
	// 201s (fresh or replayed: the goodput).
	Attempts, Admitted, Shed, Refused, Timeouts, Created []int
	// Limit is the server's atomicrides_admission_limit, the last sample
	// within the bucket (null: none, or the server has no such gauge).
	Limit []jsonFloat
}

// jsonFloat is a float64 that encodes NaN as null.
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(f))
}

func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = jsonFloat(math.NaN())
		return nil
	}
	return json.Unmarshal(b, (*float64)(f))
}

// Outcomes of an attempt.
const (
	outOK          = iota // the 2xx the operation wanted
	outShed               // 503 /problems/overloaded with Retry-After
	outUnavailable        // another 503 with Retry-After
	outRefused            // 429 with Retry-After
	outConflict           // 409
	outBad                // any other answer
	outTimeout            // no answer within the timeout
	outFailed             // another transport error
)

// attemptRec is one request of the run; times are from the first phase's
// start.
type attemptRec struct {
	kind           opKind
	sent, answered time.Duration
	outcome        int
	status         int
	replayed       bool
	retryAfter     int // seconds; -1: none
}

// opRec is one operation of the run: a booking of a key, or a priority
// request, with its retries.
type opRec struct {
	kind     opKind
	first    time.Duration // its first request, from the first phase's start
	done     time.Duration // the answer that ended it
	attempts int
	ok       bool
	gaveUp   bool // MaxAttempts reached
	cut      bool // its client's end came first
	// afterLoss: an attempt timed out or failed, and a later one was
	// answered with the replayed 201.
	afterLoss bool
}

// opTarget is one operation's request.
type opTarget struct {
	kind             opKind
	path, auth, key  string
	body             []byte
	rideID, riderKey string // for the operations that follow a booking
}

// bookedRide is a ride the run booked, for the priority operations.
type bookedRide struct {
	riderKey, key, id string
}

// overloadRecorder collects the run's requests and operations.
type overloadRecorder struct {
	spec  overloadSpec
	t0    time.Time
	mu    sync.Mutex
	att   []attemptRec
	ops   []opRec
	errs  []string
	drops []time.Duration
	// The priority operations' supply: rides booked (to complete), rides
	// completed (to refund), keys finished (to replay).
	booked, completed, finished chan bookedRide
}

func newOverloadRecorder(spec overloadSpec) *overloadRecorder {
	return &overloadRecorder{spec: spec,
		booked: make(chan bookedRide, 4096), completed: make(chan bookedRide, 4096), finished: make(chan bookedRide, 4096)}
}

func offer(ch chan bookedRide, r bookedRide) {
	select {
	case ch <- r:
	default:
	}
}

// connSource lends connections to operations.
type connSource interface {
	get() *leanConn
	put(*leanConn)
}

// ownConn is a closed-loop client's one connection.
type ownConn struct{ c *leanConn }

func (o ownConn) get() *leanConn { return o.c }
func (o ownConn) put(*leanConn)  {}

// connPool is a pool of idle connections: an operation takes one, or dials
// a new one, for each request, and gives it back after.
type connPool struct {
	addr string
	idle chan *leanConn
}

func newConnPool(base string, size int) *connPool {
	addr := strings.TrimPrefix(base, "http://")
	return &connPool{addr: addr, idle: make(chan *leanConn, size)}
}

func (p *connPool) get() *leanConn {
	select {
	case c := <-p.idle:
		return c
	default:
		return &leanConn{addr: p.addr, host: p.addr}
	}
}

func (p *connPool) put(c *leanConn) {
	if c.conn == nil {
		return
	}
	select {
	case p.idle <- c:
	default:
		c.close()
	}
}

func (p *connPool) closeAll() {
	for {
		select {
		case c := <-p.idle:
			c.close()
		default:
			return
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// do runs one operation as a client of the service would: each request
// times out after the spec's timeout and is sent again at once with the
// same key; a 429 or 503 with Retry-After, a 409 or another 5xx is sent
// again after client.RetryAfterWait of its Retry-After (a second without
// one); the operation's 2xx ends it, and so does any other answer; after
// MaxAttempts requests its client gives it up. No request is sent at or
// after stop. It returns the operation and, for a booking's 201, the
// ride's id.
func (r *overloadRecorder) do(conns connSource, t opTarget, stop time.Time) (opRec, string) {
	op := opRec{kind: t.kind}
	lost := false
	var rideID string
	for op.attempts < r.spec.MaxAttempts {
		if !time.Now().Before(stop) {
			op.cut = true
			break
		}
		c := conns.get()
		ctx, cancel := context.WithTimeout(context.Background(), r.spec.Timeout)
		t0 := time.Now()
		resp, err := c.do(ctx, "POST", t.path, t.auth, t.key, t.body)
		t1 := time.Now()
		cancel()
		a := attemptRec{kind: t.kind, sent: t0.Sub(r.t0), answered: t1.Sub(r.t0), retryAfter: -1}
		if op.attempts == 0 {
			op.first = a.sent
		}
		op.attempts++
		var wait time.Duration
		again, sample := true, ""
		if err != nil {
			if isTimeout(err) {
				a.outcome = outTimeout
			} else {
				a.outcome = outFailed
				sample = err.Error()
			}
			lost = true // sent again at once
		} else {
			a.status, a.replayed = resp.status, resp.replayed
			ra, hasRA := retryAfter(resp.retryAfter)
			if hasRA {
				a.retryAfter = int(ra / time.Second)
			}
			switch {
			case r.wanted(t.kind, resp):
				a.outcome = outOK
				again = false
				op.ok, op.done = true, a.answered
				op.afterLoss = lost && resp.replayed && t.kind == kindBooking
				if t.kind == kindBooking {
					if id, ok := jsonID(resp.body); ok {
						rideID = id
					}
				}
			case resp.status == http.StatusServiceUnavailable && hasRA && bytes.Contains(resp.body, []byte(overloadProblem)):
				a.outcome = outShed
			case resp.status == http.StatusServiceUnavailable && hasRA:
				a.outcome = outUnavailable
			case resp.status == http.StatusTooManyRequests && hasRA:
				a.outcome = outRefused
			case resp.status == http.StatusConflict:
				a.outcome = outConflict
				sample = fmt.Sprintf("%s: status 409 Retry-After %q: %s", t.kind, resp.retryAfter, tail(string(resp.body), 200))
			default:
				a.outcome = outBad
				sample = fmt.Sprintf("%s: status %d replayed=%v Retry-After %q: %s", t.kind, resp.status, resp.replayed, resp.retryAfter, tail(string(resp.body), 200))
				// A 4xx (a 429 without Retry-After aside) will not change.
				again = resp.status >= 500 || resp.status == http.StatusTooManyRequests
			}
			if again {
				if !hasRA {
					ra = time.Second
				}
				wait = client.RetryAfterWait(ra, rand.Int64N)
			}
		}
		conns.put(c)
		r.mu.Lock()
		r.att = append(r.att, a)
		if sample != "" && len(r.errs) < 8 {
			r.errs = append(r.errs, sample)
		}
		r.mu.Unlock()
		if !again {
			break
		}
		if wait > 0 {
			if !time.Now().Add(wait).Before(stop) {
				op.cut = true
				break
			}
			time.Sleep(wait) // the client's back-off, as Retry-After asks
		}
	}
	if op.attempts == 0 {
		return op, "" // its client's end came before it started
	}
	if !op.ok && !op.cut && op.attempts >= r.spec.MaxAttempts {
		op.gaveUp = true
	}
	if op.done == 0 {
		op.done = time.Since(r.t0)
	}
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
	return op, rideID
}

// wanted says whether resp is the answer an operation of kind k wants.
func (r *overloadRecorder) wanted(k opKind, resp leanResponse) bool {
	switch k {
	case kindBooking:
		return resp.status == http.StatusCreated
	case kindReplay:
		return resp.status == http.StatusCreated && resp.replayed
	default: // a completion or a refund: 201 by this key, 200 by another
		return resp.status == http.StatusCreated || resp.status == http.StatusOK
	}
}

// book books key after key for riderKey until newKeysUntil, then ends
// with the booking under way; no request is sent at or after stop.
func (r *overloadRecorder) book(conns connSource, riderKey, label string, newKeysUntil, stop time.Time) {
	for n := 0; time.Now().Before(newKeysUntil) && time.Now().Before(stop); n++ {
		key := fmt.Sprintf("%s-n%07d", label, n)
		r.bookOne(conns, riderKey, key, stop)
	}
}

// bookOne books one key, and offers the ride to the priority operations.
func (r *overloadRecorder) bookOne(conns connSource, riderKey, key string, stop time.Time) opRec {
	op, id := r.do(conns, opTarget{kind: kindBooking, path: "/rides", auth: riderKey, key: key, body: benchRideBody}, stop)
	if op.ok && id != "" {
		ride := bookedRide{riderKey: riderKey, key: key, id: id}
		offer(r.booked, ride)
		offer(r.finished, ride)
	}
	return op
}

// priority sends operations of kind k at rate per second from start until
// stop, each on a connection of conns, and returns when they have all
// ended: an operation under way at stop may retry until
// overloadPriorityDrain after it. It counts those it had no ride for in
// missing.
func (r *overloadRecorder) priority(k opKind, rate float64, conns connSource, start, stop time.Time, missing *int) {
	var wg sync.WaitGroup
	defer wg.Wait()
	interval := time.Duration(float64(time.Second) / rate)
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * interval)
		if !due.Before(stop) {
			return
		}
		time.Sleep(time.Until(due)) // the operations' schedule
		var (
			src  chan bookedRide
			ride bookedRide
		)
		switch k {
		case kindCompletion:
			src = r.booked
		case kindRefund:
			src = r.completed
		default:
			src = r.finished
		}
		select {
		case ride = <-src:
		default:
			*missing++
			continue
		}
		var t opTarget
		switch k {
		case kindCompletion:
			t = opTarget{kind: k, path: "/rides/" + ride.id + "/complete", auth: benchDispatchToken, key: ride.key + benchCompleteKeySuffix, body: benchCompleteBody}
		case kindRefund:
			t = opTarget{kind: k, path: "/rides/" + ride.id + "/refund", auth: ride.riderKey, key: ride.key + "-refund"}
		default:
			t = opTarget{kind: k, path: "/rides", auth: ride.riderKey, key: ride.key, body: benchRideBody}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			op, _ := r.do(conns, t, stop.Add(overloadPriorityDrain))
			if k == kindCompletion && op.ok {
				offer(r.completed, ride)
			}
		}()
	}
}

// openLoop starts a booking, its own client, at Poisson arrivals of rate
// per second from start until stop, and returns when they have all ended.
func (r *overloadRecorder) openLoop(conns connSource, riderKeys []string, rate float64, start, stop time.Time) {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, overloadMaxOutstanding)
	due := start
	for i := 0; ; i++ {
		due = due.Add(time.Duration(rand.ExpFloat64() / rate * float64(time.Second)))
		if !due.Before(stop) {
			return
		}
		time.Sleep(time.Until(due)) // the open loop's schedule
		select {
		case slots <- struct{}{}:
		default:
			r.mu.Lock()
			r.drops = append(r.drops, due.Sub(r.t0))
			r.mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			r.bookOne(conns, riderKeys[i%len(riderKeys)], fmt.Sprintf("overload-open-a%09d", i), stop)
		}()
	}
}

// limitSample is the server's admission limit at a time from the first
// phase's start; NaN when it was not read.
type limitSample struct {
	at    time.Duration
	limit float64
}

// scrapeLimit samples the server's atomicrides_admission_limit every
// bucket until stop is closed; a missing gauge or a failed scrape is NaN.
func (r *overloadRecorder) scrapeLimit(base string, stop <-chan struct{}) []limitSample {
	hc := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(overloadBucket)
	defer tick.Stop()
	var out []limitSample
	for {
		select {
		case <-stop:
			return out
		case <-tick.C:
		}
		v := math.NaN()
		if m, err := metricsOf(hc, base); err == nil {
			if l, ok := m["atomicrides_admission_limit"]; ok {
				v = l
			}
		}
		out = append(out, limitSample{at: time.Since(r.t0), limit: v})
	}
}

// metricsOf reads the server's /metrics: each sample by its full name,
// labels included.
func metricsOf(hc *http.Client, base string) (map[string]float64, error) {
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+benchAdminToken)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %d", resp.StatusCode)
	}
	return parseMetrics(b), nil
}

// admissionDelta is the server's admission metrics over a phase: counters
// as their increase, gauges as they were at its end.
func admissionDelta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for name, v := range after {
		base, _, _ := strings.Cut(name, "{")
		if !strings.HasPrefix(base, "atomicrides_admission_") && base != "atomicrides_http_refused_total" {
			continue
		}
		if strings.HasSuffix(base, "_total") {
			v -= before[name]
		}
		out[name] = v
	}
	return out
}

// measureOverload runs the overload measurement on a deployment of its
// own (trips: CAPTURE=trip), the admission control at its defaults: on
// one serve process the sweep that finds S and N, then the three
// closed-loop phases and the open loop; then it reads the fake Stripe's
// ledger.
func (e *benchEnv) measureOverload(tb testing.TB, spec overloadSpec) *overloadRun {
	tb.Helper()
	o := &overloadRun{Spec: spec, Recovery: -1, RecoveryBase: -1, Missing: map[string]int{}}
	d := e.deployOn(tb, dbtest.NewURL(tb), e.cfg.Users).forTrips()
	env := append(append(append([]string{}, d.env...), limitsOn()...), "RATE_LIMIT_WRITES=off", "RATE_LIMIT_IN_FLIGHT=off")
	srv := d.startLimited(tb, env...)
	ctx := context.Background()
	key := func(label string, clients int) func(client, n int) string {
		return func(client, n int) string { return fmt.Sprintf("%s-c%04d-w%04d-n%09d", label, clients, client, n) }
	}

	warm := runLoad(ctx, loadSpec{base: srv.base, clients: spec.SweepFrom, duration: e.cfg.Warmup, apiKeys: d.apiKeys, key: key("warm", spec.SweepFrom)})
	if warm.OK == 0 {
		d.stop(tb, srv)
		tb.Fatalf("overload: the warm-up booked nothing: %v", warm.ErrorSample)
	}
	o.SweepKeys += warm.OK
	pool := newConnPool(srv.base, 4096)
	defer pool.closeAll()
	for c := spec.SweepFrom; c <= spec.SweepTo; c *= 2 {
		r := calibrate(pool, d.apiKeys, spec, c, e.cfg.Duration)
		o.Sweep = append(o.Sweep, r)
		o.SweepKeys += r.Booked
		gain := r.Goodput >= 1.1*o.Saturated
		o.Saturated = max(o.Saturated, r.Goodput)
		if !gain {
			break
		}
	}
	if o.Saturated == 0 {
		d.stop(tb, srv)
		tb.Fatalf("overload: the sweep booked nothing: %v", o.Sweep[0].ErrorSample)
	}
	for _, r := range o.Sweep {
		if r.Goodput >= overloadSaturating*o.Saturated {
			o.SaturatingClients = r.Clients
			break
		}
	}

	n, D := o.SaturatingClients, e.cfg.Duration
	o.Phases = []*overloadPhase{
		{Name: "1 ×", Clients: n},
		{Name: fmt.Sprintf("%d ×", spec.Factor), Clients: spec.Factor * n},
		{Name: "back to 1 ×", Clients: n},
		{Name: fmt.Sprintf("open loop, %d × S", spec.Factor), Rate: float64(spec.Factor) * o.Saturated},
	}
	rec := newOverloadRecorder(spec)
	hc := &http.Client{Timeout: 5 * time.Second}
	// The run starts on the next whole 100 ms, so that the phases' bounds
	// fall on the series' buckets.
	rec.t0 = time.Now().Add(overloadBucket).Truncate(overloadBucket)
	at := func(phase int) time.Time { return rec.t0.Add(time.Duration(phase) * D) }
	for i, p := range o.Phases {
		p.Start, p.Window = time.Duration(i)*D, D
	}

	stopScrape := make(chan struct{})
	scraped := make(chan []limitSample, 1)
	go func() { scraped <- rec.scrapeLimit(srv.base, stopScrape) }()
	// Each phase's clients start once the admission counters were read at
	// its start (begun[i] closed), so that the counters of a phase are its
	// own.
	var begun [numPhases]chan struct{}
	for i := range begun {
		begun[i] = make(chan struct{})
	}
	// The closed loop: N clients through the three phases, Factor × N − N
	// more from the second phase's start, taking new keys until its end
	// and finishing the booking under way after it.
	var work sync.WaitGroup
	closedEnd := at(phaseOpen)
	for i := range spec.Factor * n {
		work.Add(1)
		go func() {
			defer work.Done()
			c := &leanConn{addr: pool.addr, host: pool.addr}
			defer c.close()
			label := fmt.Sprintf("overload-closed-w%04d", i)
			if i < n {
				<-begun[phaseBase]
				rec.book(ownConn{c}, d.apiKeys[i%len(d.apiKeys)], label, closedEnd, closedEnd)
				return
			}
			<-begun[phaseOverload]
			rec.book(ownConn{c}, d.apiKeys[i%len(d.apiKeys)], label, at(phaseBack), closedEnd)
		}()
	}
	var missing [numKinds]int
	for _, k := range priorityKinds {
		work.Add(1)
		go func() {
			defer work.Done()
			<-begun[phaseBase]
			rec.priority(k, spec.PriorityRate, pool, at(phaseBase), at(numPhases), &missing[k])
		}()
	}
	// The admission counters at each phase's bounds, and the open loop.
	var counters [numPhases + 1]map[string]float64
	var cpu *cpuSampler
	for i := range numPhases + 1 {
		time.Sleep(time.Until(at(i))) // the phases' schedule
		if cpu != nil {
			o.Phases[i-1].CPU, o.Phases[i-1].CPUWindow = cpu.finish(0)
		}
		counters[i], _ = metricsOf(hc, srv.base)
		if i < numPhases {
			cpu = startCPU(e.admin, d.name, srv.Pid(), e.stripe.Pid(), e.mail.Pid())
			close(begun[i])
		}
		if i == phaseOpen {
			work.Add(1)
			go func() {
				defer work.Done()
				rec.openLoop(pool, d.apiKeys, o.Phases[phaseOpen].Rate, at(phaseOpen), at(numPhases))
			}()
		}
	}
	// Every request sent before the end is answered or timed out; the
	// limit is sampled until then.
	work.Wait()
	close(stopScrape)
	samples := <-scraped

	for i, p := range o.Phases {
		if counters[i] != nil && counters[i+1] != nil {
			p.Admission = admissionDelta(counters[i], counters[i+1])
		}
	}
	for _, k := range priorityKinds {
		o.Missing[k.String()] = missing[k]
	}
	o.summarize(rec, samples)
	d.stop(tb, srv)

	var ledger fakestripe.Snapshot
	stripeLedger(tb, e.stripeBase, &ledger)
	o.ChargedKeys, o.ChargedTwice = chargesPerKey(&ledger)
	o.KeysBooked = o.SweepKeys
	for _, op := range rec.ops {
		if op.kind == kindBooking && op.ok {
			o.KeysBooked++
		}
	}
	return o
}

// calibrate measures the goodput of clients closed-loop clients for d,
// with the phases' clients and retries, beside the priority requests at
// their rate (which share the machine in every phase): S is what the
// process books with them.
func calibrate(pool *connPool, riderKeys []string, spec overloadSpec, clients int, d time.Duration) sweepPoint {
	rec := newOverloadRecorder(spec)
	rec.t0 = time.Now()
	end := rec.t0.Add(d)
	var work sync.WaitGroup
	for i := range clients {
		work.Add(1)
		go func() {
			defer work.Done()
			c := &leanConn{addr: pool.addr, host: pool.addr}
			defer c.close()
			rec.book(ownConn{c}, riderKeys[i%len(riderKeys)], fmt.Sprintf("overload-sweep-c%03d-w%04d", clients, i), end, end)
		}()
	}
	var missing [numKinds]int
	for _, k := range priorityKinds {
		work.Add(1)
		go func() {
			defer work.Done()
			rec.priority(k, spec.PriorityRate, pool, rec.t0, end, &missing[k])
		}()
	}
	work.Wait()
	r := sweepPoint{Clients: clients, ErrorSample: rec.errs}
	var lat []time.Duration
	inWindow := 0
	for _, a := range rec.att {
		if a.kind != kindBooking {
			continue
		}
		if a.outcome == outOK && a.answered < d {
			inWindow++
		}
		if a.outcome != outOK {
			r.Other++
		}
		if a.outcome != outTimeout && a.outcome != outFailed {
			lat = append(lat, a.answered-a.sent)
		}
	}
	for _, op := range rec.ops {
		if op.kind == kindBooking && op.ok {
			r.Booked++
		}
	}
	slices.Sort(lat)
	r.P50, r.P99 = percentile(lat, 0.50), percentile(lat, 0.99)
	r.Goodput = float64(inWindow) / d.Seconds()
	return r
}

// chargesPerKey counts the client keys (metadata ar_key) with a
// PaymentIntent, or a charge of the Charges API, in any status, and those
// with more than one.
func chargesPerKey(l *fakestripe.Snapshot) (keys, twice int) {
	per := map[string]int{}
	for _, pi := range l.PaymentIntents {
		per[pi.Metadata["ar_key"]]++
	}
	for _, c := range l.Charges {
		if c.PaymentIntent == "" {
			per[c.Metadata["ar_key"]]++
		}
	}
	for _, n := range per {
		if n > 1 {
			twice++
		}
	}
	return len(per), twice
}

// summarize sums the recorder's requests and operations into the phases
// and the series.
func (o *overloadRun) summarize(rec *overloadRecorder, samples []limitSample) {
	end := time.Duration(len(o.Phases)) * o.Phases[0].Window
	for _, a := range rec.att {
		end = max(end, a.answered)
	}
	nb := int(end/overloadBucket) + 1
	s := overloadSeries{Bucket: overloadBucket,
		Attempts: make([]int, nb), Admitted: make([]int, nb), Shed: make([]int, nb), Refused: make([]int, nb),
		Timeouts: make([]int, nb), Created: make([]int, nb), Limit: make([]jsonFloat, nb)}
	bucket := func(d time.Duration) int { return min(max(int(d/overloadBucket), 0), nb-1) }
	phaseOf := func(d time.Duration) *overloadPhase {
		for _, p := range o.Phases {
			if d >= p.Start && d < p.Start+p.Window {
				return p
			}
		}
		return nil
	}
	lat := make([][]time.Duration, len(o.Phases))
	for _, a := range rec.att {
		s.Attempts[bucket(a.sent)]++
		ab := bucket(a.answered)
		switch a.outcome {
		case outShed:
			s.Shed[ab]++
		case outTimeout, outFailed:
		default:
			s.Admitted[ab]++
		}
		switch a.outcome {
		case outRefused:
			s.Refused[ab]++
		case outTimeout:
			s.Timeouts[ab]++
		}
		if a.kind == kindBooking && a.outcome == outOK {
			s.Created[ab]++
			if p := phaseOf(a.answered); p != nil {
				p.KeysInWindow++
			}
		}
		p := phaseOf(a.sent)
		if p == nil || a.kind != kindBooking {
			continue
		}
		p.Attempts++
		switch a.outcome {
		case outOK:
			if a.replayed {
				p.Replayed++
			} else {
				p.Created++
			}
		case outShed:
			p.Shed++
			if p.RetryAfter == nil {
				p.RetryAfter = map[int]int{}
			}
			p.RetryAfter[a.retryAfter]++
		case outUnavailable:
			p.Unavailable++
		case outRefused:
			p.Refused++
		case outConflict:
			p.Conflicts++
		case outBad:
			p.Bad++
		case outTimeout:
			p.Timeouts++
		case outFailed:
			p.Failed++
		}
		if a.outcome != outTimeout && a.outcome != outFailed {
			i := slices.Index(o.Phases, p)
			lat[i] = append(lat[i], a.answered-a.sent)
		}
	}
	// Priority requests count against the answers' target too: their
	// attempts, by phase and kind.
	type kp struct {
		p *overloadPhase
		k opKind
	}
	prAttempts, prRefused, prBad := map[kp]int{}, map[kp]int{}, map[kp]int{}
	for _, a := range rec.att {
		p := phaseOf(a.sent)
		if p == nil || a.kind == kindBooking {
			continue
		}
		prAttempts[kp{p, a.kind}]++
		switch a.outcome {
		case outShed, outRefused, outUnavailable:
			prRefused[kp{p, a.kind}]++
		case outConflict, outBad, outFailed:
			prBad[kp{p, a.kind}]++
		}
	}
	for i, p := range o.Phases {
		slices.Sort(lat[i])
		p.P50, p.P99 = percentile(lat[i], 0.50), percentile(lat[i], 0.99)
		if len(lat[i]) > 0 {
			p.Max = lat[i][len(lat[i])-1]
		}
		p.Priority = map[string]*priorityStats{}
		for _, k := range priorityKinds {
			p.Priority[k.String()] = &priorityStats{Attempts: prAttempts[kp{p, k}], Refused: prRefused[kp{p, k}]}
			p.Bad += prBad[kp{p, k}] // counted with the phase's other answers
		}
	}
	opLat := map[kp][]time.Duration{}
	for _, op := range rec.ops {
		p := phaseOf(op.first)
		if p == nil {
			continue
		}
		if op.kind == kindBooking {
			p.Bookings++
			switch {
			case op.ok:
				p.Booked++
				if op.afterLoss {
					p.WorkAfterLoss++
				}
			case op.gaveUp:
				p.GaveUp++
			case op.cut:
				p.Cut++
			}
			continue
		}
		ps := p.Priority[op.kind.String()]
		ps.Ops++
		if op.ok {
			ps.OK++
			opLat[kp{p, op.kind}] = append(opLat[kp{p, op.kind}], op.done-op.first)
		}
	}
	for key, l := range opLat {
		slices.Sort(l)
		ps := key.p.Priority[key.k.String()]
		ps.P50, ps.P99 = percentile(l, 0.50), percentile(l, 0.99)
	}
	for _, d := range rec.drops {
		if p := phaseOf(d); p != nil {
			p.Dropped++
		}
	}
	for i := range s.Limit {
		s.Limit[i] = jsonFloat(math.NaN())
	}
	for _, l := range samples {
		s.Limit[bucket(l.at)] = jsonFloat(l.limit)
	}
	for _, p := range o.Phases {
		b0, b1 := bucket(p.Start), bucket(p.Start+p.Window)
		p.AttemptsCV = cv(s.Attempts[b0:b1])
	}
	o.Series = s
	o.ErrorSample = rec.errs

	// Back at 1 ×: the end of the phase's first second whose 201s reach
	// targetRecoveryRatio × S (and × the first 1 ×'s goodput).
	back := o.Phases[phaseBack]
	per := int(time.Second / overloadBucket)
	b0 := bucket(back.Start)
	recovery := func(goodput float64) time.Duration {
		for i := b0 + per; i <= bucket(back.Start+back.Window); i++ {
			sum := 0
			for _, c := range s.Created[i-per : i] {
				sum += c
			}
			if float64(sum) >= targetRecoveryRatio*goodput {
				return time.Duration(i-b0) * overloadBucket
			}
		}
		return -1
	}
	o.Recovery, o.RecoveryBase = recovery(o.Saturated), recovery(o.Phases[phaseBase].Goodput())
}

// cv is the coefficient of variation of counts: their standard deviation
// over their mean (0 for none).
func cv(counts []int) float64 {
	if len(counts) == 0 {
		return 0
	}
	var sum float64
	for _, c := range counts {
		sum += float64(c)
	}
	mean := sum / float64(len(counts))
	if mean == 0 {
		return 0
	}
	var sq float64
	for _, c := range counts {
		sq += (float64(c) - mean) * (float64(c) - mean)
	}
	return math.Sqrt(sq/float64(len(counts))) / mean
}

// distinctRetryAfters is the distinct Retry-After values of the capacity
// 503s over the run, in seconds, in order.
func (o *overloadRun) distinctRetryAfters() []int {
	seen := map[int]bool{}
	for _, p := range o.Phases {
		for s := range p.RetryAfter {
			seen[s] = true
		}
	}
	var out []int
	for s := range seen {
		out = append(out, s)
	}
	sort.Ints(out)
	return out
}

// distinctLimits is the distinct values the sampled admission limit took.
func (o *overloadRun) distinctLimits() []float64 {
	var out []float64
	for _, l := range o.Series.Limit {
		v := float64(l)
		if !math.IsNaN(v) && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// answersBad sums, over every phase, the answers that are not a 2xx, a
// 429 or a 503 with Retry-After, and the transport errors.
func (o *overloadRun) answersBad() (bad, conflicts, failed int) {
	for _, p := range o.Phases {
		bad += p.Bad
		conflicts += p.Conflicts
		failed += p.Failed
	}
	return bad, conflicts, failed
}

// targets judges the overload run.
func (o *overloadRun) targets() []benchTarget {
	if len(o.Phases) != numPhases {
		return nil
	}
	base, over, back, open := o.Phases[phaseBase], o.Phases[phaseOverload], o.Phases[phaseBack], o.Phases[phaseOpen]
	name := fmt.Sprintf("overload (S = %.0f rides/s from N = %d clients; %d clients, then %.0f arrivals/s, each request timing out after %s)",
		o.Saturated, o.SaturatingClients, over.Clients, open.Rate, o.Spec.Timeout)
	var ts []benchTarget
	add := func(what string, met bool, got string) {
		ts = append(ts, benchTarget{Name: name + ": " + what, Judged: true, Met: met, Got: got})
	}
	for _, p := range []*overloadPhase{over, open} {
		g := ratio(p.Goodput(), o.Saturated)
		add(fmt.Sprintf("goodput during the %s phase ≥ %.2f × S", p.Name, targetGoodputRatio), g >= targetGoodputRatio,
			fmt.Sprintf("%.2f × (%.0f keys booked/s against %.0f rides/s)", g, p.Goodput(), o.Saturated))
	}
	var tmet, wmet = true, true
	var tgot, wgot []string
	for _, p := range o.Phases {
		tmet = tmet && p.timeoutShare() <= targetTimeoutShare
		tgot = append(tgot, fmt.Sprintf("%s %.2f%% (%d of %d)", p.Name, 100*p.timeoutShare(), p.Timeouts, p.Attempts))
		wmet = wmet && p.workAfterLossShare() <= targetGaveUpWorkShare
		wgot = append(wgot, fmt.Sprintf("%s %.2f%% (%d of %d)", p.Name, 100*p.workAfterLossShare(), p.WorkAfterLoss, p.Booked))
	}
	add(fmt.Sprintf("client timeouts ≤ %.1f%% of the booking attempts, every phase", 100*targetTimeoutShare), tmet, strings.Join(tgot, "; "))
	add(fmt.Sprintf("work finished for attempts their clients gave up on (a replayed 201 after a timeout) ≤ %.0f%% of the keys booked, every phase", 100*targetGaveUpWorkShare),
		wmet, strings.Join(wgot, "; ")+fmt.Sprintf("; at the fake Stripe, %d keys charged for %d answered 201", o.ChargedKeys, o.KeysBooked))
	for _, k := range priorityKinds {
		at1, at10 := base.Priority[k.String()], over.Priority[k.String()]
		if at1 == nil || at10 == nil {
			continue
		}
		share := ratio(float64(at10.OK), float64(at10.Ops))
		p99 := ratio(float64(at10.P99), float64(at1.P99))
		add(fmt.Sprintf("%ss during %s: ≥ %.0f%% succeed, p99 ≤ %.0f × their p99 at 1 ×", k, over.Name, 100*targetPrioritySuccess, targetPriorityP99Ratio),
			at10.Ops > 0 && share >= targetPrioritySuccess && at1.P99 > 0 && p99 <= targetPriorityP99Ratio,
			fmt.Sprintf("%d of %d succeeded (%.1f%%; %d attempts, %d refused), p99 %s ms against %s ms at 1 × (%.2f ×)",
				at10.OK, at10.Ops, 100*share, at10.Attempts, at10.Refused, ms(at10.P99), ms(at1.P99), p99))
	}
	add(fmt.Sprintf("no waves during %s: the attempts per 100 ms vary by ≤ %.1f (coefficient of variation)", over.Name, targetAttemptsCV),
		over.Attempts > 0 && over.AttemptsCV <= targetAttemptsCV,
		fmt.Sprintf("%.2f (%s: %.2f, open loop: %.2f)", over.AttemptsCV, base.Name, base.AttemptsCV, open.AttemptsCV))
	add(fmt.Sprintf("≤ %.0f attempts per booking during %s", targetAttemptsPerBooking, over.Name),
		over.KeysInWindow > 0 && over.attemptsPerBooking() <= targetAttemptsPerBooking,
		fmt.Sprintf("%.2f (%d attempts for %d keys booked; %d bookings given up after %d attempts)",
			over.attemptsPerBooking(), over.Attempts, over.KeysInWindow, over.GaveUp, o.Spec.MaxAttempts))
	add(fmt.Sprintf("back at 1 ×: goodput over a second ≥ %.2f × S within %s", targetRecoveryRatio, targetRecoveryWithin),
		o.Recovery >= 0 && o.Recovery <= targetRecoveryWithin,
		fmt.Sprintf("%s (the phase: %.2f × S; the first 1 ×: %.2f × S, and %.2f × its goodput reached %s)",
			after(o.Recovery), ratio(back.Goodput(), o.Saturated), ratio(base.Goodput(), o.Saturated), targetRecoveryRatio, after(o.RecoveryBase)))
	add(fmt.Sprintf("at 1 ×, before and after: ≤ %.1f%% of the booking attempts refused", 100*targetRefusedAt1x),
		base.Attempts > 0 && back.Attempts > 0 && base.refusedShare() <= targetRefusedAt1x && back.refusedShare() <= targetRefusedAt1x,
		fmt.Sprintf("%.2f%% (%d of %d) and %.2f%% (%d of %d)", 100*base.refusedShare(), base.Shed+base.Refused, base.Attempts,
			100*back.refusedShare(), back.Shed+back.Refused, back.Attempts))
	bad, conflicts, failed := o.answersBad()
	var shed, refused, total int
	for _, p := range o.Phases {
		shed += p.Shed + p.Unavailable
		refused += p.Refused
		total += p.Attempts
	}
	add("every answer a 2xx, a 429 or a 503 with Retry-After", total > 0 && bad == 0 && conflicts == 0 && failed == 0,
		fmt.Sprintf("%d booking attempts: %d × 503, %d × 429; %d × 409, %d other answers, %d transport errors (priority requests' included); Retry-After of the capacity 503s: %v s",
			total, shed, refused, conflicts, bad, failed, o.distinctRetryAfters()))
	add("every key charged at most once (the fake Stripe's ledger)", o.ChargedTwice == 0 && o.ChargedKeys >= o.KeysBooked,
		fmt.Sprintf("%d keys with two PaymentIntents or charges or more; %d keys charged, for %d keys answered 201 (%d in the warm-up and the sweep)",
			o.ChargedTwice, o.ChargedKeys, o.KeysBooked, o.SweepKeys))
	return ts
}

// markdown writes the run's section of the report.
func (o *overloadRun) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n## Overload\n\n")
	fmt.Fprintf(b, "Trips (CAPTURE=trip), the admission control at its defaults, the per-rider budget of writes off. "+
		"On one serve process: a closed-loop sweep, with the clients of the phases and the priority requests beside them, finds the saturated throughput S (the best rides/s, doubling the clients until that gains less than a tenth) and the saturating clients N (the fewest reaching %.0f%% of it); "+
		"then, without a restart, %s each of N clients, %d × N and N again, then an open loop of %d × S new bookings a second (Poisson arrivals, each its own client). "+
		"Each request times out after %s and is sent again at once with the same key; a 429, 503 or 409 is sent again with the same key after client.RetryAfterWait of its Retry-After; a booking is given up after %d attempts. "+
		"When the %d × phase ends its extra clients take no new key but finish the booking under way. "+
		"Throughout, %.0f a second of each priority kind: completions (the dispatch side) of rides booked in the run, refunds of completed ones, replays of finished keys. "+
		"Requests count in the phase they were sent in, 201s in the phase they were answered in; goodput is the keys answered 201 per second. The plot: overload.png.\n\n",
		100*overloadSaturating, o.Phases[0].Window, o.Spec.Factor, o.Spec.Factor, o.Spec.Timeout, o.Spec.MaxAttempts, o.Spec.Factor, o.Spec.PriorityRate)
	fmt.Fprintf(b, "| sweep clients | rides/s | p50 ms | p99 ms | 201 | other |\n|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range o.Sweep {
		fmt.Fprintf(b, "| %d | %.0f | %s | %s | %d | %d |\n", r.Clients, r.Goodput, ms(r.P50), ms(r.P99), r.Booked, r.Other)
	}
	fmt.Fprintf(b, "\nS = %.0f rides/s, N = %d.\n\n", o.Saturated, o.SaturatingClients)
	fmt.Fprintf(b, "| phase | load | attempts | goodput rides/s | × S | 201 (replayed) | 503 | 429 | 409 | timeouts | other | gave up | attempts/booking | CV of attempts/100 ms | p50 / p99 / max ms | CPU ms/s: server, PostgreSQL, load generator | Retry-After s (503s) |\n")
	fmt.Fprintf(b, "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|\n")
	for _, p := range o.Phases {
		load := fmt.Sprintf("%d clients", p.Clients)
		if p.Clients == 0 {
			load = fmt.Sprintf("%.0f arrivals/s (%d dropped)", p.Rate, p.Dropped)
		}
		perSec := func(d time.Duration) string {
			return fmt.Sprintf("%.0f", ratio(msf(d), p.CPUWindow.Seconds()))
		}
		fmt.Fprintf(b, "| %s | %s | %d | %.0f | %.2f | %d (%d) | %d | %d | %d | %d | %d | %d | %.2f | %.2f | %s / %s / %s | %s, %s, %s | %s |\n",
			p.Name, load, p.Attempts, p.Goodput(), ratio(p.Goodput(), o.Saturated), p.Created+p.Replayed, p.Replayed,
			p.Shed+p.Unavailable, p.Refused, p.Conflicts, p.Timeouts, p.Bad+p.Failed, p.GaveUp, p.attemptsPerBooking(), p.AttemptsCV,
			ms(p.P50), ms(p.P99), ms(p.Max), perSec(p.CPU.Server), perSec(p.CPU.Postgres), perSec(p.CPU.Load), retryAfterHist(p.RetryAfter))
	}
	fmt.Fprintf(b, "\n| priority kind | phase | operations | succeeded | attempts | refused | p50 ms | p99 ms |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, k := range priorityKinds {
		for _, p := range o.Phases {
			s := p.Priority[k.String()]
			if s == nil {
				continue
			}
			fmt.Fprintf(b, "| %s | %s | %d | %d | %d | %d | %s | %s |\n", k, p.Name, s.Ops, s.OK, s.Attempts, s.Refused, ms(s.P50), ms(s.P99))
		}
	}
	ls := o.distinctLimits()
	lim := "no sample (the server has no atomicrides_admission_limit)"
	if len(ls) > 0 {
		lim = fmt.Sprintf("%d distinct values from %g to %g", len(ls), ls[0], ls[len(ls)-1])
	}
	fmt.Fprintf(b, "\nBack at 1 ×, goodput over a second reached %.2f × S %s (%.2f × the first 1 ×'s goodput: %s). The admission limit sampled every 100 ms: %s. "+
		"Bookings started, booked, given up, cut by the phase's end, booked for an attempt given up on: %s. Priority operations not sent for want of a ride (none booked or completed yet): %s. "+
		"At the fake Stripe: %d keys charged, %d of them twice or more, for %d keys answered 201.\n",
		targetRecoveryRatio, after(o.Recovery), targetRecoveryRatio, after(o.RecoveryBase), lim, o.bookingsLine(), o.missingLine(), o.ChargedKeys, o.ChargedTwice, o.KeysBooked)
	fmt.Fprintf(b, "\nThe server's admission counters over each phase (atomicrides_admission_*, atomicrides_http_refused_total; non-zero):\n\n")
	for _, p := range o.Phases {
		fmt.Fprintf(b, "- %s: %s\n", p.Name, admissionLine(p.Admission))
	}
	for _, s := range o.ErrorSample[:min(len(o.ErrorSample), 4)] {
		fmt.Fprintf(b, "- error: %s\n", strings.ReplaceAll(s, "\n", " "))
	}
}

// after writes a recovery time, "after 1.2s", or that there was none.
func after(d time.Duration) string {
	if d < 0 {
		return "not within the phase"
	}
	return "after " + d.String()
}

func (o *overloadRun) missingLine() string {
	var parts []string
	for _, k := range priorityKinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, o.Missing[k.String()]))
	}
	return strings.Join(parts, ", ")
}

func (o *overloadRun) bookingsLine() string {
	var parts []string
	for _, p := range o.Phases {
		parts = append(parts, fmt.Sprintf("%s %d, %d, %d, %d, %d", p.Name, p.Bookings, p.Booked, p.GaveUp, p.Cut, p.WorkAfterLoss))
	}
	return strings.Join(parts, "; ")
}

// retryAfterHist writes the Retry-After values' counts, "1: 20, 2: 5".
func retryAfterHist(h map[int]int) string {
	if len(h) == 0 {
		return "–"
	}
	var keys []int
	for k := range h {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d: %d", k, h[k]))
	}
	return strings.Join(parts, ", ")
}

// admissionLine writes the non-zero admission metrics of a phase, by name.
func admissionLine(m map[string]float64) string {
	if m == nil {
		return "not read"
	}
	var names []string
	for n, v := range m {
		if v != 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("`%s` %g", strings.TrimPrefix(n, "atomicrides_"), m[n]))
	}
	return strings.Join(parts, ", ")
}

// stripeLedger reads the fake Stripe's ledger (GET /_fake/ledger).
func stripeLedger(tb testing.TB, stripeBase string, dst *fakestripe.Snapshot) {
	tb.Helper()
	resp, err := http.Get(stripeBase + "/_fake/ledger")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET /_fake/ledger: %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(dst); err != nil {
		tb.Fatal(err)
	}
}
