package service

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/service/idem"
)

// The domain's side of the idempotency engine (package idem): the names
// the service's API has always given its types, the engine's errors
// translated into the domain's, and what the engine does counted in the
// service's metrics.

// RecoveryPoint names the last atomic phase a request committed (idem).
type RecoveryPoint = idem.RecoveryPoint

// Response is the answer to a request made under an idempotency key (idem).
type Response = idem.Response

const (
	// RecoveryPointStarted is the point of a newly claimed key.
	RecoveryPointStarted = idem.Started
	// RecoveryPointFinished is the point of a key with a stored response.
	RecoveryPointFinished = idem.Finished
)

// DefaultReplayCacheTTL is how long a process answers replays of a finished
// key from memory, unless Config.ReplayCacheTTL says otherwise.
const DefaultReplayCacheTTL = idem.DefaultReplayTTL

// run serves req with flow through the engine, in the domain's errors.
func run[S any](ctx context.Context, s *Service, flow *idem.Flow[S], req idem.Request) (*Response, error) {
	resp, err := idem.Run(ctx, s.engine, flow, req)
	return resp, engineError(err)
}

// engineError translates what the engine returns into the error the client
// sees. Nothing here is final: the request can be retried.
func engineError(err error) error {
	var (
		inUse *idem.KeyInUseError
		pe    *PaymentError
	)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, idem.ErrKeyReused):
		return errKeyReused
	case errors.As(err, &inUse):
		return keyInUse(inUse.RetryAfter)
	case errors.Is(err, idem.ErrLeaseLost):
		return keyInUse(time.Second)
	case errors.Is(err, idem.ErrKeyNotFound):
		return &Error{Code: CodeNotFound, Message: "no such idempotency key"}
	case errors.As(err, &pe):
		return &Error{
			Code:       CodeProcessorUnavailable,
			Message:    "the payment processor is unavailable; retry with the same idempotency key",
			RetryAfter: 2 * time.Second,
			Err:        err,
		}
	}
	return Internal(err)
}

func keyInUse(retryAfter time.Duration) *Error {
	return &Error{
		Code:       CodeKeyInUse,
		Message:    "another request with this idempotency key is in progress; retry later",
		RetryAfter: retryAfter,
	}
}

var errKeyReused = &Error{
	Code:    CodeKeyReused,
	Message: "this idempotency key was already used with a different request",
}

// engineObserver counts what the engine does in the service's metrics.
type engineObserver struct{ m *metrics }

func (o engineObserver) Replayed()   { o.m.replays.Add(1) }
func (o engineObserver) Conflicted() { o.m.conflicts.Add(1) }
func (o engineObserver) TxRetried()  { o.m.txRetry() }
func (o engineObserver) PhaseDone(flow string, from RecoveryPoint, d time.Duration) {
	o.m.phase(flow, from, d)
}

// inTx runs fn in one transaction of the engine (idem.Engine.InTx).
func (s *Service) inTx(ctx context.Context, iso pgx.TxIsoLevel, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return s.engine.InTx(ctx, iso, fn)
}
