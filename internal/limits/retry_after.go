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

// excessBucket and excessBuckets make the excess meter's ten seconds.
const (
	excessBucket  = 100 * time.Millisecond
	excessBuckets = 100
	excessSecond  = int64(time.Second / excessBucket)
)

// excess counts, over the last ten seconds, the requests the service
// answered and the requests it refused for capacity: the Retry-After of a
// refusal is how long the service takes to serve as many requests as wait
// for it.
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

// rates sums the requests refused in the last second, and the requests
// served in the last second or, when more, a second's worth of the last
// ten: a pause (a probe, a stall) does not make the service look slower
// than it has been serving.
func (e *excess) rates(now time.Time) (served, refused int) {
	slot := now.UnixNano() / int64(excessBucket)
	var served10 int
	for _, b := range e.buckets {
		age := slot - b.slot
		if age < 0 || age >= excessBuckets {
			continue
		}
		served10 += b.served
		if age < excessSecond {
			served += b.served
			refused += b.refused
		}
	}
	return max(served, served10/10), refused
}

// base is the Retry-After, in whole seconds, before its spread: the
// requests that wait (refused in the last second, and queued) against
// those the service answers in a second, within [1, 30].
func (e *excess) base(now time.Time, queued int) int {
	served, refused := e.rates(now)
	s := math.Ceil(float64(refused+queued) / float64(max(served, 1)))
	return int(min(max(s, minRetryAfter), maxRetryAfter))
}

// spread draws one answer's Retry-After from base: uniform over the whole
// seconds [base, 2·base], so that the clients refused together come back
// over a span as long as the wait itself.
func spread(base int, rand func(n int) int) int {
	return base + rand(base+1)
}
