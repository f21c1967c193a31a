package testkit

import (
	"sync/atomic"
	"time"
)

// Clock is the service's clock in tests: the real time plus an offset that
// only grows. It is safe for concurrent use.
type Clock struct{ offset atomic.Int64 }

// Now returns the real time moved forward by every Advance so far.
func (c *Clock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }
