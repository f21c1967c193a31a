package chaos

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
)

// Two processors under chaos: the fake Adyen runs as a process of its own
// beside the fake Stripe, serve routes with PROCESSORS=stripe,adyen, and the
// fault schedule gains processor outages and flapping circuits.

// chaosCircuitOpenFor is how long an open circuit keeps new bookings away
// in a chaos run (PROCESSOR_CIRCUIT_OPEN_FOR): short, so that circuits go
// half-open with real traffic, and close, many times in one run.
const chaosCircuitOpenFor = 2 * time.Second

// Processor names as the service, its metrics and the report use them.
const (
	procStripe = "stripe"
	procAdyen  = "adyen"
)

// chaosProcessors are the processors of a two-processor run, in the order
// of preference given to serve.
var chaosProcessors = []string{procStripe, procAdyen}

// startChaosAdyen starts the fake Adyen as its own process.
func startChaosAdyen(t *testing.T, ctx context.Context, sys *chaosSystem) {
	t.Helper()
	addr := binrun.FreeAddr(t)
	sys.adyen = "http://" + addr
	proc := binrun.Start(t, binrun.Cmd{Bin: sys.bin, Args: []string{"fakeadyen", "-addr", addr},
		Dir: sys.workDir, LogPath: filepath.Join(sys.logDir, "fakeadyen.log")})
	t.Cleanup(func() { _ = proc.Stop(10 * time.Second) })
	require.NoError(t, proc.Ready(ctx, sys.adyen+"/_fake/ledger", 30*time.Second))
}

// processorEnv is the routing part of serve's environment: both
// processors, Stripe first, when the run has the fake Adyen.
func (sys *chaosSystem) processorEnv() []string {
	if sys.adyen == "" {
		return nil
	}
	env := []string{
		"PROCESSORS=" + strings.Join(chaosProcessors, ","),
		"ADYEN_API_KEY=chaos_adyen_key",
		"ADYEN_MERCHANT_ACCOUNT=AtomicRidesChaos",
		"ADYEN_API_BASE=" + sys.adyen + "/v71",
		"PROCESSOR_CIRCUIT_OPEN_FOR=" + chaosCircuitOpenFor.String(),
	}
	if sys.hooks.adyenNotified(sys) {
		env = append(env, "ADYEN_HMAC_KEY="+fakeadyen.DevHMACKey)
	}
	return env
}

// chaosRiderSource is the payment source of the i-th rider created before a
// run: with two processors, every other rider from the third on has a card
// only Adyen accepts (the fake Stripe refuses it), so that Adyen always has
// traffic of its own, and the others move to Adyen when Stripe's circuit
// opens.
func (sys *chaosSystem) chaosRiderSource(i int) string {
	switch {
	case i == 0:
		return "tok_chargeCustomerFail" // declined on every charge
	case sys.adyen != "" && i >= 2 && i%2 == 0:
		return fmt.Sprintf("%schaos_%02d", fakeadyen.EncryptedCardPrefix, i)
	}
	return "tok_visa"
}

// adyenControl calls the fake Adyen's control API.
func (sys *chaosSystem) adyenControl(ctx context.Context, method, path string, in, out any) error {
	return fakeControl(ctx, "fake Adyen", sys.adyen, method, path, in, out)
}

// adyenLedger reads the fake Adyen's ledger.
func (sys *chaosSystem) adyenLedger(ctx context.Context) (*fakeadyen.Ledger, error) {
	var l fakeadyen.Ledger
	return &l, sys.adyenControl(ctx, http.MethodGet, "ledger", nil, &l)
}

// setOutage switches the outage of processor on or off at its fake.
func (sys *chaosSystem) setOutage(ctx context.Context, processor string, on bool) error {
	body := map[string]bool{"on": on}
	if processor == procAdyen {
		return sys.adyenControl(ctx, http.MethodPost, "outage", body, nil)
	}
	return sys.stripeControl(ctx, http.MethodPost, "outage", body, nil)
}

// chaosOutage is one step of the processor fault schedule: the processors
// named are down for down, flaps times (1: a plain outage), up for up
// between two flaps and after the last.
type chaosOutage struct {
	name     string
	procs    []string
	down, up time.Duration
	flaps    int
}

// chaosOutages is the processor fault schedule: each processor down for a
// while, then back (its circuit opens, new bookings go to the other one,
// requests routed to it wait at their recovery point); both down for a
// short while (new bookings 503 before anything is written); then each
// flapping, its outage toggled faster than the circuit's open time so
// that circuits open, go half-open with real traffic, open again, and in
// the end close.
//
// Adyen has less traffic than Stripe (its own riders, and Stripe's while
// Stripe's circuit is open), so its outages last longer: five
// indeterminate outcomes in a row in one process open a circuit.
var chaosOutages = []chaosOutage{
	{name: "Stripe down", procs: []string{procStripe}, down: 6 * time.Second, up: 4 * time.Second, flaps: 1},
	{name: "Adyen down", procs: []string{procAdyen}, down: 8 * time.Second, up: 4 * time.Second, flaps: 1},
	{name: "both down", procs: []string{procStripe, procAdyen}, down: 2 * time.Second, up: 4 * time.Second, flaps: 1},
	{name: "Stripe flapping", procs: []string{procStripe}, down: time.Second, up: 1500 * time.Millisecond, flaps: 6},
	{name: "Adyen flapping", procs: []string{procAdyen}, down: 2 * time.Second, up: 2 * time.Second, flaps: 4},
}

// chaosOutagesShort is the schedule of the short run: each step once,
// shorter.
var chaosOutagesShort = []chaosOutage{
	{name: "Stripe down", procs: []string{procStripe}, down: 7 * time.Second, up: 3 * time.Second, flaps: 1},
	{name: "Adyen down", procs: []string{procAdyen}, down: 7 * time.Second, up: 3 * time.Second, flaps: 1},
	{name: "both down", procs: []string{procStripe, procAdyen}, down: 2 * time.Second, up: 3 * time.Second, flaps: 1},
	{name: "Stripe flapping", procs: []string{procStripe}, down: time.Second, up: 1500 * time.Millisecond, flaps: 4},
	{name: "Adyen flapping", procs: []string{procAdyen}, down: 2 * time.Second, up: 2 * time.Second, flaps: 2},
}

// outageLane plays outages in turn, recording each in log.
func outageLane(ctx context.Context, sys *chaosSystem, outages []chaosOutage, log *chaosFaultLog) error {
	for _, o := range outages {
		if err := playOutage(ctx, sys, o, log); err != nil {
			return err
		}
	}
	return nil
}

// playOutage plays one step of the schedule. The outage is switched off
// however the step ends.
func playOutage(ctx context.Context, sys *chaosSystem, o chaosOutage, log *chaosFaultLog) error {
	log.event("processors: %s (%d × %s down, %s up)", o.name, o.flaps, o.down, o.up)
	log.count(log.outageSteps, o.name)
	for range o.flaps {
		for _, p := range o.procs {
			if err := sys.setOutage(ctx, p, true); err != nil {
				return err
			}
		}
		downErr := pause(ctx, o.down)
		for _, p := range o.procs {
			// Back up even when the run is ending.
			if err := sys.setOutage(context.WithoutCancel(ctx), p, false); err != nil {
				return err
			}
			log.mu.Lock()
			log.outages[p]++
			log.outageDown[p] += o.down
			log.mu.Unlock()
		}
		if downErr != nil {
			return downErr
		}
		if err := pause(ctx, o.up); err != nil {
			return err
		}
	}
	return nil
}

// mixedOutages plays random steps of the schedule, at random moments,
// until ctx ends.
func mixedOutages(ctx context.Context, sys *chaosSystem, log *chaosFaultLog) error {
	for {
		if err := pause(ctx, time.Duration(3000+rand.IntN(5000))*time.Millisecond); err != nil {
			return nil
		}
		if err := playOutage(ctx, sys, chaosOutages[rand.IntN(len(chaosOutages))], log); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// allProcessorsUp ends every outage.
func (sys *chaosSystem) allProcessorsUp(ctx context.Context) error {
	if sys.adyen == "" {
		return nil
	}
	for _, p := range chaosProcessors {
		if err := sys.setOutage(ctx, p, false); err != nil {
			return err
		}
	}
	return nil
}

// circuitWatch scrapes the /metrics of every serve process, every
// interval, for the circuit changes of each processor
// (atomicrides_processor_circuit_changes_total{processor,to}). A process
// counts from zero when it starts, so the watch keeps the last value seen
// of each process (instance and start) and sums them: the changes a
// process made in its last interval before a SIGKILL are not seen.
type circuitWatch struct {
	mu   sync.Mutex
	last map[string]map[string]float64 // by "instance#start", then "processor to"
}

// circuitChangeLine matches one sample of the circuit changes counter,
// keyLookupLine one of the look-ups before a key is sent again, and
// gapsFoundLine the gaps in the database's heartbeat a process found.
var (
	circuitChangeLine = regexp.MustCompile(`^atomicrides_processor_circuit_changes_total\{([^}]*)\} ([0-9.e+]+)$`)
	keyLookupLine     = regexp.MustCompile(`^atomicrides_processor_key_lookups_total\{([^}]*)\} ([0-9.e+]+)$`)
	gapsFoundLine     = regexp.MustCompile(`^atomicrides_database_gaps_found_total() ([0-9.e+]+)$`)
)

// watchCircuits scrapes sys's instances until ctx ends, and once more then.
func watchCircuits(ctx context.Context, sys *chaosSystem, interval time.Duration) *circuitWatch {
	w := &circuitWatch{last: map[string]map[string]float64{}}
	go func() {
		for {
			w.scrape(context.WithoutCancel(ctx), sys)
			if pause(ctx, interval) != nil {
				return
			}
		}
	}()
	return w
}

// scrape reads every instance's counters once.
func (w *circuitWatch) scrape(ctx context.Context, sys *chaosSystem) {
	for _, s := range sys.serves {
		s.mu.Lock()
		id := fmt.Sprintf("%s#%d", s.name, s.starts)
		s.mu.Unlock()
		got, err := scrapeCircuits(ctx, "http://"+s.addr)
		if err != nil {
			continue // the process is down or restarting
		}
		w.mu.Lock()
		w.last[id] = got
		w.mu.Unlock()
	}
}

// scrapeCircuits reads the circuit changes counter of the instance at base.
func scrapeCircuits(ctx context.Context, base string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+chaosAdminToken)
	resp, err := chaosHTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %d", resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var series string
		m := circuitChangeLine.FindStringSubmatch(sc.Text())
		if m == nil {
			series = "lookups "
			m = keyLookupLine.FindStringSubmatch(sc.Text())
		}
		if m == nil {
			series = "gaps "
			m = gapsFoundLine.FindStringSubmatch(sc.Text())
		}
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, kv := range strings.Split(m[1], ",") {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = strings.Trim(v, `"`)
		}
		n, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return nil, err
		}
		out[series+labels["processor"]+" "+labels["to"]+labels["reason"]] += n
	}
	return out, sc.Err()
}

// changes returns the circuit changes of processor to state ("open",
// "half-open", "closed") seen over every process.
func (w *circuitWatch) changes(processor, to string) int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0.0
	for _, m := range w.last {
		n += m[processor+" "+to]
	}
	return int(n)
}

// keyLookups returns the look-ups before a key was sent again, for reason
// ("key_age", "database_gap"), at every processor, seen over every
// process.
func (w *circuitWatch) keyLookups(reason string) int {
	return w.sum(func(series string) bool {
		return strings.HasPrefix(series, "lookups ") && strings.HasSuffix(series, " "+reason)
	})
}

// gapsFound returns the gaps in the database's heartbeat the processes
// found.
func (w *circuitWatch) gapsFound() int {
	return w.sum(func(series string) bool { return strings.HasPrefix(series, "gaps ") })
}

func (w *circuitWatch) sum(match func(series string) bool) int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0.0
	for _, m := range w.last {
		for series, v := range m {
			if match(series) {
				n += v
			}
		}
	}
	return int(n)
}

// returnDuringOutage takes Stripe down for down while the clients that had
// an answer before killed come back (returningClients) and the load goes
// on: the load opens Stripe's circuits, and a client whose booking was
// lost with the commits, coming back while a circuit is open, is routed
// anew to Adyen. It returns the clients that came back.
func returnDuringOutage(ctx context.Context, sys *chaosSystem, load *chaosLoad, killed time.Time, down time.Duration, log *chaosFaultLog) ([]chaosReturned, error) {
	o := chaosOutage{name: "Stripe down while clients come back", procs: []string{procStripe}, down: down, flaps: 1}
	var wg sync.WaitGroup
	var outageErr error
	wg.Go(func() { outageErr = playOutage(ctx, sys, o, log) })
	returned := returningClients(ctx, load, killed)
	log.event("%d clients came back with their keys", len(returned))
	wg.Wait()
	return returned, outageErr
}
