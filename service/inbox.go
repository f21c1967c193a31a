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
	// InboxSourceAdyen is Adyen's standard notifications, one row per
	// notification item, ids "<pspReference>:<eventCode>:<success>".
	InboxSourceAdyen = "adyen"
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
	// InboundPayment: a payment that may have waited for its rider moved
	// (a Stripe PaymentIntent succeeded, failed or was cancelled): Charge
	// is the payment as the event tells it, with PaymentID set.
	InboundPayment InboundKind = "payment"
	// InboundCapture: the capture of a trip's hold was made or failed
	// (Charge is the capture: PaymentID the payment, ID the capture,
	// CapturedCents what was captured; Status ChargeFailed when it failed).
	InboundCapture InboundKind = "capture"
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
	// Processor is the processor whose objects the event is about; ""
	// is Stripe.
	Processor string
	// ForeignAccount: the event is about another account at the processor
	// (Adyen: another merchant account). It is acknowledged, counted and
	// ignored.
	ForeignAccount bool
}

// InboundMessage is one verified message of a delivery and its own
// payload, as the inbox records it.
type InboundMessage struct {
	Event   *InboundEvent
	Payload []byte
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

// BatchEventSource is an EventSource whose deliveries carry several
// messages, each verified on its own (Adyen's notification items). The
// inbox records each under its own natural id, all in one transaction, and
// refuses the whole delivery when any message is refused.
type BatchEventSource interface {
	EventSource
	// VerifyBatch checks a delivery and returns its messages, each with
	// the payload Parse reads back. A refusal is an EventRejection.
	VerifyBatch(payload []byte, signature string) ([]InboundMessage, error)
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
	var msgs []InboundMessage
	if batch, ok := src.(BatchEventSource); ok {
		msgs, err = batch.VerifyBatch(payload, signature)
	} else {
		var ev *InboundEvent
		if ev, err = src.Verify(payload, signature); err == nil {
			msgs = []InboundMessage{{Event: ev, Payload: payload}}
		}
	}
	if err != nil {
		var r EventRejection
		if !errors.As(err, &r) {
			r = RejectNotAnEvent
		}
		s.logger.WarnContext(ctx, "inbound event rejected", "source", source, "reason", string(r), "err", err)
		return false, s.reject(source, r)
	}
	return s.inboxRecord(ctx, source, msgs)
}

// inboxRecord records verified messages, each with its job, once, in one
// transaction. duplicate: every message was recorded already.
func (s *Service) inboxRecord(ctx context.Context, source string, msgs []InboundMessage) (duplicate bool, err error) {
	var recorded int
	err = s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		recorded = 0
		for _, m := range msgs {
			ev := m.Event
			n, err := s.queries.InboxEventRecord(ctx, tx, dbgen.InboxEventRecordParams{
				Source: source, EventID: ev.ID, EventType: ev.Type, OccurredAt: ev.Created, Payload: m.Payload,
			})
			if err != nil {
				return err
			}
			if n == 0 {
				continue
			}
			recorded++
			if _, err = s.jobs.InsertTx(ctx, tx, InboxApplyArgs{Source: source, EventID: ev.ID}, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return false, Internal(err)
	}
	s.metrics.inboxReceived.WithLabelValues(source, "recorded").Add(float64(recorded))
	s.metrics.inboxReceived.WithLabelValues(source, "duplicate").Add(float64(len(msgs) - recorded))
	return recorded == 0, nil
}

func (s *Service) reject(source string, r EventRejection) error {
	s.metrics.inboxRejected.WithLabelValues(source, string(r)).Inc()
	code := CodeEventRejected
	if r == RejectTooLarge {
		code = CodeEventTooLarge
	}
	return &Error{Code: code, Message: "the message was refused: " + string(r), Err: r}
}
