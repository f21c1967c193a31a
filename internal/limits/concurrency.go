package limits

import "sync"

// Defaults of the concurrency limits: how many requests of one credential
// may be in flight at once, queued ones included. A rider's app that
// books a ride per user action never comes near its limit, and neither
// does a rider's whole burst of writes (DefaultWrites.Quota); a runaway
// client holding connections open meets it at once. The operator's import
// scripts and the dispatch side run many workers, and have limits of their
// own.
const (
	DefaultRiderConcurrency    = 50
	DefaultOperatorConcurrency = 1000
	DefaultDispatchConcurrency = 200
)

// Concurrency counts the requests in flight by key (a rider, the operator,
// the dispatch side) and refuses one past the key's limit. Keys with
// nothing in flight take no memory.
type Concurrency struct {
	mu       sync.Mutex
	inFlight map[string]int
}

// NewConcurrency returns an empty count.
func NewConcurrency() *Concurrency {
	return &Concurrency{inFlight: map[string]int{}}
}

// Acquire counts one more request of key unless limit are in flight; a
// limit of zero or less limits nothing. When it reports true, the caller
// calls Release once the request ends.
func (c *Concurrency) Acquire(key string, limit int) bool {
	if limit <= 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight[key] >= limit {
		return false
	}
	c.inFlight[key]++
	return true
}

// Release ends a request Acquire counted.
func (c *Concurrency) Release(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.inFlight[key] - 1; n > 0 {
		c.inFlight[key] = n
	} else {
		delete(c.inFlight, key)
	}
}

// InFlight reports key's requests in flight.
func (c *Concurrency) InFlight(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight[key]
}
