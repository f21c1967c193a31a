package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
	"github.com/atomicrides/atomicrides/internal/failpoint"
	"github.com/atomicrides/atomicrides/internal/fake/mailsink"
	"github.com/atomicrides/atomicrides/internal/pgenv"
	"github.com/atomicrides/atomicrides/service"
)

// Settings of the system under chaos: short enough that leases expire,
// the completer acts and River rescues the jobs of a killed process within
// a bounded run.
const (
	chaosAdminToken = "chaos-admin-token-0123456789abcdef0123456789"
	// chaosStripeTimeout bounds each Stripe attempt of the service; the
	// latency faults hold requests longer than that.
	chaosStripeTimeout = 600 * time.Millisecond
	// chaosLease outlasts the Stripe budget of the service (3 attempts of
	// chaosStripeTimeout, stripe-go's backoff and a margin: 4.3 s).
	chaosLease         = 5 * time.Second
	chaosCompleterIdle = 3 * time.Second
	chaosJobTimeout    = 10 * time.Second
	// chaosJobRescueAfter outlasts every job's timeout (a completion's is
	// the lease plus 10 s); River's rescuer looks every 30 s.
	chaosJobRescueAfter = 16 * time.Second
)

// chaosSystem is everything the harness runs as separate processes: a
// PostgreSQL cluster it may crash, the fake Stripe, two serve instances on
// one database; plus a mail sink in the test process.
type chaosSystem struct {
	bin    string
	logDir string
	// workDir is the working directory of every process the harness
	// starts, under the test's t.TempDir().
	workDir string
	cluster *pgenv.Cluster
	// standby is the synchronous standby of cluster (chaosDBSyncStandby).
	standby *pgenv.Cluster
	// spareDir and sparePort are where a restore of cluster starts
	// (chaosDBRestore): the second host of dbURL.
	spareDir  string
	sparePort int
	spare     *pgenv.Cluster // the backup, once taken
	// patroni is the Patroni cluster (chaosDBPatroni); cluster is nil then.
	patroni *pgenv.Patroni
	// bouncer is the PgBouncer the serve processes reach the cluster
	// through (chaosDBPgBouncer).
	bouncer *pgenv.PgBouncer
	// dbURL names every server that may be the primary, with
	// target_session_attrs=read-write: the harness's own connections.
	dbURL string
	// serveDB is the database settings of the serve processes: dbURL
	// itself, or PgBouncer's URL and dbURL as the direct one.
	serveDB []string
	stripe  string // base URL of the fake Stripe process
	// adyen is the base URL of the fake Adyen process, "" when the run
	// charges at Stripe alone; with it, serve runs with
	// PROCESSORS=stripe,adyen (processors_test.go).
	adyen   string
	sink    *mailsink.Sink
	smtpURL string
	serves  []*chaosServe
	// hooks: the webhooks and the orphan policy's window (webhooks_test.go).
	hooks *chaosWebhooks
}

// chaosDB is the shape of the PostgreSQL of a chaos run.
type chaosDB int

const (
	// chaosDBSingle is one server, restarted in place.
	chaosDBSingle chaosDB = iota
	// chaosDBSyncStandby is a primary with a synchronous streaming
	// standby, promoted when the primary dies.
	chaosDBSyncStandby
	// chaosDBRestore is a primary whose base backup, taken during the run,
	// is started in its place when it dies, on a port of its own.
	chaosDBRestore
	// chaosDBPgBouncer is one server behind PgBouncer in transaction
	// pooling mode, restarted in place.
	chaosDBPgBouncer
	// chaosDBPatroni is a Patroni cluster on one etcd member: a leader
	// and a synchronous standby, which Patroni promotes by itself.
	chaosDBPatroni
)

// chaosBouncerPoolSize is PgBouncer's server connections for the chaos
// database: fewer than the serve processes' pools hold (2 × 8), so that
// transactions of different clients share server connections.
const chaosBouncerPoolSize = 6

// startChaosSystem starts every process and waits until each answers; with
// procs, the fake Adyen too, and serve routes to both processors.
func startChaosSystem(t *testing.T, ctx context.Context, logDir string, db chaosDB, procs bool) *chaosSystem {
	t.Helper()
	// The command with failpoints compiled in.
	sys := &chaosSystem{logDir: logDir, workDir: t.TempDir(), bin: binrun.Build(t, "failpoints"),
		hooks: newChaosWebhooks(db)}

	if db == chaosDBPatroni {
		startChaosPatroni(t, ctx, sys)
	} else {
		startChaosCluster(t, ctx, sys, db)
	}

	// The fake Stripe, as its own process.
	stripeAddr := binrun.FreeAddr(t)
	sys.stripe = "http://" + stripeAddr
	stripeProc := binrun.Start(t, binrun.Cmd{Bin: sys.bin, Args: append([]string{"fakestripe", "-addr", stripeAddr}, sys.hooks.stripeArgs()...),
		Dir: sys.workDir, LogPath: filepath.Join(logDir, "fakestripe.log")})
	t.Cleanup(func() { _ = stripeProc.Stop(10 * time.Second) })
	require.NoError(t, stripeProc.Ready(ctx, sys.stripe+"/_fake/ledger", 30*time.Second))
	if procs {
		startChaosAdyen(t, ctx, sys)
	}

	// The mail sink, in this process, so that messages are counted here.
	sys.sink = mailsink.New(mailsink.Options{})
	smtpURL, stopSink, err := sys.sink.Start("127.0.0.1:0")
	require.NoError(t, err)
	sys.smtpURL = smtpURL
	t.Cleanup(func() { _ = stopSink(context.Background()) })

	for _, name := range []string{"serve-a", "serve-b"} {
		s := &chaosServe{sys: sys, name: name, addr: binrun.FreeAddr(t)}
		sys.serves = append(sys.serves, s)
		t.Cleanup(s.stop)
	}
	if procs && (db == chaosDBSingle || db == chaosDBRestore) {
		// The trips of the main and the restore runs (trips_test.go): a
		// third instance books
		// with CAPTURE=trip; the trips' completions and cancellations go to
		// every instance.
		s := &chaosServe{sys: sys, name: "serve-t", addr: binrun.FreeAddr(t), capture: service.CaptureTrip}
		sys.serves = append(sys.serves, s)
		t.Cleanup(s.stop)
	}
	sys.hooks.listen(t)
	for _, s := range sys.serves {
		require.NoError(t, s.start(ctx, ""))
	}

	// The fake's webhooks, to the instances (webhooks_test.go).
	sys.hooks.start(t, ctx, sys)
	return sys
}

// startChaosCluster starts the PostgreSQL of db, its own cluster on its
// own port, crash-safe so that committed work survives the immediate
// restarts, with its standby or PgBouncer.
func startChaosCluster(t *testing.T, ctx context.Context, sys *chaosSystem, db chaosDB) {
	t.Helper()
	pgDir := t.TempDir()
	cluster, err := pgenv.StartClusterWith(ctx, pgDir, pgenv.ClusterOptions{Port: binrun.FreePort(t), CrashSafe: true,
		Replication: db != chaosDBSingle && db != chaosDBPgBouncer})
	require.NoError(t, err)
	stopCluster(t, pgDir, func() string { return cluster.Root })
	sys.cluster = cluster
	conn, err := pgx.Connect(ctx, cluster.URL)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE DATABASE chaos")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	hosts := fmt.Sprintf("127.0.0.1:%d", cluster.Port)
	switch db {
	case chaosDBSyncStandby:
		dir := t.TempDir()
		stopCluster(t, dir, func() string {
			if sys.standby == nil {
				return ""
			}
			return sys.standby.Root
		})
		sys.standby, err = pgenv.StartStandby(ctx, dir, cluster, pgenv.StandbyOptions{Port: binrun.FreePort(t), Synchronous: true})
		require.NoError(t, err)
		hosts += fmt.Sprintf(",127.0.0.1:%d", sys.standby.Port)
	case chaosDBRestore:
		sys.spareDir, sys.sparePort = t.TempDir(), binrun.FreePort(t)
		stopCluster(t, sys.spareDir, func() string {
			if sys.spare == nil {
				return ""
			}
			return sys.spare.Root
		})
		hosts += fmt.Sprintf(",127.0.0.1:%d", sys.sparePort)
	}
	sys.dbURL = fmt.Sprintf("postgres://%s@%s/chaos?sslmode=disable&target_session_attrs=read-write", pgenv.Superuser, hosts)
	sys.serveDB = []string{"DATABASE_URL=" + sys.dbURL + "&pool_max_conns=8"}
	if db == chaosDBPgBouncer {
		dir := t.TempDir()
		sys.bouncer, err = pgenv.StartPgBouncer(ctx, dir, cluster.Port, pgenv.PgBouncerOptions{Port: binrun.FreePort(t), PoolSize: chaosBouncerPoolSize})
		require.NoError(t, err)
		t.Cleanup(func() {
			sys.bouncer.Stop()
			_ = os.RemoveAll(sys.bouncer.Root)
		})
		sys.serveDB = []string{
			"DATABASE_URL=" + sys.bouncer.URL("chaos") + "&pool_max_conns=8",
			"DATABASE_POOLER=pgbouncer",
			"DATABASE_DIRECT_URL=" + sys.dbURL,
		}
	}

}

// startChaosPatroni starts the Patroni cluster and creates the chaos
// database on its leader.
func startChaosPatroni(t *testing.T, ctx context.Context, sys *chaosSystem) {
	t.Helper()
	dir := t.TempDir()
	p, err := pgenv.StartPatroni(ctx, dir, pgenv.PatroniOptions{TTL: chaosPatroniTTL, LoopWait: time.Second,
		Ports: []int{binrun.FreePort(t), binrun.FreePort(t), binrun.FreePort(t), binrun.FreePort(t), binrun.FreePort(t), binrun.FreePort(t)}})
	require.NoError(t, err)
	sys.patroni = p
	t.Cleanup(func() {
		p.Stop()
		if !t.Failed() {
			_ = os.RemoveAll(p.Root)
		} else if sys.logDir != "" {
			// Patroni's and etcd's logs beside the processes'.
			logs, _ := filepath.Glob(filepath.Join(p.Root, "*.log"))
			for _, l := range logs {
				if b, err := os.ReadFile(l); err == nil {
					_ = os.WriteFile(filepath.Join(sys.logDir, "patroni-"+filepath.Base(l)), b, 0o644)
				}
			}
		}
	})
	conn, err := pgx.Connect(ctx, p.URL("postgres"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE DATABASE chaos")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	sys.dbURL = p.URL("chaos")
	sys.serveDB = []string{"DATABASE_URL=" + sys.dbURL + "&pool_max_conns=8"}
}

// chaosPatroniTTL is the leader key's time to live: a dead leader's key
// expires, and its standby may be promoted, that long after its last
// renewal.
const chaosPatroniTTL = 10 * time.Second

// stopCluster stops the cluster kept in dir when the test ends, and removes
// its files (root() says where they are, "" if nowhere).
func stopCluster(t *testing.T, dir string, root func() string) {
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pgenv.StopCluster(stopCtx, dir); err != nil {
			t.Errorf("stop the chaos cluster in %s: %v", dir, err)
		}
		if r := root(); r != "" {
			_ = os.RemoveAll(r)
		}
	})
}

// env is the environment of a serve process (and of the operator CLI).
func (sys *chaosSystem) env() []string {
	return append(append(append(slices.Clone(sys.serveDB), sys.processorEnv()...),
		"ADMIN_TOKEN="+chaosAdminToken,
		"STRIPE_API_BASE="+sys.stripe,
		"STRIPE_SECRET_KEY=sk_test_chaos",
		"STRIPE_TIMEOUT="+chaosStripeTimeout.String(),
		"LEASE="+chaosLease.String(),
		"SMTP_URL="+sys.smtpURL,
		"COMPLETER_INTERVAL=1s",
		// Trips (trips_test.go): the dispatch side's token, and holds
		// released within the run.
		"DISPATCH_TOKEN="+chaosDispatchToken,
		"HOLD_EXPIRY="+chaosHoldExpiry.String(),
		"ACTION_DEADLINE="+chaosActionDeadline,
		"COMPLETER_IDLE="+chaosCompleterIdle.String(),
		"JOB_TIMEOUT="+chaosJobTimeout.String(),
		"JOB_RESCUE_AFTER="+chaosJobRescueAfter.String(),
		// The chaos checks exactly-once under faults, not admission
		// control: its clients run at full speed with few riders.
		"RATE_LIMIT_WRITES=off", "RATE_LIMIT_READS=off", "RATE_LIMIT_IN_FLIGHT=off", "LOAD_SHED_IN_FLIGHT=off",
	), sys.hooks.env()...) // webhooks_test.go
}

// bases returns the base URLs of the serve instances that book with the
// default capture (CAPTURE=booking), as a load balancer without health
// checks would know them.
func (sys *chaosSystem) bases() []string {
	var out []string
	for _, s := range sys.serves {
		if s.capture == "" {
			out = append(out, "http://"+s.addr)
		}
	}
	return out
}

// tripBases returns the base URLs of the instances that book trips
// (CAPTURE=trip): none when the run has no trips.
func (sys *chaosSystem) tripBases() []string {
	var out []string
	for _, s := range sys.serves {
		if s.capture == service.CaptureTrip {
			out = append(out, "http://"+s.addr)
		}
	}
	return out
}

// chaosServe is one serve instance: a process that the harness kills,
// arms with a failpoint and restarts on the same address.
type chaosServe struct {
	sys  *chaosSystem
	name string
	addr string
	// capture is the instance's CAPTURE: "" (booking) or trip.
	capture service.Capture

	mu      sync.Mutex
	proc    *binrun.Process // the current process; nil before the first start
	logPath string
	starts  int
}

// start starts the instance with the failpoints of spec armed (none if
// empty; see package failpoint) and waits until it is ready. A start that fails (the database restarting, say)
// is tried again, a bounded number of times.
func (s *chaosServe) start(ctx context.Context, spec string) error {
	var last error
	for attempt := 1; attempt <= 10; attempt++ {
		if last = s.startOnce(ctx, spec); last == nil {
			return nil
		}
		if ctx.Err() != nil {
			return last
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not start: %w", s.name, last)
}

func (s *chaosServe) startOnce(ctx context.Context, spec string) error {
	s.mu.Lock()
	s.starts++
	logPath := filepath.Join(s.sys.logDir, fmt.Sprintf("%s.%02d.log", s.name, s.starts))
	env := append(s.sys.env(), "ADDR="+s.addr)
	if s.capture != "" {
		env = append(env, "CAPTURE="+string(s.capture))
	}
	if spec != "" {
		env = append(env, failpoint.EnvVar+"="+spec)
	}
	proc, err := binrun.Cmd{Bin: s.sys.bin, Args: []string{"serve"}, Env: env, Dir: s.sys.workDir, LogPath: logPath}.Start()
	if err != nil {
		s.mu.Unlock()
		return err
	}
	s.proc, s.logPath = proc, logPath
	s.mu.Unlock()

	if err := proc.Ready(ctx, "http://"+s.addr+"/readyz", 60*time.Second); err != nil {
		s.kill()
		return fmt.Errorf("%s did not get ready (see %s): %w", s.name, logPath, err)
	}
	return nil
}

// exited returns a channel closed when the current process exits.
func (s *chaosServe) exited() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc.Done()
}

// kill sends SIGKILL to the current process and waits for it to exit.
func (s *chaosServe) kill() {
	s.mu.Lock()
	proc := s.proc
	s.mu.Unlock()
	if proc != nil {
		proc.Kill()
	}
}

// stop ends the instance gracefully (SIGTERM), or kills it after a while.
func (s *chaosServe) stop() {
	s.mu.Lock()
	proc := s.proc
	s.mu.Unlock()
	if proc != nil {
		_ = proc.Stop(30 * time.Second)
	}
}

// crashedAt reports whether the current process (exited) crashed at the
// named failpoint, from the line the failpoint writes before SIGKILL.
func (s *chaosServe) crashedAt(point string) bool {
	s.mu.Lock()
	path := s.logPath
	s.mu.Unlock()
	b, err := os.ReadFile(path)
	return err == nil && bytes.Contains(b, []byte("failpoint "+point+": crash"))
}

// stripeLedger reads the fake Stripe's ledger. Its refunds are the ones
// that returned money: the refund by which Stripe shows a hold released
// (release) took none back, and is no refund to any check.
func (sys *chaosSystem) stripeLedger(ctx context.Context) (*chaosLedger, error) {
	var l chaosLedger
	if err := sys.stripeControl(ctx, http.MethodGet, "ledger", nil, &l); err != nil {
		return &l, err
	}
	refunds := l.Refunds[:0]
	for _, r := range l.Refunds {
		if !r.Release {
			refunds = append(refunds, r)
		}
	}
	l.Refunds = refunds
	return &l, nil
}

// stripeFaultsLeft returns how many injected faults are still active.
func (sys *chaosSystem) stripeFaultsLeft(ctx context.Context) (int, error) {
	var out struct {
		Faults []json.RawMessage `json:"faults"`
	}
	err := sys.stripeControl(ctx, http.MethodGet, "faults", nil, &out)
	return len(out.Faults), err
}

// stripeControl calls the fake Stripe's control API.
func (sys *chaosSystem) stripeControl(ctx context.Context, method, path string, in, out any) error {
	return fakeControl(ctx, "fake Stripe", sys.stripe, method, path, in, out)
}

// fakeControl calls the control API (under /_fake/) of the fake called
// name at base.
func fakeControl(ctx context.Context, name, base, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+"/_fake/"+path, body)
	if err != nil {
		return err
	}
	resp, err := chaosHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s %s: %d %s", name, method, path, resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

// chaosLedger is the part of the fake Stripe's ledger the checks read.
type chaosLedger struct {
	Customers []struct {
		ID       string            `json:"id"`
		Metadata map[string]string `json:"metadata"`
	} `json:"customers"`
	Charges []struct {
		ID       string            `json:"id"`
		Status   string            `json:"status"`
		Metadata map[string]string `json:"metadata"`
		Refunded bool              `json:"refunded"` // webhooks_test.go
		// Amount and Uncaptured: trips_checks_test.go.
		Amount     int64 `json:"amount"`
		Uncaptured bool  `json:"uncaptured"`
	} `json:"charges"`
	// PaymentIntents: the trips' holds (capture_method manual) and what
	// was captured of them (trips_checks_test.go).
	PaymentIntents []struct {
		ID               string            `json:"id"`
		Amount           int64             `json:"amount"`
		AmountCapturable int64             `json:"amount_capturable"`
		AmountReceived   int64             `json:"amount_received"`
		Status           string            `json:"status"`
		CaptureMethod    string            `json:"capture_method"`
		LatestCharge     string            `json:"latest_charge"`
		Metadata         map[string]string `json:"metadata"`
	} `json:"payment_intents"`
	Refunds []struct {
		ID     string `json:"id"`
		Charge string `json:"charge"`
		Status string `json:"status"` // webhooks_test.go
		// Release: Stripe's own refund that shows a hold released.
		Release bool `json:"release"`
	} `json:"refunds"`
	// Disputes: webhooks_test.go.
	Disputes []struct {
		ID     string `json:"id"`
		Charge string `json:"charge"`
		Status string `json:"status"`
	} `json:"disputes"`
	Requests []struct {
		Op      string `json:"op"`
		Status  int    `json:"status"`
		Dropped bool   `json:"dropped"`
		Fault   string `json:"fault"`
		Outage  bool   `json:"outage"`
	} `json:"requests"`
}

// operatorKeys runs the operator CLI of the binary, `keys list -dead -json`,
// and returns the ids of the keys it lists.
func (sys *chaosSystem) operatorKeys(ctx context.Context) (map[int64]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := binrun.Cmd{Bin: sys.bin, Args: []string{"keys", "list", "-dead", "-json", "-limit", "10000"},
		Env: sys.env(), Dir: sys.workDir}.Run(ctx)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit code %d", res.ExitCode)
	}
	if err != nil {
		return nil, fmt.Errorf("keys list -dead: %w\n%s", err, res.Stderr)
	}
	var keys []struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &keys); err != nil {
		return nil, fmt.Errorf("keys list -dead: %w\n%s", err, res.Stdout)
	}
	ids := map[int64]bool{}
	for _, k := range keys {
		ids[k.ID] = true
	}
	return ids, nil
}

// chaosHTTP is the harness's own client for control calls; riders have
// their own (chaosRider).
var chaosHTTP = &http.Client{Timeout: 10 * time.Second}
