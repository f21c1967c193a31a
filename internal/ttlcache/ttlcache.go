// Package ttlcache is a small in-process map whose entries expire a fixed time
// after they were put: what a process may keep of answers that never change
// (finished idempotency keys) or change rarely (authenticated API keys).
package ttlcache

import (
	"sync"
	"time"
)

// maxEntries bounds a cache's memory: a full cache forgets its
// expired entries, or all of them when that would free less than a quarter,
// so that a sweep of the whole map happens at most once per quarter of it
// filled (a put costs O(1) amortised, under any load).
const maxEntries = 10_000

// Cache is a small in-process map whose entries expire ttl after they
// were put. It is safe for concurrent use; a ttl ≤ 0 disables it.
type Cache[K comparable, V any] struct {
	ttl     time.Duration
	mu      sync.RWMutex
	entries map[K]entry[V]
}

type entry[V any] struct {
	value   V
	expires time.Time
}

// New returns an empty cache whose entries live ttl.
func New[K comparable, V any](ttl time.Duration) *Cache[K, V] {
	return &Cache[K, V]{ttl: ttl, entries: make(map[K]entry[V])}
}

// Get returns the value put under k less than ttl before now.
func (c *Cache[K, V]) Get(k K, now time.Time) (V, bool) {
	var zero V
	if c.ttl <= 0 {
		return zero, false
	}
	c.mu.RLock()
	e, ok := c.entries[k]
	c.mu.RUnlock()
	if !ok || !now.Before(e.expires) {
		return zero, false
	}
	return e.value, true
}

// Put remembers v under k from now.
func (c *Cache[K, V]) Put(k K, v V, now time.Time) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= maxEntries {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) > maxEntries*3/4 {
			clear(c.entries)
		}
	}
	c.entries[k] = entry[V]{value: v, expires: now.Add(c.ttl)}
}

// Delete forgets k.
func (c *Cache[K, V]) Delete(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, k)
}

// Clear forgets every entry.
func (c *Cache[K, V]) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.entries)
}
