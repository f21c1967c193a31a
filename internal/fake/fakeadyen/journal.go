package fakeadyen

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"time"
)

// Request is one API request that reached the server, as the journal keeps
// it (control requests under /_fake/ are not journalled).
type Request struct {
	// Op is the operation routed to (OpStore, OpPayment, OpRefund,
	// OpDetails, OpCancel, OpCapture); empty for an unknown endpoint.
	Op string `json:"op,omitempty"`
	// Status is the HTTP status answered; 0 when the connection was
	// dropped without an answer.
	Status int `json:"status"`
	// Dropped is set when the connection was closed without an answer.
	Dropped bool `json:"dropped,omitempty"`
	// Outage is set when the request arrived while the outage was on: it
	// was answered 503 without being executed.
	Outage bool      `json:"outage,omitempty"`
	At     time.Time `json:"at"`
}

// journal records the API requests in arrival order.
type journal struct {
	mu       sync.Mutex
	requests []Request
}

func (j *journal) add(r Request) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.requests = append(j.requests, r)
}

func (j *journal) list() []Request {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]Request(nil), j.requests...)
}

func (j *journal) reset() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.requests = nil
}

// Journal returns every API request that reached the server, in arrival
// order, with its answer.
func (s *Server) Journal() []Request { return s.journal.list() }

// recorder is the ResponseWriter of a journalled request: it notes the
// status answered, and a connection hijacked to be dropped.
type recorder struct {
	http.ResponseWriter
	status  int
	dropped bool
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Hijack hands the connection over (the drop faults close it), and notes
// that the request got no answer.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := r.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, http.ErrNotSupported
	}
	r.dropped = true
	return hj.Hijack()
}
