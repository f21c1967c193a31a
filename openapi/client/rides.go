package client

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Retrier makes the API's idempotent operations safe to retry: each logical
// operation carries one idempotency key through every attempt, so that the
// server does its work at most once however many attempts reach it.
type Retrier struct {
	// Client sends the attempts (see NewClient, WithBearer).
	Client ClientInterface
	// Policy bounds the retries.
	Policy Policy
}

// RideCreate books one ride under key, or under a fresh key when key is
// empty (Result.Key tells which). Retried as Do describes; a 201, 202 or
// 402 is the final, stored answer (RideCreateReply.Outcome reads it), and
// Result.Replayed tells whether an earlier request with the key produced
// it.
func (r *Retrier) RideCreate(ctx context.Context, key string, body RideCreateBody) (*Result[*RideCreateReply], error) {
	if key == "" {
		key = NewIdempotencyKey()
	}
	return Do(ctx, r.Policy, key, func(ctx context.Context, key string) (*http.Response, error) {
		return r.Client.RideCreate(ctx, &RideCreateParams{IdempotencyKey: key}, body)
	}, ParseRideCreateReply)
}

// RideRefund refunds ride rideID in full under key, or under a fresh key
// when key is empty. Retried as Do describes; 201 (this key asked for the
// refund), 200 (another key did) and 409 are the final, stored answers.
func (r *Retrier) RideRefund(ctx context.Context, key string, rideID int64) (*Result[*RideRefundReply], error) {
	if key == "" {
		key = NewIdempotencyKey()
	}
	return Do(ctx, r.Policy, key, func(ctx context.Context, key string) (*http.Response, error) {
		return r.Client.RideRefund(ctx, rideID, &RideRefundParams{IdempotencyKey: key})
	}, ParseRideRefundReply)
}

// RideOutcome is what a booking's final answer says of the ride.
type RideOutcome string

const (
	// RideOutcomeCharged: 201, the ride is booked and charged.
	RideOutcomeCharged RideOutcome = "charged"
	// RideOutcomeAuthorized: 201, the ride is booked and its fare held
	// (capture trip): the dispatch side completes it with the final fare
	// (RideComplete), or it is cancelled (RideCancel).
	RideOutcomeAuthorized RideOutcome = "authorized"
	// RideOutcomeRequiresAction: 202, the rider's bank asks the rider to
	// authenticate the payment: send them to the ride's
	// NextAction.RedirectUrl; the ride then moves by itself (RideAwait).
	RideOutcomeRequiresAction RideOutcome = "requires_action"
	// RideOutcomeDeclined: 402, nothing was charged.
	RideOutcomeDeclined RideOutcome = "declined"
	// RideOutcomeBalanceDue: 402, nothing was booked: the rider owes the
	// balance of an earlier ride, which RideCreateReply.Problem().RideID()
	// names. Pay it (RideBalancePay), then book again: the key is free.
	RideOutcomeBalanceDue RideOutcome = "balance_due"
)

// Outcome reads a booking's final answer as what it means: the ride,
// charged, held or waiting for its rider; declined (the 402's problem names
// the declined ride); or refused until the rider pays a balance (the 402's
// problem names the ride that owes it). Any other answer is an error with
// its status.
func (r *RideCreateReply) Outcome() (RideOutcome, *Ride, error) {
	switch {
	case r.JSON201 != nil && r.JSON201.ChargeStatus == RideChargeStatusAuthorized:
		return RideOutcomeAuthorized, r.JSON201, nil
	case r.JSON201 != nil:
		return RideOutcomeCharged, r.JSON201, nil
	case r.JSON202 != nil:
		return RideOutcomeRequiresAction, r.JSON202, nil
	case r.StatusCode() == http.StatusPaymentRequired && r.Problem().Type == ProblemBalanceDue:
		return RideOutcomeBalanceDue, nil, nil
	case r.StatusCode() == http.StatusPaymentRequired:
		return RideOutcomeDeclined, nil, nil
	}
	return "", nil, fmt.Errorf("client: booking answered %d: %s", r.StatusCode(), r.Body)
}

// RideAwait reads ride id every interval (a second when zero) until its
// booking's charge is decided — charged, authorized (a trip's fare held),
// declined or expired; no longer pending or requires_action — and returns
// it as it is then. It stops when ctx ends. A ride waits for its rider at
// most until its next_action.expires_at.
func RideAwait(ctx context.Context, c ClientInterface, id int64, interval time.Duration) (*RideDetail, error) {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		resp, err := c.RideGet(ctx, id)
		if err != nil {
			return nil, err
		}
		reply, err := ParseRideGetReply(resp)
		if err != nil {
			return nil, err
		}
		if reply.JSON200 == nil {
			return nil, fmt.Errorf("client: ride %d answered %d: %s", id, reply.StatusCode(), reply.Body)
		}
		switch reply.JSON200.ChargeStatus {
		case RideDetailChargeStatusPending, RideDetailChargeStatusRequiresAction:
		default:
			return reply.JSON200, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
