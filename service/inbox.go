package service

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/dbgen"
)

// The inbox receives what processors tell the service (webhook events):
// each message is verified, then recorded under its natural id (the source
// and the event's id, unique together) in the same transaction as the job
// that applies it (InboxApplyArgs), and acknowledged only after that
// commit. A duplicate delivery finds the row and writes nothing. Applying
// is a job (InboxApply): it goes through the domain's flows and moves state
// only forward, so an event is applied exactly once, in any order.

// Inbox sources: the first column of an event's natural id.
const (
	// InboxSourceStripe is Stripe's webhook events, ids "evt_…".
	InboxSourceStripe = "stripe"
)

// MaxInboundEventBytes is the largest message the inbox accepts; Stripe's
// events are a few KiB.
const MaxInboundEventBytes = 1 << 20

// InboundKind is what an inbound event is about, as the domain applies it.
type InboundKind string

const (
	// InboundChargeOutcome: a charge succeeded or failed (Charge is set).
	InboundChargeOutcome InboundKind = "charge_outcome"
	// InboundRefund: a refund of a charge was made or changed (ChargeID is
	// set; Refund when the event carries one).
	InboundRefund InboundKind = "refund"
	// InboundDispute: a dispute of a charge was opened, changed or closed
	// (Dispute is set).
	InboundDispute InboundKind = "dispute"
	// InboundOther: an event the service does not act on.
	InboundOther InboundKind = "other"
)

// DisputeStatus is a ride's dispute (chargeback) state, as Ride.DisputeStatus
// shows it. It only moves forward: none, disputed, then won or lost.
type DisputeStatus string

const (
	// DisputeNone: no dispute was opened.
	DisputeNone DisputeStatus = "none"
	// DisputeOpen: the rider's bank disputes the charge; the outcome is
	// pending.
	DisputeOpen DisputeStatus = "disputed"
	// DisputeWon: the dispute was decided for us; the money stays.
	DisputeWon DisputeStatus = "won"
	// DisputeLost: the dispute was decided for the rider; the money went
	// back through the bank.
	DisputeLost DisputeStatus = "lost"
)

// Dispute is a dispute at the processor.
type Dispute struct {
	ID       string
	ChargeID string
	// Status is the domain's reading of the processor's status.
	Status DisputeStatus
}

// InboundEvent is a message from a processor, parsed by its source's
// adapter into what the domain acts on.
type InboundEvent struct {
	// ID is the event's natural id at its source.
	ID string
	// Type is the processor's event type, e.g. "charge.refunded".
	Type string
	// Created is when the processor made the event.
	Created time.Time
	Kind    InboundKind
	// Namespace is the deployment namespace (ar_ns) of the object the event
	// is about, when the object carries one.
	Namespace string
	// Charge is set for InboundChargeOutcome; its Status is the
	// processor's (ChargeSucceeded or another).
	Charge *Charge
	// ChargeID is the charge an InboundRefund or InboundDispute is about.
	ChargeID string
	// Refund is the refund an InboundRefund carries, if any.
	Refund  *Refund
	Dispute *Dispute
}

// EventRejection is why the inbox refused a message before recording it;
// each is counted (atomicrides_inbox_rejected_total{reason}).
type EventRejection string

const (
	// RejectMissingSignature: no signature came with the message.
	RejectMissingSignature EventRejection = "missing_signature"
	// RejectBadSignature: no configured secret verifies the signature (or
	// its header is malformed).
	RejectBadSignature EventRejection = "bad_signature"
	// RejectStaleTimestamp: the signature is older than the tolerance (a
	// replayed message).
	RejectStaleTimestamp EventRejection = "stale_timestamp"
	// RejectNotAnEvent: the message is signed but is not an event.
	RejectNotAnEvent EventRejection = "not_an_event"
	// RejectTooLarge: the message is larger than MaxInboundEventBytes.
	RejectTooLarge EventRejection = "too_large"
)

// InboxRejectReasons are the reason labels of atomicrides_inbox_rejected_total.
var InboxRejectReasons = []EventRejection{
	RejectMissingSignature, RejectBadSignature, RejectStaleTimestamp, RejectNotAnEvent, RejectTooLarge,
}

func (r EventRejection) Error() string { return "inbound event rejected: " + string(r) }

// EventSource is a processor's adapter of inbound messages: it verifies a
// delivery (its signature scheme, its secrets) and parses a recorded
// message again when the event is applied.
type EventSource interface {
	// Verify checks a delivery's signature and parses it. A refusal is an
	// EventRejection (wrapped or not).
	Verify(payload []byte, signature string) (*InboundEvent, error)
	// Parse parses a message already verified (recorded in the inbox, or
	// fetched from the processor's API).
	Parse(payload []byte) (*InboundEvent, error)
}

// InboxEnabled reports whether the service receives messages from source
// (its EventSource is configured).
func (s *Service) InboxEnabled(source string) bool { return s.inbound[source] != nil }

// InboxReceive verifies a delivery from source and records it with its
// processing job, in one transaction. It returns whether the event was
// already recorded (a duplicate, which writes nothing). A refusal is
// CodeEventRejected (CodeEventTooLarge for a message too large), counted by
// reason; a source that is not configured is CodeNotFound.
func (s *Service) InboxReceive(ctx context.Context, source string, payload []byte, signature string) (duplicate bool, err error) {
	src := s.inbound[source]
	if src == nil {
		return false, &Error{Code: CodeNotFound, Message: "webhooks from " + source + " are not configured"}
	}
	if len(payload) > MaxInboundEventBytes {
		return false, s.reject(source, RejectTooLarge)
	}
	ev, err := src.Verify(payload, signature)
	if err != nil {
		var r EventRejection
		if !errors.As(err, &r) {
			r = RejectNotAnEvent
		}
		s.logger.WarnContext(ctx, "inbound event rejected", "source", source, "reason", string(r), "err", err)
		return false, s.reject(source, r)
	}
	return s.inboxRecord(ctx, source, ev, payload)
}

// inboxRecord records a verified event and inserts its job, once.
func (s *Service) inboxRecord(ctx context.Context, source string, ev *InboundEvent, payload []byte) (duplicate bool, err error) {
	err = s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		n, err := s.queries.InboxEventRecord(ctx, tx, dbgen.InboxEventRecordParams{
			Source: source, EventID: ev.ID, EventType: ev.Type, OccurredAt: ev.Created, Payload: payload,
		})
		if err != nil {
			return err
		}
		duplicate = n == 0
		if duplicate {
			return nil
		}
		_, err = s.jobs.InsertTx(ctx, tx, InboxApplyArgs{Source: source, EventID: ev.ID}, nil)
		return err
	})
	if err != nil {
		return false, internal(err)
	}
	outcome := "recorded"
	if duplicate {
		outcome = "duplicate"
	}
	s.metrics.inboxReceived.WithLabelValues(source, outcome).Inc()
	return duplicate, nil
}

func (s *Service) reject(source string, r EventRejection) error {
	s.metrics.inboxRejected.WithLabelValues(source, string(r)).Inc()
	code := CodeEventRejected
	if r == RejectTooLarge {
		code = CodeEventTooLarge
	}
	return &Error{Code: code, Message: "the message was refused: " + string(r), Err: r}
}
