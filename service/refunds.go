package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/service/audit"
	"github.com/atomicrides/atomicrides/service/idem"
)

// RecoveryPointRefundCreated: the ride's refund row (pending) and its audit
// record are committed; the processor's refund comes next.
const RecoveryPointRefundCreated RecoveryPoint = "refund_created"

// The route of a ride refund, POST /rides/{id}/refund.
const (
	RideRefundMethod = http.MethodPost
	RideRefundPath   = "/rides/{id}/refund"
)

// RideRefundStatus is the refund state of a ride, as Ride.RefundStatus
// shows it. The database's CHECK on refunds.status lists the same values
// but none, which is the state of a ride without a refund row.
type RideRefundStatus string

const (
	// RideRefundNone: no refund was asked for.
	RideRefundNone RideRefundStatus = "none"
	// RideRefundPending: a refund was asked for; the processor's answer is
	// not recorded yet.
	RideRefundPending RideRefundStatus = "pending"
	// RideRefundRefunded: the processor made the refund; its id is recorded.
	RideRefundRefunded RideRefundStatus = "refunded"
	// RideRefundFailed: the processor refused the refund definitively. A
	// later request (under a new key) asks again.
	RideRefundFailed RideRefundStatus = "failed"
)

// RideRefundParams is the input of a ride refund: the ride, from the path.
type RideRefundParams struct {
	RideID int64 `json:"ride_id"`
}

// RideRefundResult is the refund of a ride, as POST /rides/{id}/refund answers it.
// Every request that refunds a ride answers the same refund.
type RideRefundResult struct {
	RideID         int64            `json:"ride_id"`
	Status         RideRefundStatus `json:"status" enum:"refunded" doc:"refunded: the processor made the refund (it may still be settling)."`
	AmountCents    int64            `json:"amount_cents" doc:"The whole charge of the ride."`
	Currency       string           `json:"currency"`
	StripeRefundID string           `json:"stripe_refund_id"`
	CreatedAt      time.Time        `json:"created_at" doc:"When the refund was first asked for."`
}

// RideRefundCreate refunds the user's ride in full under the client's
// idempotency key. It returns the stored response of the request: 201 with
// the refund for the request that asked for it first, 200 with the same
// refund for a request under any other key, or 409
// (ProblemRefundRejected) when the processor refused the refund. A ride
// that is not the user's is CodeNotFound; one that is not charged is
// CodeNotRefundable; neither writes anything. Every other failure is an
// *Error and leaves the request resumable with the same key.
func (s *Service) RideRefundCreate(ctx context.Context, userID int64, idempotencyKey string, rideID int64, ip *netip.Addr) (*Response, error) {
	if rideID < 1 {
		return nil, Invalid("path.id", "must be a ride id (1 or more)")
	}
	return run(ctx, s, s.refunds, idem.Request{
		UserID: userID,
		Key:    idempotencyKey,
		Method: s.refunds.Method,
		Path:   idem.RequestPath(s.refunds.Path, rideID),
		Params: RideRefundParams{RideID: rideID},
		IP:     ip,
	})
}

// refundState is what the refund flow knows while it runs.
type refundState struct {
	params RideRefundParams
	user   *dbgen.User
	ride   *dbgen.Ride
	refund *dbgen.Refund

	// Results of the refund call: the processor's refund, or its
	// definitive refusal. Both nil when the refund was already recorded.
	result  *Refund
	failure *PaymentError
}

func (s *Service) refundFlow() *idem.Flow[refundState] {
	return &idem.Flow[refundState]{
		Name:   "ride.refund",
		Method: RideRefundMethod,
		Path:   RideRefundPath,
		Load:   s.refundLoad,
		Steps: map[RecoveryPoint]idem.Step[refundState]{
			RecoveryPointStarted:       {Phase: s.refundRequestPhase},
			RecoveryPointRefundCreated: {Call: s.refundCall, Phase: s.refundRecordPhase},
		},
	}
}

// refundLoad rebuilds the state from the key's stored input and the
// database; at RecoveryPointStarted the request phase reads (and locks) the
// ride itself.
func (s *Service) refundLoad(ctx context.Context, tx pgx.Tx, key *idem.Key) (*refundState, error) {
	st := &refundState{}
	if err := json.Unmarshal(key.Params, &st.params); err != nil {
		return nil, fmt.Errorf("refund params of key %d: %w", key.ID, err)
	}
	var err error
	if st.user, err = s.queries.UserGet(ctx, tx, key.UserID); err != nil {
		return nil, err
	}
	if key.Point == RecoveryPointStarted {
		return st, nil
	}
	if st.ride, err = s.queries.RideGetForUser(ctx, tx, st.params.RideID, key.UserID); err != nil {
		return nil, fmt.Errorf("ride %d of key %d at %s: %w", st.params.RideID, key.ID, key.Point, err)
	}
	if st.refund, err = s.queries.RefundGetByRide(ctx, tx, st.params.RideID); err != nil {
		return nil, fmt.Errorf("refund of ride %d of key %d at %s: %w", st.params.RideID, key.ID, key.Point, err)
	}
	return st, nil
}

// refundRequestPhase, in the claim's transaction: the ride (locked, so that
// requests under different keys take turns here), then the ride's one
// refund row — created, asked for again after a refusal, joined while
// pending, or answered at once when already refunded.
func (s *Service) refundRequestPhase(ctx context.Context, tx pgx.Tx, key *idem.Key, st *refundState) (idem.Outcome, error) {
	ride, err := s.queries.RideLockForUser(ctx, tx, st.params.RideID, key.UserID)
	if IsNoRows(err) {
		return idem.Outcome{}, &Error{Code: CodeNotFound, Message: "no such ride"}
	}
	if err != nil {
		return idem.Outcome{}, err
	}
	switch RideChargeStatus(ride.ChargeStatus) {
	case RideChargeCharged, RideChargeCompleted:
	case RideChargeAuthorized:
		return idem.Outcome{}, &Error{Code: CodeNotRefundable,
			Message: "the ride's fare is held, not captured: cancel the ride instead (POST /rides/{id}/cancel), which releases the hold"}
	case RideChargeCapturing:
		return idem.Outcome{}, &Error{Code: CodeNotRefundable,
			Message: "the trip's fare is being captured; the ride can be refunded once charge_status is completed"}
	case RideChargeCancelling, RideChargeCancelled:
		return idem.Outcome{}, &Error{Code: CodeNotRefundable,
			Message: "the ride was cancelled and its hold released; nothing was captured"}
	case RideChargeCaptureFailed:
		return idem.Outcome{}, &Error{Code: CodeNotRefundable,
			Message: "the processor failed the capture of the trip's fare; nothing was captured to refund"}
	case RideChargePending:
		return idem.Outcome{}, &Error{Code: CodeNotRefundable,
			Message: "the ride's charge is not decided yet; a ride can be refunded once it is charged"}
	case RideChargeRequiresAction:
		return idem.Outcome{}, &Error{Code: CodeNotRefundable,
			Message: "the ride's payment waits for its rider to authenticate it; nothing is charged yet, and an unauthenticated payment is cancelled at its deadline"}
	case RideChargeExpired:
		return idem.Outcome{}, &Error{Code: CodeNotRefundable,
			Message: "the ride expired before its rider authenticated the payment; nothing was charged"}
	default:
		return idem.Outcome{}, &Error{Code: CodeNotRefundable,
			Message: "the ride's charge was declined; there is nothing to refund"}
	}
	st.ride = ride

	// Locked: a request under another key, past this phase, may record the
	// processor's answer on the row at any moment; what follows is decided
	// on the row as it then is.
	ref, err := s.queries.RefundLockByRide(ctx, tx, ride.ID)
	switch {
	case IsNoRows(err):
		ref, err = s.queries.RefundCreate(ctx, tx, dbgen.RefundCreateParams{
			RideID:           ride.ID,
			IdempotencyKeyID: &key.ID,
			AmountCents:      refundableCents(ride),
			Currency:         ride.Currency,
		})
	case err != nil:
	case RideRefundStatus(ref.Status) == RideRefundRefunded:
		st.refund = ref
		return refundAnswer(key, ref), nil
	case RideRefundStatus(ref.Status) == RideRefundFailed:
		ref, err = s.queries.RefundRetry(ctx, tx, &key.ID, ride.ID)
	default:
		// Pending under another key: this request drives the same refund
		// on, through the same processor key.
		st.refund = ref
		return idem.MoveTo(RecoveryPointRefundCreated), nil
	}
	if err != nil {
		return idem.Outcome{}, err
	}
	if err := audit.Record(ctx, tx, "refund.requested", "refund", ref.ID, key.UserID, key.IP, map[string]any{
		"ride_id": ride.ID, "amount_cents": ref.AmountCents, "currency": ref.Currency,
	}); err != nil {
		return idem.Outcome{}, err
	}
	st.refund = ref
	return idem.MoveTo(RecoveryPointRefundCreated), nil
}

// refundCall asks the processor for the refund under the key of the
// charge's current attempt, tagged with the namespace and the rider. No
// transaction is open here. A refund already recorded (by a request
// under another key) is not asked for again. Past the processor's key
// window, or when the processor answers that the charge is already
// refunded, the refund this service made is looked up and adopted.
func (s *Service) refundCall(ctx context.Context, key *idem.Key, st *refundState) error {
	st.result, st.failure = nil, nil
	if RideRefundStatus(st.refund.Status) == RideRefundRefunded {
		return nil
	}
	if st.ride.StripeChargeID == nil {
		return fmt.Errorf("ride %d: refund asked for without a charge", st.ride.ID)
	}

	// The attempt's key was first sent after the refund row became pending
	// for it, or, when the database may have lost that row with an
	// earlier one, after its open gap began: past the window from then,
	// the processor may have forgotten it.
	lostFrom, err := s.lostFrom(ctx)
	if err != nil {
		return err
	}
	if s.keyWindowPassed(st.ride.Processor, key.ClaimedAt, st.refund.UpdatedAt, lostFrom) {
		r, err := s.processorRefundOf(ctx, st)
		if err != nil {
			return err
		}
		if r != nil {
			st.result = r
			return nil
		}
	}

	// The refund goes to the processor that charged the ride, whatever
	// the circuits say: only it can return the money.
	proc, err := s.proc(st.ride.Processor)
	if err != nil {
		return err
	}
	pkey := RefundKey(s.namespace, *st.ride.StripeChargeID, st.refund.Attempt)
	r, err := proc.pay.RefundCreate(ctx, RefundCreateParams{
		IdempotencyKey: pkey,
		ChargeID:       *st.ride.StripeChargeID,
		PaymentID:      refundPaymentOf(st.ride),
		AmountCents:    st.refund.AmountCents,
		Currency:       st.ride.Currency,
		Tag:            s.tag(st.user.Email, pkey),
	})
	if err == nil {
		st.result = r
		return nil
	}
	pe := PaymentFinal(err)
	if pe == nil && !isIdempotencyMismatch(err) {
		return err
	}
	if (pe != nil && pe.Code == RefundCodeChargeAlreadyRefunded) || isIdempotencyMismatch(err) {
		found, err := s.processorRefundOf(ctx, st)
		if err != nil {
			return err
		}
		if found != nil {
			st.result = found
			return nil
		}
	}
	if pe == nil {
		return err
	}
	st.failure = pe
	return nil
}

// processorRefundOf returns the accepted refund this deployment made of the
// ride's charge for its rider (by the refund's tag), or else an accepted
// refund of the charge made outside the service (no tag: the processor's
// dashboard), which is the ride's refund as well; nil when the processor
// has neither.
func (s *Service) processorRefundOf(ctx context.Context, st *refundState) (*Refund, error) {
	proc, err := s.proc(st.ride.Processor)
	if err != nil {
		return nil, err
	}
	refunds, err := proc.pay.RefundList(ctx, *st.ride.StripeChargeID)
	if err != nil {
		return nil, err
	}
	var external *Refund
	for _, r := range refunds {
		if !r.Accepted() {
			continue
		}
		if s.owns(r.Tag, st.user.Email) {
			return r, nil
		}
		if r.Tag == (Tag{}) && external == nil {
			external = r
		}
	}
	return external, nil
}

// refundRecordPhase records the processor's answer on the ride's refund,
// unless a request under another key recorded it first, and finishes the
// request. The receipt job is inserted by whichever request records the
// refund.
func (s *Service) refundRecordPhase(ctx context.Context, tx pgx.Tx, key *idem.Key, st *refundState) (idem.Outcome, error) {
	ref, err := s.queries.RefundLockByRide(ctx, tx, st.ride.ID)
	if err != nil {
		return idem.Outcome{}, err
	}
	switch {
	case st.result != nil:
		n, err := s.queries.RefundSetRefunded(ctx, tx, st.result.ID, st.ride.ID)
		if err != nil {
			return idem.Outcome{}, err
		}
		if n == 0 {
			if ref.StripeRefundID == nil || *ref.StripeRefundID != st.result.ID {
				return idem.Outcome{}, fmt.Errorf("ride %d: refund recorded as %v, the processor answered %s",
					st.ride.ID, ref.StripeRefundID, st.result.ID)
			}
			break
		}
		if err := audit.Record(ctx, tx, "refund.succeeded", "refund", ref.ID, key.UserID, key.IP, map[string]any{
			"ride_id": st.ride.ID, "stripe_refund_id": st.result.ID, "amount_cents": st.result.AmountCents,
		}); err != nil {
			return idem.Outcome{}, err
		}
		if _, err := s.jobs.InsertTx(ctx, tx, RefundReceiptArgs{RideID: st.ride.ID}, nil); err != nil {
			return idem.Outcome{}, err
		}
		ref.Status, ref.StripeRefundID, ref.FailureCode = string(RideRefundRefunded), &st.result.ID, nil

	case st.failure != nil:
		if RideRefundStatus(ref.Status) == RideRefundRefunded {
			break // another request recorded the refund meanwhile
		}
		code := st.failure.Code
		if code == "" {
			code = string(st.failure.Kind)
		}
		if RideRefundStatus(ref.Status) == RideRefundPending {
			if _, err := s.queries.RefundSetFailed(ctx, tx, code, st.ride.ID); err != nil {
				return idem.Outcome{}, err
			}
			if err := audit.Record(ctx, tx, "refund.failed", "refund", ref.ID, key.UserID, key.IP, map[string]any{
				"ride_id": st.ride.ID, "code": code, "kind": string(st.failure.Kind),
			}); err != nil {
				return idem.Outcome{}, err
			}
		}
		return idem.Finish(http.StatusConflict, Problem{
			Type:   ProblemRefundRejected,
			Title:  "Refund rejected",
			Status: http.StatusConflict,
			Detail: "the payment processor refused the refund (" + code + ")",
		}), nil

	case RideRefundStatus(ref.Status) != RideRefundRefunded:
		return idem.Outcome{}, fmt.Errorf("ride %d: refund is %s and the processor was not asked", st.ride.ID, ref.Status)
	}
	return refundAnswer(key, ref), nil
}

// refundAnswer finishes a request with the ride's recorded refund: 201 for
// the request that asked for it, 200 for any other.
func refundAnswer(key *idem.Key, ref *dbgen.Refund) idem.Outcome {
	status := http.StatusOK
	if ref.IdempotencyKeyID != nil && *ref.IdempotencyKeyID == key.ID {
		status = http.StatusCreated
	}
	return idem.Finish(status, &RideRefundResult{
		RideID:         ref.RideID,
		Status:         RideRefundRefunded,
		AmountCents:    ref.AmountCents,
		Currency:       ref.Currency,
		StripeRefundID: *ref.StripeRefundID,
		CreatedAt:      ref.CreatedAt.UTC(),
	})
}

// refundPaymentOf is the payment a ride's refund names: a Stripe
// PaymentIntent is refunded through itself; a Charges API charge, and any
// other processor's payment, by the charge alone ("").
func refundPaymentOf(ride *dbgen.Ride) string {
	if ride.Processor != ProcessorStripe || ride.PaymentID == nil || PaymentAPI(ride.PaymentAPI) != PaymentAPIIntents {
		return ""
	}
	return *ride.PaymentID
}

// refundableCents is what a ride's refund returns: the charge of a ride
// charged at booking; what was captured of a completed trip's hold (a fare
// above the hold is a payment of its own, which the refund leaves).
func refundableCents(ride *dbgen.Ride) int64 {
	if RideChargeStatus(ride.ChargeStatus) == RideChargeCompleted && ride.CapturedCents != nil {
		return *ride.CapturedCents
	}
	return ride.AmountCents
}
