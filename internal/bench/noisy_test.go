package bench

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/atomicrides/atomicrides/internal/binrun"
	"github.com/atomicrides/atomicrides/internal/limits"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// The noisy-neighbour run: one rider offers ten times its budget of writes
// in an open loop (a fixed rate of new bookings, whatever the answers),
// while quiet riders book within theirs. The per-rider budget must keep the
// noisy rider's excess off the quiet riders, and refusing it must cost the
// server little.
//
// With the default budget (limits.DefaultWrites: 50 per 10 s, 5 a second
// once the burst is spent) fifteen riders booking closed-loop as fast as
// the machine answers would each book far past their own budget; a quiet
// rider is one that stays within it. So each quiet client paces itself: it
// starts a booking every quietInterval (start to start, or at once when the
// answer took longer: closed loop), which holds each rider at
// noisyQuietShare of its budget.

// Targets of the noisy-neighbour run, judged against the quiet riders alone
// on the same process in the same run.
const (
	targetNoisyP99Ratio   = 2.0 // quiet riders' p99 with the noisy rider ≤ 2 × without
	targetNoisyRateRatio  = 0.9 // quiet riders' rides/s with the noisy rider ≥ 0.9 × without
	targetRefusalCPURatio = 0.1 // the server's CPU per refusal ≤ 0.1 × per booking
)

// noisySpec is the shape of a noisy-neighbour run.
type noisySpec struct {
	// QuietRiders book with QuietClients clients each.
	QuietRiders, QuietClients int
	// QuietShare is the share of its budget a quiet rider offers.
	QuietShare float64
	// Factor is how many times its budget the noisy rider offers.
	Factor int
	// RefusalClients flood closed-loop as the noisy rider, its budget spent,
	// to measure the CPU of a refusal.
	RefusalClients int
	// Rounds is how many times the quiet riders are measured alone and
	// then with the noisy rider, alternately, the rounds' samples pooled:
	// a machine whose load drifts weighs on both alike.
	Rounds int
}

// defaultNoisySpec is the run of issue #28: 15 quiet riders with 2 clients
// each, one rider at ten times its budget.
var defaultNoisySpec = noisySpec{QuietRiders: 15, QuietClients: 2, QuietShare: 0.8, Factor: 10, RefusalClients: 4, Rounds: 2}

// floodFactor is how many times its budget the flooding rider offers in
// the flood run.
const floodFactor = 100

// defaultFloodSpec is the flood run: the same quiet riders while one rider
// offers floodFactor × its budget.
var defaultFloodSpec = noisySpec{QuietRiders: 15, QuietClients: 2, QuietShare: 0.8, Factor: floodFactor, RefusalClients: 4, Rounds: 1}

// quietInterval is the start-to-start interval of each quiet client.
func (s noisySpec) quietInterval(p limits.Policy) time.Duration {
	return time.Duration(float64(p.Interval()) * float64(s.QuietClients) / s.QuietShare)
}

// noisyRun is what a noisy-neighbour run measured.
type noisyRun struct {
	Spec noisySpec
	// Budget is the per-rider budget of writes the server ran with.
	Budget string
	// QuietInterval is each quiet client's interval between bookings;
	// Offered the noisy rider's offered bookings per second.
	QuietInterval time.Duration
	Offered       float64
	// Alone is the quiet riders without the noisy rider; WithNoisy the same
	// riders while the noisy rider floods (after its burst was spent); the
	// rounds pooled.
	Alone, WithNoisy quietRun
	// RoundP99 is each round's quiet p99, alone and with the noisy rider:
	// how much the machine's own noise moves it.
	RoundP99 [][2]time.Duration
	// Noisy is the noisy rider's answers during WithNoisy.
	Noisy floodRun
	// Refusals is the noisy rider alone, its budget spent, flooding
	// closed-loop with Spec.RefusalClients clients: nearly every answer a
	// refusal.
	Refusals floodRun
	// BookingCPU is the server's CPU per booking in Alone (what the
	// process spent over the run, idle work included, per 201).
	// RefusalCPU is the server's CPU per refusal in Refusals, its few
	// bookings counted at BookingCPU; RefusalDBCPU is PostgreSQL's per
	// refusal there, all of it.
	BookingCPU, RefusalCPU, RefusalDBCPU time.Duration
	// NoisyRunRefusalCPU estimates the same from WithNoisy: the server's
	// CPU less its bookings at BookingCPU, per refusal of the noisy rider.
	// Bookings dominate that run's CPU, so the estimate carries their
	// noise (it may even come out negative).
	NoisyRunRefusalCPU time.Duration
}

// quietRun is what the quiet riders measured over one window.
type quietRun struct {
	// Requests counts answers and transport errors; OK the fresh 201s;
	// Refused the 429s; Errors everything else.
	Requests, OK, Refused, Errors int
	Elapsed                       time.Duration
	// P50 and P99 are latencies of every request.
	P50, P99 time.Duration
	// CPU is every process's CPU over the window, in total.
	CPU         cpuShare
	ErrorSample []string

	latencies []time.Duration
}

// add pools o into r.
func (r *quietRun) add(o quietRun) {
	r.Requests += o.Requests
	r.OK += o.OK
	r.Refused += o.Refused
	r.Errors += o.Errors
	r.Elapsed += o.Elapsed
	r.CPU = cpuShare{Postgres: r.CPU.Postgres + o.CPU.Postgres, Server: r.CPU.Server + o.CPU.Server, Stripe: r.CPU.Stripe + o.CPU.Stripe,
		Mail: r.CPU.Mail + o.CPU.Mail, Load: r.CPU.Load + o.CPU.Load}
	r.ErrorSample = append(r.ErrorSample, o.ErrorSample...)[:min(len(r.ErrorSample)+len(o.ErrorSample), 5)]
	r.latencies = append(r.latencies, o.latencies...)
	slices.Sort(r.latencies)
	r.P50, r.P99 = percentile(r.latencies, 0.50), percentile(r.latencies, 0.99)
}

// PerSec is fresh 201s per second.
func (r quietRun) PerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.OK) / r.Elapsed.Seconds()
}

// floodRun is what one rider's flood got over one window.
type floodRun struct {
	// Requests counts the requests answered or failed in the window; OK
	// the fresh 201s; Refused the 429s with a Retry-After; Errors the rest
	// (a 429 without Retry-After included). Dropped counts requests the
	// open loop could not send because too many were outstanding.
	Requests, OK, Refused, Errors, Dropped int
	Elapsed                                time.Duration
	// P99 is the latency of the refusals.
	P99         time.Duration
	CPU         cpuShare
	ErrorSample []string

	refusals []time.Duration
}

// add pools o into r.
func (r *floodRun) add(o floodRun) {
	r.Requests += o.Requests
	r.OK += o.OK
	r.Refused += o.Refused
	r.Errors += o.Errors
	r.Dropped += o.Dropped
	r.Elapsed += o.Elapsed
	r.ErrorSample = append(r.ErrorSample, o.ErrorSample...)[:min(len(r.ErrorSample)+len(o.ErrorSample), 5)]
	r.refusals = append(r.refusals, o.refusals...)
	slices.Sort(r.refusals)
	r.P99 = percentile(r.refusals, 0.99)
}

// RefusedPerSec is refusals per second.
func (r floodRun) RefusedPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Refused) / r.Elapsed.Seconds()
}

// OKPerSec is bookings per second.
func (r floodRun) OKPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.OK) / r.Elapsed.Seconds()
}

// measureNoisy runs the noisy-neighbour measurement on a deployment of its
// own with spec.QuietRiders + 1 riders, the limits at their defaults, all
// on one serve process: the quiet riders alone, then with the noisy rider
// flooding, then the noisy rider alone with its budget spent.
func (e *benchEnv) measureNoisy(tb testing.TB, spec noisySpec) *noisyRun {
	tb.Helper()
	policy := limits.DefaultWrites
	n := &noisyRun{Spec: spec, Budget: policy.String(), QuietInterval: spec.quietInterval(policy),
		Offered: float64(spec.Factor) * float64(policy.Quota) / policy.Window.Seconds()}
	d := e.deployOn(tb, dbtest.NewURL(tb), spec.QuietRiders+1)
	quietKeys, noisyKey := d.apiKeys[:spec.QuietRiders], d.apiKeys[spec.QuietRiders]
	srv := d.startLimited(tb, append(append([]string{}, d.env...), limitsOn()...)...)
	defer d.stop(tb, srv)
	ctx := context.Background()
	quiet := func(label string, d time.Duration) quietRun {
		return runQuiet(ctx, srv.base, quietKeys, spec.QuietClients, n.QuietInterval, d, label)
	}
	measureQuiet := func(label string) quietRun {
		cpu := startCPU(e.admin, d.name, srv.Pid(), e.stripe.Pid(), e.mail.Pid())
		r := quiet(label, e.cfg.Duration)
		r.CPU, _ = cpu.finish(0)
		return r
	}

	if warm := quiet("warm", e.cfg.Warmup); warm.OK == 0 {
		tb.Fatalf("noisy neighbour: the quiet riders' warm-up booked nothing: %v", warm.ErrorSample)
	}
	for round := range max(spec.Rounds, 1) {
		alone := measureQuiet(fmt.Sprintf("alone%d", round))
		n.Alone.add(alone)
		// The noisy rider floods until its burst is spent, then for a
		// warm-up; the quiet riders are measured while it goes on.
		f := startFlood(ctx, srv.base, noisyKey, n.Offered, fmt.Sprintf("noisy%d", round))
		binrun.WaitFor(tb, time.Minute, "the noisy rider's first 429", func() bool { return f.snapshot(time.Time{}).Refused > 0 })
		time.Sleep(e.cfg.Warmup) // a warm-up of the flood, not a wait for a condition
		from := time.Now()
		with := measureQuiet(fmt.Sprintf("noisy%d", round))
		n.WithNoisy.add(with)
		n.RoundP99 = append(n.RoundP99, [2]time.Duration{alone.P99, with.P99})
		n.Noisy.add(f.snapshot(from))
		f.stop()
	}
	if n.Alone.OK > 0 {
		n.BookingCPU = n.Alone.CPU.Server / time.Duration(n.Alone.OK)
	}
	n.Noisy.CPU = n.WithNoisy.CPU
	if n.Noisy.Refused > 0 {
		n.NoisyRunRefusalCPU = (n.WithNoisy.CPU.Server - time.Duration(n.WithNoisy.OK+n.Noisy.OK)*n.BookingCPU) / time.Duration(n.Noisy.Refused)
	}

	// The noisy rider alone, closed loop, its budget spent: what a refusal
	// costs, its few admitted bookings set apart at BookingCPU.
	cpu := startCPU(e.admin, d.name, srv.Pid(), e.stripe.Pid(), e.mail.Pid())
	n.Refusals = runFloodClosed(ctx, srv.base, noisyKey, spec.RefusalClients, e.cfg.Duration, "refusals")
	n.Refusals.CPU, _ = cpu.finish(0)
	if n.Refusals.Refused > 0 {
		n.RefusalCPU = (n.Refusals.CPU.Server - time.Duration(n.Refusals.OK)*n.BookingCPU) / time.Duration(n.Refusals.Refused)
		n.RefusalDBCPU = n.Refusals.CPU.Postgres / time.Duration(n.Refusals.Refused)
	}
	return n
}

// runQuiet runs riders × clients paced closed-loop clients for d: each
// starts a booking (a key of its own) every interval, or at once when the
// previous answer took longer.
func runQuiet(ctx context.Context, base string, riders []string, clients int, interval, d time.Duration, label string) quietRun {
	type result struct {
		requests, ok, refused, errors int
		latencies                     []time.Duration
		sample                        []string
	}
	start := time.Now()
	deadline := start.Add(d)
	total := len(riders) * clients
	results := eachClient(base, total, func(i int, c *leanConn, res *result) {
		apiKey := riders[i%len(riders)]
		// Spread the clients' starts over one interval.
		next := start.Add(interval * time.Duration(i) / time.Duration(total))
		for n := 0; ; n++ {
			time.Sleep(time.Until(next)) // pacing: the client's own schedule
			if !time.Now().Before(deadline) || ctx.Err() != nil {
				return
			}
			t0 := time.Now()
			next = t0.Add(interval)
			resp, err := c.do(ctx, "POST", "/rides", apiKey, fmt.Sprintf("quiet-%s-w%04d-n%06d", label, i, n), benchRideBody)
			res.latencies = append(res.latencies, time.Since(t0))
			res.requests++
			switch {
			case err != nil:
				res.errors++
				res.sample = appendSample(res.sample, err.Error())
			case resp.status == http.StatusCreated && !resp.replayed:
				res.ok++
			case resp.status == http.StatusTooManyRequests:
				res.refused++
			default:
				res.errors++
				res.sample = appendSample(res.sample, fmt.Sprintf("status %d: %s", resp.status, tail(string(resp.body), 300)))
			}
		}
	})
	run := quietRun{Elapsed: time.Since(start)}
	var all []time.Duration
	for _, r := range results {
		run.Requests += r.requests
		run.OK += r.ok
		run.Refused += r.refused
		run.Errors += r.errors
		all = append(all, r.latencies...)
		if len(run.ErrorSample) < 5 {
			run.ErrorSample = append(run.ErrorSample, r.sample...)
		}
	}
	slices.Sort(all)
	run.P50, run.P99 = percentile(all, 0.50), percentile(all, 0.99)
	run.latencies = all
	return run
}

func appendSample(s []string, msg string) []string {
	if len(s) < 3 {
		s = append(s, msg)
	}
	return s
}

// floodAnswer is one answer (or failure) of a flood.
type floodAnswer struct {
	sent    time.Time
	latency time.Duration
	status  int // 0: a transport error
	ok      bool
	refused bool
	err     string
}

// flood is an open-loop flood of new bookings by one rider: a request every
// 1/rate seconds, whatever the answers, each on an idle connection of its
// pool or a new one.
type flood struct {
	mu      sync.Mutex
	answers []floodAnswer
	dropped []time.Time
	cancel  context.CancelFunc
	done    chan struct{}
}

// floodMaxOutstanding bounds the requests of a flood awaiting an answer; a
// request due beyond it is dropped (counted, not sent).
const floodMaxOutstanding = 512

// startFlood starts flooding base with new bookings as the rider of apiKey
// at rate requests per second, until stop.
func startFlood(ctx context.Context, base, apiKey string, rate float64, label string) *flood {
	addr := strings.TrimPrefix(base, "http://")
	ctx, cancel := context.WithCancel(ctx)
	f := &flood{cancel: cancel, done: make(chan struct{})}
	idle := make(chan *leanConn, floodMaxOutstanding)
	slots := make(chan struct{}, floodMaxOutstanding)
	go func() {
		defer close(f.done)
		var wg sync.WaitGroup
		defer func() {
			wg.Wait()
			close(idle)
			for c := range idle {
				c.close()
			}
		}()
		start := time.Now()
		for i := 0; ; i++ {
			due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(due)): // the open loop's schedule
			}
			select {
			case slots <- struct{}{}:
			default:
				f.mu.Lock()
				f.dropped = append(f.dropped, due)
				f.mu.Unlock()
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				var c *leanConn
				select {
				case c = <-idle:
				default:
					c = &leanConn{addr: addr, host: addr}
				}
				t0 := time.Now()
				resp, err := c.do(ctx, "POST", "/rides", apiKey, fmt.Sprintf("flood-%s-n%09d", label, i), benchRideBody)
				a := floodAnswer{sent: t0, latency: time.Since(t0)}
				if err != nil {
					if ctx.Err() != nil {
						return // stopped: not an answer
					}
					a.err = err.Error()
				} else {
					a.status = resp.status
					_, hasRetry := retryAfter(resp.retryAfter)
					a.ok = resp.status == http.StatusCreated && !resp.replayed
					a.refused = resp.status == http.StatusTooManyRequests && hasRetry
					if !a.ok && !a.refused {
						a.err = fmt.Sprintf("status %d Retry-After %q: %s", resp.status, resp.retryAfter, tail(string(resp.body), 300))
					}
				}
				f.mu.Lock()
				f.answers = append(f.answers, a)
				f.mu.Unlock()
				select {
				case idle <- c:
				default:
					c.close()
				}
			}()
		}
	}()
	return f
}

// stop ends the flood and waits for its outstanding requests.
func (f *flood) stop() {
	f.cancel()
	<-f.done
}

// snapshot sums the answers to the requests sent since from.
func (f *flood) snapshot(from time.Time) floodRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	var r floodRun
	var refusals []time.Duration
	for _, a := range f.answers {
		if a.sent.Before(from) {
			continue
		}
		r.Requests++
		switch {
		case a.ok:
			r.OK++
		case a.refused:
			r.Refused++
			refusals = append(refusals, a.latency)
		default:
			r.Errors++
			r.ErrorSample = appendSample(r.ErrorSample, a.err)
		}
	}
	for _, t := range f.dropped {
		if !t.Before(from) {
			r.Dropped++
		}
	}
	if !from.IsZero() {
		r.Elapsed = time.Since(from)
	}
	slices.Sort(refusals)
	r.P99 = percentile(refusals, 0.99)
	r.refusals = refusals
	return r
}

// runFloodClosed floods base as the rider of apiKey with clients
// closed-loop clients for d, each request a new booking.
func runFloodClosed(ctx context.Context, base, apiKey string, clients int, d time.Duration, label string) floodRun {
	lat := make([][]time.Duration, clients)
	start := time.Now()
	deadline := start.Add(d)
	results := eachClient(base, clients, func(i int, c *leanConn, r *floodRun) {
		for n := 0; time.Now().Before(deadline); n++ {
			t0 := time.Now()
			resp, err := c.do(ctx, "POST", "/rides", apiKey, fmt.Sprintf("closed-%s-w%04d-n%09d", label, i, n), benchRideBody)
			r.Requests++
			_, hasRetry := retryAfter(resp.retryAfter)
			switch {
			case err != nil:
				r.Errors++
				r.ErrorSample = appendSample(r.ErrorSample, err.Error())
			case resp.status == http.StatusCreated && !resp.replayed:
				r.OK++
			case resp.status == http.StatusTooManyRequests && hasRetry:
				r.Refused++
				lat[i] = append(lat[i], time.Since(t0))
			default:
				r.Errors++
				r.ErrorSample = appendSample(r.ErrorSample, fmt.Sprintf("status %d: %s", resp.status, tail(string(resp.body), 300)))
			}
		}
	})
	run := floodRun{Elapsed: time.Since(start)}
	var all []time.Duration
	for i, r := range results {
		run.Requests += r.Requests
		run.OK += r.OK
		run.Refused += r.Refused
		run.Errors += r.Errors
		run.ErrorSample = append(run.ErrorSample, r.ErrorSample...)
		all = append(all, lat[i]...)
	}
	slices.Sort(all)
	run.P99 = percentile(all, 0.99)
	return run
}

// targets judges the noisy-neighbour run.
func (n *noisyRun) targets() []benchTarget {
	name := fmt.Sprintf("noisy neighbour (%d quiet riders × %d clients, one rider open-loop at %d × its budget of %s)",
		n.Spec.QuietRiders, n.Spec.QuietClients, n.Spec.Factor, n.Budget)
	p99 := ratio(float64(n.WithNoisy.P99), float64(n.Alone.P99))
	rate := ratio(n.WithNoisy.PerSec(), n.Alone.PerSec())
	cpu := ratio(float64(n.RefusalCPU), float64(n.BookingCPU))
	clean := n.WithNoisy.Errors == 0 && n.WithNoisy.Refused == 0 && n.Alone.Errors == 0 && n.Alone.Refused == 0
	// Past its burst, the noisy rider books at most one ride per interval
	// of its budget (and one for the bucket's rounding).
	policy := limits.DefaultWrites
	worth := int(n.Noisy.Elapsed/policy.Interval()) + 2
	return []benchTarget{
		{Name: fmt.Sprintf("%s: the noisy rider's excess answered 429 with Retry-After, never 503, its budget's worth booked", name), Judged: true,
			Met: n.Noisy.Refused > 0 && n.Noisy.Errors == 0 && n.Noisy.OK > 0 && n.Noisy.OK <= worth,
			Got: fmt.Sprintf("%d × 201 (its budget's worth: ≤ %d over %s s), %d × 429, %d other answers (503s included)",
				n.Noisy.OK, worth, fmt.Sprintf("%.1f", n.Noisy.Elapsed.Seconds()), n.Noisy.Refused, n.Noisy.Errors)},
		{Name: fmt.Sprintf("%s: the quiet riders' p99 ≤ %.1f × their p99 alone", name, targetNoisyP99Ratio), Judged: true,
			Met: n.Alone.P99 > 0 && p99 <= targetNoisyP99Ratio,
			Got: fmt.Sprintf("%.2f × (%s ms against %s ms)", p99, ms(n.WithNoisy.P99), ms(n.Alone.P99))},
		{Name: fmt.Sprintf("%s: the quiet riders' rides/s ≥ %.1f × alone, none refused", name, targetNoisyRateRatio), Judged: true,
			Met: n.Alone.OK > 0 && rate >= targetNoisyRateRatio && clean,
			Got: fmt.Sprintf("%.2f × (%.1f against %.1f rides/s; quiet riders' 429s %d and %d, errors %d and %d; the noisy rider: %.1f rides/s booked, %.1f refusals/s, %d errors, %d dropped)",
				rate, n.WithNoisy.PerSec(), n.Alone.PerSec(), n.WithNoisy.Refused, n.Alone.Refused, n.WithNoisy.Errors, n.Alone.Errors,
				n.Noisy.OKPerSec(), n.Noisy.RefusedPerSec(), n.Noisy.Errors, n.Noisy.Dropped)},
		{Name: fmt.Sprintf("%s: the server's CPU per refusal ≤ %.1f × per booking", name, targetRefusalCPURatio), Judged: true,
			Met: n.BookingCPU > 0 && n.Refusals.Refused > 0 && n.RefusalCPU > 0 && cpu <= targetRefusalCPURatio,
			Got: fmt.Sprintf("%.3f × (%s ms per refusal over %d refusals at %.0f/s, against %s ms per booking; PostgreSQL %s ms per refusal; estimated from the noisy run itself: %s ms)",
				cpu, cpuMS(n.RefusalCPU), n.Refusals.Refused, n.Refusals.RefusedPerSec(), cpuMS(n.BookingCPU), cpuMS(n.RefusalDBCPU), cpuMS(n.NoisyRunRefusalCPU))},
	}
}

// markdown writes the run's section of the report.
func (n *noisyRun) markdown(b *strings.Builder) {
	title := "Noisy neighbour"
	if n.Spec.Factor >= floodFactor {
		title = "Flood"
	}
	fmt.Fprintf(b, "\n## %s\n\n", title)
	fmt.Fprintf(b, "Limits at their defaults (writes %s per rider). In each of %d rounds, %d quiet riders book with %d paced clients each (a booking every %s per client, start to start: %.0f%% of the rider's budget); "+
		"then again while one more rider offers %.0f new bookings/s in an open loop (%d × its budget; measured once its burst was spent); after the rounds, that rider alone, its budget spent, with %d closed-loop clients: "+
		"what a refusal costs. One serve process throughout; the rounds' samples pooled. CPU is the server's, from /proc, per booking (the quiet riders alone) and per refusal (the last run, its few bookings set apart).\n\n",
		n.Budget, n.Spec.Rounds, n.Spec.QuietRiders, n.Spec.QuietClients, n.QuietInterval, n.Spec.QuietShare*100, n.Offered, n.Spec.Factor, n.Spec.RefusalClients)
	fmt.Fprintf(b, "| run | quiet rides/s | p50 ms | p99 ms | quiet 429 | quiet errors | noisy rides/s | noisy refusals/s | refusal p99 ms | server CPU ms/s | PostgreSQL CPU ms/s |\n")
	fmt.Fprintf(b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	perSec := func(d, over time.Duration) string {
		if over <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.0f", msf(d)/over.Seconds())
	}
	fmt.Fprintf(b, "| quiet riders alone | %.1f | %s | %s | %d | %d | – | – | – | %s | %s |\n",
		n.Alone.PerSec(), ms(n.Alone.P50), ms(n.Alone.P99), n.Alone.Refused, n.Alone.Errors,
		perSec(n.Alone.CPU.Server, n.Alone.Elapsed), perSec(n.Alone.CPU.Postgres, n.Alone.Elapsed))
	fmt.Fprintf(b, "| with the noisy rider | %.1f | %s | %s | %d | %d | %.1f | %.1f | %s | %s | %s |\n",
		n.WithNoisy.PerSec(), ms(n.WithNoisy.P50), ms(n.WithNoisy.P99), n.WithNoisy.Refused, n.WithNoisy.Errors,
		n.Noisy.OKPerSec(), n.Noisy.RefusedPerSec(), ms(n.Noisy.P99),
		perSec(n.WithNoisy.CPU.Server, n.WithNoisy.Elapsed), perSec(n.WithNoisy.CPU.Postgres, n.WithNoisy.Elapsed))
	fmt.Fprintf(b, "| the noisy rider alone, budget spent | – | – | – | – | – | %.1f | %.0f | %s | %s | %s |\n",
		n.Refusals.OKPerSec(), n.Refusals.RefusedPerSec(), ms(n.Refusals.P99),
		perSec(n.Refusals.CPU.Server, n.Refusals.Elapsed), perSec(n.Refusals.CPU.Postgres, n.Refusals.Elapsed))
	fmt.Fprintf(b, "\nThe server's CPU: %s ms per booking, %s ms per refusal (%.3f ×; PostgreSQL %s ms per refusal). From the noisy run itself (its CPU less its bookings at %s ms, per refusal, so carrying the noise of its bookings): %s ms.\n",
		cpuMS(n.BookingCPU), cpuMS(n.RefusalCPU), ratio(float64(n.RefusalCPU), float64(n.BookingCPU)), cpuMS(n.RefusalDBCPU), cpuMS(n.BookingCPU), cpuMS(n.NoisyRunRefusalCPU))
	var rounds []string
	for _, r := range n.RoundP99 {
		rounds = append(rounds, fmt.Sprintf("%s / %s", ms(r[0]), ms(r[1])))
	}
	fmt.Fprintf(b, "The quiet riders' p99 round by round, alone / with the noisy rider, in ms: %s.\n", strings.Join(rounds, "; "))
	var samples []string
	for _, s := range [][]string{n.Alone.ErrorSample, n.WithNoisy.ErrorSample, n.Noisy.ErrorSample, n.Refusals.ErrorSample} {
		samples = append(samples, s...)
	}
	for _, s := range samples[:min(len(samples), 5)] {
		fmt.Fprintf(b, "- error: %s\n", strings.ReplaceAll(s, "\n", " "))
	}
}
