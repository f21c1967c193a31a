package client

import (
	"context"
	mathrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBackoffIsFullJitterUnderAnExponentialCeiling(t *testing.T) {
	t.Parallel()
	var asked []int64
	highest := Policy{Rand: func(n int64) int64 { asked = append(asked, n); return n - 1 }}.withDefaults()
	var got []time.Duration
	for n := 1; n <= 9; n++ {
		got = append(got, highest.backoff(n, 0))
	}
	ms := time.Millisecond
	require.Equal(t, []time.Duration{200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 6400 * ms, 10 * time.Second, 10 * time.Second, 10 * time.Second}, got,
		"the ceiling doubles from BaseDelay and stops at MaxDelay")
	for i, n := range asked {
		require.Equal(t, int64(got[i])+1, n, "the wait is uniform over [0, ceiling], both ends included")
	}

	lowest := Policy{Rand: func(int64) int64 { return 0 }}.withDefaults()
	require.Zero(t, lowest.backoff(3, 0), "full jitter reaches down to no wait")
	require.Equal(t, 2*time.Second, lowest.backoff(3, 2*time.Second), "Retry-After is a floor")
	require.Equal(t, 45*time.Second, highest.backoff(2, 30*time.Second), "Retry-After wins over MaxDelay, spread by up to half of it")
	require.Equal(t, 2*time.Second, highest.backoff(1, time.Second), "a Retry-After of one second is spread across the next")

	huge := Policy{BaseDelay: time.Hour, MaxDelay: 1 << 62, Rand: func(n int64) int64 { return n - 1 }}.withDefaults()
	require.Equal(t, time.Duration(1<<62), huge.backoff(200, 0), "no overflow on long runs")
}

// The server's Retry-After is a floor, and the client adds a spread of its
// own over [0, max(Retry-After/2, 1s)], both ends included: the clients
// told the same whole second come back across that second, not in its
// first instant.
func TestRetryAfterWaitSpreadsAcrossAtLeastASecond(t *testing.T) {
	t.Parallel()
	lowest := func(int64) int64 { return 0 }
	var asked []int64
	highest := func(n int64) int64 { asked = append(asked, n); return n - 1 }
	for retryAfter, spread := range map[time.Duration]time.Duration{
		time.Second:             time.Second,
		2 * time.Second:         time.Second,
		3 * time.Second:         1500 * time.Millisecond,
		30 * time.Second:        15 * time.Second,
		1500 * time.Millisecond: time.Second,
	} {
		asked = nil
		require.Equal(t, retryAfter, RetryAfterWait(retryAfter, lowest), "Retry-After %s is the floor, reached exactly", retryAfter)
		require.Equal(t, retryAfter+spread, RetryAfterWait(retryAfter, highest), "Retry-After %s: up to %s more", retryAfter, spread)
		require.Equal(t, []int64{int64(spread) + 1}, asked, "Retry-After %s: uniform over [0, %s], both ends included", retryAfter, spread)
	}

	never := func(int64) int64 { t.Error("no spread without a Retry-After"); return 0 }
	require.Zero(t, RetryAfterWait(0, never))
	require.Zero(t, RetryAfterWait(-time.Second, never))

	// With real randomness: within the bounds, and over both halves of the
	// second (the odds of 1,000 draws all in one half are 2^-999).
	var early, late bool
	for range 1000 {
		w := RetryAfterWait(time.Second, mathrand.Int64N)
		require.GreaterOrEqual(t, w, time.Second)
		require.LessOrEqual(t, w, 2*time.Second)
		early, late = early || w < 1500*time.Millisecond, late || w > 1500*time.Millisecond
	}
	require.True(t, early && late, "the waits spread across the second")
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":     0,
		"2":    2 * time.Second,
		" 7":   7 * time.Second,
		"0":    0,
		"-1":   0,
		"1.5":  0,
		"soon": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Minute).Format(http.TimeFormat):     0,
		"99999999999": 24 * time.Hour,
	} {
		require.Equal(t, want, parseRetryAfter(v, now), "Retry-After: %q", v)
	}
}

// scripted answers each request with the next status of its script (the
// last one repeats); a status of 0 drops the connection unanswered.
type scripted struct {
	mu     sync.Mutex
	script []scriptedAnswer
	keys   []string
}

type scriptedAnswer struct {
	status      int
	retryAfter  string
	problemType string
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
	a := s.script[min(len(s.keys), len(s.script))-1]
	s.mu.Unlock()
	if a.status == 0 {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	if a.status == http.StatusCreated {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		_, _ = w.Write([]byte(`{"id":7,"charge_status":"charged"}`))
		return
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(a.status)
	if a.problemType != "" {
		_, _ = w.Write([]byte(`{"status":` + strconv.Itoa(a.status) + `,"type":"` + a.problemType + `"}`))
		return
	}
	_, _ = w.Write([]byte(`{"status":` + strconv.Itoa(a.status) + `}`))
}

func (s *scripted) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

// fakeTime is a clock that only the recorded sleeps move.
type fakeTime struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

func (f *fakeTime) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeTime) Sleep(ctx context.Context, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.waits = append(f.waits, d)
	return ctx.Err()
}

func (f *fakeTime) policy(p Policy) Policy {
	p.Now, p.Sleep = f.Now, f.Sleep
	return p
}

func book(t *testing.T, p Policy, script ...scriptedAnswer) (*Result[*RideCreateReply], *scripted, error) {
	t.Helper()
	s := &scripted{script: script}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c, err := NewClient(srv.URL)
	require.NoError(t, err)
	r := &Retrier{Client: c, Policy: p}
	res, err := r.RideCreate(context.Background(), "", RideCreateBody{OriginLat: 1, OriginLon: 2, TargetLat: 3, TargetLon: 4})
	return res, s, err
}

func TestDoRetriesTransientFailuresWithOneKey(t *testing.T) {
	t.Parallel()
	clock := &fakeTime{now: time.Unix(1_000_000, 0)}
	res, s, err := book(t, clock.policy(Policy{}),
		scriptedAnswer{status: 0},
		scriptedAnswer{status: 409, retryAfter: "1"},
		scriptedAnswer{status: 429},
		scriptedAnswer{status: 500},
		scriptedAnswer{status: 502},
		scriptedAnswer{status: 503, retryAfter: "3"},
		scriptedAnswer{status: 504},
		scriptedAnswer{status: 201},
	)
	require.NoError(t, err)
	require.Equal(t, 8, res.Attempts)
	require.Equal(t, http.StatusCreated, res.StatusCode)
	require.EqualValues(t, 7, res.Reply.JSON201.ID)
	keys := s.sent()
	require.Len(t, keys, 8)
	require.GreaterOrEqual(t, len(keys[0]), 20)
	for _, k := range keys {
		require.Equal(t, res.Key, k, "every attempt carries the operation's one key")
	}
	require.Len(t, clock.waits, 7)
	require.GreaterOrEqual(t, clock.waits[1], time.Second, "Retry-After honoured")
	require.GreaterOrEqual(t, clock.waits[5], 3*time.Second, "Retry-After honoured")
}

func TestDoNeverRetriesOtherStatuses(t *testing.T) {
	t.Parallel()
	for _, status := range []int{400, 401, 402, 404, 413, 415, 422, 501} {
		clock := &fakeTime{now: time.Unix(1_000_000, 0)}
		res, s, err := book(t, clock.policy(Policy{}), scriptedAnswer{status: status}, scriptedAnswer{status: 201})
		require.NoError(t, err)
		require.Equal(t, 1, res.Attempts, "status %d", status)
		require.Equal(t, status, res.StatusCode)
		require.Len(t, s.sent(), 1)
		require.Empty(t, clock.waits)
	}
}

// A 409 is retried while another request holds the key (or the answer
// says nothing of its problem); a 409 that refuses the request (a ride not
// refundable, not cancellable, …) is final: a retry is refused the same way.
func TestDoRetriesA409OnlyWhileTheKeyIsInUse(t *testing.T) {
	t.Parallel()
	clock := &fakeTime{now: time.Unix(1_000_000, 0)}
	res, s, err := book(t, clock.policy(Policy{}),
		scriptedAnswer{status: 409, retryAfter: "1", problemType: ProblemKeyInUse},
		scriptedAnswer{status: 409, problemType: "about:blank"},
		scriptedAnswer{status: 201},
	)
	require.NoError(t, err)
	require.Equal(t, 3, res.Attempts)
	require.Equal(t, http.StatusCreated, res.StatusCode)
	require.Len(t, s.sent(), 3)

	for _, problem := range []string{"/problems/ride-not-cancellable", "/problems/ride-not-completable",
		"/problems/no-balance-due", "/problems/ride-not-refundable", "/problems/refund-rejected"} {
		clock := &fakeTime{now: time.Unix(1_000_000, 0)}
		res, s, err := book(t, clock.policy(Policy{}), scriptedAnswer{status: 409, problemType: problem}, scriptedAnswer{status: 201})
		require.NoError(t, err)
		require.Equal(t, 1, res.Attempts, problem)
		require.Equal(t, http.StatusConflict, res.StatusCode)
		require.Len(t, s.sent(), 1)
		require.Empty(t, clock.waits)
	}
}

func TestDoIsBoundedInAttempts(t *testing.T) {
	t.Parallel()
	clock := &fakeTime{now: time.Unix(1_000_000, 0)}
	res, s, err := book(t, clock.policy(Policy{MaxAttempts: 3}), scriptedAnswer{status: 503})
	require.NoError(t, err, "the last answer is reported as it is")
	require.Equal(t, 3, res.Attempts)
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	require.NotNil(t, res.Reply.ApplicationProblemJSON503)
	require.Len(t, s.sent(), 3)
	require.Len(t, clock.waits, 2)

	clock = &fakeTime{now: time.Unix(1_000_000, 0)}
	_, s, err = book(t, clock.policy(Policy{MaxAttempts: 2}), scriptedAnswer{status: 0})
	require.ErrorContains(t, err, "gave up after 2 attempts")
	require.Len(t, s.sent(), 2)
}

func TestDoIsBoundedInTime(t *testing.T) {
	t.Parallel()
	// Retry-After beyond the budget: give the answer back at once.
	clock := &fakeTime{now: time.Unix(1_000_000, 0)}
	res, s, err := book(t, clock.policy(Policy{MaxElapsed: 5 * time.Second}), scriptedAnswer{status: 503, retryAfter: "10"})
	require.NoError(t, err)
	require.Equal(t, 1, res.Attempts)
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	require.Len(t, s.sent(), 1)
	require.Empty(t, clock.waits)

	// Waits add up to the budget and no further: two waits of Retry-After
	// exactly fit in it; two of Retry-After and its whole spread do not, and
	// the second is not begun.
	for _, c := range []struct {
		rand     func(int64) int64
		attempts int
		waits    []time.Duration
	}{
		{func(int64) int64 { return 0 }, 3, []time.Duration{2 * time.Second, 2 * time.Second}},
		{func(n int64) int64 { return n - 1 }, 2, []time.Duration{3 * time.Second}},
	} {
		clock = &fakeTime{now: time.Unix(1_000_000, 0)}
		res, _, err = book(t, clock.policy(Policy{MaxElapsed: 5 * time.Second, Rand: c.rand}), scriptedAnswer{status: 503, retryAfter: "2"})
		require.NoError(t, err)
		require.Equal(t, c.attempts, res.Attempts)
		require.Equal(t, c.waits, clock.waits)
	}
}

func TestDoStopsWhenTheCallerGivesUp(t *testing.T) {
	t.Parallel()
	s := &scripted{script: []scriptedAnswer{{status: 503, retryAfter: "60"}}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c, err := NewClient(srv.URL)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &Retrier{Client: c, Policy: Policy{MaxElapsed: 2 * time.Minute, OnRetry: func(int, int, error, time.Duration) { cancel() }}}
	_, err = r.RideCreate(ctx, "caller-gives-up-key-000001", RideCreateBody{})
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, s.sent(), 1)
}

// A 429 is the caller's own budget: the wait is the server's Retry-After
// (or, without one, the RateLimit field's reset), spread, and never grown
// by the backoff; a 503 is the service's capacity: the backoff grows, never
// below the spread Retry-After.
func TestA429WaitsForTheBudgetAndA503BacksOff(t *testing.T) {
	t.Parallel()
	highest := Policy{Rand: func(n int64) int64 { return n - 1 }}.withDefaults()
	require.Equal(t, 2*time.Second, highest.waitBefore(8, http.StatusTooManyRequests, time.Second), "the budget's second, spread across the next, at the eighth retry too")
	require.Equal(t, 10*time.Second, highest.waitBefore(8, http.StatusServiceUnavailable, time.Second), "the service's: backed off to MaxDelay")
	require.Equal(t, 10*time.Second, highest.waitBefore(8, http.StatusTooManyRequests, 0), "a 429 that says nothing backs off")

	require.Equal(t, 10*time.Second, rateLimitReset(`"writes";r=0;t=10`))
	require.Zero(t, rateLimitReset(`"writes";r=3;t=10`), "room left: no wait to read")
	require.Zero(t, rateLimitReset(""))
	require.Zero(t, rateLimitReset(`"writes";r=0;t=x`))

	var calls int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			w.Header().Set("RateLimit", `"writes";r=0;t=3`)
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	var waits []time.Duration
	p := Policy{Rand: func(int64) int64 { return 0 }, Sleep: func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }}
	res, err := Do(context.Background(), p, "k", func(ctx context.Context, key string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		return http.DefaultClient.Do(req)
	}, func(*http.Response) (struct{}, error) { return struct{}{}, nil })
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode)
	require.Equal(t, []time.Duration{3 * time.Second}, waits, "a 429 without Retry-After waits for its RateLimit reset")
}
