package service

import (
	"sync"
	"time"
)

// DefaultAuthCacheTTL is how long Authenticate trusts a key it found in the
// database, unless Config.AuthCacheTTL says otherwise.
const DefaultAuthCacheTTL = 5 * time.Second

// authCacheMaxEntries bounds the cache's memory; a full cache forgets its
// expired entries, or else everything.
const authCacheMaxEntries = 10_000

// authCache remembers, for a short time, which user an API key belongs to,
// so that a rider's every request need not read the key from the database.
// It is keyed by the key's SHA-256, never the key itself, and holds only keys
// found: an unknown key is looked up every time, so it cannot fill the cache.
// A key removed from the database is refused at most ttl later.
type authCache struct {
	ttl     time.Duration // ≤ 0: disabled
	mu      sync.Mutex
	entries map[[32]byte]authEntry
}

type authEntry struct {
	user    User
	expires time.Time
}

func newAuthCache(ttl time.Duration) *authCache {
	return &authCache{ttl: ttl, entries: make(map[[32]byte]authEntry)}
}

// get returns a copy of the user the hashed key belonged to, if found less
// than ttl before now.
func (c *authCache) get(hash [32]byte, now time.Time) (*User, bool) {
	if c.ttl <= 0 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[hash]
	if !ok || !now.Before(e.expires) {
		return nil, false
	}
	u := e.user
	return &u, true
}

// put remembers that the hashed key belongs to user, as found at now.
func (c *authCache) put(hash [32]byte, user *User, now time.Time) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= authCacheMaxEntries {
		for h, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, h)
			}
		}
		if len(c.entries) >= authCacheMaxEntries {
			clear(c.entries)
		}
	}
	c.entries[hash] = authEntry{user: *user, expires: now.Add(c.ttl)}
}
