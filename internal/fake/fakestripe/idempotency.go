package fakestripe

import (
	"sync"
	"time"
)

// KeyLifetime is how long an idempotency key is remembered after its first
// use, as at Stripe. After that, the key is new again. Options.KeyLifetime
// shortens it for a test that must see a key forgotten within its run.
const KeyLifetime = 24 * time.Hour

const maxIdempotencyKeyLen = 255

// idempotencyScope identifies a key: keys are scoped per secret key.
type idempotencyScope struct {
	secret, key string
}

// savedResponse is the answer stored for a key, replayed byte for byte.
type savedResponse struct {
	status    int
	body      []byte
	requestID string
}

// idempotencyEntry is the state of one key: in flight until its first
// executing request completes, then holding the saved response.
type idempotencyEntry struct {
	scope     idempotencyScope
	firstUsed time.Time
	method    string
	path      string
	params    string // canonical form encoding of the parameters
	done      bool
	saved     savedResponse
}

// claimOutcome is what the idempotency layer decides for a request.
type claimOutcome int

const (
	// claimExecute: the key is new (or expired); the request executes and
	// must complete or abandon the entry.
	claimExecute claimOutcome = iota
	// claimReplay: same endpoint and parameters as the saved request.
	claimReplay
	// claimInFlight: the first request with this key has not finished.
	claimInFlight
	// claimOtherEndpoint: the key was first used on another endpoint.
	claimOtherEndpoint
	// claimOtherParams: the key was first used with other parameters.
	claimOtherParams
)

// idempotencyStore is Stripe's idempotency layer. It is safe for concurrent
// use; exactly one of any number of concurrent requests with the same key
// gets claimExecute.
type idempotencyStore struct {
	mu       sync.Mutex
	entries  map[idempotencyScope]*idempotencyEntry
	lifetime time.Duration // KeyLifetime unless Options.KeyLifetime says otherwise
}

func (st *idempotencyStore) init() {
	st.entries = make(map[idempotencyScope]*idempotencyEntry)
	if st.lifetime <= 0 {
		st.lifetime = KeyLifetime
	}
}

func (st *idempotencyStore) reset() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.init()
}

// claim decides what happens to a request using scope. On claimExecute the
// returned entry is the caller's claim, to complete or abandon; on
// claimReplay saved is a copy of the saved response. The entry's method and
// path never change and may be read without the lock.
func (st *idempotencyStore) claim(scope idempotencyScope, method, path, params string, now time.Time) (claimOutcome, *idempotencyEntry, savedResponse) {
	st.mu.Lock()
	defer st.mu.Unlock()
	e, ok := st.entries[scope]
	if ok && !now.Before(e.firstUsed.Add(st.lifetime)) {
		ok = false // expired: the key is new again
	}
	if !ok {
		e = &idempotencyEntry{scope: scope, firstUsed: now, method: method, path: path, params: params}
		st.entries[scope] = e
		return claimExecute, e, savedResponse{}
	}
	switch {
	case !e.done:
		return claimInFlight, e, savedResponse{}
	case e.method != method || e.path != path:
		return claimOtherEndpoint, e, savedResponse{}
	case e.params != params:
		return claimOtherParams, e, savedResponse{}
	}
	return claimReplay, e, e.saved
}

// complete saves resp under the claimed entry.
func (st *idempotencyStore) complete(e *idempotencyEntry, resp savedResponse) {
	st.mu.Lock()
	defer st.mu.Unlock()
	e.saved = resp
	e.done = true
}

// abandon releases a claim without saving anything: the key is new again.
func (st *idempotencyStore) abandon(e *idempotencyEntry) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.entries[e.scope] == e {
		delete(st.entries, e.scope)
	}
}
