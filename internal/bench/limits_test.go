package bench

import (
	"bytes"
	"encoding/json"
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

	"github.com/atomicrides/atomicrides/internal/limits"
)

// Flags of the admission runs of BenchmarkRides: the noisy neighbour and the
// overload, each with the limits on (go tool task bench -- -rides.noisy=false).
var (
	benchNoisy    = flag.Bool("rides.noisy", true, "run the noisy-neighbour measurement (per-rider budgets on; false: leave it out)")
	benchOverload = flag.Bool("rides.overload", true, "run the overload measurement (the admission control at its defaults; false: leave it out)")
)

// limitsOn is the environment of a serve process started with
// startLimited: the per-rider budgets at their defaults (package limits),
// set explicitly, and nothing else: the admission control
// (LOAD_SHED_IN_FLIGHT) unset, at its default. The failed-authentication
// budget is left at its default too: nothing in these runs fails to
// authenticate.
func limitsOn() []string {
	return []string{
		"RATE_LIMIT_WRITES=" + limits.DefaultWrites.String(),
		"RATE_LIMIT_READS=" + limits.DefaultReads.String(),
	}
}

// limitsRuns is what the admission runs measured; nil runs were left out.
type limitsRuns struct {
	Noisy *noisyRun
	// Flood is the noisy-neighbour run with one rider at
	// floodFactor × its budget.
	Flood    *noisyRun
	Burst    *burstRun
	Overload *overloadRun
}

// benchLimits runs the admission runs the flags ask for, each as a
// sub-benchmark of b on a deployment of its own, logs their targets, and
// appends their sections to the report in cfg.OutDir (and writes
// limits.json beside it).
func (e *benchEnv) benchLimits(b *testing.B, cfg benchConfig) {
	var runs limitsRuns
	if *benchNoisy {
		b.Run("noisy", func(b *testing.B) {
			runs.Noisy = e.measureNoisy(b, defaultNoisySpec)
			n := runs.Noisy
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(n.Alone.PerSec(), "quiet-alone-rides/s")
			b.ReportMetric(n.WithNoisy.PerSec(), "quiet-noisy-rides/s")
			b.ReportMetric(msf(n.Alone.P99), "quiet-alone-p99-ms")
			b.ReportMetric(msf(n.WithNoisy.P99), "quiet-noisy-p99-ms")
			b.ReportMetric(float64(n.BookingCPU)/1e6, "server-cpu-ms/booking")
			b.ReportMetric(float64(n.RefusalCPU)/1e6, "server-cpu-ms/refusal")
		})
		b.Run("flood", func(b *testing.B) {
			runs.Flood = e.measureNoisy(b, defaultFloodSpec)
			n := runs.Flood
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(msf(n.Alone.P99), "quiet-alone-p99-ms")
			b.ReportMetric(msf(n.WithNoisy.P99), "quiet-flood-p99-ms")
			b.ReportMetric(float64(n.WithNoisy.Errors+n.WithNoisy.Refused), "quiet-refused-or-failed")
			b.ReportMetric(float64(n.Noisy.Errors), "flooder-non-429-refusals")
		})
	}
	if *benchOverload {
		b.Run("burst", func(b *testing.B) {
			runs.Burst = e.measureBurst(b, defaultBurstSizes)
			b.ReportMetric(0, "ns/op")
			met := 0
			for _, c := range runs.Burst.Cases {
				if c.met() {
					met++
				}
			}
			b.ReportMetric(float64(met), "bursts-met")
		})
		b.Run("overload", func(b *testing.B) {
			runs.Overload = e.measureOverload(b, defaultOverloadSpec)
			o := runs.Overload
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(o.Saturated, "saturated-rides/s")
			b.ReportMetric(float64(o.SaturatingClients), "saturating-clients")
			if len(o.Phases) == numPhases {
				over, open := o.Phases[phaseOverload], o.Phases[phaseOpen]
				b.ReportMetric(over.Goodput(), "goodput-10x-rides/s")
				b.ReportMetric(open.Goodput(), "goodput-open-rides/s")
				b.ReportMetric(100*over.timeoutShare(), "timeouts-10x-%")
				b.ReportMetric(over.attemptsPerBooking(), "attempts/booking-10x")
				b.ReportMetric(over.AttemptsCV, "attempts-cv-10x")
			}
			b.ReportMetric(o.Recovery.Seconds(), "recovery-s")
			b.ReportMetric(float64(o.ChargedTwice), "keys-charged-twice")
		})
	}
	if runs.Noisy == nil && runs.Flood == nil && runs.Burst == nil && runs.Overload == nil {
		return
	}
	for _, t := range limitsTargets(runs) {
		b.Logf("target %s: met=%v: %s", t.Name, t.Met, t.Got)
	}
	if err := appendLimitsReport(cfg.OutDir, runs); err != nil {
		b.Fatal(err)
	}
}

// limitsTargets judges the admission runs that ran.
func limitsTargets(runs limitsRuns) []benchTarget {
	var ts []benchTarget
	for _, n := range []*noisyRun{runs.Noisy, runs.Flood} {
		if n != nil {
			ts = append(ts, n.targets()...)
		}
	}
	if r := runs.Burst; r != nil {
		ts = append(ts, r.targets()...)
	}
	if o := runs.Overload; o != nil {
		ts = append(ts, o.targets()...)
	}
	return ts
}

// appendLimitsReport appends the admission runs' sections and verdicts to
// dir/report.md, and writes them to dir/limits.json.
func appendLimitsReport(dir string, runs limitsRuns) error {
	js, err := json.MarshalIndent(runs, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "limits.json"), js, 0o644); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, "report.md"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(limitsMarkdown(runs)); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if runs.Overload == nil {
		return nil
	}
	p, err := os.Create(filepath.Join(dir, "overload.png"))
	if err != nil {
		return err
	}
	if err := plotOverload(p, runs.Overload); err != nil {
		p.Close()
		return err
	}
	return p.Close()
}

// limitsMarkdown renders the admission runs: a section each, then their
// verdicts in the form of the report's targets.
func limitsMarkdown(runs limitsRuns) string {
	var b strings.Builder
	for _, n := range []*noisyRun{runs.Noisy, runs.Flood} {
		if n != nil {
			n.markdown(&b)
		}
	}
	if r := runs.Burst; r != nil {
		r.markdown(&b)
	}
	if o := runs.Overload; o != nil {
		o.markdown(&b)
	}
	fmt.Fprintf(&b, "\n## Targets of the limits\n\n")
	for _, t := range limitsTargets(runs) {
		verdict := "**missed**"
		if t.Met {
			verdict = "met"
		}
		fmt.Fprintf(&b, "- %s — %s: %s\n", t.Name, verdict, t.Got)
	}
	return b.String()
}

// retryAfter reads a Retry-After of whole seconds; ok is false when it is
// missing or not a positive number.
func retryAfter(v string) (time.Duration, bool) {
	s, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || s < 0 {
		return 0, false
	}
	return time.Duration(s) * time.Second, true
}

// smokeLimits runs the noisy-neighbour, burst and overload runs short, for
// TestBenchSmoke: it asserts their mechanics (the noisy rider refused with
// 429 and Retry-After, never 503, and held to its budget, the quiet riders
// never refused, a queued burst served whole, the CPU measured, keys
// booked and none charged twice), not their targets,
// which a second's run on a shared machine cannot judge.
func smokeLimits(t *testing.T, e *benchEnv) {
	t.Helper()
	start := time.Now()
	defer func() { t.Logf("the limits' runs, short, in %s", time.Since(start).Round(100*time.Millisecond)) }()
	n := e.measureNoisy(t, noisySpec{QuietRiders: 2, QuietClients: 2, QuietShare: 0.8, Factor: 10, RefusalClients: 2, Rounds: 1})
	require.Positive(t, n.Alone.OK, "quiet riders alone: %v", n.Alone.ErrorSample)
	require.Positive(t, n.WithNoisy.OK, "quiet riders with the noisy rider: %v", n.WithNoisy.ErrorSample)
	require.Zero(t, n.Alone.Refused+n.WithNoisy.Refused, "a quiet rider was refused")
	require.Zero(t, n.Alone.Errors+n.WithNoisy.Errors, "%v %v", n.Alone.ErrorSample, n.WithNoisy.ErrorSample)
	require.Positive(t, n.Noisy.Refused, "the noisy rider got no 429 with Retry-After: %v", n.Noisy.ErrorSample)
	require.Zero(t, n.Noisy.Errors, "the noisy rider: %v", n.Noisy.ErrorSample)
	// Past its burst, the noisy rider books at most one ride per interval
	// of its budget (and one for the bucket's rounding).
	policy := limits.DefaultWrites
	require.LessOrEqual(t, n.Noisy.OK, int(n.Noisy.Elapsed/policy.Interval())+2, "the noisy rider booked past its budget")
	require.Positive(t, n.Refusals.Refused, "the refusal run: %v", n.Refusals.ErrorSample)
	require.Positive(t, n.BookingCPU, "the server's CPU per booking")
	require.Positive(t, n.Refusals.CPU.Server, "the server's CPU in the refusal run")

	// A burst a rider's budget allows, and the operator's, each queued
	// for the admission limit (50 at once, far above what the limit
	// admits on a small machine), are served whole: no 503.
	burst := e.measureBurst(t, []int{50})
	for _, c := range burst.Cases {
		require.Zero(t, c.Unavailable+c.Errors, "burst of %d × %s: %d × 503, %d other: %v", c.Size, c.Name, c.Unavailable, c.Errors, c.ErrorSample)
		require.Equal(t, c.Size, c.OK, "burst of %d × %s: every request within the budget served", c.Size, c.Name)
	}

	o := e.measureOverload(t, overloadSpec{SweepFrom: 2, SweepTo: 4, Factor: 10, Timeout: overloadClientTimeout,
		MaxAttempts: overloadMaxAttempts, PriorityRate: overloadPriorityRate})
	require.NotEmpty(t, o.Sweep)
	require.Positive(t, o.Saturated)
	require.Positive(t, o.SaturatingClients)
	require.Len(t, o.Phases, numPhases)
	for _, p := range o.Phases {
		require.Positive(t, p.Attempts, "%s: no booking sent", p.Name)
		require.Positive(t, p.Booked, "%s: nothing booked: %v", p.Name, o.ErrorSample)
	}
	require.Equal(t, 10*o.SaturatingClients, o.Phases[phaseOverload].Clients)
	bad, conflicts, failed := o.answersBad()
	require.Zero(t, bad+conflicts+failed, "every answer a 2xx, a 429 or a 503 with Retry-After: %d other answers, %d × 409, %d transport errors: %v",
		bad, conflicts, failed, o.ErrorSample)
	require.Zero(t, o.ChargedTwice, "keys charged twice at the fake Stripe")
	require.GreaterOrEqual(t, o.ChargedKeys, o.KeysBooked, "a key answered 201 has no PaymentIntent at the fake Stripe")

	require.NoError(t, appendLimitsReport(e.cfg.OutDir, limitsRuns{Noisy: n, Burst: burst, Overload: o}))
	report, err := os.ReadFile(filepath.Join(e.cfg.OutDir, "report.md"))
	require.NoError(t, err)
	for _, s := range []string{"## Noisy neighbour", "## Bursts", "## Overload", "## Targets of the limits", "| priority kind |", "back at 1 ×"} {
		require.Contains(t, string(report), s)
	}
	require.FileExists(t, filepath.Join(e.cfg.OutDir, "limits.json"))
	img, err := os.ReadFile(filepath.Join(e.cfg.OutDir, "overload.png"))
	require.NoError(t, err)
	decoded, err := png.Decode(bytes.NewReader(img))
	require.NoError(t, err)
	require.Equal(t, plotW, decoded.Bounds().Dx())

	// The admission control's mechanics: the limit moves; the classes keep
	// their shares (the priority requests of the overload all succeed while
	// bookings are refused); the refusals' Retry-After spreads.
	require.Greater(t, len(o.distinctLimits()), 1, "the admission limit sampled every 100 ms took %v", o.distinctLimits())
	over := o.Phases[phaseOverload]
	require.Positive(t, over.Shed+over.Refused, "no booking was refused during %s", over.Name)
	for _, k := range priorityKinds {
		s := over.Priority[k.String()]
		require.Positive(t, s.Ops, "no %s during %s", k, over.Name)
		require.Equal(t, s.Ops, s.OK, "%ss during %s: %d of %d succeeded", k, over.Name, s.OK, s.Ops)
	}
	require.GreaterOrEqual(t, len(o.distinctRetryAfters()), 2, "the capacity 503s' Retry-After values: %v", o.distinctRetryAfters())
}
