package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults of a zero Policy.
const (
	DefaultMaxAttempts = 8
	DefaultMaxElapsed  = time.Minute
	DefaultBaseDelay   = 200 * time.Millisecond
	DefaultMaxDelay    = 10 * time.Second
)

// Policy bounds the retries of one logical operation. The zero value uses
// the defaults above, the real clock and real randomness.
type Policy struct {
	// MaxAttempts bounds the requests sent, the first included.
	MaxAttempts int
	// MaxElapsed bounds the whole operation, waits included: no attempt
	// runs past it, and no wait is begun that would end past it.
	MaxElapsed time.Duration
	// BaseDelay and MaxDelay shape the backoff: before retry n (from 1) the
	// wait is uniform in [0, min(MaxDelay, BaseDelay·2^(n-1))] ("full
	// jitter"), and never shorter than the server's Retry-After, which is
	// itself spread at random (RetryAfterWait).
	BaseDelay time.Duration
	MaxDelay  time.Duration

	// OnRetry, when set, is told of every retry before its wait: the
	// attempt that failed (from 1), its status (0 for a network error), its
	// error, and the wait.
	OnRetry func(attempt, status int, err error, wait time.Duration)

	// Now, Sleep and Rand replace the clock, the wait and the randomness
	// (Rand returns a uniform int64 in [0, n)); nil means the real ones.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	Rand  func(n int64) int64
}

func (p Policy) withDefaults() Policy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.MaxElapsed <= 0 {
		p.MaxElapsed = DefaultMaxElapsed
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = DefaultBaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = DefaultMaxDelay
	}
	if p.Now == nil {
		p.Now = time.Now
	}
	if p.Sleep == nil {
		p.Sleep = sleep
	}
	if p.Rand == nil {
		p.Rand = mathrand.Int64N
	}
	return p
}

// backoff is the wait before retry n (from 1) of a policy with defaults
// applied: full jitter over [0, min(MaxDelay, BaseDelay·2^(n-1))], raised to
// retryAfter.
func (p Policy) backoff(n int, retryAfter time.Duration) time.Duration {
	ceiling := p.BaseDelay
	for i := 1; i < n && ceiling < p.MaxDelay; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, p.MaxDelay)
	wait := time.Duration(p.Rand(int64(ceiling) + 1))
	if retryAfter > 0 {
		wait = max(wait, RetryAfterWait(retryAfter, p.Rand))
	}
	return wait
}

// waitBefore is the wait before retry n (from 1) after an answer of
// status that said retryAfter. A 429 is the caller's own budget, spent: it
// refills when the server says, whatever the service's load, so the wait
// is the server's Retry-After spread (RetryAfterWait) and nothing grows it.
// Every other answer (a 503: the service short of capacity; a 5xx, a 409,
// no answer) backs off exponentially, never sooner than Retry-After.
func (p Policy) waitBefore(n, status int, retryAfter time.Duration) time.Duration {
	if status == http.StatusTooManyRequests && retryAfter > 0 {
		return RetryAfterWait(retryAfter, p.Rand)
	}
	return p.backoff(n, retryAfter)
}

// RetryAfterWait is how long a client waits when the server said
// Retry-After: retryAfter, never less, plus a spread of its own drawn with
// randn (a uniform int64 in [0, n)): up to half of retryAfter more, and at
// least up to a second more. The server speaks in whole seconds and
// spreads its answers by whole seconds; this spreads the clients told the
// same second across it, so that they do not all come back in the same
// instant.
func RetryAfterWait(retryAfter time.Duration, randn func(n int64) int64) time.Duration {
	if retryAfter <= 0 {
		return 0
	}
	spread := max(retryAfter/2, time.Second)
	return retryAfter + time.Duration(randn(int64(spread)+1))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Result is the outcome of one logical operation.
type Result[T any] struct {
	// Reply is the parsed answer of the last attempt. After retries gave
	// up it may be a retryable status (409, 429, 5xx): check StatusCode.
	Reply T
	// StatusCode is the HTTP status of Reply.
	StatusCode int
	// Key is the idempotency key every attempt carried.
	Key string
	// Attempts counts the requests sent.
	Attempts int
	// Replayed is true when the server answered from the response it had
	// stored for Key (Idempotent-Replayed: true): an earlier request with
	// this key did the work.
	Replayed bool
}

// Do runs one logical operation under one idempotency key: send makes one
// attempt with the key, parse reads its answer. It retries network errors and
// the statuses retryable says so of (409, 429, 500, 502, 503, 504), never
// another status, with full-jitter exponential backoff that honours
// Retry-After, within the policy's attempts and time. A 409 whose problem
// is a refusal of the request (a ride not refundable, not cancellable, …)
// rather than another request holding the key is final too: a retry would
// be refused the same way.
//
// The error is non-nil only when there is no answer to report: every
// attempt failed on the network, ctx ended first, or an answer could not be
// parsed. A final answer is returned as it is, whatever its status.
func Do[T any](ctx context.Context, p Policy, key string, send func(ctx context.Context, key string) (*http.Response, error), parse func(*http.Response) (T, error)) (*Result[T], error) {
	p = p.withDefaults()
	start := p.Now()
	deadline := start.Add(p.MaxElapsed)
	ctx, cancel := context.WithTimeout(ctx, p.MaxElapsed)
	defer cancel()

	res := &Result[T]{Key: key}
	for {
		res.Attempts++
		status, retry, retryAfter, err := attempt(ctx, p, res, send, parse)
		if err == nil && !retry {
			return res, nil
		}
		if err != nil && (ctx.Err() != nil || !transient(err)) {
			return nil, fmt.Errorf("attempt %d of key %s: %w", res.Attempts, key, err)
		}
		if res.Attempts >= p.MaxAttempts {
			return finalAnswer(res, err)
		}
		wait := p.waitBefore(res.Attempts, status, retryAfter)
		if p.Now().Add(wait).After(deadline) {
			return finalAnswer(res, err)
		}
		if p.OnRetry != nil {
			p.OnRetry(res.Attempts, status, err, wait)
		}
		if err := p.Sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("waiting to retry key %s: %w", key, err)
		}
	}
}

// finalAnswer ends an operation whose retries ran out: with its last answer,
// or with the error of its last attempt when that got none.
func finalAnswer[T any](res *Result[T], err error) (*Result[T], error) {
	if err != nil {
		return nil, fmt.Errorf("gave up after %d attempts of key %s: %w", res.Attempts, res.Key, err)
	}
	return res, nil
}

// attempt sends one request and, when an answer came back whole, records it
// in res. It reports the status, whether the answer may change on a retry
// (retryableAnswer), the server's Retry-After on such answers, and the
// error that left it without an answer.
func attempt[T any](ctx context.Context, p Policy, res *Result[T], send func(context.Context, string) (*http.Response, error), parse func(*http.Response) (T, error)) (int, bool, time.Duration, error) {
	resp, err := send(ctx, res.Key)
	if err != nil {
		return 0, false, 0, err
	}
	// Read the body here, so that an answer cut short counts as the network
	// error it is rather than as a parse failure.
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return 0, false, 0, &lostAnswerError{status: resp.StatusCode, err: err}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	retry := retryableAnswer(resp.StatusCode, body)
	var retryAfter time.Duration
	if retry {
		retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), p.Now())
		if retryAfter == 0 && resp.StatusCode == http.StatusTooManyRequests {
			retryAfter = rateLimitReset(resp.Header.Get("RateLimit"))
		}
	}
	reply, err := parse(resp)
	if err != nil {
		if retry {
			// A gateway's answer in another shape: still worth a retry.
			return resp.StatusCode, true, retryAfter, &lostAnswerError{status: resp.StatusCode, err: err}
		}
		return resp.StatusCode, false, 0, fmt.Errorf("parse the %d answer: %w", resp.StatusCode, err)
	}
	res.Reply, res.StatusCode = reply, resp.StatusCode
	res.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	return resp.StatusCode, retry, retryAfter, nil
}

// lostAnswerError is an answer that arrived but could not be read whole.
type lostAnswerError struct {
	status int
	err    error
}

func (e *lostAnswerError) Error() string {
	return fmt.Sprintf("answer %d lost: %v", e.status, e.err)
}

func (e *lostAnswerError) Unwrap() error { return e.err }

// retryable reports whether an answer with status may change on a retry with
// the same key: a concurrent request held the key (409), the server asked
// to slow down (429), or it or a gateway failed without storing anything
// (500, 502, 503, 504). Every other status is final.
func retryable(status int) bool {
	switch status {
	case http.StatusConflict, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// ProblemKeyInUse is the problem type of the 409 that answers a request
// while another request holds its idempotency key, or holds the ride it
// acts on: the one 409 a retry may see otherwise.
const ProblemKeyInUse = "/problems/idempotency-key-in-use"

// retryableAnswer reports whether an answer with status and body may change
// on a retry with the same key: a retryable status, except a 409 whose
// problem+json type names a refusal of the request (a ride not refundable,
// not completable, not cancellable, owing nothing, a refund the processor
// rejected) rather than the key in use. A 409 without a problem type (a
// gateway's) is retried, as before.
func retryableAnswer(status int, body []byte) bool {
	if status != http.StatusConflict {
		return retryable(status)
	}
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &p) != nil {
		return true
	}
	switch p.Type {
	case "", "about:blank", ProblemKeyInUse:
		return true
	}
	return false
}

// transient reports whether err is a failure of the exchange (connection
// refused or reset, timeout, answer cut short) rather than of building the
// request.
func transient(err error) bool {
	var ue *url.Error
	var lost *lostAnswerError
	return errors.As(err, &ue) || errors.As(err, &lost)
}

// rateLimitReset reads the time until the budget of a RateLimit field
// (draft-ietf-httpapi-ratelimit-headers, e.g. "writes";r=0;t=10) allows a
// request again: its t parameter when nothing remains; 0 when absent,
// unreadable, or when the budget still has room.
func rateLimitReset(v string) time.Duration {
	var remaining, reset int64 = -1, -1
	for _, param := range strings.Split(v, ";")[1:] {
		name, val, ok := strings.Cut(strings.TrimSpace(param), "=")
		n, err := strconv.ParseInt(val, 10, 64)
		if !ok || err != nil || n < 0 {
			continue
		}
		switch name {
		case "r":
			remaining = n
		case "t":
			reset = n
		}
	}
	if remaining != 0 || reset <= 0 {
		return 0
	}
	return time.Duration(min(reset, int64(24*time.Hour/time.Second))) * time.Second
}

// parseRetryAfter reads Retry-After as delay-seconds or as an HTTP date; 0
// when absent or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(min(secs, int64(24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// NewIdempotencyKey returns a fresh idempotency key: 26 random base32
// characters (130 bits). Mint one per logical operation and reuse it for
// every retry of that operation.
func NewIdempotencyKey() string { return rand.Text() }
