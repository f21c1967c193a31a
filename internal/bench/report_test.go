package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/service"
)

// benchInfo describes where and how a benchmark run ran.
type benchInfo struct {
	Date       time.Time
	CPU        string
	Cores      int
	GoVersion  string
	PostgreSQL string
	// PgbenchClients caps the connections of every pgbench run.
	PgbenchClients int
}

func (e *benchEnv) info() benchInfo {
	info := benchInfo{Date: time.Now().UTC(), CPU: cpuModel(), Cores: runtime.NumCPU(), GoVersion: runtime.Version(), PgbenchClients: e.pgbenchClients}
	_ = e.admin.QueryRow(context.Background(), `SHOW server_version`).Scan(&info.PostgreSQL)
	return info
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// Targets of the benchmark, measured in one run.
const (
	targetClients           = 32   // new rides and replays are judged at this concurrency
	targetFloorReceiptRatio = 0.8  // new rides ≥ 0.8 × the floor with its receipt
	targetTripFloorRatio    = 0.8  // trips (book and complete) ≥ 0.8 × the floor of a trip
	targetDBCPURatio        = 1.15 // PostgreSQL CPU per ride ≤ 1.15 × the floor-with-receipt's
	targetServerCPURatio    = 0.35 // the server's CPU per ride ≤ 0.35 × PostgreSQL's per ride
	targetRoundTrips        = 8    // round trips per ride on the request path, at most
	targetPooledRatio       = 0.85 // new rides through PgBouncer ≥ 0.85 × direct, no error, no 409
	targetPooledDBCPURatio  = 1.2  // PostgreSQL CPU per ride through PgBouncer ≤ 1.2 × direct
	targetHealthzRatio      = 0.8  // replays ≥ 0.8 × GET /healthz of the same server
	targetSelectRatio       = 0.6  // replays ≥ 0.6 × single-row select
	targetFirstSelectRatio  = 0.5  // first replays ≥ 0.5 × single-row select
	targetBoundRatio128     = 0.85
	targetBoundRatio256     = 0.6
	targetMaxPool           = 16 // … with a pool of at most 16 connections
	targetMaxRSS            = 100
	mib                     = 1 << 20
	targetRSSBytes          = targetMaxRSS * mib
	targetRSSClients        = 256  // the memory target's concurrency
	targetGrowthRatio       = 1.15 // cost on grown tables ≤ 1.15 × on empty ones
	targetReapP99Ratio      = 1.5  // p99 during a reaper pass ≤ 1.5 × without
)

// benchTarget is one target and whether this run met it.
type benchTarget struct {
	Name string
	Got  string
	// Met is meaningful only when Judged: the sweep held the concurrency
	// the target is judged at.
	Met, Judged bool
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// bound is the throughput that clients closed-loop clients can reach when
// each ride waits latency at Stripe.
func bound(clients int, latency time.Duration) float64 {
	return float64(clients) / latency.Seconds()
}

// bestSeed is the seed design's better throughput: retrying at once or
// backing off.
func (p *benchPoint) bestSeed() float64 { return max(p.Seed.TPS, p.SeedNow.TPS) }

func pointAt(points []*benchPoint, clients int) *benchPoint {
	for _, p := range points {
		if p.Clients == clients {
			return p
		}
	}
	return nil
}

func cpuMS(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

func benchTargets(cfg benchConfig, points []*benchPoint, growth *growthRun) []benchTarget {
	var ts []benchTarget
	p := pointAt(points, targetClients)
	judged := p != nil && p.New.Requests > 0
	add := func(judged bool, name string, met func(p *benchPoint) bool, got func(p *benchPoint) string) {
		t := benchTarget{Name: fmt.Sprintf("%d clients: %s", targetClients, name), Judged: judged}
		if judged {
			t.Met, t.Got = met(p), got(p)
		}
		ts = append(ts, t)
	}
	// at judges a target of the point at targetClients once its new rides
	// were measured; pooledAt once its new rides through PgBouncer were too.
	at := func(name string, met func(p *benchPoint) bool, got func(p *benchPoint) string) {
		add(judged, name, met, got)
	}
	pooledAt := func(name string, met func(p *benchPoint) bool, got func(p *benchPoint) string) {
		add(judged && p.Pooled.Requests > 0, name, met, got)
	}
	at(fmt.Sprintf("PostgreSQL CPU per ride ≤ %.2f × the floor with its receipt", targetDBCPURatio),
		func(p *benchPoint) bool {
			return p.FloorReceipt.CPU.Postgres > 0 && ratio(float64(p.New.CPU.Postgres), float64(p.FloorReceipt.CPU.Postgres)) <= targetDBCPURatio
		},
		func(p *benchPoint) string {
			return fmt.Sprintf("%.2f × (%s ms against %s ms; the floor without the receipt: %s ms)",
				ratio(float64(p.New.CPU.Postgres), float64(p.FloorReceipt.CPU.Postgres)),
				cpuMS(p.New.CPU.Postgres), cpuMS(p.FloorReceipt.CPU.Postgres), cpuMS(p.Floor.CPU.Postgres))
		})
	at(fmt.Sprintf("the server's CPU per ride ≤ %.2f × PostgreSQL's CPU per ride", targetServerCPURatio),
		func(p *benchPoint) bool {
			return p.New.CPU.Server > 0 && ratio(float64(p.New.CPU.Server), float64(p.New.CPU.Postgres)) <= targetServerCPURatio
		},
		func(p *benchPoint) string {
			return fmt.Sprintf("%.2f × (%s ms against %s ms)", ratio(float64(p.New.CPU.Server), float64(p.New.CPU.Postgres)),
				cpuMS(p.New.CPU.Server), cpuMS(p.New.CPU.Postgres))
		})
	at(fmt.Sprintf("≤ %d round trips per ride on the request path", targetRoundTrips),
		func(p *benchPoint) bool { return p.New.RoundTrips > 0 && p.New.RoundTrips <= targetRoundTrips },
		func(p *benchPoint) string {
			return fmt.Sprintf("%.2f round trips, %.2f statements (background: %.2f round trips per ride)", p.New.RoundTrips, p.New.Statements, p.New.BackgroundRoundTrips)
		})
	at(fmt.Sprintf("new rides ≥ %.2f × the floor with its receipt", targetFloorReceiptRatio),
		func(p *benchPoint) bool { return ratio(p.New.PerSec(), p.FloorReceipt.TPS) >= targetFloorReceiptRatio },
		func(p *benchPoint) string {
			return fmt.Sprintf("%.2f × (%.0f against %.0f rides/s; against the floor without it: %.2f ×)",
				ratio(p.New.PerSec(), p.FloorReceipt.TPS), p.New.PerSec(), p.FloorReceipt.TPS, ratio(p.New.PerSec(), p.Floor.TPS))
		})
	pooledAt(fmt.Sprintf("new rides through PgBouncer ≥ %.2f × direct", targetPooledRatio),
		func(p *benchPoint) bool {
			return ratio(p.Pooled.PerSec(), p.New.PerSec()) >= targetPooledRatio && p.Pooled.Errors == 0 && p.Pooled.Conflicts == 0
		},
		func(p *benchPoint) string {
			return fmt.Sprintf("%.2f × (%.0f against %.0f rides/s; p99 %s against %s ms; %d errors, %d × 409)",
				ratio(p.Pooled.PerSec(), p.New.PerSec()), p.Pooled.PerSec(), p.New.PerSec(), ms(p.Pooled.P99), ms(p.New.P99), p.Pooled.Errors, p.Pooled.Conflicts)
		})
	pooledAt(fmt.Sprintf("PostgreSQL CPU per ride through PgBouncer ≤ %.2f × direct", targetPooledDBCPURatio),
		func(p *benchPoint) bool {
			x := ratio(float64(p.Pooled.CPU.Postgres), float64(p.New.CPU.Postgres))
			return x > 0 && x <= targetPooledDBCPURatio
		},
		func(p *benchPoint) string {
			return fmt.Sprintf("%.2f × (%s ms against %s ms; the server's %s against %s ms; %.2f round trips against %.2f)",
				ratio(float64(p.Pooled.CPU.Postgres), float64(p.New.CPU.Postgres)), cpuMS(p.Pooled.CPU.Postgres), cpuMS(p.New.CPU.Postgres),
				cpuMS(p.Pooled.CPU.Server), cpuMS(p.New.CPU.Server), p.Pooled.RoundTrips, p.New.RoundTrips)
		})
	at(fmt.Sprintf("replays ≥ %.2f × GET /healthz of the same server", targetHealthzRatio),
		func(p *benchPoint) bool { return ratio(p.Replay.PerSec(), p.Healthz.PerSec()) >= targetHealthzRatio },
		func(p *benchPoint) string {
			return fmt.Sprintf("%.2f × (%.0f against %.0f/s)", ratio(p.Replay.PerSec(), p.Healthz.PerSec()), p.Replay.PerSec(), p.Healthz.PerSec())
		})
	at(fmt.Sprintf("replays ≥ %.1f × the single-row primary-key select", targetSelectRatio),
		func(p *benchPoint) bool { return ratio(p.Replay.PerSec(), p.Select.TPS) >= targetSelectRatio },
		func(p *benchPoint) string {
			return fmt.Sprintf("%.2f × (%.0f against %.0f/s)", ratio(p.Replay.PerSec(), p.Select.TPS), p.Replay.PerSec(), p.Select.TPS)
		})
	at(fmt.Sprintf("first replays ≥ %.1f × the single-row primary-key select", targetFirstSelectRatio),
		func(p *benchPoint) bool { return ratio(p.FirstReplay.PerSec(), p.Select.TPS) >= targetFirstSelectRatio },
		func(p *benchPoint) string {
			return fmt.Sprintf("%.2f × (%.0f against %.0f/s; %.2f round trips, %.2f statements)", ratio(p.FirstReplay.PerSec(), p.Select.TPS),
				p.FirstReplay.PerSec(), p.Select.TPS, p.FirstReplay.RoundTrips, p.FirstReplay.Statements)
		})

	ts = append(ts, tripTarget(points))

	for _, c := range []struct {
		clients int
		x       float64
	}{{128, targetBoundRatio128}, {256, targetBoundRatio256}} {
		t := benchTarget{Name: fmt.Sprintf("Stripe latency %s, %d clients, pool ≤ %d: ≥ %.2f × clients / latency", cfg.StripeLatency, c.clients, targetMaxPool, c.x)}
		if p := pointAt(points, c.clients); p != nil && p.Slow.Requests > 0 {
			x := ratio(p.Slow.PerSec(), bound(p.Clients, cfg.StripeLatency))
			t.Judged = true
			t.Met = x >= c.x && cfg.PoolMaxConns <= targetMaxPool && cfg.StripeLatency > 0 && p.Slow.Errors == 0 && p.Slow.Conflicts == 0
			t.Got = fmt.Sprintf("%.0f rides/s = %.2f × %.0f, pool %d, %d errors, %d × 409", p.Slow.PerSec(), x, bound(p.Clients, cfg.StripeLatency), cfg.PoolMaxConns, p.Slow.Errors, p.Slow.Conflicts)
		}
		ts = append(ts, t)
	}

	if growth != nil {
		if p := pointAt(points, growth.New.Clients); p != nil {
			cost := func(r loadRun) float64 { return float64(r.CPU.Postgres + r.CPU.Server) }
			name := fmt.Sprintf("%d finished keys, %d clients", growth.Keys, growth.New.Clients)
			x := ratio(cost(growth.New), cost(p.New))
			ts = append(ts, benchTarget{Name: fmt.Sprintf("%s: a new ride costs ≤ %.2f × its cost on empty tables (PostgreSQL + server CPU)", name, targetGrowthRatio),
				Judged: true, Met: x > 0 && x <= targetGrowthRatio,
				Got: fmt.Sprintf("%.2f × (%s ms against %s ms; PostgreSQL alone %s against %s ms)", x,
					cpuMS(time.Duration(cost(growth.New))), cpuMS(time.Duration(cost(p.New))), cpuMS(growth.New.CPU.Postgres), cpuMS(p.New.CPU.Postgres))})
			x = ratio(cost(growth.FirstReplay), cost(p.FirstReplay))
			ts = append(ts, benchTarget{Name: fmt.Sprintf("%s: a first replay (from the database) costs ≤ %.2f × its cost on empty tables (PostgreSQL + server CPU)", name, targetGrowthRatio),
				Judged: true, Met: x > 0 && x <= targetGrowthRatio,
				Got: fmt.Sprintf("%.2f × (%s ms against %s ms; PostgreSQL alone %s against %s ms)", x,
					cpuMS(time.Duration(cost(growth.FirstReplay))), cpuMS(time.Duration(cost(p.FirstReplay))), cpuMS(growth.FirstReplay.CPU.Postgres), cpuMS(p.FirstReplay.CPU.Postgres))})
		}
		x := ratio(float64(growth.Reaping.P99), float64(growth.New.P99))
		ts = append(ts, benchTarget{Name: fmt.Sprintf("%d finished keys: POST /rides p99 during a reaper pass ≤ %.1f × without", growth.Keys, targetReapP99Ratio),
			Judged: true, Met: x > 0 && x <= targetReapP99Ratio && growth.Reaped > 0,
			Got: fmt.Sprintf("%.2f × (%s ms against %s ms); the reaper deleted %.0f keys/s meanwhile", x, ms(growth.Reaping.P99), ms(growth.New.P99), growth.ReapedPerSec)})
	}

	t := benchTarget{Name: fmt.Sprintf("peak RSS of the server at %d clients ≤ %d MB", targetRSSClients, targetMaxRSS)}
	if p := pointAt(points, targetRSSClients); p != nil {
		peak := max(p.New.PeakRSS, p.Replay.PeakRSS, p.FirstReplay.PeakRSS, p.Slow.PeakRSS, p.Healthz.PeakRSS)
		if peak > 0 {
			t.Judged, t.Met = true, peak <= targetRSSBytes
			t.Got = fmt.Sprintf("%.0f MB", float64(peak)/mib)
		}
	}
	ts = append(ts, t)
	return append(ts, cleanRunsTarget(points, growth))
}

// tripTarget judges trips against the floor of a trip at targetClients,
// once the trips were measured there.
func tripTarget(points []*benchPoint) benchTarget {
	t := benchTarget{Name: fmt.Sprintf("%d clients: trips ≥ %.2f × the floor of a trip", targetClients, targetTripFloorRatio)}
	p := pointAt(points, targetClients)
	if p == nil || p.Trip.Requests == 0 {
		return t
	}
	x := ratio(p.Trip.PerSec(), p.FloorTrip.TPS)
	t.Judged, t.Met = true, x >= targetTripFloorRatio && p.Trip.Errors == 0 && p.Trip.Conflicts == 0
	t.Got = fmt.Sprintf("%.2f × (%.0f against %.0f trips/s; CPU per trip %s ms against %s ms, PostgreSQL's %s against %s ms; %d errors, %d × 409)",
		x, p.Trip.PerSec(), p.FloorTrip.TPS, cpuMS(p.Trip.CPU.Total()), cpuMS(p.FloorTrip.CPU.Total()),
		cpuMS(p.Trip.CPU.Postgres), cpuMS(p.FloorTrip.CPU.Postgres), p.Trip.Errors, p.Trip.Conflicts)
	return t
}

// writeTripReport writes report-trips.md into dir: the trips' section and
// their target, for BenchmarkTrips.
func writeTripReport(dir string, info benchInfo, cfg benchConfig, points []*benchPoint) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Atomic Rides benchmark: trips\n\n")
	benchConditions(&b, info, cfg)
	tripMarkdown(&b, points)
	t := tripTarget(points)
	fmt.Fprintf(&b, "\n## Target\n\n- %s — %s: %s\n", t.Name, verdict(t), t.Got)
	return os.WriteFile(filepath.Join(dir, "report-trips.md"), []byte(b.String()), 0o644)
}

// tripMarkdown writes the trips' section: trips/s against the floor of a
// trip, and the CPU per trip of every process beside the floor's.
func tripMarkdown(b *strings.Builder, points []*benchPoint) {
	fmt.Fprintf(b, "\n## Trips: book, then complete (CAPTURE=trip)\n\n")
	fmt.Fprintf(b, "Each client books a ride (its fare, %d cents, held at the fake Stripe), then completes it as the dispatch side (`POST /rides/{id}/complete`, its own key, a fare of %d cents: captured, nothing above the hold), then books the next: a trip is both answers, 201 each; its latency is the two requests'. The serve process runs with CAPTURE=trip; the receipts go out meanwhile, in the background. The floor of a trip is `sql/bench/floor_trip.sql` run by pgbench: the least SQL of a trip, four commits, the receipt's delivery left out. CPU in ms per trip (per script run for the floor), from /proc; round trips and statements are the server's on the request path, both requests'.\n\n",
		service.RideAmountCents, benchTripFare)
	fmt.Fprintf(b, "| clients | trips/s | p50 ms | p99 ms | errors | 409 | commits/trip | floor trips/s | floor commits/trip | × trip floor | PostgreSQL ms | server ms | fake Stripe ms | mail sink ms | load ms | total ms | floor: PostgreSQL ms | floor: total ms | round trips | statements |\n")
	fmt.Fprintf(b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range points {
		if p.Trip.Requests == 0 {
			continue
		}
		c := p.Trip.CPU
		fmt.Fprintf(b, "| %d | %.0f | %s | %s | %d | %d | %.2f | %.0f | %.2f | %.2f | %s | %s | %s | %s | %s | %s | %s | %s | %.2f | %.2f |\n",
			p.Clients, p.Trip.PerSec(), ms(p.Trip.P50), ms(p.Trip.P99), p.Trip.Errors, p.Trip.Conflicts, p.Trip.CommitsPerOK,
			p.FloorTrip.TPS, p.FloorTrip.CommitsPerRun, ratio(p.Trip.PerSec(), p.FloorTrip.TPS),
			cpuMS(c.Postgres), cpuMS(c.Server), cpuMS(c.Stripe), cpuMS(c.Mail), cpuMS(c.Load), cpuMS(c.Total()),
			cpuMS(p.FloorTrip.CPU.Postgres), cpuMS(p.FloorTrip.CPU.Total()), p.Trip.RoundTrips, p.Trip.Statements)
	}
}

// verdict is how the report states a target.
func verdict(t benchTarget) string {
	if !t.Judged {
		return "not judged (the sweep lacks its concurrency)"
	}
	if t.Met {
		return "met"
	}
	return "**missed**"
}

// benchConditions writes the line of a report that says where and how the
// run ran.
func benchConditions(b *strings.Builder, info benchInfo, cfg benchConfig) {
	fmt.Fprintf(b, "%s · %s, %d cores · PostgreSQL %s · %s · %s per measurement after a %s warm-up · pool_max_conns=%d · %d riders · pgbench clients capped at %d\n\n",
		info.Date.Format("2006-01-02 15:04 MST"), info.CPU, info.Cores, info.PostgreSQL, info.GoVersion,
		cfg.Duration, cfg.Warmup, cfg.PoolMaxConns, cfg.Users, info.PgbenchClients)
}

// writeBenchReport writes report.md, results.json and throughput.png into
// dir.
func writeBenchReport(dir string, info benchInfo, cfg benchConfig, points []*benchPoint, growth *growthRun) error {
	md := benchMarkdown(info, cfg, points, growth)
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(md), 0o644); err != nil {
		return err
	}
	js, err := json.MarshalIndent(struct {
		Info   benchInfo
		Config benchConfig
		Points []*benchPoint
		Growth *growthRun
	}{info, cfg, points, growth}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), js, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "throughput.png"))
	if err != nil {
		return err
	}
	if err := plotThroughput(f, cfg, points); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

func mb(b int64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", float64(b)/mib)
}

// benchMarkdown renders the run as markdown: conditions, three tables and
// the targets.
func benchMarkdown(info benchInfo, cfg benchConfig, points []*benchPoint, growth *growthRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Atomic Rides benchmark\n\n")
	benchConditions(&b, info, cfg)

	fmt.Fprintf(&b, "## New rides, no Stripe latency\n\n")
	fmt.Fprintf(&b, "Seed design: retrying at once / with a jittered backoff of up to %s (retries in brackets); × seed is against the faster of the two. Service's SQL: the service's statements for a ride run by pgbench.\n\n", cfg.SeedBackoff)
	fmt.Fprintf(&b, "| clients | service rides/s | p50 ms | p99 ms | errors | 409 | commits/ride | peak RSS MB | floor rides/s | floor with receipt rides/s | seed design rides/s | service's SQL rides/s | × floor | × seed |\n")
	fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range points {
		fmt.Fprintf(&b, "| %d | %.0f | %s | %s | %d | %d | %.2f | %s | %.0f | %.0f | %.0f (%d) / %.0f (%d) | %.0f | %.2f | %.1f |\n",
			p.Clients, p.New.PerSec(), ms(p.New.P50), ms(p.New.P99), p.New.Errors, p.New.Conflicts, p.New.CommitsPerOK, mb(p.New.PeakRSS),
			p.Floor.TPS, p.FloorReceipt.TPS, p.SeedNow.TPS, p.SeedNow.Retries, p.Seed.TPS, p.Seed.Retries, p.SQL.TPS,
			ratio(p.New.PerSec(), p.Floor.TPS), ratio(p.New.PerSec(), p.bestSeed()))
	}

	fmt.Fprintf(&b, "\n## New rides through PgBouncer\n\n")
	fmt.Fprintf(&b, "The same service on the same database, its pool (pool_max_conns=%d) reaching PostgreSQL directly or through PgBouncer 1.18 in transaction pooling mode with as many server connections (DATABASE_POOLER=pgbouncer: pgx's cache_describe exec mode; River's listener on DATABASE_DIRECT_URL). CPU ms per ride: PostgreSQL's backends and the server's; PgBouncer's own CPU is not counted.\n\n", cfg.PoolMaxConns)
	fmt.Fprintf(&b, "| clients | direct rides/s | p50 ms | p99 ms | PgBouncer rides/s | p50 ms | p99 ms | errors | × direct | PostgreSQL ms direct / PgBouncer | server ms direct / PgBouncer | round trips direct / PgBouncer |\n")
	fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range points {
		if p.Pooled.OK == 0 && p.Pooled.Errors == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %d | %.0f | %s | %s | %.0f | %s | %s | %d | %.2f | %s / %s | %s / %s | %.2f / %.2f |\n",
			p.Clients, p.New.PerSec(), ms(p.New.P50), ms(p.New.P99), p.Pooled.PerSec(), ms(p.Pooled.P50), ms(p.Pooled.P99), p.Pooled.Errors,
			ratio(p.Pooled.PerSec(), p.New.PerSec()), cpuMS(p.New.CPU.Postgres), cpuMS(p.Pooled.CPU.Postgres),
			cpuMS(p.New.CPU.Server), cpuMS(p.Pooled.CPU.Server), p.New.RoundTrips, p.Pooled.RoundTrips)
	}

	fmt.Fprintf(&b, "\n## Replays of finished keys\n\n")
	fmt.Fprintf(&b, "Replays repeat each finished key over and over (after its first replay a process answers it from memory); first replays replay each key once on a fresh process (from the database: one read), warmed on a quarter of the keys and measured on the rest; GET /healthz is the same server doing no database work.\n\n")
	fmt.Fprintf(&b, "| clients | replays/s | p50 ms | p99 ms | errors | commits/replay | peak RSS MB | pgbench select/s | × select | first replays/s | commits/first replay | GET /healthz/s |\n")
	fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range points {
		fmt.Fprintf(&b, "| %d | %.0f | %s | %s | %d | %.2f | %s | %.0f | %.2f | %.0f | %.2f | %.0f |\n",
			p.Clients, p.Replay.PerSec(), ms(p.Replay.P50), ms(p.Replay.P99), p.Replay.Errors, p.Replay.CommitsPerOK, mb(p.Replay.PeakRSS),
			p.Select.TPS, ratio(p.Replay.PerSec(), p.Select.TPS), p.FirstReplay.PerSec(), p.FirstReplay.CommitsPerOK, p.Healthz.PerSec())
	}

	tripMarkdown(&b, points)

	fmt.Fprintf(&b, "\n## Where the CPU goes\n\n")
	fmt.Fprintf(&b, "CPU milliseconds per ride (per request for replays and GET /healthz; per script run for pgbench) of each process, from /proc: PostgreSQL is the backends of the measured database; the mail sink (its own process, no file written) receives the receipts; load is the harness's load generator for the service, pgbench for the baselines. Round trips and statements are what the server sent to the database per request while serving it (background: River and the receipts, per request).\n\n")
	fmt.Fprintf(&b, "| clients | run | per s | PostgreSQL ms | server ms | fake Stripe ms | mail sink ms | load ms | total ms | round trips | statements | background round trips |\n")
	fmt.Fprintf(&b, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range points {
		row := func(name string, perSec float64, c cpuShare, rt, st, bg string) {
			if perSec == 0 {
				return
			}
			fmt.Fprintf(&b, "| %d | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
				p.Clients, name, perSec, cpuMS(c.Postgres), cpuMS(c.Server), cpuMS(c.Stripe), cpuMS(c.Mail), cpuMS(c.Load), cpuMS(c.Total()), rt, st, bg)
		}
		f2 := func(x float64) string { return fmt.Sprintf("%.2f", x) }
		row("service: new rides", p.New.PerSec(), p.New.CPU, f2(p.New.RoundTrips), f2(p.New.Statements), f2(p.New.BackgroundRoundTrips))
		row("floor (pgbench)", p.Floor.TPS, p.Floor.CPU, "–", "–", "–")
		row("floor with receipt (pgbench)", p.FloorReceipt.TPS, p.FloorReceipt.CPU, "–", "–", "–")
		row("service's SQL (pgbench)", p.SQL.TPS, p.SQL.CPU, "–", "–", "–")
		row("service: replays", p.Replay.PerSec(), p.Replay.CPU, f2(p.Replay.RoundTrips), f2(p.Replay.Statements), f2(p.Replay.BackgroundRoundTrips))
		row("service: first replays", p.FirstReplay.PerSec(), p.FirstReplay.CPU, f2(p.FirstReplay.RoundTrips), f2(p.FirstReplay.Statements), f2(p.FirstReplay.BackgroundRoundTrips))
		row("select (pgbench)", p.Select.TPS, p.Select.CPU, "–", "–", "–")
		row("service: GET /healthz", p.Healthz.PerSec(), p.Healthz.CPU, "–", "–", "–")
		row(fmt.Sprintf("service: Stripe latency %s", cfg.StripeLatency), p.Slow.PerSec(), p.Slow.CPU, f2(p.Slow.RoundTrips), f2(p.Slow.Statements), f2(p.Slow.BackgroundRoundTrips))
		row("service: trips (book + complete)", p.Trip.PerSec(), p.Trip.CPU, f2(p.Trip.RoundTrips), f2(p.Trip.Statements), f2(p.Trip.BackgroundRoundTrips))
		row("floor of a trip (pgbench)", p.FloorTrip.TPS, p.FloorTrip.CPU, "–", "–", "–")
	}

	if cfg.StripeLatency > 0 {
		fmt.Fprintf(&b, "\n## New rides, Stripe latency %s\n\n", cfg.StripeLatency)
		fmt.Fprintf(&b, "| clients | rides/s | clients / latency | × bound | p50 ms | p99 ms | errors | 409 | commits/ride | peak RSS MB |\n")
		fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, p := range points {
			bd := bound(p.Clients, cfg.StripeLatency)
			fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.2f | %s | %s | %d | %d | %.2f | %s |\n",
				p.Clients, p.Slow.PerSec(), bd, ratio(p.Slow.PerSec(), bd), ms(p.Slow.P50), ms(p.Slow.P99),
				p.Slow.Errors, p.Slow.Conflicts, p.Slow.CommitsPerOK, mb(p.Slow.PeakRSS))
		}
	}

	if growth != nil {
		fmt.Fprintf(&b, "\n## Cost as the data grows\n\n")
		fmt.Fprintf(&b, "%d finished keys, each with its ride and audit record, loaded with SQL over %s (in %s); then new rides and first replays at %d clients, and new rides while a reaper pass deletes the keys older than %s. CPU in ms per request.\n\n",
			growth.Keys, growthSpan, growth.Load.Round(time.Second), growth.New.Clients, growthReapTo)
		fmt.Fprintf(&b, "| run | per s | p50 ms | p99 ms | errors | PostgreSQL ms | server ms | on empty tables: per s | p99 ms | PostgreSQL ms | server ms |\n")
		fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		var empty *benchPoint
		if p := pointAt(points, growth.New.Clients); p != nil {
			empty = p
		} else {
			empty = &benchPoint{}
		}
		row := func(name string, r, e loadRun) {
			fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %d | %s | %s | %.0f | %s | %s | %s |\n", name, r.PerSec(), ms(r.P50), ms(r.P99), r.Errors,
				cpuMS(r.CPU.Postgres), cpuMS(r.CPU.Server), e.PerSec(), ms(e.P99), cpuMS(e.CPU.Postgres), cpuMS(e.CPU.Server))
		}
		row("new rides", growth.New, empty.New)
		row("first replays", growth.FirstReplay, empty.FirstReplay)
		row(fmt.Sprintf("new rides, reaper deleting (%.0f keys/s)", growth.ReapedPerSec), growth.Reaping, empty.New)
		if l := growth.List; l != nil {
			fmt.Fprintf(&b, "\nA page of `GET /rides` (%d rides, the service's query, median of %d): %.3f ms for the first page of a rider of %d rides, %.3f ms for a page after %d of them.\n",
				listPageSize, listRuns, msf(l.First), l.Rides, msf(l.Deep), l.Depth)
		}
	}

	fmt.Fprintf(&b, "\n## Targets\n\n")
	for _, t := range benchTargets(cfg, points, growth) {
		fmt.Fprintf(&b, "- %s — %s: %s\n", t.Name, verdict(t), t.Got)
	}
	var samples []string
	for _, p := range points {
		for _, r := range []loadRun{p.New, p.Pooled, p.Replay, p.FirstReplay, p.Slow, p.Healthz, p.Trip} {
			for _, s := range r.ErrorSample {
				samples = append(samples, fmt.Sprintf("%d clients: %s", p.Clients, s))
			}
		}
	}
	if len(samples) > 0 {
		fmt.Fprintf(&b, "\n## First errors\n\n")
		for _, s := range samples[:min(len(samples), 10)] {
			fmt.Fprintf(&b, "- %s\n", strings.ReplaceAll(s, "\n", " "))
		}
	}
	return b.String()
}

// TestTargets judges made-up figures at targetClients: the first replays'
// Got carries their round trips and statements, and the PgBouncer targets
// follow the new rides' and are judged only once rides went through
// PgBouncer, met only with no error and no 409.
func TestTargets(t *testing.T) {
	t.Parallel()
	run := func(ok int, pg, server time.Duration) loadRun {
		return loadRun{Clients: targetClients, Requests: ok, OK: ok, Elapsed: time.Second, P99: 10 * time.Millisecond,
			CPU: cpuShare{Postgres: pg, Server: server}, RoundTrips: 1, Statements: 1}
	}
	p := &benchPoint{
		Clients:     targetClients,
		New:         run(1000, time.Millisecond, 300*time.Microsecond),
		FirstReplay: run(5000, 100*time.Microsecond, 50*time.Microsecond),
		Select:      pgbenchRun{TPS: 10000},
	}
	find := func(ts []benchTarget, name string) (int, benchTarget) {
		for i, x := range ts {
			if strings.Contains(x.Name, name) {
				return i, x
			}
		}
		t.Fatalf("no target %q among %d", name, len(ts))
		return -1, benchTarget{}
	}
	const pooled, pooledCPU = "new rides through PgBouncer ≥ 0.85 × direct", "PostgreSQL CPU per ride through PgBouncer ≤ 1.20 × direct"

	ts := benchTargets(benchConfig{}, []*benchPoint{p}, nil)
	for _, name := range []string{pooled, pooledCPU} {
		_, got := find(ts, name)
		require.False(t, got.Judged, "%s: no ride went through PgBouncer", name)
	}
	_, first := find(ts, "first replays ≥ 0.5 × the single-row primary-key select")
	require.True(t, first.Judged && first.Met, first.Got)
	require.Contains(t, first.Got, "1.00 round trips, 1.00 statements")
	_, server := find(ts, "the server's CPU per ride ≤ 0.35 × PostgreSQL's CPU per ride")
	require.True(t, server.Met, server.Got)

	p.Pooled = run(900, 1150*time.Microsecond, 320*time.Microsecond)
	ts = benchTargets(benchConfig{}, []*benchPoint{p}, nil)
	iNew, _ := find(ts, "new rides ≥ 0.80 × the floor with its receipt")
	iPooled, got := find(ts, pooled)
	require.Equal(t, iNew+1, iPooled, "the PgBouncer targets follow the new rides'")
	require.True(t, got.Judged && got.Met, got.Got)
	iCPU, got := find(ts, pooledCPU)
	require.Equal(t, iPooled+1, iCPU)
	require.True(t, got.Judged && got.Met, got.Got)
	require.Contains(t, got.Got, "1.15 × (1.150 ms against 1.000 ms")

	p.Pooled.Conflicts = 1
	p.Pooled.CPU.Postgres = 1300 * time.Microsecond
	ts = benchTargets(benchConfig{}, []*benchPoint{p}, nil)
	_, got = find(ts, pooled)
	require.False(t, got.Met, "a 409 through PgBouncer misses the target: %s", got.Got)
	_, got = find(ts, pooledCPU)
	require.False(t, got.Met, got.Got)
}
