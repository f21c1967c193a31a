package service

import (
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// CustomerCreateArgs is the job that registers a user's payment source at
// every payment processor and stores the answers. It is inserted in the
// transaction that creates the user, and in the one that replaces the
// user's source; the processor sees one customer per user and source
// however often the job runs, through the entity-level key derived from the
// deployment's namespace, the rider's normalised email and the source
// ("ar-cu-…", processor_keys.go).
type CustomerCreateArgs struct {
	UserID int64 `json:"user_id"`
	// PaymentSource is the source to register, the rider's current one or
	// not. Empty in jobs inserted before sources could be replaced: the
	// rider's current source.
	PaymentSource string `json:"payment_source,omitempty"`
}

// Kind is the job's kind in River.
func (CustomerCreateArgs) Kind() string { return "customer_create" }

// InsertOpts makes the job unique per user and source.
func (CustomerCreateArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 20, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// RideReceiptArgs is the job that emails the receipt of a charged ride. It is
// inserted in the phase that records the charge, so it exists exactly when the
// charge is recorded.
type RideReceiptArgs struct {
	RideID int64 `json:"ride_id"`
}

// Kind is the job's kind in River.
func (RideReceiptArgs) Kind() string { return "ride_receipt" }

// InsertOpts makes the job unique per ride.
func (RideReceiptArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 25, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// KeyCompleteArgs is the job that drives an abandoned request to completion
// through its flow, from its recovery point, with its stored request. The
// completer inserts it; it is unique per key among live and discarded jobs,
// so a key has at most one completion in flight, and a key whose completion
// was discarded after its last attempt (River's dead letters) waits for an
// operator instead of being queued again.
type KeyCompleteArgs struct {
	KeyID int64 `json:"key_id"`
}

// KeyCompleteMaxAttempts is how often a completion is tried before it is
// discarded; with River's default backoff the attempts span about three hours.
const KeyCompleteMaxAttempts = 10

// Kind is the job's kind in River.
func (KeyCompleteArgs) Kind() string { return "key_complete" }

// InsertOpts makes the job unique per key, discarded jobs included.
func (KeyCompleteArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		MaxAttempts: KeyCompleteMaxAttempts,
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
			rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
			rivertype.JobStateRetryable, rivertype.JobStateScheduled, rivertype.JobStateDiscarded,
		}},
	}
}

// RefundReceiptArgs is the job that emails the receipt of a refunded ride. It
// is inserted in the phase that records the refund, so it exists exactly when
// the refund is recorded, once per ride however many requests asked for it.
type RefundReceiptArgs struct {
	RideID int64 `json:"ride_id"`
}

// Kind is the job's kind in River.
func (RefundReceiptArgs) Kind() string { return "refund_receipt" }

// InsertOpts makes the job unique per ride.
func (RefundReceiptArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 25, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}
