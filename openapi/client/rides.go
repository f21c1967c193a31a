package client

import (
	"context"
	"net/http"
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
// empty (Result.Key tells which). Retried as Do describes; a 201 or 402 is
// the final, stored answer, and Result.Replayed tells whether an earlier
// request with the key produced it.
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
