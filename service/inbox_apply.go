package service

import (
	"cmp"
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/service/audit"
)

// Outcomes of applying an inbound event, as recorded on its row (outcome)
// and counted (atomicrides_inbox_applied_total{outcome}).
const (
	InboxOutcomeCompleted       = "request_completed"
	InboxOutcomeAlreadyRecorded = "already_recorded"
	InboxOutcomeRefundRecorded  = "refund_recorded"
	InboxOutcomeNoRefund        = "no_accepted_refund"
	InboxOutcomeDisputeMoved    = "dispute_updated"
	InboxOutcomeDisputeStale    = "dispute_stale"
	InboxOutcomeOrphanCharge    = "orphan_charge"
	InboxOutcomeUnknownCharge   = "unknown_charge"
	InboxOutcomeForeign         = "ignored_other_deployment"
	InboxOutcomeForeignAccount  = "ignored_other_account"
	InboxOutcomeIgnoredType     = "ignored_type"
	// Outcomes of a trip's events (trips.go, ride_cancel.go).
	InboxOutcomeTripCaptured  = "trip_captured"
	InboxOutcomeCaptureFailed = "capture_failed"
	InboxOutcomeHoldReleased  = "hold_released"
	// InboxOutcomeCancelFailed: the processor refused a cancel of a
	// waiting ride's payment; the ride waits for the operator
	// (ride_cancel.go).
	InboxOutcomeCancelFailed = "cancel_failed"
)

// InboxApplyArgs is the job that applies one recorded inbound event. It is
// inserted in the transaction that records the event, and is unique per
// event.
type InboxApplyArgs struct {
	Source  string `json:"source"`
	EventID string `json:"event_id"`
}

// Kind is the job's kind in River.
func (InboxApplyArgs) Kind() string { return "inbox_apply" }

// InsertOpts makes the job unique per event while it is live.
func (InboxApplyArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 25, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// effect is the database side of applying an event: it runs in the
// transaction that marks the event applied, and returns the outcome.
type effect func(ctx context.Context, tx pgx.Tx) (string, error)

// InboxApply applies the recorded event source/eventID exactly once and
// returns its outcome. Calls to the processor (the object's current state,
// driving a stored request) happen before any transaction; the effect on
// the domain and the mark "applied" commit together, under the event row's
// lock, so an event is applied once however often this runs. An event
// already applied returns its recorded outcome.
func (s *Service) InboxApply(ctx context.Context, source, eventID string) (string, error) {
	row, err := s.queries.InboxEventGet(ctx, s.pool, source, eventID)
	if IsNoRows(err) {
		return "", &Error{Code: CodeNotFound, Message: fmt.Sprintf("no inbound event %s/%s", source, eventID)}
	}
	if err != nil {
		return "", Internal(err)
	}
	if row.AppliedAt != nil {
		return *row.Outcome, nil
	}
	src := s.inbound[source]
	if src == nil {
		return "", Internal(fmt.Errorf("inbound event %s/%s: source not configured", source, eventID))
	}
	ev, err := src.Parse(row.Payload)
	if err != nil {
		return "", Internal(fmt.Errorf("inbound event %s/%s: %w", source, eventID, err))
	}
	eff, err := s.prepare(ctx, ev)
	if err != nil {
		return "", err
	}
	var (
		outcome string
		applied bool // by this call: its effects are counted once
	)
	err = s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		locked, err := s.queries.InboxEventLock(ctx, tx, source, eventID)
		if err != nil {
			return err
		}
		if locked.AppliedAt != nil {
			outcome = *locked.Outcome
			return nil
		}
		applied = true
		if outcome, err = eff(ctx, tx); err != nil {
			return err
		}
		_, err = s.queries.InboxEventSetApplied(ctx, tx, dbgen.InboxEventSetAppliedParams{Outcome: outcome, Source: source, EventID: eventID})
		return err
	})
	if err != nil {
		return "", Internal(err)
	}
	s.metrics.inboxApplied.WithLabelValues(source, string(ev.Kind), outcome).Inc()
	s.countAction(outcome, actionViaEvent)
	switch {
	case !applied:
	case outcome == InboxOutcomeDisputeMoved:
		s.metrics.disputes.WithLabelValues(string(ev.Dispute.Status)).Inc()
	case outcome == InboxOutcomeCancelFailed:
		s.metrics.cancelsFailed.WithLabelValues(cmp.Or(ev.Processor, ProcessorStripe)).Inc()
	}
	return outcome, nil
}

// prepare does what an event needs outside a transaction and returns its
// effect.
func (s *Service) prepare(ctx context.Context, ev *InboundEvent) (effect, error) {
	if ev.ForeignAccount {
		return constant(InboxOutcomeForeignAccount), nil
	}
	if ev.Namespace != "" && ev.Namespace != s.namespace {
		return constant(InboxOutcomeForeign), nil
	}
	switch ev.Kind {
	case InboundChargeOutcome:
		return s.prepareChargeOutcome(ctx, ev)
	case InboundPayment:
		return s.preparePayment(ctx, ev)
	case InboundCapture:
		return s.prepareCapture(ctx, ev)
	case InboundRefund:
		return s.prepareRefund(ctx, ev)
	case InboundDispute:
		if err := s.waitForBooking(ctx, ev.Processor, ev.Dispute.ChargeID); err != nil {
			return nil, err
		}
		return s.disputeEffect(ev), nil
	}
	return constant(InboxOutcomeIgnoredType), nil
}

func constant(outcome string) effect {
	return func(context.Context, pgx.Tx) (string, error) { return outcome, nil }
}

// prepareChargeOutcome: a charge made under the processor key of an
// unfinished ride request lets that request finish now, through the same
// engine as its client's retry and the completer (KeyComplete): the flow
// sends the same charge request under the same key, the processor answers
// with what it did, and the flow records it. A charge that a ride records
// already needs nothing; one that no ride and no request knows is an
// orphan (a booking lost with a restore), resolved by the orphan policy.
func (s *Service) prepareChargeOutcome(ctx context.Context, ev *InboundEvent) (effect, error) {
	ch := ev.Charge
	if ch.Tag.Namespace != s.namespace {
		return constant(InboxOutcomeForeign), nil
	}
	eff, err := s.waitingRideEffect(ctx, ev.Processor, ch)
	if err == nil && eff == nil {
		eff, err = s.chargeOutcomeEffect(ctx, ch)
	}
	if err != nil || ev.Processor == "" || ev.Processor == ProcessorStripe || (ch.Status != ChargeSucceeded && ch.Status != ChargeAuthorized) ||
		ch.AmountCents <= 0 || ch.Tag.Key == "" || len(ch.Currency) != 3 {
		return eff, err
	}
	// A processor whose API lists no charges (Adyen): the charge is
	// recorded as notified, whatever became of it, so that
	// reconciliation sees it — an orphan, or a second charge of a request
	// whose ride was charged at another processor.
	return func(ctx context.Context, tx pgx.Tx) (string, error) {
		if _, err := s.queries.NotifiedChargeRecord(ctx, tx, dbgen.NotifiedChargeRecordParams{
			Processor: ev.Processor, ChargeID: ch.ID, ChargeKey: ch.Tag.Key, RiderRef: ch.Tag.Rider,
			AmountCents: ch.AmountCents, Currency: ch.Currency, ChargedAt: ch.Created, Hold: ch.Status == ChargeAuthorized,
		}); err != nil {
			return "", err
		}
		return eff(ctx, tx)
	}, nil
}

// preparePayment: a payment of this deployment moved at the processor. A
// ride waiting for its rider under the payment's key moves on with it
// (waitingRideEffect); a succeeded payment that no ride records yet lets
// its unfinished request finish now, like a charge outcome; anything else
// is recorded already, or will be by its booking.
func (s *Service) preparePayment(ctx context.Context, ev *InboundEvent) (effect, error) {
	p := ev.Charge
	if p.Tag.Namespace != "" && p.Tag.Namespace != s.namespace {
		// (Adyen's CANCELLATION carries no tag: its merchant reference
		// names this deployment's payment, or none of ours.)
		return constant(InboxOutcomeForeign), nil
	}
	if p.Status == ChargeCancelFailed {
		return s.cancelFailedEffect(ctx, ev.Processor, p)
	}
	eff, err := s.waitingRideEffect(ctx, ev.Processor, p)
	if err != nil || eff != nil {
		return eff, err
	}
	if eff, err := s.holdExpiredEffect(ctx, ev.Processor, p); err != nil || eff != nil {
		return eff, err
	}
	if p.Status == ChargeSucceeded && p.ID != "" {
		return s.chargeOutcomeEffect(ctx, p)
	}
	return constant(InboxOutcomeAlreadyRecorded), nil
}

// waitingRideEffect is what an event about payment p does to the ride made
// under its key, when that ride waits for its rider at the event's
// processor; nil for every other event. A ride waiting
// for its rider moves to the payment's outcome as the processor tells it
// now (an event may be stale or out of order; Stripe's PaymentIntent is
// read again, Adyen's notification is its outcome); a ride that moved on
// already needs nothing. A ride whose booking is not recorded yet (the
// event came before the booking's answer) is waited for: CodeKeyInUse, and
// the job runs again.
func (s *Service) waitingRideEffect(ctx context.Context, processor string, p *Charge) (effect, error) {
	if p.Tag.Key == "" {
		return nil, nil
	}
	ride, err := s.queries.RideGetByChargeKey(ctx, s.pool, &p.Tag.Key)
	if IsNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, Internal(err)
	}
	if processor == "" {
		processor = ProcessorStripe
	}
	if RideChargeStatus(ride.ChargeStatus) != RideChargeRequiresAction || ride.Processor != processor {
		// Not waiting (or waiting at another processor): the event is
		// about a charge as any other (recorded, orphan, or a second
		// charge of the request).
		return nil, nil
	}
	proc, err := s.proc(ride.Processor)
	if err != nil {
		return nil, err
	}
	now, err := s.paymentNow(ctx, proc, ride)
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = p
	}
	return func(ctx context.Context, tx pgx.Tx) (string, error) {
		return s.rideActionApply(ctx, tx, ride, now, actionViaEvent)
	}, nil
}

// chargeOutcomeEffect is what a charge outcome of this deployment does:
// see prepareChargeOutcome.
func (s *Service) chargeOutcomeEffect(ctx context.Context, ch *Charge) (effect, error) {
	if _, err := s.queries.RideGetByCharge(ctx, s.pool, &ch.ID); err == nil {
		return constant(InboxOutcomeAlreadyRecorded), nil
	} else if !IsNoRows(err) {
		return nil, Internal(err)
	}
	keyID, err := s.unfinishedRideKey(ctx, ch.Tag.Key)
	if err != nil {
		return nil, err
	}
	if keyID == 0 {
		// The request may have finished between the two reads, recording
		// the charge on its ride with its key's answer: read the ride
		// again, now that no unfinished request can record it.
		if _, err := s.queries.RideGetByCharge(ctx, s.pool, &ch.ID); err == nil {
			return constant(InboxOutcomeAlreadyRecorded), nil
		} else if !IsNoRows(err) {
			return nil, Internal(err)
		}
		if ch.Status != ChargeSucceeded {
			return constant(InboxOutcomeAlreadyRecorded), nil
		}
		return constant(InboxOutcomeOrphanCharge), nil
	}
	// A request that holds its lease (its client's, the completer's) fails
	// this attempt with CodeKeyInUse: the job runs again, and then finds
	// the request finished or free.
	resp, err := s.KeyComplete(ctx, keyID)
	if err != nil {
		return nil, err
	}
	if resp.Replayed {
		// Another path (the client's retry, the completer, the event's
		// twin about the same payment) finished the request meanwhile.
		return constant(InboxOutcomeAlreadyRecorded), nil
	}
	return constant(InboxOutcomeCompleted), nil
}

// waitForBooking fails with CodeKeyInUse while no ride records chargeID
// but an unfinished ride request will (the charge was made under its
// processor key): an event about the charge (a refund in the dashboard, a
// dispute) that arrives before the booking is recorded is applied once it
// is (the job retries), rather than found about an unknown charge. The
// charge is read at the event's processor (processor "" is Stripe); one
// whose API has no lookup (Adyen) is applied as it stands.
func (s *Service) waitForBooking(ctx context.Context, processor, chargeID string) error {
	if _, err := s.queries.RideGetByCharge(ctx, s.pool, &chargeID); err == nil {
		return nil
	} else if !IsNoRows(err) {
		return Internal(err)
	}
	if processor == "" {
		processor = ProcessorStripe
	}
	proc, err := s.proc(processor)
	if err != nil {
		return err
	}
	ch, err := proc.pay.ChargeGet(ctx, chargeID)
	if isUnsupported(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ch == nil || ch.Tag.Namespace != s.namespace {
		return nil
	}
	keyID, err := s.unfinishedRideKey(ctx, ch.Tag.Key)
	if err != nil {
		return err
	}
	if keyID != 0 {
		return &Error{Code: CodeKeyInUse, Message: fmt.Sprintf("charge %s: its booking (key %d) is not recorded yet", chargeID, keyID)}
	}
	return nil
}

// unfinishedRideKey returns the id of the unfinished ride request whose
// charge goes under the processor key pkey, or 0.
func (s *Service) unfinishedRideKey(ctx context.Context, pkey string) (int64, error) {
	if pkey == "" {
		return 0, nil
	}
	keys, err := s.queries.IdempotencyKeyListUnfinishedRideIDs(ctx, s.pool, s.rides.Name)
	if err != nil {
		return 0, Internal(err)
	}
	for _, k := range keys {
		if ChargeKey(s.namespace, k.Email, k.IdempotencyKey) == pkey {
			return k.ID, nil
		}
	}
	return 0, nil
}

// prepareRefund: a refund of a ride's charge, made by this service or
// outside it (the processor's dashboard), is recorded on the ride. The
// event may be stale, so the charge's refunds are read now, from the
// processor: the ride records the accepted refund, if there is one, and a
// refund once recorded stays (a later failure of it is the operator's).
func (s *Service) prepareRefund(ctx context.Context, ev *InboundEvent) (effect, error) {
	eff, err := s.refundEffect(ctx, ev)
	if err != nil || ev.Processor == "" || ev.Processor == ProcessorStripe || ev.Refund == nil ||
		!ev.Refund.Accepted() || ev.Refund.AmountCents <= 0 {
		return eff, err
	}
	// A processor whose API lists no refunds (Adyen): the refund is
	// recorded as notified, whatever became of it, so that the orphan
	// pass finds it on a ride booked again after a restore lost both.
	return func(ctx context.Context, tx pgx.Tx) (string, error) {
		if _, err := s.queries.NotifiedRefundRecord(ctx, tx, dbgen.NotifiedRefundRecordParams{
			Processor: ev.Processor, RefundID: ev.Refund.ID, ChargeID: ev.ChargeID,
			AmountCents: ev.Refund.AmountCents, RefundedAt: ev.Created,
		}); err != nil {
			return "", err
		}
		return eff(ctx, tx)
	}, nil
}

// refundEffect is what a refund event does to the ride of its charge:
// see prepareRefund.
func (s *Service) refundEffect(ctx context.Context, ev *InboundEvent) (effect, error) {
	if err := s.waitForBooking(ctx, ev.Processor, ev.ChargeID); err != nil {
		return nil, err
	}
	if _, err := s.queries.RideGetByCharge(ctx, s.pool, &ev.ChargeID); IsNoRows(err) {
		return constant(InboxOutcomeUnknownCharge), nil
	} else if err != nil {
		return nil, Internal(err)
	}
	// An event is about its processor's charges: the refunds are read
	// from that processor. One whose API lists no refunds (Adyen) tells
	// the refund's outcome in the notification itself.
	name := ev.Processor
	if name == "" {
		name = ProcessorStripe
	}
	proc, err := s.proc(name)
	if err != nil {
		return nil, err
	}
	refunds, err := proc.pay.RefundList(ctx, ev.ChargeID)
	switch {
	case isUnsupported(err) && ev.Refund != nil:
		refunds = []*Refund{ev.Refund}
	case err != nil:
		return nil, err
	}
	var accepted *Refund
	for _, r := range refunds {
		if r.Accepted() {
			accepted = r
			break
		}
	}
	if accepted == nil {
		return constant(InboxOutcomeNoRefund), nil
	}
	return func(ctx context.Context, tx pgx.Tx) (string, error) {
		return s.refundRecordExternal(ctx, tx, ev.ChargeID, accepted)
	}, nil
}

// refundRecordExternal records r, a refund the processor accepted, on the
// ride of chargeID: created refunded when the ride has no refund row, set
// refunded when its row is pending or failed; a row already refunded
// stays as it is. The rider's refund receipt is queued with it. A ride
// whose hold was released (cancelled, expired) took nothing and never
// records a refund, whatever the processor lists: what it shows refunded
// of that charge is the released authorization (InboxOutcomeNoRefund).
func (s *Service) refundRecordExternal(ctx context.Context, tx pgx.Tx, chargeID string, r *Refund) (string, error) {
	ride, err := s.queries.RideLockByCharge(ctx, tx, &chargeID)
	if err != nil {
		return "", err
	}
	if r.Release || tookNothing(RideChargeStatus(ride.ChargeStatus)) {
		return InboxOutcomeNoRefund, nil
	}
	ref, err := s.queries.RefundLockByRide(ctx, tx, ride.ID)
	switch {
	case IsNoRows(err):
		ref, err = s.queries.RefundRecordExternal(ctx, tx, dbgen.RefundRecordExternalParams{
			RideID: ride.ID, StripeRefundID: r.ID, AmountCents: ride.AmountCents, Currency: ride.Currency,
		})
		if err != nil {
			return "", err
		}
	case err != nil:
		return "", err
	case RideRefundStatus(ref.Status) == RideRefundRefunded:
		return InboxOutcomeAlreadyRecorded, nil
	default:
		if _, err := s.queries.RefundSetRefunded(ctx, tx, r.ID, ride.ID); err != nil {
			return "", err
		}
	}
	if err := audit.Record(ctx, tx, "refund.recorded_from_processor", "refund", ref.ID, ride.UserID, nil, map[string]any{
		"ride_id": ride.ID, "stripe_refund_id": r.ID, "amount_cents": r.AmountCents,
	}); err != nil {
		return "", err
	}
	if _, err := s.jobs.InsertTx(ctx, tx, RefundReceiptArgs{RideID: ride.ID}, nil); err != nil {
		return "", err
	}
	return InboxOutcomeRefundRecorded, nil
}

// tookNothing reports whether a ride in status st ended without taking
// money: its hold released (cancelled, expired; an authentication never
// finished expires too).
func tookNothing(st RideChargeStatus) bool {
	return st == RideChargeCancelled || st == RideChargeExpired
}

// disputeEffect moves the ride's dispute forward to the event's status. A
// dispute's status only moves forward too (opened, then won or lost), so
// the status an event carries is applied under that rule, and a stale
// event changes nothing.
func (s *Service) disputeEffect(ev *InboundEvent) effect {
	return func(ctx context.Context, tx pgx.Tx) (string, error) {
		d := ev.Dispute
		ride, err := s.queries.RideLockByCharge(ctx, tx, &d.ChargeID)
		if IsNoRows(err) {
			return InboxOutcomeUnknownCharge, nil
		}
		if err != nil {
			return "", err
		}
		n, err := s.queries.RideSetDispute(ctx, tx, dbgen.RideSetDisputeParams{
			DisputeStatus: string(d.Status), StripeDisputeID: d.ID, ID: ride.ID,
		})
		if err != nil {
			return "", err
		}
		if n == 0 {
			return InboxOutcomeDisputeStale, nil
		}
		if err := audit.Record(ctx, tx, "ride.dispute_"+string(d.Status), "ride", ride.ID, ride.UserID, nil, map[string]any{
			"stripe_dispute_id": d.ID, "charge_id": d.ChargeID,
		}); err != nil {
			return "", err
		}
		return InboxOutcomeDisputeMoved, nil
	}
}
