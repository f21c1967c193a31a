package service

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/atomicrides/atomicrides/dbgen"
)

// The orphan policy: a charge of this deployment (metadata ar_ns) that no
// ride records and no unfinished request may still record — a booking whose
// commits a restore lost and whose client never came back — is refunded in
// full once it is older than the orphan grace period (Config.OrphanRefundAfter),
// with a receipt telling the rider why. The grace outlasts the processor's
// idempotency window: until then a client retrying the lost booking's
// request sends the same charge under the same key and the processor
// answers with this very charge, which the retry records. After the refund,
// such a retry is answered ProblemBookingRefunded (rideChargeCall), never
// charged again. The policy covers every processor: Stripe's charges as
// Stripe lists them, Adyen's as its notifications recorded them
// (notified_charges). It also resolves double charges — a request whose
// ride records a charge at one processor and that another processor
// charged too (a routing commit lost): the charge no ride records is
// refunded at once, since the request is finished and nothing can claim
// it.

// DefaultOrphanRefundAfter is the default of Config.OrphanRefundAfter:
// Stripe's 24-hour idempotency window and a day's margin, so that no
// client retry can still claim the charge when it is refunded.
const DefaultOrphanRefundAfter = 2 * ProcessorKeyWindow

// OrphanScanWindow is how far back beyond the grace period an orphan pass
// lists the processor's charges: two days, so that passes an hour apart
// (or a day, if several are missed) overlap.
const OrphanScanWindow = 48 * time.Hour

// processorKeyOrphanRefund is the attempt of RefundKey an orphan refund is
// made under: the first attempt of a ride's refund, so that a refund of the
// same charge by any path converges on one refund at the processor.
const orphanRefundAttempt = 0

// Orphan refund statuses, as in orphan_refunds.status.
const (
	OrphanRefundPending  = "pending"
	OrphanRefundRefunded = "refunded"
	OrphanRefundFailed   = "failed"
)

// OrphanRefundArgs is the job that refunds an orphan charge recorded in
// orphan_refunds. It is inserted in the transaction that records the
// orphan, so it exists exactly when the orphan is recorded.
type OrphanRefundArgs struct {
	ChargeID string `json:"charge_id"`
}

// Kind is the job's kind in River.
func (OrphanRefundArgs) Kind() string { return "orphan_refund" }

// InsertOpts retries a refund the processor could not answer for a day.
func (OrphanRefundArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 25, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// OrphanReceiptArgs is the job that emails the rider of a refunded orphan
// charge why it was refunded. It is inserted in the transaction that
// records the refund.
type OrphanReceiptArgs struct {
	ChargeID string `json:"charge_id"`
}

// Kind is the job's kind in River.
func (OrphanReceiptArgs) Kind() string { return "orphan_receipt" }

// InsertOpts makes the job unique per charge.
func (OrphanReceiptArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 25, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// OrphanRefundAfter is the orphan grace period the service was configured
// with.
func (s *Service) OrphanRefundAfter() time.Duration { return s.orphanRefundAfter }

// OrphanPassInterval is how often the orphan pass runs for a grace period:
// hourly, or eight times per grace when the grace is shorter than eight
// hours (a test API's short key window), so that an orphan is resolved
// within an eighth of the grace after it ends.
func OrphanPassInterval(grace time.Duration) time.Duration {
	return max(time.Second, min(time.Hour, grace/8))
}

// OrphanRefundsSchedule finds the orphan charges (Reconcile's) created
// more than grace ago, by the database's clock, and records each in
// orphan_refunds with the job that refunds it, in one transaction per
// charge. A charge recorded already (by an earlier pass, or a concurrent
// one) writes nothing. It returns how many it recorded.
func (s *Service) OrphanRefundsSchedule(ctx context.Context, grace time.Duration) (int, error) {
	rep, err := s.Reconcile(ctx, grace+OrphanScanWindow)
	if err != nil {
		return 0, err
	}
	now, err := s.queries.ClockNow(ctx, s.pool)
	if err != nil {
		return 0, Internal(err)
	}
	s.orphansUnresolvedObserved(rep, now, grace)
	scheduled := 0
	// A double charge at once: its request is finished at the other
	// processor, so no retry can claim this charge any more.
	for _, d := range rep.DoubleCharges {
		ch, err := s.orphanCharge(ctx, d.OtherProcessor, d.OtherChargeID)
		if err != nil {
			return scheduled, err
		}
		if ch == nil {
			continue
		}
		userID, email, err := s.doubleChargeRider(ctx, d, ch)
		if err != nil {
			return scheduled, err
		}
		rideID := d.RideID
		n, err := s.orphanRecord(ctx, d.OtherProcessor, OrphanReasonDoubleCharge, ch, userID, email, &rideID)
		if err != nil {
			return scheduled, err
		}
		scheduled += n
	}
	for _, o := range rep.OrphanCharges {
		if !o.Created.Before(now.Add(-grace)) {
			continue
		}
		ch, err := s.orphanCharge(ctx, o.processor, o.ID)
		if err != nil {
			return scheduled, err
		}
		if ch == nil {
			continue
		}
		userID, email, err := s.orphanRider(ctx, ch)
		if err != nil {
			return scheduled, err
		}
		n, err := s.orphanRecord(ctx, o.processor, OrphanReasonOrphan, ch, userID, email, nil)
		if err != nil {
			return scheduled, err
		}
		scheduled += n
	}
	// A hold no ride records: its booking was lost. It took no money, so it
	// is released, not refunded, once no retry of its request can claim
	// it any more (the same grace).
	for _, o := range rep.OrphanHolds {
		if !o.Created.Before(now.Add(-grace)) {
			continue
		}
		if err := s.orphanHoldRelease(ctx, o); err != nil {
			return scheduled, err
		}
	}
	// A refund no ride records whose charge a ride records: the ride's
	// refund commit was lost (or the event was applied before the ride was
	// recorded again). It is recorded on the ride as its event would
	// record it.
	for _, o := range rep.OrphanRefunds {
		if err := s.orphanRefundOfRide(ctx, o); err != nil {
			return scheduled, err
		}
	}
	// Every charge made in a gap of the database's past is seen: the
	// gaps this pass covered need no look-up any more.
	return scheduled, s.databaseGapsResolve(ctx, rep, now, grace)
}

// Why a charge is in orphan_refunds (orphan_refunds.reason).
const (
	// OrphanReasonOrphan: no ride records the charge.
	OrphanReasonOrphan = "orphan"
	// OrphanReasonDoubleCharge: the charge's request has its ride charged
	// at another processor.
	OrphanReasonDoubleCharge = "double_charge"
)

// orphanCharge reads the charge id at the processor name again, as the
// processor holds it now, or, for a processor whose API has no lookup
// (Adyen), as its notification recorded it. nil when it is not a succeeded
// charge of this deployment.
func (s *Service) orphanCharge(ctx context.Context, name, id string) (*Charge, error) {
	proc, err := s.proc(name)
	if err != nil {
		return nil, err
	}
	ch, err := proc.pay.ChargeGet(ctx, id)
	if isUnsupported(err) {
		r, err := s.queries.NotifiedChargeGet(ctx, s.pool, name, id)
		if IsNoRows(err) {
			return nil, nil
		} else if err != nil {
			return nil, Internal(err)
		}
		return notifiedCharge(s.namespace, r), nil
	}
	if err != nil {
		return nil, err
	}
	if ch == nil || ch.Status != ChargeSucceeded || ch.Tag.Namespace != s.namespace {
		return nil, nil
	}
	return ch, nil
}

// doubleChargeRider is the rider of the ride d whose request also made ch:
// the ride's user, if the charge's rider reference is the user's.
func (s *Service) doubleChargeRider(ctx context.Context, d ReconcileDouble, ch *Charge) (*int64, *string, error) {
	ride, err := s.queries.RideGetByCharge(ctx, s.pool, &d.RecordedChargeID)
	if IsNoRows(err) {
		return nil, nil, nil
	} else if err != nil {
		return nil, nil, Internal(err)
	}
	u, err := s.queries.UserGet(ctx, s.pool, ride.UserID)
	if err != nil {
		return nil, nil, Internal(err)
	}
	if ch.Tag.Rider != "" && riderRef(s.namespace, u.Email) != ch.Tag.Rider {
		return nil, nil, nil
	}
	return &u.ID, &u.Email, nil
}

// orphanRecord records ch, a charge at the processor name to resolve for
// reason, in orphan_refunds, once: with the job that refunds it, or, when
// the processor lists an accepted refund of it already (its ride refunded,
// then lost), as refunded with that refund, sending nothing. It returns 1
// when it recorded the charge, 0 when the charge was recorded already (an
// earlier pass, or a concurrent one).
func (s *Service) orphanRecord(ctx context.Context, name, reason string, ch *Charge, userID *int64, email *string, rideID *int64) (int, error) {
	proc, err := s.proc(name)
	if err != nil {
		return 0, err
	}
	// A processor that cannot list a charge's refunds (Adyen) reports
	// its refunds by notification, which record them on their rides.
	before, err := s.acceptedRefundOf(ctx, proc, ch.ID)
	if isUnsupported(err) {
		before, err = nil, nil
	}
	if err != nil {
		return 0, err
	}
	var inserted bool
	err = s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		inserted = false
		if before != nil {
			n, err := s.queries.OrphanRefundRecordRefundedBefore(ctx, tx, dbgen.OrphanRefundRecordRefundedBeforeParams{
				StripeChargeID: ch.ID, ChargeKey: ch.Tag.Key, RiderRef: ch.Tag.Rider,
				AmountCents: ch.AmountCents, Currency: ch.Currency, ChargeCreatedAt: ch.Created,
				UserID: userID, Email: email, StripeRefundID: &before.ID,
				Processor: name, Reason: reason, RideID: rideID,
			})
			inserted = n > 0
			return err
		}
		n, err := s.queries.OrphanRefundRecord(ctx, tx, dbgen.OrphanRefundRecordParams{
			StripeChargeID: ch.ID, ChargeKey: ch.Tag.Key, RiderRef: ch.Tag.Rider,
			AmountCents: ch.AmountCents, Currency: ch.Currency, ChargeCreatedAt: ch.Created,
			UserID: userID, Email: email, Processor: name, Reason: reason, RideID: rideID,
		})
		if err != nil || n == 0 {
			return err
		}
		inserted = true
		_, err = s.jobs.InsertTx(ctx, tx, OrphanRefundArgs{ChargeID: ch.ID}, nil)
		return err
	})
	if err != nil {
		return 0, Internal(err)
	}
	switch {
	case !inserted:
		return 0, nil
	case before != nil:
		s.logger.WarnContext(ctx, "orphan charge: refunded already at the processor, resolved with that refund (nothing sent)",
			"charge", ch.ID, "processor", name, "reason", reason, "refund", before.ID, "amount_cents", ch.AmountCents, "created", ch.Created)
	default:
		s.logger.WarnContext(ctx, "orphan charge: refund scheduled", "charge", ch.ID, "processor", name, "reason", reason,
			"amount_cents", ch.AmountCents, "created", ch.Created, "rider_known", email != nil)
	}
	return 1, nil
}

// orphanRefundOfRide records the orphan refund o on the ride that records
// its charge, through the effect its event has (refundRecordExternal): a
// ride with no refund row gets one, refunded; a pending or failed one is
// set refunded; a ride refunded already stays as it is. A refund whose
// charge no ride records is left to its charge (orphanRecord).
func (s *Service) orphanRefundOfRide(ctx context.Context, o ReconcileOrphan) error {
	if _, err := s.queries.RideGetByCharge(ctx, s.pool, &o.ChargeID); IsNoRows(err) {
		return nil
	} else if err != nil {
		return Internal(err)
	}
	var outcome string
	err := s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		outcome, err = s.refundRecordExternal(ctx, tx, o.ChargeID, &Refund{ID: o.ID, ChargeID: o.ChargeID, AmountCents: o.AmountCents})
		return err
	})
	if err != nil {
		return Internal(err)
	}
	s.logger.WarnContext(ctx, "orphan refund: recorded on its ride", "refund", o.ID, "charge", o.ChargeID, "outcome", outcome)
	return nil
}

// orphansUnresolvedObserved sets atomicrides_orphans_unresolved_past_grace
// from a reconciliation at now: the findings older than the grace and one
// pass interval, which an earlier pass should have resolved.
func (s *Service) orphansUnresolvedObserved(rep *ReconcileReport, now time.Time, grace time.Duration) {
	cutoff := now.Add(-grace - OrphanPassInterval(grace))
	count := func(list []ReconcileOrphan) int {
		n := 0
		for _, o := range list {
			if o.Created.Before(cutoff) {
				n++
			}
		}
		return n
	}
	s.metrics.orphansUnresolved.WithLabelValues("charge").Set(float64(count(rep.OrphanCharges)))
	s.metrics.orphansUnresolved.WithLabelValues("refund").Set(float64(count(rep.OrphanRefunds)))
}

// orphanRider returns the user id and email of the rider an orphan charge
// was made for: the user of the charged customer, or else a user whose customer is
// not recorded (the lost commit may have held it) whose rider reference is
// the charge's. Either way the charge's rider reference (metadata
// ar_rider) must be the user's. nils when no user is known.
func (s *Service) orphanRider(ctx context.Context, ch *Charge) (*int64, *string, error) {
	if ch.CustomerID != "" {
		u, err := s.queries.UserGetByStripeCustomer(ctx, s.pool, &ch.CustomerID)
		if err == nil && riderRef(s.namespace, u.Email) == ch.Tag.Rider {
			return &u.ID, &u.Email, nil
		} else if err != nil && !IsNoRows(err) {
			return nil, nil, Internal(err)
		}
	}
	type user struct {
		ID    int64
		Email string
	}
	var users []user
	if ch.CustomerID != "" && strings.HasPrefix(ch.CustomerID, "cus_") {
		rows, err := s.queries.UserListWithoutStripeCustomer(ctx, s.pool)
		if err != nil {
			return nil, nil, Internal(err)
		}
		for _, u := range rows {
			users = append(users, user{u.ID, u.Email})
		}
	} else {
		// A charge that names no Stripe customer (Adyen's notifications
		// name none): any user may be its rider.
		rows, err := s.queries.UserListAll(ctx, s.pool)
		if err != nil {
			return nil, nil, Internal(err)
		}
		for _, u := range rows {
			users = append(users, user{u.ID, u.Email})
		}
	}
	for _, u := range users {
		if riderRef(s.namespace, u.Email) == ch.Tag.Rider {
			return &u.ID, &u.Email, nil
		}
	}
	return nil, nil, nil
}

// OrphanRefund refunds the orphan charge recorded under chargeID in full,
// under RefundKey of the charge (a pure function of the namespace and the
// processor's charge id), and records the refund with the rider's receipt
// job. A charge the processor says is refunded already adopts the accepted
// refund it lists; a definitive refusal is recorded as failed (an operator
// looks at it) and is not retried. Any other failure leaves the orphan
// pending for the job's retry. It returns the orphan's row as recorded.
func (s *Service) OrphanRefund(ctx context.Context, chargeID string) (*dbgen.OrphanRefund, error) {
	o, err := s.queries.OrphanRefundGet(ctx, s.pool, chargeID)
	if IsNoRows(err) {
		return nil, &Error{Code: CodeNotFound, Message: fmt.Sprintf("no orphan charge %s", chargeID)}
	} else if err != nil {
		return nil, Internal(err)
	}
	if o.Status != OrphanRefundPending {
		return o, nil
	}
	proc, err := s.proc(o.Processor)
	if err != nil {
		return nil, err
	}
	pkey := RefundKey(s.namespace, chargeID, orphanRefundAttempt)
	r, err := proc.pay.RefundCreate(ctx, RefundCreateParams{
		IdempotencyKey: pkey,
		ChargeID:       chargeID,
		AmountCents:    o.AmountCents,
		Currency:       o.Currency,
		Tag:            Tag{Namespace: s.namespace, Rider: o.RiderRef, Key: pkey},
	})
	var failure *PaymentError
	if err != nil {
		pe := PaymentFinal(err)
		if pe == nil && !isIdempotencyMismatch(err) {
			return nil, err
		}
		if (pe != nil && pe.Code == RefundCodeChargeAlreadyRefunded) || isIdempotencyMismatch(err) {
			if r, err = s.acceptedRefundOf(ctx, proc, chargeID); err != nil {
				return nil, err
			}
		}
		if r == nil {
			if pe == nil {
				return nil, err
			}
			failure = pe
		}
	}
	err = s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if failure != nil {
			_, err := s.queries.OrphanRefundSetFailed(ctx, tx, chargeID)
			return err
		}
		n, err := s.queries.OrphanRefundSetRefunded(ctx, tx, &r.ID, chargeID)
		if err != nil || n == 0 {
			return err
		}
		_, err = s.jobs.InsertTx(ctx, tx, OrphanReceiptArgs{ChargeID: chargeID}, nil)
		return err
	})
	if err != nil {
		return nil, Internal(err)
	}
	if failure != nil {
		s.logger.ErrorContext(ctx, "orphan charge: the processor refused its refund", "charge", chargeID, "code", failure.Code)
	}
	if o, err = s.queries.OrphanRefundGet(ctx, s.pool, chargeID); err != nil {
		return nil, Internal(err)
	}
	return o, nil
}

// acceptedRefundOf returns an accepted refund of the charge at proc, or
// nil.
func (s *Service) acceptedRefundOf(ctx context.Context, proc *processor, chargeID string) (*Refund, error) {
	refunds, err := proc.pay.RefundList(ctx, chargeID)
	if err != nil {
		return nil, err
	}
	for _, r := range refunds {
		if r.Accepted() {
			return r, nil
		}
	}
	return nil, nil
}

// orphanHoldRelease releases the hold o whose booking was lost, under the
// release key of its booking's processor key (the key a ride of it would
// release it under): once, however many passes see it before the
// processor lists it released.
func (s *Service) orphanHoldRelease(ctx context.Context, o ReconcileOrphan) error {
	if o.PaymentID == "" || o.ProcessorKey == "" {
		return nil
	}
	proc, err := s.proc(o.processor)
	if err != nil {
		return err
	}
	_, err = proc.pay.PaymentCancel(ctx, PaymentCancelParams{
		IdempotencyKey: releaseKey(o.ProcessorKey), PaymentID: o.PaymentID, Reference: o.ProcessorKey, Hold: true,
	})
	if pe := PaymentFinal(err); pe != nil && pe.Code == PaymentCodeUnexpectedState {
		// Captured or released meanwhile: nothing is held any more.
		return nil
	}
	if err != nil {
		return err
	}
	// A processor that lists no payments (Adyen) is read from its
	// notifications: the hold is marked released there.
	if _, err := s.queries.NotifiedChargeSetReleased(ctx, s.pool, o.processor, o.ID); err != nil {
		return Internal(err)
	}
	s.metrics.holdsOrphanReleased.WithLabelValues(o.processor).Inc()
	s.logger.InfoContext(ctx, "orphan pass: released the hold of a booking the database lost",
		"charge", o.ID, "payment", o.PaymentID, "processor", o.processor)
	return nil
}
