package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/service/audit"
	"github.com/atomicrides/atomicrides/service/idem"
)

// RecoveryPointReleaseRequested: the ride is cancelling; the release of its
// hold at the processor comes next.
const RecoveryPointReleaseRequested RecoveryPoint = "release_requested"

// The route of a ride's cancellation, POST /rides/{id}/cancel.
const (
	RideCancelMethod = http.MethodPost
	RideCancelPath   = "/rides/{id}/cancel"
)

// Reasons a hold is released (rides.release_reason), which are the states
// the ride ends in.
const (
	releaseCancelled = string(RideChargeCancelled)
	releaseExpired   = string(RideChargeExpired)
)

// RideCancelParams is the input of a ride's cancellation: the ride, from
// the path, and whether the dispatch side asks (any ride) or its rider.
type RideCancelParams struct {
	RideID   int64 `json:"ride_id"`
	Dispatch bool  `json:"dispatch,omitempty"`
}

// RideCancel cancels a trip before it is completed and releases its hold,
// under the caller's idempotency key: the rider's for their own ride
// (userID), or the dispatch side's for any ride (userID 0). A ride is
// cancelled once, whatever the keys: the request that cancelled it gets
// 201, any other 200 with the same ride. A ride completed (or being
// completed) is CodeNotCancellable: a refund is the way then; so is one
// that holds nothing. A ride that is not the rider's is CodeNotFound. None
// of these refusals writes anything.
func (s *Service) RideCancel(ctx context.Context, userID int64, idempotencyKey string, rideID int64, ip *netip.Addr) (*Response, error) {
	if rideID < 1 {
		return nil, Invalid("path.id", "must be a ride id (1 or more)")
	}
	params := RideCancelParams{RideID: rideID}
	if userID == 0 {
		userID, params.Dispatch = s.dispatchID, true
	}
	return run(ctx, s, s.cancellations, idem.Request{
		UserID: userID,
		Key:    idempotencyKey,
		Method: RideCancelMethod,
		Path:   idem.RequestPath(RideCancelPath, rideID),
		Params: params,
		IP:     ip,
	})
}

// cancelState is what the cancellation flow knows while it runs.
type cancelState struct {
	params RideCancelParams
	ride   *dbgen.Ride
	// captured is the hold's payment when the processor shows it
	// captured: the cancellation lost to a completion it did not see.
	captured *Charge
	// requested: the processor took the release on and tells its outcome
	// later (Adyen); the ride waits in cancelling until it does.
	requested bool
}

func (s *Service) cancelFlow() *idem.Flow[cancelState] {
	return &idem.Flow[cancelState]{
		Name:   "ride.cancel",
		Method: RideCancelMethod,
		Path:   RideCancelPath,
		Load: func(ctx context.Context, tx pgx.Tx, key *idem.Key) (*cancelState, error) {
			st := &cancelState{}
			var err error
			st.ride, _, err = s.tripLoad(ctx, tx, key, &st.params, &st.params.RideID)
			return st, err
		},
		Steps: map[RecoveryPoint]idem.Step[cancelState]{
			RecoveryPointStarted: {Phase: s.cancelRequestPhase},
			RecoveryPointReleaseRequested: {
				Call: func(ctx context.Context, _ *idem.Key, st *cancelState) error {
					st.captured, st.requested = nil, false
					if RideChargeStatus(st.ride.ChargeStatus) != RideChargeCancelling {
						return nil
					}
					requested, err := s.holdRelease(ctx, st.ride)
					if st.captured = capturedNow(err); st.captured != nil {
						return nil
					}
					st.requested = requested
					return err
				},
				Phase: func(ctx context.Context, tx pgx.Tx, key *idem.Key, st *cancelState) (idem.Outcome, error) {
					if p := st.captured; p != nil {
						if _, err := s.tripRecognised(ctx, tx, st.ride.ID, p.CapturedCents, p.ID); err != nil {
							return idem.Outcome{}, err
						}
						return idem.Finish(http.StatusConflict, Problem{Type: ProblemTripCaptured, Title: "Trip captured",
							Status: http.StatusConflict, RideID: st.ride.ID,
							Detail: "the trip's fare was captured already; the ride is completed, not cancelled: refund it instead"}), nil
					}
					if st.requested {
						// Taken on: the processor's notification releases
						// it (it may have done so already).
						if _, err := s.queries.RideCancelRequested(ctx, tx, st.ride.ID); err != nil {
							return idem.Outcome{}, err
						}
					} else if _, err := s.holdReleased(ctx, tx, st.ride.ID, "request"); err != nil {
						return idem.Outcome{}, err
					}
					ride, err := s.queries.RideGet(ctx, tx, st.ride.ID)
					if err != nil {
						return idem.Outcome{}, err
					}
					if RideChargeStatus(ride.ChargeStatus) == RideChargeCancelling && ride.ReleaseReason != nil &&
						*ride.ReleaseReason == releaseCancelled {
						return idem.Finish(http.StatusAccepted, rideFromRow(ride)), nil
					}
					return cancelAnswer(key, ride)
				},
			},
		},
	}
}

// cancelRequestPhase, in the claim's transaction: the ride, locked (a
// completion or another cancellation takes its turn), moves from authorized
// to cancelling; a ride cancelled already is answered or joined; anything
// else is refused.
func (s *Service) cancelRequestPhase(ctx context.Context, tx pgx.Tx, key *idem.Key, st *cancelState) (idem.Outcome, error) {
	var (
		ride *dbgen.Ride
		err  error
	)
	if st.params.Dispatch {
		ride, err = s.queries.RideLock(ctx, tx, st.params.RideID)
	} else {
		ride, err = s.queries.RideLockForUser(ctx, tx, st.params.RideID, key.UserID)
	}
	if IsNoRows(err) {
		return idem.Outcome{}, &Error{Code: CodeNotFound, Message: "no such ride"}
	}
	if err != nil {
		return idem.Outcome{}, err
	}
	st.ride = ride
	switch RideChargeStatus(ride.ChargeStatus) {
	case RideChargeAuthorized:
		if st.ride, err = s.queries.RideReleaseStart(ctx, tx, dbgen.RideReleaseStartParams{
			ReleaseReason: releaseCancelled, CancelKeyID: &key.ID, ID: ride.ID,
		}); err != nil {
			return idem.Outcome{}, err
		}
		who := "rider"
		if st.params.Dispatch {
			who = "dispatch"
		}
		if err := audit.Record(ctx, tx, "ride.cancel_requested", "ride", ride.ID, ride.UserID, key.IP, map[string]any{"by": who}); err != nil {
			return idem.Outcome{}, err
		}
		return idem.MoveTo(RecoveryPointReleaseRequested), nil
	case RideChargeCancelling:
		if ride.ReleaseReason != nil && *ride.ReleaseReason == releaseCancelled {
			// Cancelled under another key whose request has not finished:
			// this one drives the same release on.
			return idem.MoveTo(RecoveryPointReleaseRequested), nil
		}
	case RideChargeCancelled:
		return cancelAnswer(key, ride)
	}
	return idem.Outcome{}, notCancellable(ride)
}

// notCancellable is why a ride cannot be cancelled.
func notCancellable(ride *dbgen.Ride) *Error {
	msg := "the ride holds nothing to release"
	switch RideChargeStatus(ride.ChargeStatus) {
	case RideChargeCapturing, RideChargeCompleted, RideChargeCaptureFailed:
		msg = "the trip was completed and its fare captured; refund the ride instead (POST /rides/{id}/refund)"
	case RideChargeCharged:
		msg = "the ride was charged in full when booked (capture booking); refund it instead (POST /rides/{id}/refund)"
	case RideChargePending, RideChargeRequiresAction:
		msg = "the ride's payment is not decided yet; cancel it once charge_status is authorized"
	case RideChargeDeclined:
		msg = "the ride's payment was declined; there is nothing to cancel"
	case RideChargeExpired, RideChargeCancelling:
		msg = "the ride expired and its hold was released (or is being released)"
	}
	return &Error{Code: CodeNotCancellable, RideID: ride.ID, Message: msg}
}

// cancelAnswer finishes a cancellation with the cancelled ride: 201 for the
// request that cancelled it, 200 for any other. A ride whose release ended
// otherwise (the processor's expiry came first) is not cancellable.
func cancelAnswer(key *idem.Key, ride *dbgen.Ride) (idem.Outcome, error) {
	if RideChargeStatus(ride.ChargeStatus) != RideChargeCancelled {
		return idem.Outcome{}, notCancellable(ride)
	}
	status := http.StatusOK
	if ride.CancelKeyID != nil && *ride.CancelKeyID == key.ID {
		status = http.StatusCreated
	}
	return idem.Finish(status, rideFromRow(ride)), nil
}

// holdRelease asks the processor to release the hold of a cancelling ride,
// under a key derived from the booking's processor key (the same for a
// cancellation and an expiry: a ride releases once). No transaction is
// open here. A hold the processor released by itself is released. It
// reports requested when the processor took the release on and tells its
// outcome later, in a notification (Adyen): the ride waits in cancelling
// until then.
func (s *Service) holdRelease(ctx context.Context, ride *dbgen.Ride) (requested bool, err error) {
	if ride.ChargeKey == nil || ride.PaymentID == nil {
		return false, fmt.Errorf("ride %d: a hold without its payment", ride.ID)
	}
	proc, err := s.proc(ride.Processor)
	if err != nil {
		return false, err
	}
	p, err := proc.pay.PaymentCancel(ctx, PaymentCancelParams{
		IdempotencyKey: releaseKey(*ride.ChargeKey), PaymentID: *ride.PaymentID, Reference: *ride.ChargeKey, Hold: true,
	})
	if pe := PaymentFinal(err); pe != nil && pe.Code == PaymentCodeUnexpectedState {
		p, gerr := s.paymentNow(ctx, proc, ride)
		if gerr != nil {
			return false, gerr
		}
		if p != nil && p.Status == ChargeCanceled {
			return false, nil
		}
		if p != nil && p.Status == ChargeSucceeded && p.CapturedCents > 0 {
			return false, &holdCapturedError{payment: p}
		}
		return false, Internal(fmt.Errorf("ride %d: its hold cannot be released: %w", ride.ID, pe))
	}
	if err != nil {
		return false, err
	}
	return p != nil && p.Status == ChargeCancelRequested, nil
}

// holdReleased records that a cancelling ride's hold is released: it is
// cancelled or expired, by the reason its release started with, once. It
// returns whether it moved the ride.
func (s *Service) holdReleased(ctx context.Context, tx pgx.Tx, rideID int64, via string) (bool, error) {
	ride, err := s.queries.RideReleaseFinish(ctx, tx, rideID)
	if IsNoRows(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := audit.Record(ctx, tx, "ride."+ride.ChargeStatus, "ride", ride.ID, ride.UserID, nil, map[string]any{"via": via}); err != nil {
		return false, err
	}
	s.metrics.tripsEnded.WithLabelValues(ride.Processor, ride.ChargeStatus).Inc()
	return true, nil
}

// HoldsRelease releases, at most limit, the holds of rides neither completed
// nor cancelled within the hold expiry (the periodic job): each ride moves
// to cancelling in its own transaction, its hold is released at the
// processor, and it expires (at a processor that tells the outcome later,
// when its notification comes). A release interrupted earlier is finished.
// It returns how many rides expired.
func (s *Service) HoldsRelease(ctx context.Context, limit int32) (int, error) {
	rides, err := s.queries.RideHoldsToRelease(ctx, s.pool, limit)
	if err != nil {
		return 0, Internal(err)
	}
	expired := 0
	for _, ride := range rides {
		if RideChargeStatus(ride.ChargeStatus) == RideChargeAuthorized {
			err := s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				r, err := s.queries.RideReleaseStart(ctx, tx, dbgen.RideReleaseStartParams{ReleaseReason: releaseExpired, ID: ride.ID})
				if IsNoRows(err) {
					ride = nil // completed or cancelled meanwhile
					return nil
				}
				if err != nil {
					return err
				}
				ride = r
				return audit.Record(ctx, tx, "ride.hold_expiring", "ride", r.ID, r.UserID, nil, map[string]any{"hold_expires_at": r.HoldExpiresAt})
			})
			if err != nil {
				return expired, Internal(err)
			}
			if ride == nil {
				continue
			}
		}
		requested, err := s.holdRelease(ctx, ride)
		if err != nil {
			if p := capturedNow(err); p != nil {
				// Captured: the completion was lost; it is recognised.
				if err := s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					_, err := s.tripRecognised(ctx, tx, ride.ID, p.CapturedCents, p.ID)
					return err
				}); err != nil {
					return expired, Internal(err)
				}
				continue
			}
			return expired, err
		}
		if requested {
			// Taken on: the processor's notification expires the ride.
			if _, err := s.queries.RideCancelRequested(ctx, s.pool, ride.ID); err != nil {
				return expired, Internal(err)
			}
			continue
		}
		var moved bool
		if err := s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) (err error) {
			moved, err = s.holdReleased(ctx, tx, ride.ID, "expiry")
			return err
		}); err != nil {
			return expired, Internal(err)
		}
		if moved {
			expired++
		}
	}
	return expired, nil
}

// holdExpiredEffect is what an event telling that the processor released a
// trip's hold does (Stripe's charge.expired or payment_intent.canceled,
// Adyen's CANCELLATION or TECHNICAL_CANCEL): a ride still holding it
// expires (the processor's own expiry, or a cancel outside the service);
// one being cancelled or expired by the service ends as its release
// started. nil when the event is about no such ride (at Adyen, whose
// notifications are the only record of its payments: unknown_charge).
func (s *Service) holdExpiredEffect(ctx context.Context, processor string, p *Charge) (effect, error) {
	if p.Status != ChargeCanceled || (p.Tag.Key == "" && p.PaymentID == "") {
		return nil, nil
	}
	if processor == "" {
		processor = ProcessorStripe
	}
	ride, err := s.rideOfPayment(ctx, processor, p)
	if err != nil {
		return nil, err
	}
	if ride == nil {
		if processor == ProcessorAdyen {
			// Adyen's notifications are the only record of its
			// payments: a cancel of a payment no ride of ours made or
			// holds.
			return constant(InboxOutcomeUnknownCharge), nil
		}
		return nil, nil
	}
	switch RideChargeStatus(ride.ChargeStatus) {
	case RideChargeAuthorized, RideChargeCancelling:
	case RideChargeCancelled, RideChargeExpired:
		return constant(InboxOutcomeAlreadyRecorded), nil
	default:
		return nil, nil
	}
	if ride.Processor != processor {
		return nil, nil
	}
	proc, err := s.proc(ride.Processor)
	if err != nil {
		return nil, err
	}
	// The event may be stale: the payment as it is now decides.
	if now, err := s.paymentNow(ctx, proc, ride); err != nil {
		return nil, err
	} else if now != nil && now.Status != ChargeCanceled {
		return constant(InboxOutcomeAlreadyRecorded), nil
	}
	return func(ctx context.Context, tx pgx.Tx) (string, error) {
		r, err := s.queries.RideHoldExpired(ctx, tx, ride.ID)
		if IsNoRows(err) {
			return InboxOutcomeAlreadyRecorded, nil
		}
		if err != nil {
			return "", err
		}
		if err := audit.Record(ctx, tx, "ride."+r.ChargeStatus, "ride", r.ID, r.UserID, nil, map[string]any{"via": actionViaEvent}); err != nil {
			return "", err
		}
		s.metrics.tripsEnded.WithLabelValues(r.Processor, r.ChargeStatus).Inc()
		return InboxOutcomeHoldReleased, nil
	}, nil
}

// rideOfPayment is the ride of the payment an event names: by the key it
// was made under, else by its id at processor; nil when none.
func (s *Service) rideOfPayment(ctx context.Context, processor string, p *Charge) (*dbgen.Ride, error) {
	if p.Tag.Key != "" {
		r, err := s.queries.RideGetByChargeKey(ctx, s.pool, &p.Tag.Key)
		switch {
		case err == nil:
			return r, nil
		case !IsNoRows(err):
			return nil, Internal(err)
		}
	}
	if p.PaymentID != "" {
		// A cancel the service did not ask for carries the reference its
		// maker gave it (Adyen's CANCELLATION: the cancel's own
		// merchantReference), not the ride's key: the payment it names
		// (originalReference) finds the ride.
		r, err := s.queries.RideGetByPayment(ctx, s.pool, processor, &p.PaymentID)
		switch {
		case err == nil:
			return r, nil
		case !IsNoRows(err):
			return nil, Internal(err)
		}
	}
	return nil, nil
}

// cancelFailedEffect is what a processor's refusal of a cancel it had
// taken on does (p.Status ChargeCancelFailed: Adyen's CANCELLATION or
// TECHNICAL_CANCEL with success false). The payment is as it was: a ride
// that still waits for the cancel (for its rider, or in cancelling) stays
// there with the processor's reason, for the operator, until the payment's
// own outcome moves it (a late AUTHORISATION, a cancel from the processor's
// console); a ride that moved on already keeps its state. A payment of no
// ride of ours is InboxOutcomeUnknownCharge.
func (s *Service) cancelFailedEffect(ctx context.Context, processor string, p *Charge) (effect, error) {
	if processor == "" {
		processor = ProcessorStripe
	}
	ride, err := s.rideOfPayment(ctx, processor, p)
	if err != nil {
		return nil, err
	}
	if ride == nil || ride.Processor != processor {
		return constant(InboxOutcomeUnknownCharge), nil
	}
	reason := cmp.Or(p.FailureMessage, p.FailureCode, "refused")
	return func(ctx context.Context, tx pgx.Tx) (string, error) {
		r, err := s.queries.RideCancelFailed(ctx, tx, reason, ride.ID)
		if IsNoRows(err) {
			return InboxOutcomeAlreadyRecorded, nil
		}
		if err != nil {
			return "", err
		}
		if err := audit.Record(ctx, tx, "ride.cancel_failed", "ride", r.ID, r.UserID, nil, map[string]any{
			"via": actionViaEvent, "payment_id": p.PaymentID, "event": p.FailureCode, "reason": reason,
		}); err != nil {
			return "", err
		}
		return InboxOutcomeCancelFailed, nil
	}, nil
}

// holdCapturedError: a hold to release was captured already (a completion
// lost with a restore, or a capture outside the service).
type holdCapturedError struct{ payment *Charge }

func (e *holdCapturedError) Error() string {
	return "the hold of payment " + e.payment.PaymentID + " was captured"
}

// capturedNow is the captured payment err reports, nil for any other error.
func capturedNow(err error) *Charge {
	var hc *holdCapturedError
	if errors.As(err, &hc) {
		return hc.payment
	}
	return nil
}
