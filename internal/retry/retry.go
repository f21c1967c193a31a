// Package retry holds the waits between attempts that the engine and the
// service share: exponential backoff with full jitter, and a sleep that
// ends with its context.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is exponential with full jitter: a random duration in
// [0, min(max, base*2^attempt)), plus a microsecond.
func Backoff(attempt int, base, max time.Duration) time.Duration {
	d := base << min(attempt, 20)
	if d <= 0 || d > max {
		d = max
	}
	return rand.N(d) + time.Microsecond
}

// Sleep waits d, or until ctx is done (its error).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
