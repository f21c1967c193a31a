package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// benchRideBody is the body of every ride the benchmark books: replays of a
// key send it again, byte for byte.
var benchRideBody = []byte(`{"origin_lat":37.7749,"origin_lon":-122.4194,"target_lat":37.8044,"target_lon":-122.2712}`)

// loadRun is what one run of the load generator measured.
type loadRun struct {
	Clients int
	// Requests counts responses and transport errors. OK counts the
	// responses the run wanted: a fresh 201 for new rides, a replayed 201 for
	// replays. Conflicts counts 409s; Errors everything else.
	Requests, OK, Conflicts, Errors int
	// Elapsed runs from the first request to the last response.
	Elapsed time.Duration
	// P50 and P99 are latencies of all requests.
	P50, P99 time.Duration
	// CommitsPerOK is the database's committed transactions per OK
	// response (pg_stat_database), when measured.
	CommitsPerOK float64
	// PeakRSS is the server's peak resident set size during the run, in
	// bytes (VmHWM), when measured.
	PeakRSS int64
	// ErrorSample describes the first few errors.
	ErrorSample []string

	// finished holds, per client, the keys of the rides it got a fresh 201
	// for.
	finished [][]string
}

// PerSec is OK responses per second.
func (r loadRun) PerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.OK) / r.Elapsed.Seconds()
}

// loadSpec is one run of the load generator: clients concurrent closed-loop
// clients on keep-alive connections, each sending POST /rides as its
// user until the duration is up, then waiting for its last answer.
type loadSpec struct {
	base     string
	clients  int
	duration time.Duration
	// apiKeys are the users' API keys; client i rides as user i mod n.
	apiKeys []string
	// key is the idempotency key of client i's n-th request; "" ends the
	// client's run early.
	key func(client, n int) string
	// replay says the run repeats finished keys: OK is a replayed 201.
	replay bool
	// healthz sends GET /healthz instead, the server's answer with no
	// database work: OK is a 200.
	healthz bool
}

// runLoad runs spec and returns what it measured.
func runLoad(ctx context.Context, spec loadSpec) loadRun {
	transport := &http.Transport{
		MaxIdleConns:        spec.clients,
		MaxIdleConnsPerHost: spec.clients,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 2 * time.Minute}

	type clientResult struct {
		requests, ok, conflicts, errors int
		latencies                       []time.Duration
		finished                        []string
		errorSample                     []string
	}
	results := make([]clientResult, spec.clients)
	start := time.Now()
	deadline := start.Add(spec.duration)
	var wg sync.WaitGroup
	for i := range spec.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := &results[i]
			apiKey := spec.apiKeys[i%len(spec.apiKeys)]
			for n := 0; time.Now().Before(deadline) && ctx.Err() == nil; n++ {
				var (
					key      string
					status   int
					replayed bool
					detail   string
				)
				t0 := time.Now()
				if spec.healthz {
					status, detail = benchGet(ctx, client, spec.base+"/healthz")
				} else {
					if key = spec.key(i, n); key == "" {
						break
					}
					status, replayed, detail = benchPostRide(ctx, client, spec.base, apiKey, key)
				}
				res.latencies = append(res.latencies, time.Since(t0))
				res.requests++
				switch {
				case spec.healthz && status == http.StatusOK:
					res.ok++
				case !spec.healthz && status == http.StatusCreated && replayed == spec.replay:
					res.ok++
					if !spec.replay {
						res.finished = append(res.finished, key)
					}
				case status == http.StatusConflict:
					res.conflicts++
				default:
					res.errors++
					if len(res.errorSample) < 3 {
						res.errorSample = append(res.errorSample, fmt.Sprintf("status %d replayed=%v: %s", status, replayed, detail))
					}
				}
			}
		}()
	}
	wg.Wait()

	run := loadRun{Clients: spec.clients, Elapsed: time.Since(start), finished: make([][]string, spec.clients)}
	var all []time.Duration
	for i, r := range results {
		run.Requests += r.requests
		run.OK += r.ok
		run.Conflicts += r.conflicts
		run.Errors += r.errors
		all = append(all, r.latencies...)
		run.finished[i] = r.finished
		if len(run.ErrorSample) < 5 {
			run.ErrorSample = append(run.ErrorSample, r.errorSample...)
		}
	}
	slices.Sort(all)
	run.P50, run.P99 = percentile(all, 0.50), percentile(all, 0.99)
	return run
}

// benchPostRide books a ride under key and reads the whole answer, so that
// the connection is reused. A transport error is status 0 with its text.
func benchPostRide(ctx context.Context, client *http.Client, base, apiKey, key string) (status int, replayed bool, detail string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/rides", bytes.NewReader(benchRideBody))
	if err != nil {
		return 0, false, err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, false, err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, false, err.Error()
	}
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", tail(string(body), 300)
}

// benchGet sends GET url and reads the whole answer.
func benchGet(ctx context.Context, client *http.Client, url string) (status int, detail string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, tail(string(body), 300)
}

// percentile of sorted durations, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted)) + 0.5)
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}
