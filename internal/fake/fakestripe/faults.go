package fakestripe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// FaultKind is what a fault does to the requests it targets.
type FaultKind string

const (
	// FaultLatency holds the request back for Duration (or until Gate is
	// closed) after it claimed its idempotency key and before the operation
	// executes. If the client goes away meanwhile, the operation does not
	// execute and the key is released.
	FaultLatency FaultKind = "latency"
	// FaultStatus answers with Status and a Stripe-shaped error without
	// executing or saving anything, e.g. 503 api_error, 429 rate_limit or
	// 409 idempotency_key_in_use.
	FaultStatus FaultKind = "status"
	// FaultDropBefore closes the connection without executing anything.
	FaultDropBefore FaultKind = "drop_before"
	// FaultDropAfter executes the operation, records it and saves its
	// response under the idempotency key, then closes the connection
	// without answering: the charge was made, the answer was lost.
	//
	// Note that net/http retries a request that carries an Idempotency-Key
	// header by itself when a reused keep-alive connection closes without
	// an answer; a test that wants the client to see the lost answer should
	// use a transport with keep-alives disabled.
	FaultDropAfter FaultKind = "drop_after"
	// FaultRefuse answers with Status and a Stripe-shaped error in place of
	// executing the operation, as a definitive refusal (a declined card, a
	// refused refund): the answer is saved under the idempotency key, so a
	// retry with the key gets it again. A request whose key already has a
	// saved answer is replayed; the fault does not act on it.
	FaultRefuse FaultKind = "refuse"
)

// Fault makes the server misbehave for requests to one operation. A fault
// fires Times times (0: until cleared); each request consumes at most one
// firing of each fault that acts on it.
type Fault struct {
	// Op is the operation targeted, e.g. OpChargeCreate, or OpAny.
	Op string `json:"op"`
	// Kind is what the fault does.
	Kind FaultKind `json:"kind"`
	// Duration is how long a FaultLatency holds the request back.
	Duration time.Duration `json:"-"`
	// Status is the HTTP status a FaultStatus or FaultRefuse answers with.
	Status int `json:"status,omitempty"`
	// Type, Code and Message override the error body of a FaultStatus or
	// FaultRefuse; by default they follow from Status.
	Type    string `json:"type,omitempty"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// Times is how many requests the fault fires for; 0 means until the
	// faults are cleared. Faults() reports the firings left.
	Times int `json:"times,omitempty"`

	// Gate, when set on a FaultLatency, holds the request until Gate is
	// closed instead of sleeping Duration. Go API only.
	Gate <-chan struct{} `json:"-"`
	// Fired, when set, receives one value each time the fault fires, before
	// it takes effect; the send gives up if the client goes away. Use it to
	// learn that a request is being held by a Gate. Go API only.
	Fired chan<- struct{} `json:"-"`
}

// faultJSON is the wire form of a Fault, with Duration as a Go duration
// string such as "1.5s".
type faultJSON struct {
	Op       string    `json:"op"`
	Kind     FaultKind `json:"kind"`
	Duration string    `json:"duration,omitempty"`
	Status   int       `json:"status,omitempty"`
	Type     string    `json:"type,omitempty"`
	Code     string    `json:"code,omitempty"`
	Message  string    `json:"message,omitempty"`
	Times    int       `json:"times,omitempty"`
}

// MarshalJSON encodes f with Duration as a Go duration string.
func (f Fault) MarshalJSON() ([]byte, error) {
	w := faultJSON{Op: f.Op, Kind: f.Kind, Status: f.Status, Type: f.Type, Code: f.Code, Message: f.Message, Times: f.Times}
	if f.Duration != 0 {
		w.Duration = f.Duration.String()
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes f with Duration as a Go duration string.
func (f *Fault) UnmarshalJSON(b []byte) error {
	var w faultJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*f = Fault{Op: w.Op, Kind: w.Kind, Status: w.Status, Type: w.Type, Code: w.Code, Message: w.Message, Times: w.Times}
	if w.Duration != "" {
		d, err := time.ParseDuration(w.Duration)
		if err != nil {
			return fmt.Errorf("fault duration: %w", err)
		}
		f.Duration = d
	}
	return nil
}

// Validate reports whether f is a fault the server can apply.
func (f Fault) Validate() error {
	if !knownOp(f.Op) {
		return fmt.Errorf("fault: unknown op %q", f.Op)
	}
	if f.Times < 0 {
		return errors.New("fault: times must not be negative")
	}
	switch f.Kind {
	case FaultLatency:
		if f.Duration <= 0 && f.Gate == nil {
			return errors.New("fault: latency needs a positive duration or a gate")
		}
	case FaultStatus:
		if f.Status < 400 || f.Status > 599 {
			return fmt.Errorf("fault: status %d is not an error status", f.Status)
		}
	case FaultRefuse:
		if f.Status < 400 || f.Status > 499 {
			return fmt.Errorf("fault: status %d is not a refusal (4xx)", f.Status)
		}
	case FaultDropBefore, FaultDropAfter:
	default:
		return fmt.Errorf("fault: unknown kind %q", f.Kind)
	}
	return nil
}

// response is the error a FaultStatus answers with.
func (f Fault) response() response {
	e := apiError{Type: typeInvalidRequest, Message: "Request failed."}
	switch {
	case f.Status == http.StatusConflict:
		e.Code = "idempotency_key_in_use"
		e.Message = "There is currently another in-progress request using this Stripe token (probably " +
			"from the same idempotency key). Please try again later."
	case f.Status == http.StatusTooManyRequests:
		e.Code = "rate_limit"
		e.Message = "Too many requests hit the API too quickly. We recommend an exponential backoff of your requests."
	case f.Status == http.StatusPaymentRequired:
		e.Type, e.Code, e.DeclineCode, e.Message = typeCard, "card_declined", "generic_decline", "Your card was declined."
	case f.Status >= 500:
		e.Type = typeAPI
		e.Message = "Sorry, something went wrong: " + http.StatusText(f.Status) + "."
	}
	if f.Type != "" {
		e.Type = f.Type
	}
	if f.Code != "" {
		e.Code = f.Code
	}
	if f.Message != "" {
		e.Message = f.Message
	}
	return errorResponse(f.Status, e)
}

// activeFault is an injected fault and its remaining firings.
type activeFault struct {
	Fault
	unlimited bool
}

// faultStore holds the injected faults in injection order.
type faultStore struct {
	mu     sync.Mutex
	active []*activeFault
}

func (fs *faultStore) inject(f Fault) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.active = append(fs.active, &activeFault{Fault: f, unlimited: f.Times == 0})
}

func (fs *faultStore) clear() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.active = nil
}

func (fs *faultStore) list() []Fault {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]Fault, 0, len(fs.active))
	for _, a := range fs.active {
		out = append(out, a.Fault)
	}
	return out
}

// take consumes one firing of each fault targeting op whose kind is
// accepted, at most limit faults (0: no limit), in injection order.
func (fs *faultStore) take(op string, limit int, accept func(FaultKind) bool) []Fault {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var taken []Fault
	kept := fs.active[:0]
	for _, a := range fs.active {
		if (limit == 0 || len(taken) < limit) && (a.Op == op || a.Op == OpAny) && accept(a.Kind) {
			taken = append(taken, a.Fault)
			if !a.unlimited {
				a.Times--
				if a.Times == 0 {
					continue // used up
				}
			}
		}
		kept = append(kept, a)
	}
	clear(fs.active[len(kept):])
	fs.active = kept
	return taken
}

// takeFront consumes the first fault acting in front of the idempotency
// layer (FaultStatus or FaultDropBefore) for op.
func (fs *faultStore) takeFront(op string) (Fault, bool) {
	taken := fs.take(op, 1, func(k FaultKind) bool { return k == FaultStatus || k == FaultDropBefore })
	if len(taken) == 0 {
		return Fault{}, false
	}
	return taken[0], true
}

// takeRefuse consumes the first FaultRefuse for op.
func (fs *faultStore) takeRefuse(op string) (Fault, bool) {
	taken := fs.take(op, 1, func(k FaultKind) bool { return k == FaultRefuse })
	if len(taken) == 0 {
		return Fault{}, false
	}
	return taken[0], true
}

// takeDropAfter consumes the first FaultDropAfter for op.
func (fs *faultStore) takeDropAfter(op string) (Fault, bool) {
	taken := fs.take(op, 1, func(k FaultKind) bool { return k == FaultDropAfter })
	if len(taken) == 0 {
		return Fault{}, false
	}
	return taken[0], true
}

// delay applies every latency fault for op. held reports whether any
// applied; ok is false if ctx ended first, i.e. the client went away.
func (fs *faultStore) delay(ctx context.Context, op string) (held, ok bool) {
	faults := fs.take(op, 0, func(k FaultKind) bool { return k == FaultLatency })
	for _, f := range faults {
		if !f.wait(ctx) {
			return true, false
		}
	}
	return len(faults) > 0, true
}

// notify signals f.Fired, giving up when ctx ends.
func (f Fault) notify(ctx context.Context) bool {
	if f.Fired == nil {
		return true
	}
	select {
	case f.Fired <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// wait holds a latency fault's request back.
func (f Fault) wait(ctx context.Context) bool {
	if !f.notify(ctx) {
		return false
	}
	if f.Gate != nil {
		select {
		case <-f.Gate:
			return true
		case <-ctx.Done():
			return false
		}
	}
	t := time.NewTimer(f.Duration)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Inject adds a fault. It panics if the fault is invalid (see
// Fault.Validate), as that is a mistake in the calling test.
func (s *Server) Inject(f Fault) {
	if err := f.Validate(); err != nil {
		panic(err)
	}
	s.faults.inject(f)
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.faults.clear()
}

// Faults returns the faults still active, in injection order, with Times
// holding the firings left (0: unlimited).
func (s *Server) Faults() []Fault {
	return s.faults.list()
}
