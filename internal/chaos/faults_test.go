package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/atomicrides/atomicrides/internal/binrun"
)

// chaosCrashPoints are the engine's failpoints (service/idem, FailpointName):
// for each flow, the claim transaction fused with the first phase, a claim
// alone (a request resumed past its first phase), the foreign call that
// answered but was not recorded, and the phase that records it; before and
// after each commit.
var chaosCrashPoints = func() []string {
	var points []string
	for _, f := range []struct{ flow, mid string }{
		{"ride.create", "ride_created"},
		{"ride.refund", "refund_created"},
		// Trips (trips_test.go): the capture of a completion, the
		// release of a cancellation.
		{"ride.complete", "capture_requested"},
		{"ride.cancel", "release_requested"},
	} {
		points = append(points,
			f.flow+":started:before_commit",
			f.flow+":started:after_commit",
			f.flow+":"+f.mid+":after_call",
			f.flow+":"+f.mid+":before_commit",
			f.flow+":"+f.mid+":after_commit",
			f.flow+":claim:before_commit",
			f.flow+":claim:after_commit",
		)
	}
	return points
}()

// chaosStripeFault is a fault of the fake Stripe, in the JSON of its
// control API, with the name it is reported under.
type chaosStripeFault struct {
	name  string
	fault map[string]any
}

func stripeFault(name, op, kind string, status, times int, duration time.Duration) chaosStripeFault {
	f := map[string]any{"op": op, "kind": kind, "times": times}
	if status != 0 {
		f["status"] = status
	}
	if duration != 0 {
		f["duration"] = duration.String()
	}
	return chaosStripeFault{name: name, fault: f}
}

// chaosStripeFaults are the Stripe faults, each once in turn. Latency is
// past the service's Stripe timeout. A fault fires "times" times: the
// service's Stripe client retries some failures itself (up to twice), so a
// fault that fires six times fails two or more requests. Refusals (a
// declined card, a refused refund) are saved under the Stripe key, as
// Stripe does, so they never answer the retry of a key that was charged.
var chaosStripeFaults = []chaosStripeFault{
	stripeFault("charge: latency past the client's timeout", "payment_intent.create", "latency", 0, 6, 2*chaosStripeTimeout),
	stripeFault("charge: 500", "payment_intent.create", "status", 500, 6, 0),
	stripeFault("charge: 503", "payment_intent.create", "status", 503, 6, 0),
	stripeFault("charge: 429 rate limited", "payment_intent.create", "status", 429, 6, 0),
	stripeFault("charge: 409 idempotency key in use", "payment_intent.create", "status", 409, 6, 0),
	stripeFault("charge: connection dropped before", "payment_intent.create", "drop_before", 0, 6, 0),
	stripeFault("charge: connection dropped after the charge was made", "payment_intent.create", "drop_after", 0, 6, 0),
	stripeFault("charge: card declined", "payment_intent.create", "refuse", 402, 1, 0),
	stripeFault("customer: 503", "customer.create", "status", 503, 3, 0),
	stripeFault("refund: 503", "refund.create", "status", 503, 6, 0),
	stripeFault("refund: connection dropped after the refund was made", "refund.create", "drop_after", 0, 6, 0),
	{name: "refund: refused (charge disputed)", fault: map[string]any{
		"op": "refund.create", "kind": "refuse", "status": 400, "code": "charge_disputed",
		"message": "The charge is disputed.", "times": 1,
	}},
}

// chaosFaultLog records what was injected and what became of it.
type chaosFaultLog struct {
	mu sync.Mutex
	// crashes by failpoint: fired (the process crashed there) or missed
	// (not reached within the window; the process was killed instead).
	fired, missed map[string]int
	kills         int // SIGKILL at an arbitrary moment
	pgRestarts    []time.Duration
	stripe        map[string]int // injected, by name
	stripeLeft    map[string]int // not consumed within the window
	// outageSteps counts the steps of the processor schedule played, by
	// name; outages and outageDown, the outages of each processor and how
	// long it was down in all (processors_test.go).
	outageSteps map[string]int
	outages     map[string]int
	outageDown  map[string]time.Duration
	events      []string
	start       time.Time
}

func newChaosFaultLog() *chaosFaultLog {
	return &chaosFaultLog{fired: map[string]int{}, missed: map[string]int{}, stripe: map[string]int{},
		stripeLeft: map[string]int{}, outageSteps: map[string]int{}, outages: map[string]int{},
		outageDown: map[string]time.Duration{}, start: time.Now()}
}

func (f *chaosFaultLog) event(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, fmt.Sprintf("%6.1fs  ", time.Since(f.start).Seconds())+fmt.Sprintf(format, args...))
}

func (f *chaosFaultLog) count(m map[string]int, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m[key]++
}

// crashLane arms one serve instance with each point it takes from points,
// in turn: it restarts the instance with the point armed (crash on its
// first hit) and waits for the crash, or kills the instance when the point
// is not reached within window. The first restart is graceful. At the end
// the instance runs clean.
func crashLane(ctx context.Context, s *chaosServe, points <-chan string, window time.Duration, log *chaosFaultLog) error {
	s.stop()
	for point := range points {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.start(ctx, point+"=crash"); err != nil {
			return err
		}
		log.event("%s armed with %s", s.name, point)
		select {
		case <-s.exited():
			if s.crashedAt(point) {
				log.count(log.fired, point)
				log.event("%s crashed at %s", s.name, point)
			} else {
				log.count(log.missed, point)
				log.event("%s exited without reaching %s", s.name, point)
			}
		case <-time.After(window):
			log.count(log.missed, point)
			s.kill()
			log.event("%s killed: %s not reached within %s", s.name, point, window)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.start(ctx, "")
}

// stripeLane injects each fault in turn, calls injected with it, and waits
// (bounded by window) until the fake Stripe has fired it as often as asked.
func stripeLane(ctx context.Context, sys *chaosSystem, faults []chaosStripeFault, window time.Duration, log *chaosFaultLog, injected func(chaosStripeFault)) error {
	for _, f := range faults {
		if err := sys.stripeControl(ctx, http.MethodPost, "faults", f.fault, nil); err != nil {
			return err
		}
		log.count(log.stripe, f.name)
		log.event("Stripe: %s", f.name)
		injected(f)
		err := binrun.Poll(ctx, window, func() error {
			left, err := sys.stripeFaultsLeft(ctx)
			if err == nil && left > 0 {
				err = fmt.Errorf("%d faults left", left)
			}
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			log.count(log.stripeLeft, f.name)
			log.event("Stripe: %s not used up within %s; cleared", f.name, window)
			if err := sys.stripeControl(ctx, http.MethodDelete, "faults", nil, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// restartPostgres crashes PostgreSQL under load and waits until it accepts
// connections again.
func restartPostgres(ctx context.Context, sys *chaosSystem, log *chaosFaultLog) error {
	start := time.Now()
	if err := sys.cluster.RestartImmediate(ctx); err != nil {
		return err
	}
	d := time.Since(start)
	log.mu.Lock()
	log.pgRestarts = append(log.pgRestarts, d)
	log.mu.Unlock()
	log.event("PostgreSQL restarted (-m immediate) in %s", d.Round(time.Millisecond))
	return nil
}

// mixedFaults injects every kind of fault at once, at random, until ctx
// ends: crashes at random failpoints (on a random hit) and at arbitrary
// moments on both instances, Stripe faults, and PostgreSQL restarts every
// pgEvery.
func mixedFaults(ctx context.Context, sys *chaosSystem, pgEvery time.Duration, log *chaosFaultLog) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(sys.serves)+2)
	for _, s := range sys.serves {
		wg.Go(func() {
			for ctx.Err() == nil {
				if rand.IntN(4) == 0 {
					// A crash at an arbitrary moment.
					select {
					case <-ctx.Done():
					case <-time.After(time.Duration(1+rand.IntN(4)) * time.Second):
					}
					s.kill()
					log.mu.Lock()
					log.kills++
					log.mu.Unlock()
					log.event("%s killed at an arbitrary moment", s.name)
					if err := s.start(context.WithoutCancel(ctx), ""); err != nil {
						errs <- err
						return
					}
					continue
				}
				point := chaosCrashPoints[rand.IntN(len(chaosCrashPoints))]
				nth := 1 + rand.IntN(3)
				s.kill()
				if err := s.start(context.WithoutCancel(ctx), fmt.Sprintf("%s=crash@%d", point, nth)); err != nil {
					errs <- err
					return
				}
				select {
				case <-s.exited():
					if s.crashedAt(point) {
						log.count(log.fired, point)
						log.event("%s crashed at %s (hit %d)", s.name, point, nth)
					}
				case <-time.After(10 * time.Second):
					log.count(log.missed, point)
				case <-ctx.Done():
				}
			}
			s.kill()
			if err := s.start(context.WithoutCancel(ctx), ""); err != nil {
				errs <- err
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(500+rand.IntN(1500)) * time.Millisecond):
			}
			f := chaosStripeFaults[rand.IntN(len(chaosStripeFaults))]
			if err := sys.stripeControl(ctx, http.MethodPost, "faults", f.fault, nil); err != nil {
				if ctx.Err() == nil {
					errs <- err
				}
				return
			}
			log.count(log.stripe, f.name)
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(pgEvery):
			}
			if err := restartPostgres(context.WithoutCancel(ctx), sys, log); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	var all []string
	for err := range errs {
		all = append(all, err.Error())
	}
	if len(all) > 0 {
		return fmt.Errorf("mixed faults: %s", strings.Join(all, "; "))
	}
	return nil
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
