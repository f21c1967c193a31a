package idem

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// RecoveryPoint names the last atomic phase a request committed. Every key
// starts at Started and ends at Finished; a flow names the points in
// between.
type RecoveryPoint string

const (
	// Started is the point of a newly claimed key.
	Started RecoveryPoint = "started"
	// Finished is the point of a key with a stored response.
	Finished RecoveryPoint = "finished"
)

// Outcome is what an atomic phase decides, recorded in the phase's own
// transaction: move to a recovery point, finish with a response, or nothing.
type Outcome struct {
	kind   outcomeKind
	point  RecoveryPoint
	status int
	body   any
}

type outcomeKind int

const (
	outcomeNoOp outcomeKind = iota
	outcomeMoveTo
	outcomeFinish
)

// MoveTo records that the phase reached recovery point p.
func MoveTo(p RecoveryPoint) Outcome { return Outcome{kind: outcomeMoveTo, point: p} }

// Finish finishes the request: status and body (marshalled to JSON) are
// stored on the key and replayed for every later request with it.
func Finish(status int, body any) Outcome {
	return Outcome{kind: outcomeFinish, status: status, body: body}
}

// NoOp records nothing; the request stays at its recovery point.
func NoOp() Outcome { return Outcome{} }

// Key is the state of a claimed idempotency key, as a flow sees it.
type Key struct {
	ID int64
	// UserID is the owner of the key: keys are unique per owner.
	UserID int64
	// ClientKey is the client's idempotency key.
	ClientKey string
	// CreatedAt is when the key was first claimed, by the database's clock.
	CreatedAt time.Time
	// ClaimedAt is when this claim took the lease, by the database's clock:
	// the present, as far as ages of the request's records go.
	ClaimedAt time.Time
	// Point is the recovery point the request resumes from.
	Point RecoveryPoint
	// Params is the normalised request input, as first received.
	Params json.RawMessage
	// IP is the client address of the first request, when known.
	IP *netip.Addr

	// token is the lease's fencing token: every phase's writes to the key
	// name it, so a request whose lease was taken over writes nothing.
	token uuid.UUID
}

// Step is how a request leaves one recovery point: an optional foreign call
// made with no transaction open, then an atomic phase that records its
// result. A Call that returns an error leaves the request where it was; a
// Call that gets a definitive failure records it in the state and returns
// nil so that its Phase can finish the request.
type Step[S any] struct {
	Call  func(ctx context.Context, key *Key, state *S) error
	Phase func(ctx context.Context, tx pgx.Tx, key *Key, state *S) (Outcome, error)
}

// Flow is a multi-phase request served under idempotency keys: a directed
// acyclic graph of steps from Started to Finished.
type Flow[S any] struct {
	// Name identifies the flow on the key row, so that a stored request can
	// be driven on by something other than its client (Engine.Complete).
	Name string
	// Method and Path are the route of the flow's requests, Path as a
	// pattern with "{id}" for a path parameter: every request of the flow
	// is stored and fingerprinted with them (RequestPath).
	Method, Path string
	// Load rebuilds the flow's state from the key and the database. It runs
	// in the claim transaction, before any phase.
	Load  func(ctx context.Context, tx pgx.Tx, key *Key) (*S, error)
	Steps map[RecoveryPoint]Step[S]
}

func (f *Flow[S]) step(p RecoveryPoint) (Step[S], error) {
	step, ok := f.Steps[p]
	if !ok {
		return Step[S]{}, fmt.Errorf("flow %s: no step from recovery point %q", f.Name, p)
	}
	return step, nil
}

// Request is one request made under an idempotency key.
type Request struct {
	UserID int64
	// Key is the client's idempotency key, already validated.
	Key    string
	Method string
	Path   string
	// Params is the normalised input; its JSON is stored and fingerprinted.
	// A value that implements AppendJSON(b []byte) []byte is written by it,
	// which must write what encoding/json would.
	Params any
	IP     *netip.Addr
}

// Response is the answer to a request made under an idempotency key.
type Response struct {
	Status int
	// Body is the JSON body, byte for byte as first stored.
	Body []byte
	// Replayed is true when the response comes from an earlier request.
	Replayed bool
}
