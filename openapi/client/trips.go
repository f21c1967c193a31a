package client

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// Problem types a trip's operations answer with (RFC 9457 "type").
const (
	// ProblemBalanceDue: the booking is refused (402, nothing booked, not
	// stored) because the rider owes the balance of the ride its instance
	// names (/rides/{id}): pay it (RideBalancePay), then book again.
	ProblemBalanceDue = "/problems/balance-due"
	// ProblemRideNotCompletable: the ride holds nothing to capture, or was
	// completed with another fare (409, final, not stored).
	ProblemRideNotCompletable = "/problems/ride-not-completable"
	// ProblemRideNotCancellable: the ride was completed (refund it
	// instead), or holds nothing to release (409, final, not stored).
	ProblemRideNotCancellable = "/problems/ride-not-cancellable"
	// ProblemNoBalanceDue: the ride owes nothing (409, final, not stored).
	ProblemNoBalanceDue = "/problems/no-balance-due"
)

// RideComplete completes trip rideID with its final fare under key, or
// under a fresh key when key is empty (Result.Key tells which). It is the
// dispatch side's operation: Client must send the dispatch token
// (WithBearer). Retried as Do describes, every attempt with the one key; a
// 503 leaves the ride at its recovery point and the retry carries it on.
// 201 (this request completed the ride), 200 (another key completed it with
// the same fare) and 202 (the processor confirms the capture later) are the
// final, stored answers; a 409 refusal (ProblemRideNotCompletable) is final
// and not stored. RideCompleteReply.Ride reads the answer.
func (r *Retrier) RideComplete(ctx context.Context, key string, rideID int64, body RideCompleteInputBody) (*Result[*RideCompleteReply], error) {
	if key == "" {
		key = NewIdempotencyKey()
	}
	return Do(ctx, r.Policy, key, func(ctx context.Context, key string) (*http.Response, error) {
		return r.Client.RideComplete(ctx, rideID, &RideCompleteParams{IdempotencyKey: key}, body)
	}, ParseRideCompleteReply)
}

// RideCancel cancels trip rideID under key, or under a fresh key when key
// is empty, and so releases its hold. The rider cancels their own ride with
// their API key, the dispatch side any ride with its token. Retried as Do
// describes, every attempt with the one key. 201 (this request cancelled
// the ride) and 200 (another key did) are the final, stored answers; a 409
// refusal (ProblemRideNotCancellable: the trip was completed, refund it) is
// final and not stored. RideCancelReply.Ride reads the answer.
func (r *Retrier) RideCancel(ctx context.Context, key string, rideID int64) (*Result[*RideCancelReply], error) {
	if key == "" {
		key = NewIdempotencyKey()
	}
	return Do(ctx, r.Policy, key, func(ctx context.Context, key string) (*http.Response, error) {
		return r.Client.RideCancel(ctx, rideID, &RideCancelParams{IdempotencyKey: key})
	}, ParseRideCancelReply)
}

// RideBalancePay pays the balance the rider owes for ride rideID (its
// balance_due_cents) with the rider's current payment source, under key,
// or under a fresh key when key is empty. Retried as Do describes, every
// attempt with the one key. 201 (paid by this request), 200 (paid already)
// and 402 (declined: the balance stays due; register another card, then pay
// again under a new key) are the final, stored answers; a 409 refusal
// (ProblemNoBalanceDue) is final and not stored. RideBalancePayReply.Ride
// reads the answer.
func (r *Retrier) RideBalancePay(ctx context.Context, key string, rideID int64) (*Result[*RideBalancePayReply], error) {
	if key == "" {
		key = NewIdempotencyKey()
	}
	return Do(ctx, r.Policy, key, func(ctx context.Context, key string) (*http.Response, error) {
		return r.Client.RideBalancePay(ctx, rideID, &RideBalancePayParams{IdempotencyKey: key})
	}, ParseRideBalancePayReply)
}

// Ride reads a completion's final answer: the ride, completed (201 by this
// request, 200 by another key with the same fare) or capturing (202, the
// processor confirms the capture later). A completed ride may still say
// that its capture failed (charge_status capture_failed) or that the rider
// owes the fare above the hold (extra_status due, balance_due_cents). Any
// other answer is a *ProblemError.
func (r *RideCompleteReply) Ride() (*Ride, error) {
	for _, ride := range []*Ride{r.JSON201, r.JSON200, r.JSON202} {
		if ride != nil {
			return ride, nil
		}
	}
	return nil, NewProblemError(r.StatusCode(), r.Body)
}

// Ride reads a cancellation's final answer: the ride, cancelled (201 by
// this request, 200 by another key). Any other answer is a *ProblemError.
func (r *RideCancelReply) Ride() (*Ride, error) {
	for _, ride := range []*Ride{r.JSON201, r.JSON200} {
		if ride != nil {
			return ride, nil
		}
	}
	return nil, NewProblemError(r.StatusCode(), r.Body)
}

// Ride reads a balance payment's final answer: the ride, its balance paid
// (201 by this request, 200 already). Any other answer is a *ProblemError,
// a declined payment (402) among them.
func (r *RideBalancePayReply) Ride() (*Ride, error) {
	for _, ride := range []*Ride{r.JSON201, r.JSON200} {
		if ride != nil {
			return ride, nil
		}
	}
	return nil, NewProblemError(r.StatusCode(), r.Body)
}

// ProblemError is an answer other than an operation's success, as its
// RFC 9457 problem says: its status, type, title, detail and instance, and
// the body as it came.
type ProblemError struct {
	Status   int
	Type     string
	Title    string
	Detail   string
	Instance string
	Body     []byte

	rideID int64 // the ride_id member of a declined payment's problem
}

// NewProblemError reads an answer's status and body as a problem; a body
// that is no problem+json leaves the fields other than Status and Body
// empty.
func NewProblemError(status int, body []byte) *ProblemError {
	var p struct {
		Type     string `json:"type"`
		Title    string `json:"title"`
		Detail   string `json:"detail"`
		Instance string `json:"instance"`
		RideID   int64  `json:"ride_id"`
	}
	_ = json.Unmarshal(body, &p)
	return &ProblemError{Status: status, Type: p.Type, Title: p.Title, Detail: p.Detail, Instance: p.Instance, Body: body, rideID: p.RideID}
}

func (e *ProblemError) Error() string {
	msg := "client: answered " + strconv.Itoa(e.Status)
	if e.Type != "" && e.Type != "about:blank" {
		msg += " (" + e.Type + ")"
	}
	switch {
	case e.Detail != "":
		msg += ": " + e.Detail
	case e.Title != "":
		msg += ": " + e.Title
	case len(e.Body) > 0:
		msg += ": " + string(e.Body)
	}
	return msg
}

// RideID is the ride the problem is about: the one its instance names
// (/rides/{id}: the ride whose balance is due, the ride not cancellable),
// else its ride_id member (a declined booking's ride); 0 when it names
// none.
func (e *ProblemError) RideID() int64 {
	if id, ok := strings.CutPrefix(e.Instance, "/rides/"); ok {
		if n, err := strconv.ParseInt(id, 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return e.rideID
}

// Problem reads a booking's answer as the problem it is: nil for a ride
// (201, 202); for a 402, the declined ride (RideID) or the ride whose
// balance is due (Type ProblemBalanceDue, RideID).
func (r *RideCreateReply) Problem() *ProblemError {
	if r.JSON201 != nil || r.JSON202 != nil {
		return nil
	}
	return NewProblemError(r.StatusCode(), r.Body)
}
