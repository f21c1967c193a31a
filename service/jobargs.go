package service

import "github.com/riverqueue/river"

// CustomerCreateArgs is the job that creates a user's customer at the
// payment processor and stores its id. It is inserted in the transaction that
// creates the user; the processor sees one customer per user however often
// the job runs, through the entity-level key "user-<id>-customer".
type CustomerCreateArgs struct {
	UserID int64 `json:"user_id"`
}

// Kind is the job's kind in River.
func (CustomerCreateArgs) Kind() string { return "customer_create" }

// InsertOpts makes the job unique per user.
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
