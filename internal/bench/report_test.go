package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
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

// Targets of the benchmark, as ratios measured in one run.
const (
	targetClients        = 32  // new rides are judged at this concurrency
	targetFloorRatio     = 0.7 // service ≥ 0.7 × floor
	targetSeedRatio      = 3.0 // service ≥ 3 × seed design
	targetCommitsPerRide = 2.0 // commits per ride at most
	targetBoundRatio     = 0.6 // with Stripe latency: ≥ 0.6 × clients / latency
	targetMaxPool        = 16  // … with a pool of at most 16 connections
	targetSelectRatio    = 0.5 // replays ≥ 0.5 × single-row select
	targetMaxRSS         = 150 // MB of peak RSS at the highest concurrency
	mib                  = 1 << 20
	targetRSSBytes       = targetMaxRSS * mib
	targetSlowClients    = 256 // the latency target's concurrency
	targetRSSClients     = 256 // the memory target's concurrency
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

func benchTargets(cfg benchConfig, points []*benchPoint) []benchTarget {
	var ts []benchTarget
	p := pointAt(points, targetClients)
	judged := p != nil && p.New.Requests > 0
	newTarget := func(name string, met func(p *benchPoint) bool, got func(p *benchPoint) string) {
		t := benchTarget{Name: fmt.Sprintf("new rides, no Stripe latency, %d clients: %s", targetClients, name), Judged: judged}
		if judged {
			t.Met, t.Got = met(p), got(p)
		}
		ts = append(ts, t)
	}
	newTarget(fmt.Sprintf("≥ %.1f × the floor", targetFloorRatio),
		func(p *benchPoint) bool { return ratio(p.New.PerSec(), p.Floor.TPS) >= targetFloorRatio },
		func(p *benchPoint) string {
			return fmt.Sprintf("%.2f × (%.0f against %.0f rides/s; the service's SQL alone: %.2f ×)",
				ratio(p.New.PerSec(), p.Floor.TPS), p.New.PerSec(), p.Floor.TPS, ratio(p.SQL.TPS, p.Floor.TPS))
		})
	newTarget(fmt.Sprintf("≥ %.0f × the seed's design", targetSeedRatio),
		func(p *benchPoint) bool { return ratio(p.New.PerSec(), p.bestSeed()) >= targetSeedRatio },
		func(p *benchPoint) string {
			return fmt.Sprintf("%.1f × the seed backing off (%.0f rides/s), %.1f × the seed retrying at once (%.0f rides/s)",
				ratio(p.New.PerSec(), p.Seed.TPS), p.Seed.TPS, ratio(p.New.PerSec(), p.SeedNow.TPS), p.SeedNow.TPS)
		})
	newTarget("no 409",
		func(p *benchPoint) bool { return p.New.Conflicts == 0 },
		func(p *benchPoint) string {
			return fmt.Sprintf("%d × 409, %d other errors", p.New.Conflicts, p.New.Errors)
		})
	newTarget(fmt.Sprintf("≤ %.0f commits per ride", targetCommitsPerRide),
		func(p *benchPoint) bool { return p.New.CommitsPerOK <= targetCommitsPerRide },
		func(p *benchPoint) string {
			return fmt.Sprintf("%.2f: every commit in the database from the server's start to its stop (River and the pool's start-up included) per ride", p.New.CommitsPerOK)
		})

	t := benchTarget{Name: fmt.Sprintf("Stripe latency %s, %d clients, pool ≤ %d: ≥ %.1f × clients / latency", cfg.StripeLatency, targetSlowClients, targetMaxPool, targetBoundRatio)}
	if p := pointAt(points, targetSlowClients); p != nil && p.Slow.Requests > 0 {
		x := ratio(p.Slow.PerSec(), bound(p.Clients, cfg.StripeLatency))
		t.Judged = true
		t.Met = x >= targetBoundRatio && cfg.PoolMaxConns <= targetMaxPool && cfg.StripeLatency > 0
		t.Got = fmt.Sprintf("%.0f rides/s = %.2f × %.0f, pool %d", p.Slow.PerSec(), x, bound(p.Clients, cfg.StripeLatency), cfg.PoolMaxConns)
	}
	ts = append(ts, t)

	t = benchTarget{Name: fmt.Sprintf("replays of finished keys: ≥ %.1f × pgbench single-row primary-key select, at each concurrency", targetSelectRatio)}
	var got []string
	for _, p := range points {
		if p.Replay.Requests == 0 {
			continue
		}
		x := ratio(p.Replay.PerSec(), p.Select.TPS)
		if !t.Judged {
			t.Judged, t.Met = true, true
		}
		t.Met = t.Met && x >= targetSelectRatio
		got = append(got, fmt.Sprintf("%.2f at %d", x, p.Clients))
	}
	t.Got = strings.Join(got, ", ")
	ts = append(ts, t)

	t = benchTarget{Name: fmt.Sprintf("peak RSS of the server at %d clients ≤ %d MB", targetRSSClients, targetMaxRSS)}
	if p := pointAt(points, targetRSSClients); p != nil {
		peak := max(p.New.PeakRSS, p.Replay.PeakRSS, p.FirstReplay.PeakRSS, p.Slow.PeakRSS, p.Healthz.PeakRSS)
		if peak > 0 {
			t.Judged, t.Met = true, peak <= targetRSSBytes
			t.Got = fmt.Sprintf("%.0f MB", float64(peak)/mib)
		}
	}
	ts = append(ts, t)
	return ts
}

// writeBenchReport writes report.md, results.json and throughput.png into
// dir.
func writeBenchReport(dir string, info benchInfo, cfg benchConfig, points []*benchPoint) error {
	md := benchMarkdown(info, cfg, points)
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(md), 0o644); err != nil {
		return err
	}
	js, err := json.MarshalIndent(struct {
		Info   benchInfo
		Config benchConfig
		Points []*benchPoint
	}{info, cfg, points}, "", "  ")
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
func benchMarkdown(info benchInfo, cfg benchConfig, points []*benchPoint) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Atomic Rides benchmark\n\n")
	fmt.Fprintf(&b, "%s · %s, %d cores · PostgreSQL %s · %s · %s per measurement after a %s warm-up · pool_max_conns=%d · %d riders · pgbench clients capped at %d\n\n",
		info.Date.Format("2006-01-02 15:04 MST"), info.CPU, info.Cores, info.PostgreSQL, info.GoVersion,
		cfg.Duration, cfg.Warmup, cfg.PoolMaxConns, cfg.Users, info.PgbenchClients)

	fmt.Fprintf(&b, "## New rides, no Stripe latency\n\n")
	fmt.Fprintf(&b, "Seed design: retrying at once / with a jittered backoff of up to %s (retries in brackets); × seed is against the faster of the two. Service's SQL: the service's statements for a ride run by pgbench.\n\n", cfg.SeedBackoff)
	fmt.Fprintf(&b, "| clients | service rides/s | p50 ms | p99 ms | errors | 409 | commits/ride | peak RSS MB | floor rides/s | seed design rides/s | service's SQL rides/s | × floor | × seed |\n")
	fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range points {
		fmt.Fprintf(&b, "| %d | %.0f | %s | %s | %d | %d | %.2f | %s | %.0f | %.0f (%d) / %.0f (%d) | %.0f | %.2f | %.1f |\n",
			p.Clients, p.New.PerSec(), ms(p.New.P50), ms(p.New.P99), p.New.Errors, p.New.Conflicts, p.New.CommitsPerOK, mb(p.New.PeakRSS),
			p.Floor.TPS, p.SeedNow.TPS, p.SeedNow.Retries, p.Seed.TPS, p.Seed.Retries, p.SQL.TPS,
			ratio(p.New.PerSec(), p.Floor.TPS), ratio(p.New.PerSec(), p.bestSeed()))
	}

	fmt.Fprintf(&b, "\n## Replays of finished keys\n\n")
	fmt.Fprintf(&b, "Replays repeat each finished key over and over (after its first replay a process answers it from memory); first replays replay each key once on a fresh process (from the database); GET /healthz is the same server doing no database work.\n\n")
	fmt.Fprintf(&b, "| clients | replays/s | p50 ms | p99 ms | errors | commits/replay | peak RSS MB | pgbench select/s | × select | first replays/s | commits/first replay | GET /healthz/s |\n")
	fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range points {
		fmt.Fprintf(&b, "| %d | %.0f | %s | %s | %d | %.2f | %s | %.0f | %.2f | %.0f | %.2f | %.0f |\n",
			p.Clients, p.Replay.PerSec(), ms(p.Replay.P50), ms(p.Replay.P99), p.Replay.Errors, p.Replay.CommitsPerOK, mb(p.Replay.PeakRSS),
			p.Select.TPS, ratio(p.Replay.PerSec(), p.Select.TPS), p.FirstReplay.PerSec(), p.FirstReplay.CommitsPerOK, p.Healthz.PerSec())
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

	fmt.Fprintf(&b, "\n## Targets\n\n")
	for _, t := range benchTargets(cfg, points) {
		verdict := "not judged (the sweep lacks its concurrency)"
		if t.Judged {
			verdict = "**missed**"
			if t.Met {
				verdict = "met"
			}
		}
		fmt.Fprintf(&b, "- %s — %s: %s\n", t.Name, verdict, t.Got)
	}
	var samples []string
	for _, p := range points {
		for _, r := range []loadRun{p.New, p.Replay, p.FirstReplay, p.Slow, p.Healthz} {
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
