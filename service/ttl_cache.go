package service

import (
	"sync"
	"time"
)

// ttlCacheMaxEntries bounds a cache's memory: a full cache forgets its
// expired entries, or all of them when that would free less than a quarter,
// so that a sweep of the whole map happens at most once per quarter of it
// filled (a put costs O(1) amortised, under any load).
const ttlCacheMaxEntries = 10_000

// ttlCache is a small in-process map whose entries expire ttl after they
// were put. It is safe for concurrent use; a ttl ≤ 0 disables it.
type ttlCache[K comparable, V any] struct {
	ttl     time.Duration
	mu      sync.RWMutex
	entries map[K]ttlEntry[V]
}

type ttlEntry[V any] struct {
	value   V
	expires time.Time
}

func newTTLCache[K comparable, V any](ttl time.Duration) *ttlCache[K, V] {
	return &ttlCache[K, V]{ttl: ttl, entries: make(map[K]ttlEntry[V])}
}

// get returns the value put under k less than ttl before now.
func (c *ttlCache[K, V]) get(k K, now time.Time) (V, bool) {
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

// put remembers v under k from now.
func (c *ttlCache[K, V]) put(k K, v V, now time.Time) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= ttlCacheMaxEntries {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) > ttlCacheMaxEntries*3/4 {
			clear(c.entries)
		}
	}
	c.entries[k] = ttlEntry[V]{value: v, expires: now.Add(c.ttl)}
}

// delete forgets k.
func (c *ttlCache[K, V]) delete(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, k)
}

// clear forgets every entry.
func (c *ttlCache[K, V]) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.entries)
}
