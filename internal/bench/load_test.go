package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/atomicrides/atomicrides/internal/testkit"
)

// benchRideBody is the body of every ride the benchmark books: replays of a
// key send it again, byte for byte.
var benchRideBody = []byte(testkit.SomeRideJSON)

// benchTripFare is the final fare every trip is completed with: within the
// hold of service.RideAmountCents, so that the whole trip is the hold and
// its capture, nothing above it to charge. benchCompleteBody is the body of
// the completion.
const benchTripFare = 1850

var benchCompleteBody = []byte(fmt.Sprintf(`{"fare_cents":%d,"currency":"usd"}`, benchTripFare))

// benchCompleteKeySuffix makes a trip's completion key from its booking's.
const benchCompleteKeySuffix = "-complete"

// loadRun is what one run of the load generator measured.
type loadRun struct {
	Clients int
	// Requests counts responses and transport errors. OK counts the
	// responses the run wanted: a fresh 201 for new rides, a replayed 201 for
	// replays; for trips, a fresh 201 for the booking and then one for its
	// completion (a trip counts once, as one request: its completion is sent
	// only when its booking answered as wanted). Conflicts counts 409s;
	// Errors everything else.
	Requests, OK, Conflicts, Errors int
	// Elapsed runs from the first request to the last response.
	Elapsed time.Duration
	// P50 and P99 are latencies of all requests; of whole trips (the
	// booking and the completion) for trips.
	P50, P99 time.Duration
	// CommitsPerOK is the database's committed transactions per OK
	// response (pg_stat_database), when measured.
	CommitsPerOK float64
	// PeakRSS is the server's peak resident set size during the run, in
	// bytes (VmHWM), when measured.
	PeakRSS int64
	// CPU is the CPU per OK response of each process, over the measured
	// run (see cpuSampler).
	CPU cpuShare
	// RoundTrips and Statements are what the server sent to the database
	// per OK response while serving requests; BackgroundRoundTrips what it
	// sent meanwhile for background work (River, receipts), per OK
	// response (service.DBCounter, read on /metrics).
	RoundTrips, Statements, BackgroundRoundTrips float64
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
	// trip books a ride under key (the service holding its fare,
	// CAPTURE=trip), then completes it with benchCompleteBody as the
	// dispatch side (dispatchToken), under the key with
	// benchCompleteKeySuffix: OK is a fresh 201 for both, the ride
	// completed.
	trip          bool
	dispatchToken string
}

// runLoad runs spec and returns what it measured. Each client is one
// keep-alive connection speaking HTTP/1.1 itself (see leanConn): the load
// generator shares the machine with what it measures, so it spends as little
// CPU as it can, and the harness reports what it spent.
func runLoad(ctx context.Context, spec loadSpec) loadRun {

	type clientResult struct {
		requests, ok, conflicts, errors int
		latencies                       []time.Duration
		finished                        []string
		errorSample                     []string
	}
	start := time.Now()
	deadline := start.Add(spec.duration)
	results := eachClient(spec.base, spec.clients, func(i int, c *leanConn, res *clientResult) {
		res.latencies = make([]time.Duration, 0, 1024)
		apiKey := spec.apiKeys[i%len(spec.apiKeys)]
		for n := 0; time.Now().Before(deadline) && ctx.Err() == nil; n++ {
			var (
				key  string
				resp leanResponse
				err  error
			)
			t0 := time.Now()
			step := ""
			if spec.healthz {
				resp, err = c.do(ctx, "GET", "/healthz", "", "", nil)
			} else {
				if key = spec.key(i, n); key == "" {
					break
				}
				resp, err = c.do(ctx, "POST", "/rides", apiKey, key, benchRideBody)
				if spec.trip && err == nil && resp.status == http.StatusCreated && !resp.replayed {
					// The ride is booked, its fare held: the dispatch side
					// completes it.
					step = "complete: "
					id, ok := jsonID(resp.body)
					if !ok {
						err = fmt.Errorf("a booking's 201 without the ride's id: %s", tail(string(resp.body), 300))
					} else {
						resp, err = c.do(ctx, "POST", "/rides/"+id+"/complete", spec.dispatchToken, key+benchCompleteKeySuffix, benchCompleteBody)
					}
				}
			}
			res.latencies = append(res.latencies, time.Since(t0))
			res.requests++
			switch {
			case err != nil:
				res.errors++
				if len(res.errorSample) < 3 {
					res.errorSample = append(res.errorSample, step+err.Error())
				}
			case spec.trip && step == "" && resp.status == http.StatusCreated:
				// A booking replayed: its trip was not this run's.
				res.errors++
				if len(res.errorSample) < 3 {
					res.errorSample = append(res.errorSample, "book: a replayed 201 for a new key")
				}
			case spec.healthz && resp.status == http.StatusOK:
				res.ok++
			case !spec.healthz && resp.status == http.StatusCreated && resp.replayed == spec.replay:
				res.ok++
				if !spec.replay {
					res.finished = append(res.finished, key)
				}
			case resp.status == http.StatusConflict:
				res.conflicts++
			default:
				res.errors++
				if len(res.errorSample) < 3 {
					res.errorSample = append(res.errorSample, fmt.Sprintf("%sstatus %d replayed=%v: %s", step, resp.status, resp.replayed, tail(string(resp.body), 300)))
				}
			}
		}
	})

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

// jsonID returns the first "id" member's number of a JSON object (a ride's
// answer: its id comes first), as written, without decoding the body.
func jsonID(body []byte) (string, bool) {
	_, rest, ok := bytes.Cut(body, []byte(`"id":`))
	if !ok {
		return "", false
	}
	rest = bytes.TrimLeft(rest, " ")
	n := 0
	for n < len(rest) && '0' <= rest[n] && rest[n] <= '9' {
		n++
	}
	if n == 0 {
		return "", false
	}
	return string(rest[:n]), true
}

// leanConn is one keep-alive HTTP/1.1 connection of the load generator: it
// writes each request from a reused buffer and reads the status line, the two
// headers it needs and the body, with none of net/http's per-request
// allocations. A broken connection is redialled on the next request.
type leanConn struct {
	addr, host string
	conn       net.Conn
	r          *bufio.Reader
	buf        []byte
}

// leanResponse is what the load generator keeps of a response. body is
// valid until the next request on the connection.
type leanResponse struct {
	status   int
	replayed bool
	// retryAfter is the Retry-After field as sent, "" without one.
	retryAfter string
	body       []byte
}

func (c *leanConn) close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
}

// do sends one request and reads its whole response. apiKey and key add the
// Authorization and Idempotency-Key headers when set.
func (c *leanConn) do(ctx context.Context, method, path, apiKey, key string, body []byte) (leanResponse, error) {
	if c.conn == nil {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", c.addr)
		if err != nil {
			return leanResponse{}, err
		}
		c.conn, c.r = conn, bufio.NewReaderSize(conn, 16<<10)
	}
	b := c.buf[:0]
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, c.host...)
	b = append(b, "\r\n"...)
	if apiKey != "" {
		b = append(b, "Authorization: Bearer "...)
		b = append(b, apiKey...)
		b = append(b, "\r\n"...)
	}
	if key != "" {
		b = append(b, "Idempotency-Key: "...)
		b = append(b, key...)
		b = append(b, "\r\n"...)
	}
	if body != nil {
		b = append(b, "Content-Type: application/json\r\nContent-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	b = append(b, body...)
	c.buf = b
	resp, err := c.roundTrip(ctx)
	if err != nil {
		c.close()
	}
	return resp, err
}

func (c *leanConn) roundTrip(ctx context.Context) (leanResponse, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = c.conn.SetDeadline(dl)
	} else {
		_ = c.conn.SetDeadline(time.Now().Add(2 * time.Minute))
	}
	if _, err := c.conn.Write(c.buf); err != nil {
		return leanResponse{}, err
	}
	var resp leanResponse
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return resp, err
	}
	// "HTTP/1.1 201 Created"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return resp, fmt.Errorf("malformed status line %q", line)
	}
	if resp.status, err = strconv.Atoi(string(line[9:12])); err != nil {
		return resp, fmt.Errorf("malformed status line %q", line)
	}
	length, chunked, closing := -1, false, false
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return resp, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case asciiEqualFold(name, "Content-Length"):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return resp, fmt.Errorf("malformed Content-Length %q", value)
			}
		case asciiEqualFold(name, "Transfer-Encoding"):
			chunked = asciiEqualFold(value, "chunked")
		case asciiEqualFold(name, "Idempotent-Replayed"):
			resp.replayed = asciiEqualFold(value, "true")
		case asciiEqualFold(name, "Retry-After"):
			resp.retryAfter = string(value)
		case asciiEqualFold(name, "Connection"):
			closing = asciiEqualFold(value, "close")
		}
	}
	resp.body = c.buf[:0]
	switch {
	case chunked:
		for {
			line, err := c.r.ReadSlice('\n')
			if err != nil {
				return resp, err
			}
			size, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.SplitN(line, []byte(";"), 2)[0])), 16, 64)
			if err != nil {
				return resp, fmt.Errorf("malformed chunk size %q", line)
			}
			if size == 0 {
				for { // trailers, then the blank line
					line, err := c.r.ReadSlice('\n')
					if err != nil {
						return resp, err
					}
					if len(bytes.TrimRight(line, "\r\n")) == 0 {
						break
					}
				}
				break
			}
			if resp.body, err = readN(c.r, resp.body, int(size)); err != nil {
				return resp, err
			}
			if _, err := c.r.Discard(2); err != nil {
				return resp, err
			}
		}
	case length >= 0:
		if resp.body, err = readN(c.r, resp.body, length); err != nil {
			return resp, err
		}
	default:
		return resp, errors.New("a response with neither Content-Length nor chunked encoding")
	}
	c.buf = resp.body[:0]
	if closing {
		c.close()
	}
	return resp, nil
}

func readN(r *bufio.Reader, dst []byte, n int) ([]byte, error) {
	start := len(dst)
	dst = slices.Grow(dst, n)[:start+n]
	_, err := io.ReadFull(r, dst[start:])
	return dst, err
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// percentile of sorted durations, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted)) + 0.5)
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

// eachClient runs n clients of base at once, each on a lean keep-alive
// connection of its own, and returns their results when all have ended:
// client i fills the i-th.
func eachClient[R any](base string, n int, client func(i int, c *leanConn, res *R)) []R {
	addr := strings.TrimPrefix(base, "http://")
	results := make([]R, n)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &leanConn{addr: addr, host: addr}
			defer c.close()
			client(i, c, &results[i])
		}()
	}
	wg.Wait()
	return results
}
