package limits

import (
	"sync"
	"time"
)

// Started remembers the bookings this process admitted lately, and which
// of them it saw finish, so that their retries are told from new bookings
// before anything reads the database: a retry of a booking under way
// continues work past a recovery point, and a retry of a finished one is a
// replay the process answers from memory. It is a bounded in-memory record: a retry that
// reaches another replica, or comes after the record forgot the key, is
// taken for a new booking, which costs it only its priority, never its
// exactly-once.
type Started struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu   sync.Mutex
	keys map[string]startedKey
}

type startedKey struct {
	exp      time.Time
	finished bool
}

// DefaultStartedTTL is how long Started remembers a booking: past the
// lease of an idempotency key, so that every retry of an attempt cut short
// finds it.
const DefaultStartedTTL = 15 * time.Minute

// NewStarted returns an empty record of at most max keys, each kept ttl.
func NewStarted(ttl time.Duration, max int) *Started {
	return &Started{ttl: ttl, max: max, now: time.Now, keys: map[string]startedKey{}}
}

// Add records key as started (and not finished, if it had).
func (s *Started) Add(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if _, ok := s.keys[key]; !ok && len(s.keys) >= s.max {
		for k, v := range s.keys {
			if !now.Before(v.exp) {
				delete(s.keys, k)
			}
		}
		if len(s.keys) >= s.max {
			return
		}
	}
	s.keys[key] = startedKey{exp: now.Add(s.ttl)}
}

// Finish records that key's booking ended with a definitive answer, one a
// retry gets again.
func (s *Started) Finish(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.keys[key]; ok {
		v.finished = true
		s.keys[key] = v
	}
}

// Forget forgets key: its booking was refused before it started, and a
// retry is a new booking.
func (s *Started) Forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, key)
}

// Seen reports whether key was started within the record's ttl, and
// whether it finished.
func (s *Started) Seen(key string) (started, finished bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.keys[key]
	if !ok || !s.now().Before(v.exp) {
		return false, false
	}
	return true, v.finished
}
