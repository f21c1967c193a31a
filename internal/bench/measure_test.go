package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/jobs"
	"github.com/atomicrides/atomicrides/service"
)

// benchPoint is everything measured at one client concurrency.
type benchPoint struct {
	Clients int
	// FloorReceipt is the floor plus the receipt's least SQL (fetch its
	// job, record the receipt, complete the job): the baseline of the
	// database's work per ride, background included.
	FloorReceipt pgbenchRun
	// Floor and Seed are the baselines of new rides (SeedNow is the seed
	// retrying at once, Seed with a client's jittered backoff); Select is
	// the baseline of replays. SQL is the service's own SQL for new rides,
	// run by pgbench: what the service would do with no cost of its own.
	Floor, Seed, SeedNow, Select, SQL pgbenchRun
	// New books new rides with no Stripe latency; Replay repeats the keys
	// New finished; Slow books new rides with the configured Stripe latency.
	// FirstReplay replays each finished key once, on a process that has
	// not seen it: the database's answer. Healthz is GET /healthz: the same
	// server answering with no database work, the ceiling of any request on
	// this machine.
	New, Replay, FirstReplay, Slow, Healthz loadRun
	// Pooled books new rides like New, on the same database, through
	// PgBouncer in transaction pooling mode (DATABASE_POOLER=pgbouncer).
	Pooled loadRun
	// Trip is whole trips on a deployment of their own with CAPTURE=trip:
	// each client books a ride (its fare held), then completes it as the
	// dispatch side (the fake Stripe captures the fare). FloorTrip is the
	// least SQL of a trip (floor_trip.sql), its baseline.
	Trip      loadRun
	FloorTrip pgbenchRun

	// dep is the deployment New ran on, where Replay runs; tripDep the
	// one Trip ran on.
	dep, tripDep *deployment
}

// measureNew measures new rides at p.Clients: the floor, the seed's design
// and the service's SQL through pgbench, then the service on a deployment of
// its own.
func (e *benchEnv) measureNew(tb testing.TB, p *benchPoint) {
	tb.Helper()
	users := strconv.Itoa(e.cfg.Users)
	p.Floor = e.pgbenchCommits(tb, e.floorName, pgbenchArgs{
		url: e.floorURL, script: pgbenchScript(tb, "floor.sql"), vars: map[string]string{"users": users},
	}, p.Clients)
	p.FloorReceipt = e.pgbenchCommits(tb, e.receiptName, pgbenchArgs{
		url: e.receiptURL, script: pgbenchScript(tb, "floor_receipt.sql"), vars: map[string]string{"users": users},
	}, p.Clients)
	seed := func(backoff time.Duration) pgbenchRun {
		return e.pgbenchCommits(tb, e.seedName, pgbenchArgs{
			url: e.seedURL, script: pgbenchScript(tb, "seed.sql"), maxTries: e.cfg.SeedMaxTries,
			vars: map[string]string{"users": users, "backoff_ms": strconv.Itoa(int(backoff / time.Millisecond))},
		}, p.Clients)
	}
	p.SeedNow = seed(0)
	p.Seed = seed(e.cfg.SeedBackoff)
	p.SQL = e.pgbenchCommits(tb, e.sqlName, pgbenchArgs{
		url: e.sqlURL, script: pgbenchScript(tb, "service.sql"), vars: map[string]string{"users": users},
	}, p.Clients)
	p.dep = e.newDeployment(tb)
	p.New = e.serviceRides(tb, p.dep, p.Clients, 0, "new")
}

// measurePooled measures new rides through PgBouncer on the deployment
// measureNew used, in the same run: what the pooler's hop and the exec
// mode it needs cost per ride against New.
func (e *benchEnv) measurePooled(tb testing.TB, p *benchPoint) {
	tb.Helper()
	if p.dep == nil {
		tb.Fatal("the pooled series runs on New's deployment: measure new rides at the same concurrency first")
	}
	p.Pooled = e.serviceRides(tb, p.dep.viaBouncer(), p.Clients, 0, "pooled")
}

// measureReplay measures replays of the keys measureNew finished, and the
// single-row primary-key select they are compared with, on the same
// database.
func (e *benchEnv) measureReplay(tb testing.TB, p *benchPoint) {
	tb.Helper()
	if p.dep == nil || p.New.OK == 0 {
		tb.Fatal("replays need finished keys: measure new rides at the same concurrency first")
	}
	var maxID int64
	benchQueryRow(tb, p.dep.url, `SELECT coalesce(max(id), 0) FROM idempotency_keys`, &maxID)
	p.Select = e.pgbench(tb, p.dep.name, pgbenchArgs{
		url: p.dep.url, script: pgbenchScript(tb, "select.sql"), vars: map[string]string{"maxid": strconv.FormatInt(maxID, 10)},
	}, p.Clients)

	// First, on a fresh process, client i replays the keys it finished
	// (booking new rides, directly and through PgBouncer), once each: keys
	// the process has not seen finish. The first quarter of each client's
	// keys warms the process (its pool's connections and statements, as a
	// process serving for a while has them) and the rest are measured.
	var warmKeys, coldKeys [][]string
	for i := range p.Clients {
		keys := slices.Clone(p.New.finished[i])
		if p.Pooled.finished != nil { // a -bench pattern may leave the PgBouncer run out
			keys = append(keys, p.Pooled.finished[i]...)
		}
		warmKeys, coldKeys = append(warmKeys, keys[:len(keys)/4]), append(coldKeys, keys[len(keys)/4:])
	}
	once := func(keys [][]string) func(client, n int) string {
		return func(client, n int) string {
			if n < len(keys[client]) {
				return keys[client][n]
			}
			return ""
		}
	}
	warm := loadSpec{clients: p.Clients, key: once(warmKeys), replay: true}
	if slices.IndexFunc(warmKeys, func(keys []string) bool { return len(keys) > 0 }) < 0 {
		warm = loadSpec{} // too few keys to spare any
	}
	p.FirstReplay = e.serviceRun(tb, p.dep, 0, warm, loadSpec{clients: p.Clients, key: once(coldKeys), replay: true})

	// Then client i replays the keys its rider finished over and over, from
	// an offset of its own.
	users := len(p.dep.apiKeys)
	perUser := make([][]string, users)
	for i, keys := range p.New.finished {
		perUser[i%users] = append(perUser[i%users], keys...)
	}
	for i := range min(p.Clients, users) {
		if len(perUser[i]) == 0 {
			tb.Fatalf("no finished key of rider %d to replay", i)
		}
	}
	key := func(client, n int) string {
		keys := perUser[client%users]
		return keys[(client/users*7919+n)%len(keys)]
	}
	p.Replay = e.serviceRun(tb, p.dep, 0, loadSpec{clients: p.Clients, key: key, replay: true}, loadSpec{clients: p.Clients, key: key, replay: true})
	p.Healthz = e.serviceRun(tb, p.dep, 0, loadSpec{clients: p.Clients, healthz: true}, loadSpec{clients: p.Clients, healthz: true})
}

// measureSlow measures new rides at p.Clients, on a deployment of their own,
// with the fake Stripe holding every charge for the configured latency.
func (e *benchEnv) measureSlow(tb testing.TB, p *benchPoint) {
	tb.Helper()
	p.Slow = e.serviceRides(tb, e.newDeployment(tb), p.Clients, e.cfg.StripeLatency, "slow")
}

// measureTrip measures trips at p.Clients: the floor of a trip through
// pgbench, then the service on a deployment of its own with CAPTURE=trip,
// each client booking a ride and completing it, each trip under keys of its
// own.
func (e *benchEnv) measureTrip(tb testing.TB, p *benchPoint) {
	tb.Helper()
	p.FloorTrip = e.pgbenchCommits(tb, e.tripName, pgbenchArgs{
		url: e.tripURL, script: pgbenchScript(tb, "floor_trip.sql"),
		vars: map[string]string{"users": strconv.Itoa(e.cfg.Users), "dispatch": strconv.FormatInt(e.tripDispatch, 10)},
	}, p.Clients)
	p.tripDep = e.newDeployment(tb).forTrips()
	key := func(prefix string) func(client, n int) string {
		return func(client, n int) string {
			return fmt.Sprintf("bench-%s-c%04d-w%04d-n%09d", prefix, p.Clients, client, n)
		}
	}
	p.Trip = e.serviceRun(tb, p.tripDep, 0,
		loadSpec{clients: p.Clients, key: key("warm-trip"), trip: true, dispatchToken: benchDispatchToken},
		loadSpec{clients: p.Clients, key: key("trip"), trip: true, dispatchToken: benchDispatchToken})
}

// serviceRides measures new rides, each under a key of its own.
func (e *benchEnv) serviceRides(tb testing.TB, d *deployment, clients int, latency time.Duration, label string) loadRun {
	tb.Helper()
	key := func(prefix string) func(client, n int) string {
		return func(client, n int) string {
			return fmt.Sprintf("bench-%s-c%04d-w%04d-n%09d", prefix, clients, client, n)
		}
	}
	return e.serviceRun(tb, d, latency,
		loadSpec{clients: clients, key: key("warm-" + label)},
		loadSpec{clients: clients, key: key(label)})
}

// serviceRun starts the service on d, runs the warm-up (unless it has no
// clients) and then the measured load, and stops it. The commits counted are every commit in d's database
// from start to stop (the requests', River's, the readiness checks'), per
// OK response of the warm-up and the run; the peak RSS is the server's
// during the run.
func (e *benchEnv) serviceRun(tb testing.TB, d *deployment, latency time.Duration, warmup, measured loadSpec) loadRun {
	tb.Helper()
	e.setStripeLatency(tb, latency)
	defer e.setStripeLatency(tb, 0)
	before := e.commits(tb, d.name)
	srv := d.start(tb)

	var warm loadRun
	if warmup.clients > 0 {
		warmup.base, warmup.duration, warmup.apiKeys = srv.base, e.cfg.Warmup, d.apiKeys
		warm = runLoad(context.Background(), warmup)
		if warm.OK == 0 {
			d.stop(tb, srv)
			tb.Fatalf("warm-up at %d clients got no answer it wanted: %v", warmup.clients, warm.ErrorSample)
		}
	}

	measured.base, measured.duration, measured.apiKeys = srv.base, e.cfg.Duration, d.apiKeys
	// The window opens once the passes the process ran as it started are
	// over (hourly and daily work, not a ride's: on grown tables one of them
	// reads every charged ride of the last days) and, for a run that books
	// nothing, once the receipts of the rides booked before it are sent.
	// The reaper is left to run: the reaper's run measures rides beside it.
	// On grown tables the passes do not end (see deployment.grown): their
	// windows hold them.
	var kinds []string
	if !d.grown {
		kinds = startPasses
	}
	if measured.replay || measured.healthz {
		kinds = append(kinds[:len(kinds):len(kinds)], service.RideReceiptArgs{}.Kind())
	}
	if len(kinds) > 0 {
		waitJobsDone(tb, d.url, kinds)
	}
	pid := srv.Pid()
	rssReset := resetPeakRSS(pid)
	dbBefore := scrapeDBCounts(tb, srv.base)
	cpu := startCPU(e.admin, d.name, pid, e.stripe.Pid(), e.mail.Pid())
	prof := e.startServerProfile(tb, srv, measured.clients)
	run := runLoad(context.Background(), measured)
	run.CPU, _ = cpu.finish(run.OK)
	prof.finish(tb)
	dbAfter := scrapeDBCounts(tb, srv.base)
	if rssReset {
		run.PeakRSS = peakRSS(pid)
	}
	if run.OK > 0 {
		n := float64(run.OK)
		run.RoundTrips = float64(dbAfter.RequestRoundTrips-dbBefore.RequestRoundTrips) / n
		run.Statements = float64(dbAfter.RequestStatements-dbBefore.RequestStatements) / n
		run.BackgroundRoundTrips = float64(dbAfter.BackgroundRoundTrips-dbBefore.BackgroundRoundTrips) / n
	}
	d.stop(tb, srv)
	if n := warm.OK + run.OK; n > 0 {
		run.CommitsPerOK = float64(e.commits(tb, d.name)-before) / float64(n)
	}
	return run
}

// pgbench runs a pgbench script at the concurrency of clients, capped, on
// database db, and measures the CPU of db's backends and of pgbench per
// script run.
func (e *benchEnv) pgbench(tb testing.TB, db string, a pgbenchArgs, clients int) pgbenchRun {
	tb.Helper()
	a.bin, a.duration, a.clients = e.pgbenchBin, e.cfg.Duration, min(clients, e.pgbenchClients)
	cpu := startCPU(e.admin, db, 0, 0, 0)
	run, err := runPgbench(context.Background(), a)
	if err != nil {
		cpu.finish(0)
		tb.Fatal(err)
	}
	run.CPU, _ = cpu.finish(run.Done)
	// The harness did nothing meanwhile but wait: what pgbench spent is the
	// load generator's share.
	run.CPU.Load = 0
	if run.Done > 0 {
		run.CPU.Load = run.OwnCPU / time.Duration(run.Done)
	}
	return run
}

// pgbenchCommits is pgbench with the commits it made in db counted.
func (e *benchEnv) pgbenchCommits(tb testing.TB, db string, a pgbenchArgs, clients int) pgbenchRun {
	tb.Helper()
	before := e.commits(tb, db)
	run := e.pgbench(tb, db, a, clients)
	if run.Done > 0 {
		run.CommitsPerRun = float64(e.commits(tb, db)-before) / float64(run.Done)
	}
	return run
}

// startPasses are the kinds of the periodic jobs a serve process runs as
// it starts, the reaper's aside.
var startPasses = []string{
	jobs.KeyCompleterArgs{}.Kind(), jobs.ReconcileArgs{}.Kind(),
	jobs.OrphanPassArgs{}.Kind(), jobs.EventsPassArgs{}.Kind(),
	jobs.HoldReleaseArgs{}.Kind(),
}

// waitJobsDone waits until the deployment's serving process leads its job
// queue (so that it has enqueued the passes it runs as it starts) and the
// queue holds no job of kinds that is due or running.
func waitJobsDone(tb testing.TB, url string, kinds []string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(context.Background())
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var leaders, n int
		err := conn.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM river_leader WHERE expires_at > now()),
			(SELECT count(*) FROM river_job WHERE kind = ANY($1)
				AND (state = 'running' OR (state = 'available' AND scheduled_at <= now())))`,
			kinds).Scan(&leaders, &n)
		if err != nil {
			tb.Fatalf("waiting for the job queue: %v", err)
		}
		if leaders > 0 && n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("after 2 minutes, %d leader(s) and %d due or running jobs of %v", leaders, n, kinds)
		case <-tick.C:
		}
	}
}
