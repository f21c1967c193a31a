package fakestripe

import (
	"sync"
	"time"
)

// Request is one API request that reached the server (control requests
// under /_fake/ are not recorded).
type Request struct {
	// ID is the Request-Id the server answered with.
	ID     string `json:"id"`
	Method string `json:"method"`
	Path   string `json:"path"`
	// Op is the operation routed to; empty for unknown routes and requests
	// that failed authentication.
	Op             string `json:"op,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Status is the HTTP status answered; 0 while in flight or when the
	// connection was dropped.
	Status int `json:"status"`
	// Replayed is set when the answer was a saved idempotent response.
	Replayed bool `json:"replayed,omitempty"`
	// Dropped is set when the connection was closed without an answer.
	Dropped bool `json:"dropped,omitempty"`
	// Fault is the kind of the fault that acted on the request, if any.
	Fault FaultKind `json:"fault,omitempty"`
	// Outage is set when the request arrived during an outage (SetOutage)
	// and was answered 503 unexecuted.
	Outage bool      `json:"outage,omitempty"`
	At     time.Time `json:"at"`
}

// journal records requests in arrival order.
type journal struct {
	mu       sync.Mutex
	requests []*Request
}

func (j *journal) begin(r Request) *Request {
	j.mu.Lock()
	defer j.mu.Unlock()
	rec := &r
	j.requests = append(j.requests, rec)
	return rec
}

func (j *journal) update(rec *Request, f func(*Request)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	f(rec)
}

func (j *journal) reset() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.requests = nil
}

// Requests returns every API request that reached the server, in arrival
// order.
func (s *Server) Requests() []Request {
	s.journal.mu.Lock()
	defer s.journal.mu.Unlock()
	out := make([]Request, len(s.journal.requests))
	for i, r := range s.journal.requests {
		out[i] = *r
	}
	return out
}

// RequestCount returns how many API requests with method and path (e.g.
// "POST", "/v1/charges") reached the server, replays and failures included.
func (s *Server) RequestCount(method, path string) int {
	s.journal.mu.Lock()
	defer s.journal.mu.Unlock()
	n := 0
	for _, r := range s.journal.requests {
		if r.Method == method && r.Path == path {
			n++
		}
	}
	return n
}
