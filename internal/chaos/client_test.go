package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// How a rider's client retries: with the same key, exponential backoff
// with full jitter (honouring Retry-After, capped), a bounded number of
// attempts within a bounded time.
const (
	chaosAttemptTimeout = 4 * time.Second
	chaosBackoffBase    = 25 * time.Millisecond
	chaosBackoffCap     = time.Second
	chaosRetryAfterCap  = 2 * time.Second
	chaosMaxAttempts    = 60
	chaosMaxTime        = 60 * time.Second
)

// chaosRider is an HTTP client of the riders, shared by every simulated
// client; each attempt goes to a random instance, as through a load
// balancer without health checks.
type chaosRider struct {
	bases []string
	// tripBases are the instances that book trips (trips_test.go).
	tripBases []string
	http      *http.Client
	stats     *chaosStats
}

func newChaosRider(bases []string, stats *chaosStats) *chaosRider {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	return &chaosRider{bases: bases, http: &http.Client{Transport: tr}, stats: stats}
}

// chaosRequest is one logical request: the same method, path, headers and
// body on every attempt.
type chaosRequest struct {
	method string
	path   string
	token  string // rider's API key; empty: none
	key    string // Idempotency-Key; empty: none
	body   []byte
	ctype  string // Content-Type; default application/json when body is set
	// via says which instances take it: "" the booking ones, viaTrip
	// the ones that book trips, viaAny every one (trips_test.go).
	via string
}

// chaosAnswer is the last answer of a logical request.
type chaosAnswer struct {
	Status int // 0: no answer (network error) on the last attempt
	Body   []byte
	// Definitive is false when the client gave up on a transient answer.
	Definitive bool
	Attempts   int
	// Replayed is set when the answer was replayed from an earlier request.
	Replayed bool
	// At is when the last answer arrived.
	At time.Time
}

// do sends one attempt; status 0 means a network error or timeout.
func (r *chaosRider) do(ctx context.Context, req chaosRequest, timeout time.Duration) (status int, body []byte, hdr http.Header) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	bases := r.bases
	switch {
	case req.via == viaTrip && len(r.tripBases) > 0:
		bases = r.tripBases
	case req.via == viaAny:
		bases = append(slices.Clone(r.bases), r.tripBases...)
	}
	base := bases[rand.IntN(len(bases))]
	hr, err := http.NewRequestWithContext(ctx, req.method, base+req.path, bytes.NewReader(req.body))
	if err != nil {
		panic(err) // a bug in the harness
	}
	if req.token != "" {
		hr.Header.Set("Authorization", "Bearer "+req.token)
	}
	if req.key != "" {
		hr.Header.Set("Idempotency-Key", req.key)
	}
	switch {
	case req.ctype != "":
		hr.Header.Set("Content-Type", req.ctype)
	case req.body != nil:
		hr.Header.Set("Content-Type", "application/json")
	}
	r.stats.attempts.Add(1)
	sent := time.Now()
	resp, err := r.http.Do(hr)
	if err != nil {
		r.stats.networkErrors.Add(1)
		r.stats.attempted(chaosAttempt{sent: sent, done: time.Now(), path: req.path, cut: timeout < chaosAttemptTimeout})
		return 0, nil, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.stats.networkErrors.Add(1)
		r.stats.attempted(chaosAttempt{sent: sent, done: time.Now(), path: req.path, cut: timeout < chaosAttemptTimeout})
		return 0, nil, nil
	}
	r.stats.status(resp.StatusCode)
	r.stats.attempted(chaosAttempt{sent: sent, done: time.Now(), path: req.path, status: resp.StatusCode, cut: timeout < chaosAttemptTimeout,
		problem: problemType(b), replayed: resp.Header.Get("Idempotent-Replayed") == "true", retryAfter: resp.Header.Get("Retry-After") != ""})
	return resp.StatusCode, b, resp.Header
}

// retry sends req until a definitive answer, or gives up after
// chaosMaxAttempts attempts or chaosMaxTime.
func (r *chaosRider) retry(ctx context.Context, req chaosRequest) chaosAnswer {
	ans := r.retryUpTo(ctx, req, chaosMaxAttempts)
	if !ans.Definitive {
		r.stats.gaveUpExhausted.Add(1)
	}
	return ans
}

func (r *chaosRider) retryUpTo(ctx context.Context, req chaosRequest, attempts int) chaosAnswer {
	deadline := time.Now().Add(chaosMaxTime)
	var ans chaosAnswer
	for ans.Attempts < attempts {
		ans.Attempts++
		status, body, hdr := r.do(ctx, req, chaosAttemptTimeout)
		ans.Status, ans.Body, ans.At = status, body, time.Now()
		if !chaosTransient(status, body) {
			ans.Definitive = true
			ans.Replayed = hdr.Get("Idempotent-Replayed") == "true"
			return ans
		}
		r.stats.retries.Add(1)
		delay := rand.N(min(chaosBackoffCap, chaosBackoffBase<<min(ans.Attempts, 16))) + time.Millisecond
		if secs, err := strconv.Atoi(hdr.Get("Retry-After")); err == nil && secs > 0 {
			delay = max(delay, min(time.Duration(secs)*time.Second, chaosRetryAfterCap))
		}
		if ans.Attempts >= attempts || time.Now().Add(delay).After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ans
		case <-time.After(delay):
		}
	}
	return ans
}

// chaosTransient reports whether a client should retry an answer: no
// answer, a key in use, rate limiting, or a server-side failure.
func chaosTransient(status int, body []byte) bool {
	switch status {
	case 0, http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	case http.StatusConflict:
		return problemType(body) == "/problems/idempotency-key-in-use"
	}
	return false
}

func problemType(body []byte) string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(body, &p)
	return p.Type
}

// chaosStats counts what the clients did.
type chaosStats struct {
	attempts, retries, networkErrors, gaveUpExhausted atomic.Int64
	quitters                                          atomic.Int64

	mu       sync.Mutex
	statuses map[int]int
	timeline []chaosAttempt
}

// chaosAttempt is one attempt as its client saw it: when it was sent and
// answered, and the answer (status 0: none).
type chaosAttempt struct {
	sent, done time.Time
	path       string
	status     int
	problem    string // the problem type of an error answer
	replayed   bool
	retryAfter bool // the answer carried Retry-After
	// cut: the client hung up on purpose after a few milliseconds.
	cut bool
}

func (s *chaosStats) attempted(a chaosAttempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timeline = append(s.timeline, a)
}

// attempts returns every attempt so far, in the order they ended.
func (s *chaosStats) attemptsSoFar() []chaosAttempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.timeline)
}

func (s *chaosStats) status(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.statuses == nil {
		s.statuses = map[int]int{}
	}
	s.statuses[code]++
}

func (s *chaosStats) statusCounts() map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int]int, len(s.statuses))
	for k, v := range s.statuses {
		out[k] = v
	}
	return out
}

// chaosUser is a rider created before the chaos starts.
type chaosUser struct {
	id     int64
	email  string
	token  string
	source string
}

// chaosCreateUsers creates n riders through the admin API; the first one's
// card is declined on every charge; with two processors, some have a card
// only Adyen takes (chaosRiderSource).
func chaosCreateUsers(ctx context.Context, sys *chaosSystem, n int) ([]*chaosUser, error) {
	var users []*chaosUser
	for i := range n {
		u := &chaosUser{email: fmt.Sprintf("rider-%02d@chaos.example", i), source: sys.chaosRiderSource(i)}
		body, _ := json.Marshal(map[string]string{"payment_source": u.source})
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, sys.bases()[i%2]+"/users/"+u.email, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+chaosAdminToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := chaosHTTP.Do(req)
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusCreated {
			return nil, fmt.Errorf("create %s: %d %s", u.email, resp.StatusCode, b)
		}
		var created struct {
			User struct {
				ID int64 `json:"id"`
			} `json:"user"`
			APIKey string `json:"api_key"`
		}
		if err := json.Unmarshal(b, &created); err != nil {
			return nil, err
		}
		if created.APIKey == "" || created.User.ID == 0 {
			return nil, errors.New("create user: no id or api key in " + string(b))
		}
		u.id, u.token = created.User.ID, created.APIKey
		users = append(users, u)
	}
	return users, nil
}
