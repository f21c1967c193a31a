// Package delivery is how the fakes send what a processor sends a merchant
// (Stripe's webhooks, Adyen's notifications): each message at least once,
// held for a fault's delay, retried with jittered exponential backoff while
// the endpoint fails.
package delivery

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"time"
)

// Schedule is how one message is delivered.
type Schedule struct {
	// Delay holds the message this long before its first attempt; with
	// Reorder, a random hold of up to Delay (50ms when Delay is zero), so
	// that messages overtake each other.
	Delay   time.Duration
	Reorder bool
	// RetryBase is the first retry's backoff, doubled per attempt up to
	// RetryMax, each with jitter of up to half.
	RetryBase, RetryMax time.Duration
	// MaxAttempts bounds the attempts.
	MaxAttempts int
}

// Deliver holds the message as s says, then calls attempt until it
// returns a 2xx status, MaxAttempts times at most, or until ctx ends.
func Deliver(ctx context.Context, s Schedule, attempt func(context.Context) int) {
	hold := s.Delay
	if s.Reorder {
		limit := s.Delay
		if limit <= 0 {
			limit = 50 * time.Millisecond
		}
		hold = rand.N(limit + 1)
	}
	if !sleep(ctx, hold) {
		return
	}
	wait := s.RetryBase
	for range s.MaxAttempts {
		if status := attempt(ctx); status >= 200 && status < 300 {
			return
		}
		if !sleep(ctx, wait/2+rand.N(wait/2+1)) {
			return
		}
		wait = min(2*wait, s.RetryMax)
	}
}

// Post sends body to url with header, waiting at most timeout for the
// answer, reads the answer to its end, and returns its status: 0 when no
// answer came.
func Post(ctx context.Context, client *http.Client, url string, header http.Header, body []byte, timeout time.Duration) int {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header = header
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// sleep waits d, or until ctx ends: false then.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
