package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/atomicrides/atomicrides/internal/limits"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// The burst run: on an idle serve process, the limits at their defaults,
// bursts of requests of one credential sent all at once, each with
// burstTimeout, as an import script with many workers or an app's retry
// storm sends them. A burst the service drains within the requests'
// timeouts must be served whole: the operator's PUT /users/{email}
// answered 2xx every one; a rider's bookings answered 201 up to its
// budget's worth and 429 with the RateLimit fields past it, never 503.

// burstTimeout is each request's timeout in a burst, which each request
// tells the server in its Request-Timeout field.
const (
	burstTimeout       = 5 * time.Second
	burstTimeoutHeader = "5"
)

// defaultBurstSizes are the bursts of BenchmarkRides.
var defaultBurstSizes = []int{50, 500}

// burstCase is what one burst got.
type burstCase struct {
	// Name says whose requests the burst sent; Size how many.
	Name string
	Size int
	// Rider: the burst is a rider's bookings, held to its budget.
	Rider bool
	// OK counts the 2xx; Limited the 429s with Retry-After and the
	// RateLimit fields; Unavailable the 503s; Errors everything else
	// (timeouts and transport errors included).
	OK, Limited, Unavailable, Errors int
	// Budget is the rider's budget's worth of bookings over the burst:
	// its quota and what refilled while the burst ran.
	Budget int
	// Elapsed is the burst from its first request sent to its last answer;
	// P99 the 2xx answers' latency.
	Elapsed, P99 time.Duration
	ErrorSample  []string
}

// burstRun is what the burst run measured.
type burstRun struct {
	Budget string
	Cases  []burstCase
}

// measureBurst runs, on a deployment of its own with a rider per burst
// size, the limits at their defaults, the operator's bursts of
// PUT /users/{email} and each rider's burst of bookings, one burst at a
// time on the idle process.
func (e *benchEnv) measureBurst(tb testing.TB, sizes []int) *burstRun {
	tb.Helper()
	policy := limits.DefaultWrites
	d := e.deployOn(tb, dbtest.NewURL(tb), len(sizes))
	srv := d.startLimited(tb, append(append([]string{}, d.env...), limitsOn()...)...)
	defer d.stop(tb, srv)
	run := &burstRun{Budget: policy.String()}
	for i, n := range sizes {
		users := runBurst(n, func(j int) *http.Request {
			req, _ := http.NewRequest(http.MethodPut, fmt.Sprintf("%s/users/burst%d-%04d@bench.example.com", srv.base, n, j),
				strings.NewReader(`{"payment_source":"tok_visa"}`))
			req.Header.Set("Authorization", "Bearer "+benchAdminToken)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Request-Timeout", burstTimeoutHeader)
			return req
		})
		users.Name = "the operator's PUT /users/{email}"
		run.Cases = append(run.Cases, users)

		apiKey := d.apiKeys[i]
		rides := runBurst(n, func(j int) *http.Request {
			req, _ := http.NewRequest(http.MethodPost, srv.base+"/rides", bytes.NewReader(benchRideBody))
			req.Header.Set("Authorization", "Bearer "+apiKey)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", fmt.Sprintf("burst-%04d-key-n%09d", n, j))
			req.Header.Set("Request-Timeout", burstTimeoutHeader)
			return req
		})
		rides.Name, rides.Rider = "a rider's POST /rides", true
		rides.Budget = policy.Quota + int(rides.Elapsed/policy.Interval()) + 1
		run.Cases = append(run.Cases, rides)
	}
	return run
}

// runBurst sends n requests made by req at once, each on a connection of
// its own with burstTimeout, and sorts their answers.
func runBurst(n int, req func(j int) *http.Request) burstCase {
	c := burstCase{Size: n}
	client := &http.Client{Timeout: burstTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: n, DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	reqs := make([]*http.Request, n)
	for j := range reqs {
		reqs[j] = req(j)
	}
	var (
		mu        sync.Mutex
		wg        sync.WaitGroup
		latencies []time.Duration
	)
	start := make(chan struct{})
	for _, r := range reqs {
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), burstTimeout)
			defer cancel()
			s := time.Now()
			resp, err := client.Do(r.WithContext(ctx))
			var body []byte
			if err == nil {
				body, _ = io.ReadAll(resp.Body)
				_ = resp.Body.Close()
			}
			lat := time.Since(s)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				c.Errors++
				c.ErrorSample = appendSample(c.ErrorSample, err.Error())
			case resp.StatusCode >= 200 && resp.StatusCode < 300:
				c.OK++
				latencies = append(latencies, lat)
			case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "" &&
				resp.Header.Get("RateLimit") != "" && resp.Header.Get("RateLimit-Policy") != "":
				c.Limited++
			case resp.StatusCode == http.StatusServiceUnavailable:
				c.Unavailable++
				c.ErrorSample = appendSample(c.ErrorSample, fmt.Sprintf("status 503: %s", tail(string(body), 200)))
			default:
				c.Errors++
				c.ErrorSample = appendSample(c.ErrorSample, fmt.Sprintf("status %d: %s", resp.StatusCode, tail(string(body), 200)))
			}
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	c.Elapsed = time.Since(t0)
	slices.Sort(latencies)
	c.P99 = percentile(latencies, 0.99)
	return c
}

// met says whether the burst got what it should: every request a 2xx, or
// for a rider's bookings its budget's worth of 201s (its whole quota at
// least) and 429s with the RateLimit fields for the rest; never a 503.
func (c burstCase) met() bool {
	if c.Unavailable+c.Errors > 0 {
		return false
	}
	if !c.Rider {
		return c.OK == c.Size
	}
	return c.OK >= min(limits.DefaultWrites.Quota, c.Size) && c.OK <= c.Budget && c.OK+c.Limited == c.Size
}

// targets judges the burst run.
func (r *burstRun) targets() []benchTarget {
	var ts []benchTarget
	for _, c := range r.Cases {
		want := "every request 2xx"
		if c.Rider {
			want = fmt.Sprintf("its budget's worth (%s) 201, the rest 429 with RateLimit, never 503", r.Budget)
		}
		ts = append(ts, benchTarget{
			Name:   fmt.Sprintf("burst of %d × %s at once on an idle service, %s each: %s", c.Size, c.Name, burstTimeout, want),
			Judged: true, Met: c.met(),
			Got: fmt.Sprintf("%d × 2xx, %d × 429, %d × 503, %d other, in %s ms (2xx p99 %s ms)",
				c.OK, c.Limited, c.Unavailable, c.Errors, ms(c.Elapsed), ms(c.P99)),
		})
	}
	return ts
}

// markdown writes the run's section of the report.
func (r *burstRun) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n## Bursts\n\n")
	fmt.Fprintf(b, "Limits at their defaults (writes %s per rider), the admission limit learnt. On an idle serve process, each burst sent at once, "+
		"a connection per request, each request with a %s timeout; one burst at a time, a fresh rider for each burst of bookings.\n\n", r.Budget, burstTimeout)
	fmt.Fprintf(b, "| burst | requests | 2xx | 429 | 503 | other | elapsed ms | 2xx p99 ms |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range r.Cases {
		fmt.Fprintf(b, "| %s | %d | %d | %d | %d | %d | %s | %s |\n", c.Name, c.Size, c.OK, c.Limited, c.Unavailable, c.Errors, ms(c.Elapsed), ms(c.P99))
	}
	for _, c := range r.Cases {
		for _, s := range c.ErrorSample {
			fmt.Fprintf(b, "- %s, burst of %d: %s\n", c.Name, c.Size, strings.ReplaceAll(s, "\n", " "))
		}
	}
}
