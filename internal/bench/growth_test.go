package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/internal/binrun"
)

// growthRun is what the benchmark measured on tables holding a retention's
// worth of finished keys, against the same measurements on empty tables.
type growthRun struct {
	// Keys is how many finished keys (each with its ride and audit
	// record) were loaded, spread over the retention; Load how long the
	// load took.
	Keys int
	Load time.Duration
	// New and FirstReplay are new rides and first replays at the judged
	// concurrency on the grown tables.
	New, FirstReplay loadRun
	// Reaping is new rides while a reaper pass deletes the oldest day's
	// keys; Reaped is how many keys it deleted during the run, and
	// ReapedPerSec its rate.
	Reaping      loadRun
	Reaped       int64
	ReapedPerSec float64
	// ReapedTotal is how many keys the pass had deleted when the run
	// ended (a small load finishes its pass before the run starts).
	ReapedTotal int64
	// List is what a page of GET /rides costs on the grown tables, at the
	// first page and deep in a rider's list.
	List *listCost
}

// growthRetention is the retention the grown tables span; growthReapTo is
// the retention of the reaper pass: it deletes the keys between the two.
const (
	growthSpan   = 71 * time.Hour // a little under the 72 h retention: no key expires during the run
	growthReapTo = 48 * time.Hour
)

// measureGrowth loads keys finished keys with their rides and audit records
// into a deployment of its own, with SQL, spread over 71 hours at a steady
// rate (10 million: 72 h at about 40 rides/s); then measures new rides and
// first replays at clients, and new rides again while a reaper pass (the
// serve process started with a retention of 48 hours) deletes the oldest
// day's keys.
func (e *benchEnv) measureGrowth(tb testing.TB, keys, clients int) *growthRun {
	tb.Helper()
	g := &growthRun{Keys: keys}
	d := e.newDeployment(tb)
	start := time.Now()
	loadGrownKeys(tb, d.url, keys)
	d.grown = true
	g.Load = time.Since(start)
	tb.Logf("growth: %d finished keys, rides and audit records loaded in %s", keys, g.Load.Round(time.Second))
	g.List = measureListCost(tb, d.url)

	g.New = e.serviceRides(tb, d, clients, 0, "grown")
	once := func(client, n int) string {
		if ks := g.New.finished[client]; n < len(ks) {
			return ks[n]
		}
		return ""
	}
	g.FirstReplay = e.serviceRun(tb, d, 0, loadSpec{}, loadSpec{clients: clients, key: once, replay: true})

	// The reaper runs when the process starts: it is deleting before the
	// warm-up ends.
	srv := d.startEnv(tb, "KEY_RETENTION="+growthReapTo.String())
	binrun.WaitFor(tb, time.Minute, "the reaper's first deletions", func() bool {
		return scrapeCounter(tb, srv.base, "atomicrides_reaper_deleted_keys_total") > 0
	})
	key := func(client, n int) string { return fmt.Sprintf("bench-reaping-c%04d-w%04d-n%09d", clients, client, n) }
	warm := runLoad(context.Background(), loadSpec{base: srv.base, clients: clients, duration: e.cfg.Warmup, apiKeys: d.apiKeys,
		key: func(client, n int) string { return "warm-" + key(client, n) }})
	if warm.OK == 0 {
		tb.Fatalf("warm-up while reaping got no answer it wanted: %v", warm.ErrorSample)
	}
	before := scrapeCounter(tb, srv.base, "atomicrides_reaper_deleted_keys_total")
	cpu := startCPU(e.admin, d.name, srv.Pid(), e.stripe.Pid(), e.mail.Pid())
	g.Reaping = runLoad(context.Background(), loadSpec{base: srv.base, clients: clients, duration: e.cfg.Duration, apiKeys: d.apiKeys, key: key})
	g.Reaping.CPU, _ = cpu.finish(g.Reaping.OK)
	after := scrapeCounter(tb, srv.base, "atomicrides_reaper_deleted_keys_total")
	g.Reaped, g.ReapedTotal = int64(after-before), int64(after)
	g.ReapedPerSec = float64(g.Reaped) / g.Reaping.Elapsed.Seconds()
	// The pass goes on after the run: the process is killed, not stopped,
	// and the rest of the pass is of no interest.
	srv.Kill()
	e.waitSessionsGone(tb, d.name)
	var left int64
	benchQueryRow(tb, d.url, `SELECT count(*) FROM idempotency_keys`, &left)
	tb.Logf("growth: the reaper deleted %d keys in %s (%.0f keys/s); %d keys left", g.Reaped, g.Reaping.Elapsed.Round(time.Millisecond), g.ReapedPerSec, left)
	return g
}

// loadGrownKeys inserts n finished ride keys, each with its charged ride and
// its audit record, created at a steady rate over growthSpan up to now, in
// chunks, then vacuums and analyses the tables, as a database in its
// steady state would be.
func loadGrownKeys(tb testing.TB, url string, n int) {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(ctx)
	const chunk = 250_000
	for lo := 1; lo <= n; lo += chunk {
		hi := min(n, lo+chunk-1)
		if _, err := conn.Exec(ctx, growSQL, lo, hi, n, growthSpan.Seconds()); err != nil {
			tb.Fatalf("load keys %d–%d: %v", lo, hi, err)
		}
	}
	for _, table := range []string{"idempotency_keys", "rides", "audit_records"} {
		if _, err := conn.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
			tb.Fatal(err)
		}
	}
}

// growSQL inserts the keys $1..$2 of $3, spread over $4 seconds up to now,
// riders taken in turn, with their rides and audit records, in one
// statement.
var growSQL = strings.TrimSpace(`
WITH riders AS (SELECT array_agg(id ORDER BY id) AS ids FROM users WHERE role = 'rider'),
k AS (
    INSERT INTO idempotency_keys (
        created_at, idempotency_key, last_run_at, flow, request_method, request_path,
        request_params, request_fingerprint, request_ip, recovery_point, response_code, response_body, user_id
    )
    SELECT ts, 'grown-' || i, ts, 'ride.create', 'POST', '/rides',
        '{"origin_lat": 37.7749, "origin_lon": -122.4194, "target_lat": 37.8044, "target_lon": -122.2712}',
        sha256(convert_to('grown-' || i, 'UTF8')), '127.0.0.1', 'finished', 201,
        convert_to('{"id":' || i || ',"created_at":"2026-01-01T00:00:00Z","origin_lat":37.7749,"origin_lon":-122.4194,"target_lat":37.8044,"target_lon":-122.2712,"amount_cents":2000,"currency":"usd","charge_status":"charged","stripe_charge_id":"ch_grown_' || i || '","refund_status":"none","stripe_refund_id":null}', 'UTF8'),
        riders.ids[1 + i % cardinality(riders.ids)]
    FROM generate_series($1::bigint, $2::bigint) AS i, riders,
        LATERAL (SELECT now() - make_interval(secs => $4::float8 * (1 - i::float8 / $3::float8)) AS ts) AS t
    RETURNING id, created_at, user_id
),
r AS (
    INSERT INTO rides (
        id, created_at, idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon,
        charge_status, stripe_charge_id, amount_cents, currency, user_id, payment_source
    )
    -- Ids as random_id() (migration 0012) would have drawn them when the
    -- ride was booked, their low bits from the key's sequential id: a
    -- statement inserting thousands of rows a millisecond would see its
    -- own random draws meet.
    SELECT (floor(extract(epoch FROM created_at) * 1000)::bigint - 1767225600000) * 4096 + id % 4096,
        created_at, id, 37.7749, -122.4194, 37.8044, -122.2712, 'charged', 'ch_grown_' || id, 2000, 'usd', user_id, 'tok_visa' FROM k
    RETURNING id, created_at, user_id
)
INSERT INTO audit_records (created_at, action, data, origin_ip, resource_id, resource_type, user_id)
SELECT created_at, 'ride.created',
    '{"origin_lat": 37.7749, "origin_lon": -122.4194, "target_lat": 37.8044, "target_lon": -122.2712}',
    '127.0.0.1', id, 'ride', user_id
FROM r`)

// scrapeCounter reads one sample of the server's /metrics (its full name,
// labels included), 0 when absent.
func scrapeCounter(tb testing.TB, base, name string) float64 {
	tb.Helper()
	return scrapeMetrics(tb, base)[name]
}
