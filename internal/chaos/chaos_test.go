package chaos

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
)

var (
	chaosFullFlag = flag.Bool("chaos.full", false, "run TestChaos, the full chaos run (go tool task chaos)")
	chaosLogsFlag = flag.String("chaos.logs", "", "keep the processes' logs of a chaos run in this directory (relative: to the module root)")
)

// TestMain builds the binaries the tests run once, and removes them when
// the tests end.
func TestMain(m *testing.M) { binrun.Main(m) }

// chaosPlan bounds one chaos run.
type chaosPlan struct {
	name    string
	users   int
	clients int // concurrent clients
	// maxScenarios bounds the scenarios started, whatever the time.
	maxScenarios int64
	// crashWindow is how long an armed failpoint may take to be reached
	// before its instance is killed instead.
	crashWindow time.Duration
	// stripeWindow is how long an injected Stripe fault may take to be used
	// up before it is cleared.
	stripeWindow time.Duration
	// pgRestartAfter is when, after the faults start, PostgreSQL is
	// restarted in the pass that injects each fault in turn.
	pgRestartAfter time.Duration
	// mixed is how long every fault is injected at once, at random, after
	// that pass; pgEvery spaces the PostgreSQL restarts meanwhile.
	mixed   time.Duration
	pgEvery time.Duration
	// settle bounds the wait for the completer and the jobs after the
	// faults stop.
	settle time.Duration
	// bound is the whole run, start to verdict.
	bound time.Duration
	// processors runs serve on both processors (PROCESSORS=stripe,adyen)
	// with the fake Adyen, and adds outages, the processor fault schedule
	// (processors_test.go), to the faults.
	processors bool
	outages    []chaosOutage
}

// TestChaosShort is one pass of each fault, in turn, with a few clients:
// part of `go tool task test`.
//
// It does not run in parallel with the other tests of the package: it owns
// several processes and a PostgreSQL cluster, and its bounds assume they
// get the machine's cores.
func TestChaosShort(t *testing.T) {
	runChaos(t, chaosPlan{
		name:    "short: one pass of each fault",
		users:   5,
		clients: 8,
		// Enough scenarios to keep traffic through the processor
		// outages, which start once the crash lanes (28 points since
		// the trips' flows) are done.
		maxScenarios:   800,
		crashWindow:    15 * time.Second,
		stripeWindow:   10 * time.Second,
		pgRestartAfter: 6 * time.Second,
		settle:         90 * time.Second,
		bound:          4 * time.Minute,
		processors:     true,
		outages:        chaosOutagesShort,
	})
}

// TestChaos is the full run: each fault in turn, then all of them mixed
// for a while, with more clients. `go tool task chaos` runs it.
func TestChaos(t *testing.T) {
	if !*chaosFullFlag {
		t.Skip("the full chaos run needs -chaos.full (go tool task chaos); TestChaosShort is its short form")
	}
	runChaos(t, chaosPlan{
		name:           "full: each fault in turn, then all mixed",
		users:          10,
		clients:        12,
		maxScenarios:   4000,
		crashWindow:    15 * time.Second,
		stripeWindow:   10 * time.Second,
		pgRestartAfter: 6 * time.Second,
		// The processor outages take a minute after the crash lanes:
		// the mixed part is shorter, so that the settle fits the bound.
		mixed:      60 * time.Second,
		pgEvery:    25 * time.Second,
		settle:     80 * time.Second,
		bound:      5 * time.Minute,
		processors: true,
		outages:    chaosOutages,
	})
}

func runChaos(t *testing.T, plan chaosPlan) {
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), plan.bound)
	defer cancel()

	logDir, sys, users := startChaosRun(t, ctx, "", chaosDBSingle, plan.users, plan.processors)
	setup := time.Since(begin)

	stats, load := newChaosLoad(sys, users, plan.maxScenarios, nil)
	stop := make(chan struct{})
	var clients sync.WaitGroup
	startChaosClients(ctx, load, plan.clients, &clients, stop)
	var circuits *circuitWatch
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if plan.processors {
		circuits = watchCircuits(watchCtx, sys, 500*time.Millisecond)
	}

	// Each fault in turn: every failpoint (two lanes, one per instance,
	// taking the points in order), every Stripe fault, one PostgreSQL
	// restart under load.
	flog := newChaosFaultLog()
	faultsStart := time.Now()
	// Stripe's dashboard and the riders' banks, known to the service by
	// their events only (webhooks_test.go), while the faults last.
	stopDashboard := runDashboard(ctx, sys, time.Second, flog)
	points := make(chan string, len(chaosCrashPoints))
	for _, p := range chaosCrashPoints {
		points <- p
	}
	close(points)
	var lanes, crashLanes sync.WaitGroup
	// One error from each crash lane, and from the Stripe, PostgreSQL
	// and outage lanes.
	laneErrs := make(chan error, len(sys.serves)+3)
	for _, s := range sys.serves {
		crashLanes.Go(func() { laneErrs <- crashLane(ctx, s, points, plan.crashWindow, flog) })
	}
	lanes.Go(func() {
		laneErrs <- stripeLane(ctx, sys, chaosStripeFaults, plan.stripeWindow, flog, func(f chaosStripeFault) {
			clients.Go(func() { load.quitUnder(ctx, f) })
			clients.Go(func() {
				load.book.ran("malformed request")
				load.malformed(ctx, users[rand.IntN(len(users))])
			})
		})
	})
	lanes.Go(func() {
		select {
		case <-ctx.Done():
			laneErrs <- ctx.Err()
			return
		case <-time.After(plan.pgRestartAfter):
		}
		laneErrs <- restartPostgres(ctx, sys, flog)
	})
	if plan.processors {
		// Once the instances run clean: a circuit lives in its process,
		// and one killed every few seconds rarely lives through a whole
		// cycle (open, half-open, closed).
		lanes.Go(func() {
			crashLanes.Wait()
			flog.event("processors: the instances run clean; outages start")
			laneErrs <- outageLane(ctx, sys, plan.outages, flog)
		})
	}
	lanes.Wait()
	crashLanes.Wait()
	close(laneErrs)
	for err := range laneErrs {
		require.NoError(t, err)
	}
	if plan.mixed > 0 {
		mctx, mcancel := context.WithTimeout(ctx, plan.mixed)
		var outageErr error
		var outages sync.WaitGroup
		if plan.processors {
			outages.Go(func() { outageErr = mixedOutages(mctx, sys, flog) })
		}
		err := mixedFaults(mctx, sys, plan.pgEvery, flog)
		outages.Wait()
		mcancel()
		require.NoError(t, err)
		require.NoError(t, outageErr)
	}

	// The faults stop; the clients finish what they started (retrying
	// until a definitive answer, or giving up at their limits).
	require.NoError(t, sys.stripeControl(ctx, http.MethodDelete, "faults", nil, nil))
	require.NoError(t, sys.allProcessorsUp(ctx))
	close(stop)
	clients.Wait()
	dashboard := stopDashboard()
	faults := time.Since(faultsStart)
	flog.event("faults stopped; clients done")

	// Settle within the bound, leaving time for the checks.
	settled, settleErr := settleChaos(ctx, sys, plan.settle, flog)

	stopWatch()
	if circuits != nil {
		circuits.scrape(ctx, sys)
	}
	state := chaosReadState(t, ctx, sys, load)
	state.circuits = circuits
	checks := chaosCheckAll(state)
	if plan.processors {
		checks = append(checks, checkAllAnswersReplayed(state))
	}
	hookChecks, _ := webhookChecks(ctx, state, sys)
	checks = append(checks, hookChecks...)
	report := chaosReport(plan, load, stats, flog, checks, append(state.notes(), append(processorReport(state, flog), dashboardNote(dashboard))...), map[string]time.Duration{
		"setup": setup, "faults": faults, "settle": settled, "total": time.Since(begin),
	})
	fmt.Print(report)
	if *chaosLogsFlag != "" {
		fmt.Printf("logs of every process and the timeline of the faults (events.log): %s\n", logDir)
	}
	chaosVerdict(t, chaosOutcome{logDir: logDir, flog: flog, settle: plan.settle, settleErr: settleErr,
		checks: checks, begin: begin, bound: plan.bound})
}

// startChaosRun starts the system under test on db, its logs in a fresh
// directory (under logs, with -chaos.logs), and creates its n users.
func startChaosRun(t *testing.T, ctx context.Context, logs string, db chaosDB, n int, procs bool) (string, *chaosSystem, []*chaosUser) {
	t.Helper()
	logDir := chaosLogDir(t, logs)
	sys := startChaosSystem(t, ctx, logDir, db, procs)
	users, err := chaosCreateUsers(ctx, sys, n)
	require.NoError(t, err)
	return logDir, sys, users
}

// newChaosLoad is the clients' load on sys for users, counted in stats: at
// most maxScenarios scenarios, drawn from scenarios (nil: chaosScenarios),
// under a fresh run id.
func newChaosLoad(sys *chaosSystem, users []*chaosUser, maxScenarios int64, scenarios []chaosScenario) (*chaosStats, *chaosLoad) {
	stats := &chaosStats{}
	rider := newChaosRider(sys.bases(), stats)
	rider.tripBases = sys.tripBases()
	return stats, &chaosLoad{
		rider:     rider,
		users:     users,
		book:      &chaosBook{},
		run:       fmt.Sprintf("%08x", rand.Uint32()),
		max:       maxScenarios,
		scenarios: scenarios,
	}
}

// startChaosClients starts n clients working on load, in clients, until
// stop is closed.
func startChaosClients(ctx context.Context, load *chaosLoad, n int, clients *sync.WaitGroup, stop <-chan struct{}) {
	for range n {
		clients.Go(func() { load.work(ctx, stop) })
	}
}

// settleChaos waits for the system to settle once the faults and the
// clients have stopped, within limit and leaving 30 seconds of ctx for the
// checks; it records how long it took in flog.
func settleChaos(ctx context.Context, sys *chaosSystem, limit time.Duration, flog *chaosFaultLog) (time.Duration, error) {
	start := time.Now()
	deadline, _ := ctx.Deadline()
	within := min(limit, time.Until(deadline)-30*time.Second)
	// Every webhook delivered (or given up) first: what it records is
	// work for the settle.
	err := sys.webhooksIdle(ctx, within)
	if err == nil && sys.hooks.adyenNotified(sys) {
		// Adyen's notifications too: a trip's capture there completes
		// with its CAPTURE.
		err = sys.adyenNotificationsIdle(ctx, within-time.Since(start))
	}
	if err == nil {
		err = chaosSettle(ctx, sys, within-time.Since(start))
	}
	settled := time.Since(start)
	flog.event("settled in %s (%v)", settled.Round(time.Millisecond), err)
	return settled, err
}

// chaosOutcome is what the verdict of a run is drawn from.
type chaosOutcome struct {
	logDir    string
	flog      *chaosFaultLog
	settle    time.Duration
	settleErr error
	checks    []chaosCheck
	begin     time.Time
	bound     time.Duration
}

// chaosVerdict keeps the run's timeline in events.log beside the processes'
// logs, and fails t for a system that did not settle, for each violated
// invariant and for a run over its bound. Each invariant is a subtest of
// its own, so that a violation names its check (TestChaosShort/keys_finished)
// as well as its row.
func chaosVerdict(t *testing.T, o chaosOutcome) {
	t.Helper()
	events := filepath.Join(o.logDir, "events.log")
	if err := os.WriteFile(events, []byte(strings.Join(o.flog.events, "\n")+"\n"), 0o644); err != nil {
		t.Errorf("write %s: %v", events, err)
	}
	if o.settleErr != nil {
		t.Errorf("the system did not settle within %s: %v (logs in %s)", o.settle, o.settleErr, o.logDir)
	}
	for _, c := range o.checks {
		t.Run(c.id, func(t *testing.T) {
			if !c.ok {
				t.Errorf("invariant violated: %s: expected %s, got %s (logs in %s)", c.name, c.expected, c.actual, o.logDir)
			}
		})
	}
	if time.Since(o.begin) > o.bound {
		t.Errorf("the run took %s, over its bound of %s", time.Since(o.begin), o.bound)
	}
}

// chaosLogDir returns the directory for the logs of a run: -chaos.logs
// (under sub, when set), else a temporary directory that stays when the
// test fails.
func chaosLogDir(t *testing.T, sub string) string {
	t.Helper()
	logDir := *chaosLogsFlag
	if logDir == "" {
		var err error
		logDir, err = os.MkdirTemp("", "atomicrides-chaos-")
		require.NoError(t, err)
		t.Cleanup(func() {
			if !t.Failed() {
				_ = os.RemoveAll(logDir)
			}
		})
		return logDir
	}
	if !filepath.IsAbs(logDir) {
		root, err := binrun.ModuleRoot()
		require.NoError(t, err)
		logDir = filepath.Join(root, logDir)
	}
	logDir = filepath.Join(logDir, sub)
	require.NoError(t, os.MkdirAll(logDir, 0o755))
	return logDir
}

// chaosReport renders what the run did and the invariants table.
func chaosReport(plan chaosPlan, load *chaosLoad, stats *chaosStats, flog *chaosFaultLog, checks []chaosCheck, notes []string, took map[string]time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n=== chaos (%s)\n", plan.name)
	fmt.Fprintf(&b, "time: setup %s, faults %s, settle %s, total %s (bound %s)\n",
		took["setup"].Round(100*time.Millisecond), took["faults"].Round(100*time.Millisecond),
		took["settle"].Round(100*time.Millisecond), took["total"].Round(100*time.Millisecond), plan.bound)

	load.book.mu.Lock()
	scenarios := 0
	for _, n := range load.book.scenarios {
		scenarios += n
	}
	fmt.Fprintf(&b, "\nclients: %d concurrent, %d riders, %d scenarios:\n", plan.clients, plan.users, scenarios)
	for _, name := range sortedKeys(load.book.scenarios) {
		fmt.Fprintf(&b, "  %-52s %5d\n", name, load.book.scenarios[name])
	}
	load.book.mu.Unlock()
	fmt.Fprintf(&b, "requests: %d attempts, %d retries, %d without an answer (connection refused, reset, timeout), "+
		"%d logical requests given up at the retry limits, %d clients gone on purpose\n",
		stats.attempts.Load(), stats.retries.Load(), stats.networkErrors.Load(), stats.gaveUpExhausted.Load(), stats.quitters.Load())
	codes := stats.statusCounts()
	var parts []string
	for _, code := range []int{200, 201, 400, 401, 402, 404, 409, 413, 415, 422, 429, 500, 502, 503} {
		if codes[code] > 0 {
			parts = append(parts, fmt.Sprintf("%d×%d", code, codes[code]))
		}
	}
	fmt.Fprintf(&b, "answers: %s\n", strings.Join(parts, "  "))

	flog.mu.Lock()
	fired, missed := 0, 0
	for _, n := range flog.fired {
		fired += n
	}
	for _, n := range flog.missed {
		missed += n
	}
	fmt.Fprintf(&b, "\ncrashes (SIGKILL at a failpoint): %d; armed but not reached (killed instead): %d; "+
		"SIGKILL at an arbitrary moment: %d\n", fired, missed, flog.kills)
	for _, p := range chaosCrashPoints {
		fmt.Fprintf(&b, "  %-42s crashed %3d   not reached %3d\n", p, flog.fired[p], flog.missed[p])
	}
	var restarts []string
	for _, d := range flog.pgRestarts {
		restarts = append(restarts, d.Round(time.Millisecond).String())
	}
	fmt.Fprintf(&b, "PostgreSQL restarts (-m immediate, under load): %d (back in %s)\n", len(flog.pgRestarts), strings.Join(restarts, ", "))
	fmt.Fprintf(&b, "Stripe faults injected (not used up in time):\n")
	for _, name := range sortedKeys(flog.stripe) {
		fmt.Fprintf(&b, "  %-58s %4d (%d)\n", name, flog.stripe[name], flog.stripeLeft[name])
	}
	flog.mu.Unlock()

	for _, n := range notes {
		fmt.Fprintln(&b, n)
	}
	fmt.Fprintf(&b, "\ninvariants:\n")
	fmt.Fprint(&b, chaosTable(checks))
	return b.String()
}
