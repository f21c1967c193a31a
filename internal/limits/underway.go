package limits

import (
	"sync"
	"time"
)

// Started remembers the bookings this process admitted lately, so that
// their retries (a continuation of work past a recovery point, or a
// replay of a finished key) are told from new bookings before anything
// reads the database. It is a bounded in-memory record: a retry that
// reaches another replica, or comes after the record forgot the key, is
// taken for a new booking, which costs it only its priority, never its
// exactly-once.
type Started struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu   sync.Mutex
	keys map[string]time.Time
}

// DefaultStartedTTL is how long Started remembers a booking: past the
// lease of an idempotency key, so that every retry of an attempt cut short
// finds it.
const DefaultStartedTTL = 15 * time.Minute

// NewStarted returns an empty record of at most max keys, each kept ttl.
func NewStarted(ttl time.Duration, max int) *Started {
	return &Started{ttl: ttl, max: max, now: time.Now, keys: map[string]time.Time{}}
}

// Add records key as started.
func (s *Started) Add(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if _, ok := s.keys[key]; !ok && len(s.keys) >= s.max {
		for k, exp := range s.keys {
			if !now.Before(exp) {
				delete(s.keys, k)
			}
		}
		if len(s.keys) >= s.max {
			return
		}
	}
	s.keys[key] = now.Add(s.ttl)
}

// Has reports whether key was started within the record's ttl.
func (s *Started) Has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.keys[key]
	return ok && s.now().Before(exp)
}
