package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/atomicrides/atomicrides/internal/binrun"
	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/pgenv"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// benchConfig is what one benchmark run measures, and how long.
type benchConfig struct {
	// Clients is the client concurrency of each point of the sweep.
	Clients []int
	// Duration is how long each measurement runs (whole seconds: pgbench's
	// unit). Warmup runs before each measurement of the service.
	Duration, Warmup time.Duration
	// StripeLatency is the fake Stripe's latency on charges in the latency
	// series; 0 leaves that series out.
	StripeLatency time.Duration
	// PoolMaxConns is the service's pool size (pool_max_conns).
	PoolMaxConns int
	// Users is how many riders share the load.
	Users int
	// PgbenchMaxClients caps pgbench's connections: the server's
	// max_connections caps them anyway, and a pool caps the service's.
	PgbenchMaxClients int
	// SeedMaxTries and SeedBackoff steer the seed's retries of
	// serialization failures: the seed runs once retrying at once, and once
	// with a jittered pause of up to SeedBackoff before each retry.
	SeedMaxTries int
	SeedBackoff  time.Duration
	// GrowKeys is how many finished keys the cost-as-the-data-grows
	// measurement loads (0: none).
	GrowKeys int
	// OutDir receives the report, the plot and the processes' logs.
	OutDir string
	// CPUProfile has each serve process profiled over each measured run
	// through PPROF_ADDR, the profiles written to OutDir (see
	// serverProfile): the input of default.pgo (go tool task pgo).
	CPUProfile bool
}

const benchAdminToken = "bench-admin-token-0123456789abcdef0123456789"

// benchDispatchToken is the dispatch side's DISPATCH_TOKEN of the trips'
// serve processes: it completes their rides.
const benchDispatchToken = "bench-dispatch-token-0123456789abcdef01234567"

// benchEnv is one benchmark run's world: the built binary, the fake Stripe
// in its own process, and databases on the test server for the pgbench
// runs (the floor's, the seed's, the service's SQL's, the trip's floor's). Each measurement of the service
// gets a deployment of its own (see newDeployment).
type benchEnv struct {
	cfg        benchConfig
	bin        string
	pgbenchBin string
	// admin reads pg_stat_database and pg_stat_activity from the
	// maintenance database, so that reading them commits nothing in the
	// databases measured.
	admin                                     *pgxpool.Pool
	floorURL, seedURL, sqlURL, receiptURL     string
	floorName, seedName, sqlName, receiptName string
	// tripURL is the database of the trip's floor (floor_trip.sql), whose
	// completions are keyed by its dispatch account, tripDispatch.
	tripURL, tripName string
	tripDispatch      int64
	stripeBase        string
	// stripe is the fake Stripe's process, mail the mail sink's (at
	// mailAddr).
	stripe, mail *binrun.Process
	mailAddr     string
	// serveLog and stripeLog are the processes' log files in OutDir.
	serveLog, stripeLog string
	// workDir is the working directory of every process the harness
	// starts, under the test's t.TempDir(), whatever OutDir is.
	workDir string
	// pgbenchClients caps the clients of every pgbench run.
	pgbenchClients int
	// spareDBs are fresh databases for deployments, made up front so that
	// they outlive the sub-benchmark that first uses them.
	spareDBs []string
	// bouncer is PgBouncer, in transaction pooling mode, in front of the
	// test server: the pooled series reach their database through it.
	bouncer *pgenv.PgBouncer
}

// newBenchEnv builds the binary, creates the baselines' databases and starts
// the fake Stripe; everything is torn down when tb ends.
func newBenchEnv(tb testing.TB, cfg benchConfig) *benchEnv {
	tb.Helper()
	e := &benchEnv{cfg: cfg}
	var err error
	if e.pgbenchBin, err = findPgbench(); err != nil {
		tb.Fatal(err)
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		tb.Fatal(err)
	}
	e.bin = binrun.Build(tb)
	e.workDir = tb.TempDir()
	e.serveLog, e.stripeLog = benchLog(tb, cfg.OutDir, "serve.log"), benchLog(tb, cfg.OutDir, "fakestripe.log")
	e.admin = benchPool(tb, dbtest.AdminURL(tb))

	e.floorURL, e.seedURL, e.sqlURL, e.receiptURL = dbtest.NewURL(tb), dbtest.NewURL(tb), dbtest.NewURL(tb), dbtest.NewURL(tb)
	e.floorName, e.seedName, e.sqlName, e.receiptName = benchDBName(tb, e.floorURL), benchDBName(tb, e.seedURL), benchDBName(tb, e.sqlURL), benchDBName(tb, e.receiptURL)
	e.tripURL = dbtest.NewURL(tb)
	e.tripName = benchDBName(tb, e.tripURL)
	// The pgbench scripts pick a rider as random(1, :users): these riders
	// get the ids 1…N explicitly (the service draws its ids at random).
	for _, url := range []string{e.floorURL, e.seedURL, e.sqlURL, e.receiptURL, e.tripURL} {
		benchExec(tb, url, `
			INSERT INTO users (id, email, payment_source, stripe_customer_id)
			SELECT i, 'rider' || i || '@bench.example.com', 'tok_visa', 'cus_bench_' || i FROM generate_series(1, $1::int) i`,
			cfg.Users)
	}
	// The trip's completions are the dispatch side's: its account comes
	// with the migrated database.
	benchQueryRow(tb, e.tripURL, `SELECT id FROM users WHERE role = 'dispatch'`, &e.tripDispatch)

	// Three deployments per point: new rides (and their replays), new
	// rides with Stripe latency, and trips; one for the grown tables.
	for range 3*len(cfg.Clients) + 1 {
		e.spareDBs = append(e.spareDBs, dbtest.NewURL(tb))
	}

	stripeAddr := binrun.FreeAddr(tb)
	e.stripe = binrun.Start(tb, binrun.Cmd{Bin: e.bin, Args: []string{"fakestripe", "-addr", stripeAddr}, Dir: e.workDir, LogPath: e.stripeLog})
	e.stripeBase = "http://" + stripeAddr
	if err := e.stripe.Ready(context.Background(), e.stripeBase+"/_fake/faults", time.Minute); err != nil {
		tb.Fatalf("the fake Stripe: %v (see %s)", err, e.stripeLog)
	}

	// The receipts go to a mail sink in a process of its own, which keeps
	// no file: what receiving them costs is the recipient's, counted apart
	// from the server's.
	e.mailAddr = binrun.FreeAddr(tb)
	e.mail = binrun.Start(tb, binrun.Cmd{Bin: e.bin, Args: []string{"mailsink", "-addr", e.mailAddr, "-dir", "-"}, Dir: e.workDir, LogPath: benchLog(tb, cfg.OutDir, "mailsink.log")})
	if err := binrun.Poll(context.Background(), time.Minute, func() error {
		c, err := net.DialTimeout("tcp", e.mailAddr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		tb.Fatalf("the mail sink: %v", err)
	}

	e.bouncer = testkit.PgBouncer(tb, cfg.PoolMaxConns)

	var maxConns, inUse int
	if err := e.admin.QueryRow(context.Background(), `SELECT current_setting('max_connections')::int, (SELECT count(*) FROM pg_stat_activity)`).Scan(&maxConns, &inUse); err != nil {
		tb.Fatal(err)
	}
	// Leave room for the service's pool, River's listener and other tests.
	e.pgbenchClients = max(1, min(cfg.PgbenchMaxClients, maxConns-inUse-cfg.PoolMaxConns-10))
	return e
}

// deployment is the service on a fresh database of its own, with its riders
// and their Stripe customers made, and no process serving it between
// measurements.
type deployment struct {
	e       *benchEnv
	url     string
	name    string
	apiKeys []string
	// env is more environment of its serve processes: the pooled series'
	// DATABASE_URL through PgBouncer, say.
	env []string
	// pooled: its serve processes reach the database through e.bouncer.
	pooled bool
	// grown: its rides were loaded by SQL, charged at no processor. The
	// passes a process runs as it starts (the orphan pass lists every
	// charged ride of its window and asks the processor for each one the
	// processor's listing lacks: here, all of them) do not end within a
	// run, so no window waits for them.
	grown bool
}

// viaBouncer is d with its serve processes reaching the database through
// PgBouncer (DATABASE_POOLER=pgbouncer), d's URL as their direct one.
func (d *deployment) viaBouncer() *deployment {
	pd := *d
	pd.pooled = true
	pd.env = []string{
		"DATABASE_URL=" + withPoolMaxConns(d.e.bouncer.URL(d.name), d.e.cfg.PoolMaxConns),
		"DATABASE_POOLER=pgbouncer",
		"DATABASE_DIRECT_URL=" + d.url,
	}
	return &pd
}

// forTrips is d with its serve processes holding each booking's fare and
// completing the trip on the dispatch side's request (CAPTURE=trip, with
// benchDispatchToken).
func (d *deployment) forTrips() *deployment {
	td := *d
	td.env = append(slices.Clone(d.env), "CAPTURE=trip", "DISPATCH_TOKEN="+benchDispatchToken)
	return &td
}

// dropServerConns makes PgBouncer close its server connections to db at
// once (KILL, then RESUME for later clients), so that the database's
// statistics are complete once its sessions are gone.
func (e *benchEnv) dropServerConns(tb testing.TB, db string) {
	tb.Helper()
	conn, err := pgx.Connect(context.Background(), e.bouncer.URL("pgbouncer")+"&default_query_exec_mode=simple_protocol")
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, cmd := range []string{"KILL " + db, "RESUME " + db} {
		if _, err := conn.Exec(context.Background(), cmd); err != nil {
			tb.Fatalf("PgBouncer %s: %v", cmd, err)
		}
	}
}

// newDeployment creates a database and its riders through the API, and
// waits for the River jobs that create their Stripe customers. The fake
// Stripe forgets everything first: key and row ids start again at 1 in a
// fresh database, and so would the service's idempotency keys at Stripe.
func (e *benchEnv) newDeployment(tb testing.TB) *deployment {
	tb.Helper()
	if len(e.spareDBs) == 0 {
		tb.Fatal("no spare database left for a deployment")
	}
	url := e.spareDBs[0]
	e.spareDBs = e.spareDBs[1:]
	return e.deployOn(tb, url, e.cfg.Users)
}

// deployOn is newDeployment on the fresh database at url, with riders
// riders.
func (e *benchEnv) deployOn(tb testing.TB, url string, riders int) *deployment {
	tb.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.stripeBase+"/_fake/reset", nil)
	benchControl(tb, req)
	d := &deployment{e: e, url: url}
	d.name = benchDBName(tb, d.url)
	srv := d.start(tb)
	for i := range riders {
		d.apiKeys = append(d.apiKeys, benchCreateUser(tb, srv.base, fmt.Sprintf("rider%03d@bench.example.com", i)))
	}
	binrun.WaitFor(tb, time.Minute, "every rider's Stripe customer", func() bool {
		var missing int
		benchQueryRow(tb, d.url, `SELECT count(*) FROM users WHERE stripe_customer_id IS NULL AND role = 'rider'`, &missing)
		return missing == 0
	})
	d.stop(tb, srv)
	return d
}

// servingProcess is the built binary serving a deployment.
type servingProcess struct {
	*binrun.Process
	base string
	// pprofBase is the process's PPROF_ADDR as a URL, "" unless
	// benchConfig.CPUProfile.
	pprofBase string
}

// start runs `serve -no-migrate` on the deployment's database, its pool
// capped at the configured size, with the benchmark's fake Stripe and mail
// sink configured as a production deployment's would be, and waits until it
// is ready.
func (d *deployment) start(tb testing.TB) *servingProcess {
	tb.Helper()
	return d.startEnv(tb, d.env...)
}

// capacityLimitsOff is the environment of the capacity runs' processes:
// they measure the service as it queues, its limits off. The admission
// runs start theirs with startLimited instead.
var capacityLimitsOff = []string{"RATE_LIMIT_WRITES=off", "RATE_LIMIT_READS=off", "RATE_LIMIT_IN_FLIGHT=off", "LOAD_SHED_IN_FLIGHT=off"}

// startEnv is start with more environment variables (later entries win),
// the limits off.
func (d *deployment) startEnv(tb testing.TB, env ...string) *servingProcess {
	tb.Helper()
	return d.startProcess(tb, append(slices.Clone(capacityLimitsOff), env...))
}

// startLimited is startEnv with the limits at their defaults, but for
// those env sets (see limitsOn).
func (d *deployment) startLimited(tb testing.TB, env ...string) *servingProcess {
	tb.Helper()
	return d.startProcess(tb, env)
}

// startProcess runs the serve process with env after the deployment's
// own settings.
func (d *deployment) startProcess(tb testing.TB, env []string) *servingProcess {
	tb.Helper()
	addr := binrun.FreeAddr(tb)
	pprofEnv, pprofBase := d.e.pprofEnv(tb)
	env = append(pprofEnv, env...)
	p := binrun.Start(tb, binrun.Cmd{Bin: d.e.bin, Args: []string{"serve", "-no-migrate"}, Dir: d.e.workDir, LogPath: d.e.serveLog, Env: append([]string{
		"DATABASE_URL=" + withPoolMaxConns(d.url, d.e.cfg.PoolMaxConns),
		"ADDR=" + addr,
		"ADMIN_TOKEN=" + benchAdminToken,
		"STRIPE_API_BASE=" + d.e.stripeBase,
		"STRIPE_SECRET_KEY=sk_test_bench",
		"SMTP_URL=smtp://" + d.e.mailAddr,
	}, env...)})
	s := &servingProcess{Process: p, base: "http://" + addr, pprofBase: pprofBase}
	if err := p.Ready(context.Background(), s.base+"/readyz", time.Minute); err != nil {
		tb.Fatalf("serve: %v (see %s)", err, d.e.serveLog)
	}
	return s
}

// stop shuts the process down gracefully and waits until its database
// sessions have ended: a backend publishes its statistics as it exits, so
// pg_stat_database then counts every transaction the process committed.
func (d *deployment) stop(tb testing.TB, s *servingProcess) {
	tb.Helper()
	if err := s.Stop(time.Minute); err != nil {
		tb.Fatalf("serve: %v (see %s)", err, d.e.serveLog)
	}
	if d.pooled {
		d.e.dropServerConns(tb, d.name)
	}
	d.e.waitSessionsGone(tb, d.name)
}

// waitSessionsGone waits until no client session is connected to db.
func (e *benchEnv) waitSessionsGone(tb testing.TB, db string) {
	tb.Helper()
	binrun.WaitFor(tb, 30*time.Second, "the sessions of "+db+" to end", func() bool {
		var n int
		if err := e.admin.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'`, db).Scan(&n); err != nil {
			tb.Fatal(err)
		}
		return n == 0
	})
}

// commits returns the transactions committed in db so far. Exact when no
// session is connected to db (see deployment.stop).
func (e *benchEnv) commits(tb testing.TB, db string) int64 {
	tb.Helper()
	e.waitSessionsGone(tb, db)
	var n int64
	if err := e.admin.QueryRow(context.Background(), `SELECT xact_commit FROM pg_stat_database WHERE datname = $1`, db).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

func benchDBName(tb testing.TB, url string) string {
	tb.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	return cfg.Database
}

func benchPool(tb testing.TB, url string) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// benchExec runs one statement on its own short-lived connection, so that
// no session of the harness lingers in a measured database.
func benchExec(tb testing.TB, url, sql string, args ...any) {
	tb.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		tb.Fatal(err)
	}
}

// benchQueryRow is benchExec for a query of one row.
func benchQueryRow(tb testing.TB, url, sql string, dst ...any) {
	tb.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), sql).Scan(dst...); err != nil {
		tb.Fatal(err)
	}
}

// withPoolMaxConns sets pgxpool's pool_max_conns on a URL or a keyword/value
// connection string.
func withPoolMaxConns(url string, n int) string {
	if strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://") {
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		return url + sep + "pool_max_conns=" + strconv.Itoa(n)
	}
	return url + " pool_max_conns=" + strconv.Itoa(n)
}

// benchLog empties (or creates) the log file name in dir, which child
// processes append to, and returns its path.
func benchLog(tb testing.TB, dir, name string) string {
	tb.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// benchCreateUser creates a rider through the API and returns its API key.
func benchCreateUser(tb testing.TB, base, email string) string {
	tb.Helper()
	req, _ := http.NewRequest(http.MethodPut, base+"/users/"+email, strings.NewReader(`{"payment_source":"tok_visa"}`))
	req.Header.Set("Authorization", "Bearer "+benchAdminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var created struct {
		APIKey string `json:"api_key"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&created); err != nil || resp.StatusCode != http.StatusCreated || created.APIKey == "" {
		tb.Fatalf("PUT /users/%s: status %d, %v", email, resp.StatusCode, err)
	}
	return created.APIKey
}

// setStripeLatency makes the fake Stripe hold every charge for d (none for
// 0), through its control API.
func (e *benchEnv) setStripeLatency(tb testing.TB, d time.Duration) {
	tb.Helper()
	req, _ := http.NewRequest(http.MethodDelete, e.stripeBase+"/_fake/faults", nil)
	benchControl(tb, req)
	if d <= 0 {
		return
	}
	body, err := json.Marshal(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultLatency, Duration: d})
	if err != nil {
		tb.Fatal(err)
	}
	req, _ = http.NewRequest(http.MethodPost, e.stripeBase+"/_fake/faults", bytes.NewReader(body))
	benchControl(tb, req)
}

func benchControl(tb testing.TB, req *http.Request) {
	tb.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		tb.Fatalf("%s %s: %d %s", req.Method, req.URL, resp.StatusCode, b)
	}
}

// resetPeakRSS restarts the kernel's count of the process's peak resident
// set size (VmHWM); it reports whether it could.
func resetPeakRSS(pid int) bool {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
}

// peakRSS returns the process's peak resident set size in bytes (VmHWM), 0
// where /proc does not tell.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// scrapeMetrics reads the server's /metrics: each sample by its full name,
// labels included.
func scrapeMetrics(tb testing.TB, base string) map[string]float64 {
	tb.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+benchAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return parseMetrics(b)
}

// parseMetrics reads a Prometheus text exposition into its samples, by
// series (name and labels as written).
func parseMetrics(b []byte) map[string]float64 {
	samples := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
			samples[name] = n
		}
	}
	return samples
}

// scrapeDBCounts reads the server's database counters (service.DBCounter)
// from its /metrics.
func scrapeDBCounts(tb testing.TB, base string) service.DBCounts {
	tb.Helper()
	m := scrapeMetrics(tb, base)
	return service.DBCounts{
		RequestRoundTrips:    int64(m[`atomicrides_db_round_trips_total{path="request"}`]),
		RequestStatements:    int64(m[`atomicrides_db_statements_total{path="request"}`]),
		BackgroundRoundTrips: int64(m[`atomicrides_db_round_trips_total{path="background"}`]),
		BackgroundStatements: int64(m[`atomicrides_db_statements_total{path="background"}`]),
	}
}
