package service

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Code names a kind of domain failure. The HTTP adapter maps each code to a
// status in one table; nothing else in the domain knows about HTTP statuses
// except the stored responses of finished requests.
type Code string

const (
	// CodeInvalid: the input is invalid; Field names the offending field.
	CodeInvalid Code = "invalid"
	// CodeKeyInvalid: the Idempotency-Key header is missing or malformed;
	// Field names it.
	CodeKeyInvalid Code = "idempotency_key_invalid"
	// CodeUnauthenticated: missing or unknown credentials.
	CodeUnauthenticated Code = "unauthenticated"
	// CodeNotFound: the resource does not exist or is not the caller's.
	CodeNotFound Code = "not_found"
	// CodeNotRefundable: the ride has no charge to refund (it is pending or
	// declined). Not stored on the key: a pending ride may be charged later.
	CodeNotRefundable Code = "ride_not_refundable"
	// CodeKeyInUse: another request holds the idempotency key's lease.
	CodeKeyInUse Code = "idempotency_key_in_use"
	// CodeKeyReused: the idempotency key was first used with another request.
	CodeKeyReused Code = "idempotency_key_reused"
	// CodeProcessorUnavailable: the payment processor gave no definitive
	// answer; the request can be retried with the same key.
	CodeProcessorUnavailable Code = "processor_unavailable"
	// CodeInternal: an unexpected failure; the request can be retried with
	// the same key.
	CodeInternal Code = "internal"
	// CodeEventRejected: an inbound message (a webhook) was refused before
	// it was recorded: a missing or bad signature, a stale timestamp, or a
	// body that is not an event.
	CodeEventRejected Code = "event_rejected"
	// CodeEventTooLarge: an inbound message is larger than
	// MaxInboundEventBytes; nothing was recorded.
	CodeEventTooLarge Code = "event_too_large"
	// CodeNotCompletable: the ride holds nothing to capture (charged at
	// booking, not authorized yet, cancelled, expired, declined), or was
	// completed with another fare. Not stored; RideID names the ride.
	CodeNotCompletable Code = "ride_not_completable"
	// CodeNotCancellable: the ride's trip was completed (a refund is the
	// way then), or it holds nothing to release. Not stored.
	CodeNotCancellable Code = "ride_not_cancellable"
	// CodeBalanceDue: the rider owes the balance of the ride RideID and
	// books nothing until it is paid. Not stored: the same key books once
	// the balance is paid.
	CodeBalanceDue Code = "balance_due"
	// CodeNoBalanceDue: the ride owes no balance. Not stored.
	CodeNoBalanceDue Code = "no_balance_due"
)

// Codes returns every Code the domain uses, so that an adapter can prove
// that it translates each of them. A new Code is added here too.
func Codes() []Code {
	return []Code{
		CodeInvalid,
		CodeKeyInvalid,
		CodeUnauthenticated,
		CodeNotFound,
		CodeNotRefundable,
		CodeKeyInUse,
		CodeKeyReused,
		CodeProcessorUnavailable,
		CodeInternal,
		CodeEventRejected,
		CodeEventTooLarge,
		CodeNotCompletable,
		CodeNotCancellable,
		CodeBalanceDue,
		CodeNoBalanceDue,
	}
}

// Error is the domain's error. Message is safe to show to a client; Err
// carries the internal cause, which is logged and never shown.
type Error struct {
	Code    Code
	Message string
	// Field is the input field at fault, for CodeInvalid, as a JSON path
	// relative to its location (e.g. "body.origin_lat", "path.email").
	Field string
	// RetryAfter, when non-zero, tells the client when a retry makes sense.
	RetryAfter time.Duration
	// RideID, when non-zero, is the ride the error is about (a balance
	// due, a ride that cannot be completed): the problem names it.
	RideID int64
	Err    error
}

func (e *Error) Error() string {
	msg := string(e.Code) + ": " + e.Message
	if e.Field != "" {
		msg += " (" + e.Field + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// ErrorCode returns the code of err, CodeInternal for errors that are not
// domain errors.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// Invalid is the error of an invalid input field (a JSON path relative to
// its location, like "body.origin_lat"), its message formatted.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Internal is err as the domain's error: itself when it is one, otherwise
// CodeInternal carrying err, which the client may retry.
func Internal(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Message: "internal error; retry with the same idempotency key", RetryAfter: time.Second, Err: err}
}

// Errors below are translated from PostgreSQL at this boundary.

const (
	sqlStateSerializationFailure = "40001"
	sqlStateDeadlockDetected     = "40P01"
	sqlStateUniqueViolation      = "23505"
	sqlStateForeignKeyViolation  = "23503"
)

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// isRetryable reports whether a transaction that failed with err may succeed
// when run again from its start.
func isRetryable(err error) bool {
	var sc *serializationConflict
	if errors.As(err, &sc) {
		return true
	}
	switch sqlState(err) {
	case sqlStateSerializationFailure, sqlStateDeadlockDetected:
		return true
	}
	return isIDCollision(err)
}

// randomIDKeys are the primary keys of the tables whose ids the database
// makes (time_id(), migration 0012), so that no id a client
// holds is ever handed out again.
var randomIDKeys = map[string]bool{
	"rides_pkey":    true,
	"users_pkey":    true,
	"api_keys_pkey": true,
}

// isIDCollision reports whether err is a random id drawn a second time: a
// unique violation of one of randomIDKeys. Whatever statement inserted the
// row, running its transaction again draws another id.
func isIDCollision(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlStateUniqueViolation && randomIDKeys[pgErr.ConstraintName]
}

// IsNoRows reports whether err is a query that found no row.
func IsNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// IsForeignKeyViolation reports whether err is a row referring to one that
// does not exist (any longer).
func IsForeignKeyViolation(err error) bool { return sqlState(err) == sqlStateForeignKeyViolation }

// serializationConflict marks a unique violation that a rerun resolves.
type serializationConflict struct{ err error }

func (e *serializationConflict) Error() string { return e.err.Error() }
func (e *serializationConflict) Unwrap() error { return e.err }

// RetryableConflict marks err, a unique violation that running the
// transaction again resolves (a concurrent insert of the same row, which
// the rerun finds), as one the engine retries.
func RetryableConflict(err error) error { return &serializationConflict{err} }

// IsUniqueViolation reports whether err is a row that a unique constraint
// refused.
func IsUniqueViolation(err error) bool { return sqlState(err) == sqlStateUniqueViolation }
