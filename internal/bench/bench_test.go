package bench

import (
	"bytes"
	"flag"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
)

// TestMain builds the binary once for the benchmark and the tests, and
// removes it when they end.
func TestMain(m *testing.M) { binrun.Main(m) }

// Flags of BenchmarkRides (go tool task bench -- -rides.clients 1,32 …).
var (
	benchClients       = flag.String("rides.clients", "1,8,32,128,256", "client concurrencies of the sweep, comma-separated")
	benchDuration      = flag.Duration("rides.duration", 5*time.Second, "length of each measurement (rounded up to whole seconds)")
	benchWarmup        = flag.Duration("rides.warmup", time.Second, "warm-up before each measurement of the service")
	benchStripeLatency = flag.Duration("rides.stripe-latency", 200*time.Millisecond, "fake Stripe latency of the latency series (0: leave it out)")
	benchPoolSize      = flag.Int("rides.pool", 16, "the service's pool_max_conns")
	benchUsers         = flag.Int("rides.users", 16, "riders sharing the load")
	benchPgbenchMax    = flag.Int("rides.pgbench-max-clients", 64, "most pgbench connections")
	benchSeedBackoff   = flag.Duration("rides.seed-backoff", 200*time.Millisecond, "the seed's longest jittered pause before a retry")
	benchGrowKeys      = flag.Int("rides.grow-keys", 10_000_000, "finished keys loaded for the cost-as-the-data-grows measurement, at 32 clients (0: leave it out)")
	benchOut           = flag.String("rides.out", ".bench", "directory of the report, the plot and the logs (relative: to the module root)")
	benchCPUProfile    = flag.Bool("rides.cpuprofile", false, "profile the server's CPU over each measured run into cpu-*.pprof in -rides.out (go tool task pgo merges them into default.pgo)")
)

func benchConfigFromFlags(tb testing.TB) benchConfig {
	tb.Helper()
	var clients []int
	for _, f := range strings.Split(*benchClients, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 1 {
			tb.Fatalf("-rides.clients: %q is not a positive number", f)
		}
		clients = append(clients, c)
	}
	out := *benchOut
	if !filepath.IsAbs(out) {
		root, err := binrun.ModuleRoot()
		if err != nil {
			tb.Fatal(err)
		}
		out = filepath.Join(root, out)
	}
	return benchConfig{
		Clients:           clients,
		Duration:          wholeSeconds(*benchDuration),
		Warmup:            *benchWarmup,
		StripeLatency:     *benchStripeLatency,
		PoolMaxConns:      *benchPoolSize,
		Users:             *benchUsers,
		PgbenchMaxClients: *benchPgbenchMax,
		SeedMaxTries:      1000,
		SeedBackoff:       *benchSeedBackoff,
		GrowKeys:          *benchGrowKeys,
		OutDir:            out,
		CPUProfile:        *benchCPUProfile,
	}
}

func wholeSeconds(d time.Duration) time.Duration {
	return max(time.Second, (d+time.Second-1)/time.Second*time.Second)
}

// BenchmarkRides measures the service as its users feel it, against two
// baselines run by pgbench on the same PostgreSQL in the same run: the floor
// (the least SQL a ride needs, two commits) and the seed's design (four
// SERIALIZABLE phases). At each concurrency of the sweep it measures new
// rides, replays of finished keys, trips (book and complete, against the
// floor of a trip) and new rides with Stripe latency; then
// it writes report.md, results.json and throughput.png (see -rides.out).
// Run it with -benchtime 1x: each measurement lasts -rides.duration.
func BenchmarkRides(b *testing.B) {
	cfg := benchConfigFromFlags(b)
	e := newBenchEnv(b, cfg)
	var points []*benchPoint
	for _, c := range cfg.Clients {
		p := &benchPoint{Clients: c}
		points = append(points, p)
		b.Run(fmt.Sprintf("clients=%d", c), func(b *testing.B) {
			b.Run("new", func(b *testing.B) {
				e.measureNew(b, p)
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(p.New.PerSec(), "rides/s")
				b.ReportMetric(msf(p.New.P50), "p50-ms")
				b.ReportMetric(msf(p.New.P99), "p99-ms")
				b.ReportMetric(float64(p.New.Errors), "errors")
				b.ReportMetric(float64(p.New.Conflicts), "409s")
				b.ReportMetric(p.New.CommitsPerOK, "commits/ride")
				b.ReportMetric(float64(p.New.PeakRSS)/mib, "rss-MB")
				b.ReportMetric(p.Floor.TPS, "floor-rides/s")
				b.ReportMetric(p.FloorReceipt.TPS, "floor-receipt-rides/s")
				b.ReportMetric(float64(p.New.CPU.Postgres)/1e6, "pg-cpu-ms/ride")
				b.ReportMetric(float64(p.New.CPU.Server)/1e6, "server-cpu-ms/ride")
				b.ReportMetric(float64(p.FloorReceipt.CPU.Postgres)/1e6, "floor-receipt-pg-cpu-ms/ride")
				b.ReportMetric(p.New.RoundTrips, "round-trips/ride")
				b.ReportMetric(p.Seed.TPS, "seed-rides/s")
				b.ReportMetric(p.SeedNow.TPS, "seed-now-rides/s")
				b.ReportMetric(p.SQL.TPS, "sql-rides/s")
				b.ReportMetric(ratio(p.New.PerSec(), p.Floor.TPS), "x-floor")
				b.ReportMetric(ratio(p.New.PerSec(), p.bestSeed()), "x-seed")
			})
			b.Run("pgbouncer", func(b *testing.B) {
				e.measurePooled(b, p)
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(p.Pooled.PerSec(), "rides/s")
				b.ReportMetric(msf(p.Pooled.P50), "p50-ms")
				b.ReportMetric(msf(p.Pooled.P99), "p99-ms")
				b.ReportMetric(float64(p.Pooled.Errors), "errors")
				b.ReportMetric(ratio(p.Pooled.PerSec(), p.New.PerSec()), "x-direct")
				b.ReportMetric(float64(p.Pooled.CPU.Postgres)/1e6, "pg-cpu-ms/ride")
				b.ReportMetric(float64(p.Pooled.CPU.Server)/1e6, "server-cpu-ms/ride")
			})
			b.Run("replay", func(b *testing.B) {
				e.measureReplay(b, p)
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(p.Replay.PerSec(), "replays/s")
				b.ReportMetric(msf(p.Replay.P50), "p50-ms")
				b.ReportMetric(msf(p.Replay.P99), "p99-ms")
				b.ReportMetric(float64(p.Replay.Errors), "errors")
				b.ReportMetric(p.Select.TPS, "select/s")
				b.ReportMetric(p.Replay.CommitsPerOK, "commits/replay")
				b.ReportMetric(ratio(p.Replay.PerSec(), p.Select.TPS), "x-select")
				b.ReportMetric(p.Healthz.PerSec(), "healthz/s")
				b.ReportMetric(p.FirstReplay.PerSec(), "first-replays/s")
			})
			b.Run("trip", func(b *testing.B) {
				e.measureTrip(b, p)
				reportTrip(b, p)
			})
			if cfg.StripeLatency > 0 {
				b.Run("stripe="+cfg.StripeLatency.String(), func(b *testing.B) {
					e.measureSlow(b, p)
					b.ReportMetric(0, "ns/op")
					b.ReportMetric(p.Slow.PerSec(), "rides/s")
					b.ReportMetric(msf(p.Slow.P50), "p50-ms")
					b.ReportMetric(msf(p.Slow.P99), "p99-ms")
					b.ReportMetric(float64(p.Slow.Errors), "errors")
					b.ReportMetric(float64(p.Slow.Conflicts), "409s")
					b.ReportMetric(ratio(p.Slow.PerSec(), bound(c, cfg.StripeLatency)), "x-bound")
					b.ReportMetric(float64(p.Slow.PeakRSS)/mib, "rss-MB")
				})
			}
		})
	}
	var growth *growthRun
	if cfg.GrowKeys > 0 && pointAt(points, targetClients) != nil {
		b.Run("growth", func(b *testing.B) {
			growth = e.measureGrowth(b, cfg.GrowKeys, targetClients)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(growth.New.PerSec(), "rides/s")
			b.ReportMetric(growth.FirstReplay.PerSec(), "first-replays/s")
			b.ReportMetric(msf(growth.Reaping.P99), "reaping-p99-ms")
			b.ReportMetric(growth.ReapedPerSec, "reaped-keys/s")
		})
	}
	if err := writeBenchReport(cfg.OutDir, e.info(), cfg, points, growth); err != nil {
		b.Fatal(err)
	}
	for _, t := range benchTargets(cfg, points, growth) {
		b.Logf("target %s: judged=%v met=%v: %s", t.Name, t.Judged, t.Met, t.Got)
	}
	e.benchLimits(b, cfg) // the noisy-neighbour and overload runs (limits_test.go)
	b.Logf("report: %s", filepath.Join(cfg.OutDir, "report.md"))
}

// reportTrip reports the trip's metrics of p.
func reportTrip(b *testing.B, p *benchPoint) {
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(p.Trip.PerSec(), "trips/s")
	b.ReportMetric(msf(p.Trip.P50), "p50-ms")
	b.ReportMetric(msf(p.Trip.P99), "p99-ms")
	b.ReportMetric(float64(p.Trip.Errors), "errors")
	b.ReportMetric(float64(p.Trip.Conflicts), "409s")
	b.ReportMetric(p.Trip.CommitsPerOK, "commits/trip")
	b.ReportMetric(p.FloorTrip.TPS, "floor-trips/s")
	b.ReportMetric(p.FloorTrip.CommitsPerRun, "floor-commits/trip")
	b.ReportMetric(ratio(p.Trip.PerSec(), p.FloorTrip.TPS), "x-trip-floor")
	b.ReportMetric(msf(p.Trip.CPU.Postgres), "pg-cpu-ms/trip")
	b.ReportMetric(msf(p.Trip.CPU.Server), "server-cpu-ms/trip")
	b.ReportMetric(msf(p.Trip.CPU.Stripe), "stripe-cpu-ms/trip")
	b.ReportMetric(msf(p.Trip.CPU.Mail), "mail-cpu-ms/trip")
	b.ReportMetric(msf(p.Trip.CPU.Load), "load-cpu-ms/trip")
	b.ReportMetric(msf(p.Trip.CPU.Total()), "total-cpu-ms/trip")
	b.ReportMetric(msf(p.FloorTrip.CPU.Postgres), "floor-pg-cpu-ms/trip")
	b.ReportMetric(msf(p.FloorTrip.CPU.Total()), "floor-total-cpu-ms/trip")
	b.ReportMetric(p.Trip.RoundTrips, "round-trips/trip")
	b.ReportMetric(p.Trip.Statements, "statements/trip")
}

// BenchmarkTrips measures trips alone (CAPTURE=trip: a booking holds the
// fare, the dispatch side's completion captures it) against the floor of a
// trip (floor_trip.sql, run by pgbench in the same run), at each
// concurrency of -rides.clients, and writes report-trips.md (the trips'
// table and target) to -rides.out. BenchmarkRides measures them too, among
// everything else; this one is the quick way to measure trips alone:
//
//	go test -run '^$' -bench '^BenchmarkTrips$' -benchtime 1x ./internal/bench -args -rides.clients 32
func BenchmarkTrips(b *testing.B) {
	cfg := benchConfigFromFlags(b)
	e := newBenchEnv(b, cfg)
	var points []*benchPoint
	for _, c := range cfg.Clients {
		p := &benchPoint{Clients: c}
		points = append(points, p)
		b.Run(fmt.Sprintf("clients=%d/trip", c), func(b *testing.B) {
			e.measureTrip(b, p)
			reportTrip(b, p)
		})
	}
	if err := writeTripReport(cfg.OutDir, e.info(), cfg, points); err != nil {
		b.Fatal(err)
	}
	t := tripTarget(points)
	b.Logf("target %s: judged=%v met=%v: %s", t.Name, t.Judged, t.Met, t.Got)
	b.Logf("report: %s", filepath.Join(cfg.OutDir, "report-trips.md"))
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// TestBenchSmoke runs the whole benchmark harness at one small concurrency
// for a second per measurement, so that it cannot rot. It asserts that the
// harness measured something and wrote its report, nothing about speed.
func TestBenchSmoke(t *testing.T) {
	t.Parallel()
	cfg := benchConfig{
		Clients:           []int{3},
		Duration:          time.Second,
		Warmup:            200 * time.Millisecond,
		StripeLatency:     20 * time.Millisecond,
		PoolMaxConns:      4,
		Users:             2,
		PgbenchMaxClients: 3,
		SeedMaxTries:      1000,
		SeedBackoff:       10 * time.Millisecond,
		GrowKeys:          30_000,
		OutDir:            t.TempDir(),
	}
	e := newBenchEnv(t, cfg)
	p := &benchPoint{Clients: 3}
	e.measureNew(t, p)
	e.measurePooled(t, p)
	e.measureReplay(t, p)
	e.measureSlow(t, p)
	e.measureTrip(t, p)

	require.Positive(t, p.New.OK, "new rides: %v", p.New.ErrorSample)
	require.Zero(t, p.New.Errors, "new rides: %v", p.New.ErrorSample)
	require.Zero(t, p.New.Conflicts)
	require.Positive(t, p.New.CommitsPerOK)
	require.Positive(t, p.Pooled.OK, "new rides through PgBouncer: %v", p.Pooled.ErrorSample)
	require.Zero(t, p.Pooled.Errors, "new rides through PgBouncer: %v", p.Pooled.ErrorSample)
	require.Positive(t, p.Pooled.CPU.Postgres, "new rides through PgBouncer: PostgreSQL CPU per ride")
	require.Positive(t, p.Replay.CommitsPerOK)
	require.Positive(t, p.Replay.OK, "replays: %v", p.Replay.ErrorSample)
	require.Zero(t, p.Replay.Errors, "replays: %v", p.Replay.ErrorSample)
	require.Positive(t, p.Healthz.OK, "GET /healthz: %v", p.Healthz.ErrorSample)
	require.Positive(t, p.FirstReplay.OK, "first replays: %v", p.FirstReplay.ErrorSample)
	require.Zero(t, p.FirstReplay.Errors, "first replays: %v", p.FirstReplay.ErrorSample)
	require.Positive(t, p.Slow.OK, "rides with Stripe latency: %v", p.Slow.ErrorSample)
	require.GreaterOrEqual(t, p.Slow.P50, cfg.StripeLatency, "the fake Stripe's latency was not applied")
	for name, r := range map[string]pgbenchRun{"floor": p.Floor, "floor with receipt": p.FloorReceipt, "floor of a trip": p.FloorTrip, "seed": p.Seed, "seed retrying at once": p.SeedNow, "service's SQL": p.SQL, "select": p.Select} {
		require.Positive(t, r.TPS, name)
		require.Positive(t, r.Done, name)
		require.Positive(t, r.CPU.Postgres, "%s: PostgreSQL CPU per run", name)
		require.Positive(t, r.CPU.Load, "%s: pgbench's CPU per run", name)
	}
	require.InDelta(t, 2, p.Floor.CommitsPerRun, 0.5, "the floor commits twice per ride")
	require.InDelta(t, 4, p.FloorReceipt.CommitsPerRun, 0.5, "the floor with its receipt commits four times per ride")
	require.InDelta(t, 4, p.FloorTrip.CommitsPerRun, 0.5, "the floor of a trip commits four times per trip")
	require.Zero(t, p.FloorTrip.Failed, "the floor of a trip")

	// Where the CPU went, process by process, and what the server sent to
	// the database.
	for name, r := range map[string]loadRun{"new rides": p.New, "rides with Stripe latency": p.Slow, "trips": p.Trip} {
		require.Positive(t, r.CPU.Postgres, "%s: PostgreSQL CPU per ride", name)
		require.Positive(t, r.CPU.Server, "%s: the server's CPU per ride", name)
		require.Positive(t, r.CPU.Stripe, "%s: the fake Stripe's CPU per ride", name)
		require.Positive(t, r.CPU.Load, "%s: the load generator's CPU per ride", name)
		require.Positive(t, r.RoundTrips, "%s: round trips per ride", name)
		require.Positive(t, r.Statements, "%s: statements per ride", name)
	}
	require.Positive(t, p.Replay.CPU.Server, "replays: the server's CPU")
	require.Positive(t, p.FirstReplay.RoundTrips, "first replays reach the database")
	require.InDelta(t, 2, p.SQL.CommitsPerRun, 0.5, "the service's SQL commits twice per ride")

	// What the rides left behind is whole: every finished key has its
	// charged ride and its receipt job.
	var finished, charged, receipts int
	benchQueryRow(t, p.dep.url, `
		SELECT (SELECT count(*) FROM idempotency_keys WHERE recovery_point = 'finished'),
		       (SELECT count(*) FROM rides WHERE charge_status = 'charged'),
		       (SELECT count(*) FROM river_job WHERE kind = 'ride_receipt')`, &finished, &charged, &receipts)
	require.GreaterOrEqual(t, finished, p.New.OK)
	require.Equal(t, finished, charged)
	require.Equal(t, finished, receipts)

	// Trips: each booked, then completed with its fare captured, under two
	// keys, every request answered as wanted; what they left behind is
	// whole: every ride completed, with its capture and its receipt job, and
	// none left holding.
	require.Positive(t, p.Trip.OK, "trips: %v", p.Trip.ErrorSample)
	require.Zero(t, p.Trip.Errors, "trips: %v", p.Trip.ErrorSample)
	require.Zero(t, p.Trip.Conflicts, "trips")
	require.Positive(t, p.Trip.CommitsPerOK, "trips: commits per trip")
	var keys, completed, captured, holding int
	benchQueryRow(t, p.tripDep.url, `
		SELECT (SELECT count(*) FROM idempotency_keys WHERE recovery_point = 'finished'),
		       (SELECT count(*) FROM rides WHERE capture = 'trip' AND charge_status = 'completed'),
		       (SELECT count(*) FROM rides WHERE charge_status = 'completed' AND captured_cents = `+strconv.Itoa(benchTripFare)+`
		            AND EXISTS (SELECT 1 FROM river_job j WHERE j.kind = 'ride_receipt' AND (j.args->>'ride_id')::bigint = rides.id)),
		       (SELECT count(*) FROM rides WHERE charge_status <> 'completed')`, &keys, &completed, &captured, &holding)
	require.GreaterOrEqual(t, completed, p.Trip.OK)
	require.Equal(t, 2*completed, keys, "a booking's key and a completion's per trip")
	require.Equal(t, completed, captured, "every completed trip has its fare captured and its receipt job")
	require.Zero(t, holding, "no ride is left holding or capturing")

	// A few thousand finished keys stand for the millions of the full run.
	growth := e.measureGrowth(t, cfg.GrowKeys, 3)
	require.Positive(t, growth.New.OK, "new rides on grown tables: %v", growth.New.ErrorSample)
	require.Zero(t, growth.New.Errors, "new rides on grown tables: %v", growth.New.ErrorSample)
	require.Positive(t, growth.FirstReplay.OK, "first replays on grown tables: %v", growth.FirstReplay.ErrorSample)
	require.Positive(t, growth.Reaping.OK, "new rides while reaping: %v", growth.Reaping.ErrorSample)
	require.Positive(t, growth.ReapedTotal, "the reaper's pass deleted keys")
	require.NotNil(t, growth.List)
	require.Positive(t, growth.List.Depth, "the deep page is deep")
	require.Positive(t, growth.List.First)
	require.Positive(t, growth.List.Deep)

	require.NoError(t, writeBenchReport(cfg.OutDir, e.info(), cfg, []*benchPoint{p}, growth))
	report, err := os.ReadFile(filepath.Join(cfg.OutDir, "report.md"))
	require.NoError(t, err)
	require.Contains(t, string(report), "| 3 |")
	require.Contains(t, string(report), "## Targets")
	require.Contains(t, string(report), "## New rides through PgBouncer")
	require.Contains(t, string(report), "## Where the CPU goes")
	require.Contains(t, string(report), "## Trips")
	require.Contains(t, string(report), "trips ≥ 0.80 × the floor of a trip")
	require.Contains(t, string(report), "## Cost as the data grows")
	require.Contains(t, string(report), "A page of `GET /rides`")
	img, err := os.ReadFile(filepath.Join(cfg.OutDir, "throughput.png"))
	require.NoError(t, err)
	decoded, err := png.Decode(bytes.NewReader(img))
	require.NoError(t, err)
	require.Equal(t, plotW, decoded.Bounds().Dx())
	require.FileExists(t, filepath.Join(cfg.OutDir, "results.json"))

	smokeLimits(t, e) // the noisy-neighbour and overload runs, short (limits_test.go)
}
