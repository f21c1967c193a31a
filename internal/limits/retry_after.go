package limits

import (
	"math"
	"time"
)

// Bounds of the Retry-After of a request refused for capacity, in seconds.
const (
	minRetryAfter = 1
	maxRetryAfter = 30
)

// excessBucket and excessBuckets make the excess meter's second.
const (
	excessBucket  = 100 * time.Millisecond
	excessBuckets = 10
)

// excess counts, over the last second, the requests the service answered
// and the requests it refused for capacity: the Retry-After of a refusal
// is how long the service takes to serve as many requests as wait for it.
type excess struct {
	buckets [excessBuckets]struct {
		slot            int64
		served, refused int
	}
}

func (e *excess) bucket(now time.Time) *struct {
	slot            int64
	served, refused int
} {
	slot := now.UnixNano() / int64(excessBucket)
	b := &e.buckets[slot%excessBuckets]
	if b.slot != slot {
		b.slot, b.served, b.refused = slot, 0, 0
	}
	return b
}

func (e *excess) served(now time.Time)  { e.bucket(now).served++ }
func (e *excess) refused(now time.Time) { e.bucket(now).refused++ }

// second sums the buckets of the last second.
func (e *excess) second(now time.Time) (served, refused int) {
	slot := now.UnixNano() / int64(excessBucket)
	for _, b := range e.buckets {
		if slot-b.slot < excessBuckets {
			served += b.served
			refused += b.refused
		}
	}
	return served, refused
}

// base is the Retry-After, in whole seconds, before its spread: the
// requests that wait (refused in the last second, and queued) against
// those the service answered in the last second, within [1, 30].
func (e *excess) base(now time.Time, queued int) int {
	served, refused := e.second(now)
	s := math.Ceil(float64(refused+queued) / float64(max(served, 1)))
	return int(min(max(s, minRetryAfter), maxRetryAfter))
}

// spread draws one answer's Retry-After from base: uniform over the whole
// seconds [base, 2·base], so that the clients refused together come back
// over a span as long as the wait itself.
func spread(base int, rand func(n int) int) int {
	return base + rand(base+1)
}
