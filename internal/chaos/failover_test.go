package chaos

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/pgenv"
)

// failoverPlan bounds one failover run: load, the primary's death, the new
// primary, more load, then the checks.
type failoverPlan struct {
	name    string
	logs    string // subdirectory of -chaos.logs
	db      chaosDB
	users   int
	clients int
	// scenarios is the clients' mix; nil means chaosScenarios.
	scenarios []chaosScenario
	// before is how long the clients run before the primary dies; with a
	// restore, the backup is taken lead before that.
	before, lead time.Duration
	// after is how long they run once the new primary takes writes.
	after time.Duration
	// etcdDown, for chaosDBPatroni: instead of the leader, etcd is
	// killed, for that long, then started again.
	etcdDown time.Duration
	settle   time.Duration
	bound    time.Duration
	// processors runs serve on both processors; with a restore, Stripe is
	// down for stripeDown while clients come back, so that a lost booking
	// may be redone at Adyen (processors_test.go).
	processors bool
	stripeDown time.Duration
}

// TestChaosFailoverShort is a failover to a synchronous standby under
// load, in short: part of `go tool task test`.
func TestChaosFailoverShort(t *testing.T) {
	runFailover(t, failoverPlan{
		name: "short: failover to a synchronous standby", logs: "failover", db: chaosDBSyncStandby,
		users: 5, clients: 8, before: 6 * time.Second, after: 6 * time.Second,
		settle: 60 * time.Second, bound: 3 * time.Minute,
	})
}

// TestChaosFailover is the failover to a synchronous standby with more
// load: `go tool task chaos` runs it.
func TestChaosFailover(t *testing.T) {
	if !*chaosFullFlag {
		t.Skip("the full failover run needs -chaos.full (go tool task chaos); TestChaosFailoverShort is its short form")
	}
	runFailover(t, failoverPlan{
		name: "full: failover to a synchronous standby", logs: "failover", db: chaosDBSyncStandby,
		users: 10, clients: 12, before: 30 * time.Second, after: 30 * time.Second,
		settle: 80 * time.Second, bound: 5 * time.Minute,
	})
}

// failoverFigures is what happened around the failover.
type failoverFigures struct {
	// killed: the primary's every process got SIGKILL; promoted: the new
	// primary takes writes (promotion, or the restore started).
	killed, promoted time.Time
	// promotedDB is the new primary's clock at promotion.
	promotedDB time.Time
	// restore only: when the backup began and ended (a commit acknowledged
	// before it began is in it; one acknowledged before it ended may not
	// be: the backup stops at a point a moment before it ends), and the
	// transaction ids the primary had assigned once it ended and just
	// before its death.
	backupStart, backupEnd time.Time
	xidBackup, xidKill     int64
	// lostRefund is the refund of a ride booked and refunded after the
	// backup ended, surely lost with the primary (nil: the ride was not
	// charged); lostRefundAt, its client's retries at each instance once
	// the backup took the primary's place.
	lostRefund   *chaosRecord
	lostRefundAt []chaosAnswer
	// hooks: the webhook side after the run (restore: the orphans).
	hooks *chaosHookState
	// patroni and outage: what Patroni did (chaosDBPatroni).
	patroni *patroniFigures
	outage  *etcdOutage
}

func runFailover(t *testing.T, plan failoverPlan) {
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), plan.bound)
	defer cancel()
	logDir, sys, users := startChaosRun(t, ctx, plan.logs, plan.db, plan.users, plan.processors)
	setup := time.Since(begin)

	stats, load := newChaosLoad(sys, users, 1<<30, plan.scenarios)
	if plan.db == chaosDBRestore && len(sys.tripBases()) > 0 {
		// The trip clients' riders, created before the backup
		// (trips_test.go).
		load.makeTripRiders(ctx, 6*plan.clients)
	}
	stop := make(chan struct{})
	var clients sync.WaitGroup
	startChaosClients(ctx, load, plan.clients, &clients, stop)
	flog := newChaosFaultLog()
	loadStart := time.Now()

	var err error
	fig := &failoverFigures{}
	require.NoError(t, pause(ctx, plan.before-plan.lead))
	if plan.db == chaosDBRestore {
		fig.backupStart = time.Now()
		sys.spare, err = sys.cluster.BaseBackup(ctx, sys.spareDir)
		require.NoError(t, err)
		fig.backupEnd = time.Now()
		fig.xidBackup, err = nextXID(ctx, sys.cluster.URL)
		require.NoError(t, err)
		flog.event("base backup taken (next transaction id %d)", fig.xidBackup)
		// Halfway to the kill, well after the backup's last WAL: a ride
		// booked and refunded then is lost with the primary.
		require.NoError(t, pause(ctx, plan.lead/2))
		fig.lostRefund = load.bookAndRefund(ctx, load.users[1]) // the first rider's card is declined
		if fig.lostRefund != nil {
			flog.event("ride %d booked and refunded, to be lost", fig.lostRefund.rideID)
		}
		require.NoError(t, pause(ctx, plan.lead-time.Since(fig.backupEnd)))
		fig.xidKill, err = nextXID(ctx, sys.cluster.URL)
		require.NoError(t, err)
	}

	fig.killed = time.Now()
	var newPrimary string // the new primary's URL
	switch plan.db {
	case chaosDBSyncStandby:
		require.NoError(t, sys.cluster.Kill(ctx))
		flog.event("primary killed (SIGKILL, every process)")
		require.NoError(t, sys.standby.Promote(ctx))
		flog.event("standby promoted")
		newPrimary = sys.standby.URL
	case chaosDBRestore:
		require.NoError(t, sys.cluster.Kill(ctx))
		flog.event("primary killed (SIGKILL, every process)")
		c, err := pgenv.StartClusterWith(ctx, sys.spareDir, pgenv.ClusterOptions{Port: sys.sparePort, CrashSafe: true})
		require.NoError(t, err)
		flog.event("backup started as the primary")
		newPrimary = c.URL
	case chaosDBPgBouncer:
		require.NoError(t, restartPostgres(ctx, sys, flog))
		newPrimary = sys.cluster.URL
	case chaosDBPatroni:
		if plan.etcdDown > 0 {
			fig.outage, err = killEtcd(ctx, sys, plan.etcdDown, flog)
			require.NoError(t, err)
			fig.killed = fig.outage.killed
			newPrimary = fig.outage.primary.NodeURL("chaos")
		} else {
			fig.patroni, err = killLeader(ctx, sys, flog)
			require.NoError(t, err)
			fig.killed = fig.patroni.killed // once every process is gone
			newPrimary = fig.patroni.survivor.NodeURL("chaos")
		}
	}
	fig.promoted = time.Now()
	fig.promotedDB, err = dbNow(ctx, newPrimary)
	require.NoError(t, err)

	var circuits *circuitWatch
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if plan.processors || plan.db == chaosDBRestore {
		circuits = watchCircuits(watchCtx, sys, 500*time.Millisecond)
	}

	require.NoError(t, pause(ctx, plan.after))
	var returned []chaosReturned
	if plan.db == chaosDBRestore && plan.processors {
		// Stripe goes down while the load goes on and the clients come
		// back: its circuits open, and a booking lost with the commits may
		// be redone at Adyen (case 3 of docs/processors.md).
		returned, err = returnDuringOutage(ctx, sys, load, fig.killed, plan.stripeDown, flog)
		require.NoError(t, err)
	}
	close(stop)
	clients.Wait()
	loadTook := time.Since(loadStart)
	flog.event("clients done")

	if plan.db == chaosDBRestore && !plan.processors {
		// Clients that come back: every other key answered before the
		// primary died asks again; the others never do.
		returned = returningClients(ctx, load, fig.killed)
		flog.event("%d clients came back with their keys", len(returned))
		if fig.lostRefund != nil {
			fig.lostRefundAt = load.retryAtEach(ctx, sys.bases(), fig.lostRefund.req)
		}
	}

	if plan.db == chaosDBRestore && plan.processors && fig.lostRefund != nil {
		fig.lostRefundAt = load.retryAtEach(ctx, sys.bases(), fig.lostRefund.req)
	}

	if plan.db == chaosDBRestore && sys.adyen != "" {
		// Adyen lists neither payments nor refunds: after a restore the
		// operator resends Adyen's notifications (the Customer Area's
		// event log), and the inbox applies what the lost commits held.
		if err := sys.adyenControl(ctx, http.MethodPost, "renotify", nil, nil); err != nil {
			t.Errorf("resend Adyen's notifications: %v", err)
		}
		flog.event("operator: Adyen's notifications resent")
	}
	settled, settleErr := settleChaos(ctx, sys, plan.settle, flog)
	if plan.db == chaosDBRestore && settleErr == nil && sys.adyen != "" {
		settleErr = sys.adyenNotificationsIdle(ctx, plan.settle)
	}
	if plan.db == chaosDBRestore && settleErr == nil {
		// The orphan policy's grace ends within the run (webhooks_test.go):
		// wait for it to resolve every orphan, then for what it queued.
		start := time.Now()
		deadline, _ := ctx.Deadline()
		settleErr = sys.orphansResolved(ctx, min(chaosOrphanGrace()+plan.settle, time.Until(deadline)-40*time.Second))
		flog.event("orphans resolved in %s (%v)", time.Since(start).Round(time.Millisecond), settleErr)
		if settleErr == nil {
			var more time.Duration
			more, settleErr = settleChaos(ctx, sys, plan.settle, flog)
			settled += more
		}
		settled += time.Since(start)
	}

	stopWatch()
	if circuits != nil {
		circuits.scrape(ctx, sys)
	}
	state := chaosReadState(t, ctx, sys, load)
	state.circuits = circuits
	var checks []chaosCheck
	var notes []string
	switch plan.db {
	case chaosDBSyncStandby, chaosDBPgBouncer, chaosDBPatroni:
		checks = chaosCheckAll(state)
		checks = append(checks,
			checkAnswersReplayed(ctx, load, state.records, fig.killed),
			checkServedThrough(sys),
			checkRiverAfterFailover(ctx, sys, fig.promotedDB),
		)
		if plan.db == chaosDBPgBouncer {
			checks = append(checks, checkThroughBouncer(ctx, sys, len(state.keys)))
		}
		if fig.outage != nil {
			checks = append(checks, checkNoSplitBrain(fig.outage), checkOutageAnswers(stats.attemptsSoFar(), fig.outage))
		}
	case chaosDBRestore:
		rec, err := sys.reconcile(ctx)
		var hookChecks []chaosCheck
		hookChecks, fig.hooks = webhookChecks(ctx, state, sys)
		checks, notes = restoreChecks(state, rec, err, returned, fig)
		checks = append(checks, hookChecks...)
		checks = append(checks, checkGapFound(circuits))
		notes = append(notes, fmt.Sprintf("key windows: %d gap(s) in the database's heartbeat found after the restore; "+
			"%d payments and refunds looked up at their processor before their key was sent again because the restore may have lost an earlier send (database_gap), %d because of the key's own age",
			circuits.gapsFound(), circuits.keyLookups("database_gap"), circuits.keyLookups("key_age")))
	}
	notes = append(append(notes, state.notes()[1]), processorReport(state, flog)...)
	report := failoverReport(plan, load, stats, fig, checks, notes, map[string]time.Duration{
		"setup": setup, "load": loadTook, "settle": settled, "total": time.Since(begin),
	})
	fmt.Print(report)
	chaosVerdict(t, chaosOutcome{logDir: logDir, flog: flog, settle: plan.settle, settleErr: settleErr,
		checks: checks, begin: begin, bound: plan.bound})
}

// checkGapFound: the restore brought back a database whose heartbeat is
// older than the kill, and a serving process found that gap, so that no
// request the restore lost is sent again past its key window unlooked.
func checkGapFound(w *circuitWatch) chaosCheck {
	n := w.gapsFound()
	return chaosCheck{id: "restore_gap_found",
		name:     "the restore is noticed: a serving process finds the gap in the database's heartbeat",
		expected: "≥ 1 gap", actual: fmt.Sprintf("%d gap(s)", n), ok: n >= 1}
}

// pause lets the load run for d.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// nextXID returns the next transaction id the server at url will assign
// (assigning none itself).
func nextXID(ctx context.Context, url string) (int64, error) {
	var xid int64
	return xid, queryRow(ctx, url, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`, &xid)
}

// dbNow returns the clock of the server at url.
func dbNow(ctx context.Context, url string) (time.Time, error) {
	var now time.Time
	return now, queryRow(ctx, url, `SELECT now()`, &now)
}

// queryRow scans the one row of query, run on a connection of its own to
// url, into dest.
func queryRow(ctx context.Context, url, query string, dest ...any) error {
	return withConn(ctx, url, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, query).Scan(dest...)
	})
}

// withConn runs f on a connection of its own to url, bounded in time.
func withConn(ctx context.Context, url string, f func(context.Context, *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return f(ctx, conn)
}

// checkAnswersReplayed sends every request once more whose stored answer a
// client saw, and expects that answer again, byte for byte, as a replay:
// nothing a client saw before the failover was lost with the primary, and
// nothing after it either.
func checkAnswersReplayed(ctx context.Context, load *chaosLoad, records []*chaosRecord, killed time.Time) chaosCheck {
	before, after, sameBefore, sameAfter := 0, 0, 0, 0
	for _, r := range records {
		var seen *chaosAnswer
		for i := range r.answers {
			if a := &r.answers[i]; a.Definitive && storedAnswer(*a) {
				seen = a
				break
			}
		}
		if seen == nil || r.req.path == "" {
			continue
		}
		ans := load.rider.retry(ctx, r.req)
		same := ans.Definitive && ans.Replayed && ans.Status == seen.Status && bytes.Equal(ans.Body, seen.Body)
		if seen.At.Before(killed) {
			before++
			if same {
				sameBefore++
			}
		} else {
			after++
			if same {
				sameAfter++
			}
		}
	}
	return chaosCheck{id: "answers_replayed", name: "every stored answer a client saw, before or after the failover, is replayed identically",
		expected: fmt.Sprintf("%d before, %d after", before, after),
		actual:   fmt.Sprintf("%d before, %d after", sameBefore, sameAfter),
		ok:       sameBefore == before && sameAfter == after && before > 0 && after > 0}
}

// checkServedThrough: the serve processes ran through the failover, each
// started once: their pools and River reached the new primary on their
// own.
func checkServedThrough(sys *chaosSystem) chaosCheck {
	restarted, exited := 0, 0
	for _, s := range sys.serves {
		s.mu.Lock()
		if s.starts != 1 {
			restarted++
		}
		select {
		case <-s.proc.Done():
			exited++
		default:
		}
		s.mu.Unlock()
	}
	return chaosCheck{id: "served_through", name: "every serve process ran through the failover, never restarted",
		expected: fmt.Sprintf("%d running, 0 restarted", len(sys.serves)),
		actual:   fmt.Sprintf("%d running, %d restarted", len(sys.serves)-exited, restarted),
		ok:       restarted == 0 && exited == 0}
}

// checkRiverAfterFailover: River worked on the new primary: the leader's
// periodic completer ran there, and so did job workers (receipts).
func checkRiverAfterFailover(ctx context.Context, sys *chaosSystem, since time.Time) chaosCheck {
	var completer, receipts int
	err := withConn(ctx, sys.dbURL, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `
			SELECT count(*) FILTER (WHERE kind = 'key_completer'),
			       count(*) FILTER (WHERE kind IN ('ride_receipt', 'refund_receipt'))
			FROM river_job WHERE state = 'completed' AND finalized_at > $1`, since).Scan(&completer, &receipts)
	})
	actual := fmt.Sprintf("%d completer passes, %d receipts", completer, receipts)
	if err != nil {
		actual = err.Error()
	}
	return chaosCheck{id: "river_after_failover", name: "River's leader and workers ran on the new primary (jobs completed after promotion)",
		expected: "≥ 1 completer pass, ≥ 1 receipt", actual: actual, ok: err == nil && completer > 0 && receipts > 0}
}

// failoverReport renders what the clients saw around the failover, the
// run's figures and the invariants table.
func failoverReport(plan failoverPlan, load *chaosLoad, stats *chaosStats, fig *failoverFigures, checks []chaosCheck, notes []string, took map[string]time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n=== chaos failover (%s)\n", plan.name)
	fmt.Fprintf(&b, "time: setup %s, load %s, settle %s, total %s (bound %s)\n",
		took["setup"].Round(100*time.Millisecond), took["load"].Round(100*time.Millisecond),
		took["settle"].Round(100*time.Millisecond), took["total"].Round(100*time.Millisecond), plan.bound)
	load.book.mu.Lock()
	scenarios := 0
	for _, n := range load.book.scenarios {
		scenarios += n
	}
	load.book.mu.Unlock()
	fmt.Fprintf(&b, "clients: %d concurrent, %d riders, %d scenarios; %d attempts, %d retries\n",
		plan.clients, plan.users, scenarios, stats.attempts.Load(), stats.retries.Load())

	switch plan.db {
	case chaosDBSyncStandby:
		fmt.Fprintf(&b, "failover: primary SIGKILLed (every process) after %s of load; standby promoted %s later\n",
			plan.before, fig.promoted.Sub(fig.killed).Round(time.Millisecond))
	case chaosDBPatroni:
		if fig.patroni != nil {
			fmt.Fprintln(&b, fig.patroni.report(plan.before))
		}
		if fig.outage != nil {
			fmt.Fprintln(&b, fig.outage.report(plan.before))
		}
	case chaosDBPgBouncer:
		fmt.Fprintf(&b, "PostgreSQL behind PgBouncer (transaction pooling, %d server connections for 2 × 8 client connections) restarted (-m immediate) after %s of load, back %s later\n",
			chaosBouncerPoolSize, plan.before, fig.promoted.Sub(fig.killed).Round(time.Millisecond))
	case chaosDBRestore:
		fmt.Fprintf(&b, "restore: base backup taken after %s of load, primary SIGKILLed %s after the backup ended, backup started as the primary %s later\n",
			plan.before-plan.lead, fig.killed.Sub(fig.backupEnd).Round(time.Millisecond), fig.promoted.Sub(fig.killed).Round(time.Millisecond))
	}
	fmt.Fprintln(&b, clientView(stats.attemptsSoFar(), fig.killed))
	for _, n := range notes {
		fmt.Fprintln(&b, n)
	}
	fmt.Fprintf(&b, "\ninvariants:\n")
	fmt.Fprint(&b, chaosTable(checks))
	return b.String()
}

// clientView summarises what the clients saw around the kill at killed:
// the errors (no answer, 5xx, 429; not the hang-ups of clients that cut
// themselves off on purpose) and busy keys (409) after it, and when
// the first new booking was committed again.
func clientView(attempts []chaosAttempt, killed time.Time) string {
	var first, last, recovered time.Duration
	errorsBefore, busyBefore, busy := 0, 0, 0
	seen := map[string]int{}
	for _, a := range attempts {
		isError := (a.status == 0 && !a.cut) || a.status >= 500 || a.status == http.StatusTooManyRequests
		inUse := a.status == http.StatusConflict && a.problem == "/problems/idempotency-key-in-use"
		if a.done.Before(killed) {
			if isError {
				errorsBefore++
			}
			if inUse {
				busyBefore++
			}
			continue
		}
		at := a.done.Sub(killed)
		if isError {
			if first == 0 || at < first {
				first = at
			}
			last = max(last, at)
			name := fmt.Sprint(a.status)
			if a.status == 0 {
				name = "no answer"
			}
			seen[name]++
		}
		if inUse {
			busy++
		}
		if a.status == http.StatusCreated && !a.replayed && a.path == "/rides" && !a.sent.Before(killed) &&
			(recovered == 0 || at < recovered) {
			recovered = at
		}
	}
	var parts []string
	for _, k := range sortedKeys(seen) {
		parts = append(parts, fmt.Sprintf("%s×%d", k, seen[k]))
	}
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	return fmt.Sprintf("clients saw: before the kill, %d errors and %d × 409 key in use (same-key bursts); "+
		"after it, errors from +%s to +%s (%s: %s) and %d × 409 key in use (bursts, and keys whose request the "+
		"failover cut short, until their lease expires); first new ride booked and committed +%s after the kill",
		errorsBefore, busyBefore, first.Round(time.Millisecond), last.Round(time.Millisecond),
		(last - first).Round(100*time.Millisecond), strings.Join(parts, " "), busy, recovered.Round(time.Millisecond))
}
