package service

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/service/audit"
	"github.com/atomicrides/atomicrides/service/idem"
)

// Capture is when a ride's money is taken (Config.Capture, CAPTURE).
type Capture string

const (
	// CaptureBooking: the ride is charged in full when it is booked; its
	// trip has no end in the service.
	CaptureBooking Capture = "booking"
	// CaptureTrip: the quoted fare is held when the ride is booked; the
	// final fare is captured when the dispatch side completes the trip,
	// and the hold is released when the ride is cancelled or its hold
	// expires.
	CaptureTrip Capture = "trip"
)

// Holds last days at the card networks (Stripe documents 7 days for most
// cards, 4 days 18 hours for Visa's merchant-initiated ones): a ride neither
// completed nor cancelled releases its hold well before.
const (
	// DefaultHoldExpiry is how long a hold is kept by default.
	DefaultHoldExpiry = 24 * time.Hour
	// MaxHoldExpiry is the longest Config.HoldExpiry: inside the shortest
	// window a card network keeps a hold.
	MaxHoldExpiry = 4 * 24 * time.Hour
)

// MaxFareMultiple bounds a trip's final fare: at most this many times its
// hold. A fare above it is refused (422) as a mistake of the dispatch side
// rather than charged.
const MaxFareMultiple = 5

// RecoveryPointCaptureRequested: the ride is capturing, with its fare
// recorded; the processor's capture (and the payment of a fare above the
// hold) comes next.
const RecoveryPointCaptureRequested RecoveryPoint = "capture_requested"

// The route of a trip's completion, POST /rides/{id}/complete.
const (
	RideCompleteMethod = http.MethodPost
	RideCompletePath   = "/rides/{id}/complete"
)

// Extra statuses: what became of the fare above a trip's hold.
const (
	// ExtraNone: the fare was within the hold.
	ExtraNone = "none"
	// ExtraCharged: the fare above the hold was charged as a payment of
	// its own.
	ExtraCharged = "charged"
	// ExtraDue: that payment failed; the rider owes it (the ride's
	// balance) and books nothing until it is paid.
	ExtraDue = "due"
	// ExtraPaid: the rider paid the balance.
	ExtraPaid = "paid"
)

// CaptureFailureHoldGone is a completion's capture failure when the
// processor had released the hold before the capture (its own expiry).
const CaptureFailureHoldGone = "hold_released_before_capture"

// Trip is the part of a Ride that follows its trip: null fields for a ride
// charged at booking.
type Trip struct {
	// Capture is when the ride's money is taken.
	Capture Capture `json:"capture" enum:"booking,trip" doc:"booking: the ride was charged in full when booked (amount_cents). trip: amount_cents was held when booked, and the final fare is captured when the trip is completed (POST /rides/{id}/complete), or the hold released when the ride is cancelled (POST /rides/{id}/cancel) or its hold expires."`
	// HoldExpiresAt is when an unended trip's hold is released.
	HoldExpiresAt *time.Time `json:"hold_expires_at" nullable:"true" doc:"While charge_status is authorized: when the hold is released and the ride expires unless completed or cancelled before. Null otherwise."`
	// FareCents is the final fare the dispatch side completed the trip
	// with.
	FareCents *int64 `json:"fare_cents" nullable:"true" doc:"The trip's final fare, in the currency's minor unit, once completed. Null before."`
	// CapturedCents is what the processor captured of the hold.
	CapturedCents *int64 `json:"amount_captured_cents" nullable:"true" doc:"What the processor captured of the hold: the fare, or the whole hold when the fare is above it. Null until the processor confirms the capture."`
	// ExtraCents is the fare above the hold, charged as a payment of its
	// own.
	ExtraCents *int64 `json:"extra_cents" nullable:"true" doc:"The part of the fare above the hold, charged as a payment of its own after the trip. Null when the fare is within the hold."`
	// ExtraStatus is what became of ExtraCents.
	ExtraStatus *string `json:"extra_status" nullable:"true" enum:"none,charged,due,paid" doc:"none: the fare was within the hold; charged: extra_cents was charged; due: that payment failed and the rider owes balance_due_cents (no booking until it is paid, POST /rides/{id}/balance); paid: the rider paid it. Null until the completion decided it."`
	// ExtraChargeID is the payment of ExtraCents.
	ExtraChargeID *string `json:"extra_charge_id" nullable:"true" doc:"The processor's payment of extra_cents, once charged or paid. Null otherwise."`
	// BalanceDueCents is what the rider owes for this ride.
	BalanceDueCents int64 `json:"balance_due_cents" doc:"What the rider owes for this ride (extra_cents while extra_status is due); 0 otherwise."`
	// CompletedAt is when the fare was captured.
	CompletedAt *time.Time `json:"completed_at" nullable:"true" doc:"When the trip's fare was captured (charge_status completed). Null otherwise."`
	// ReleasedAt is when the hold was released.
	ReleasedAt *time.Time `json:"released_at" nullable:"true" doc:"When the hold was released (charge_status cancelled, or expired after a hold). Null otherwise."`
	// CaptureFailure is the processor's reason for failing the capture.
	CaptureFailure *string `json:"capture_failure" nullable:"true" doc:"While charge_status is capture_failed: the processor's reason. Null otherwise."`
	// CancelFailure is the processor's reason for refusing the cancel of
	// the ride's payment, while the ride still waits for it.
	CancelFailure *string `json:"cancel_failure" nullable:"true" doc:"While charge_status is requires_action or cancelling: the processor's reason for refusing the cancel of the ride's payment (adyen); the ride waits for the payment's own outcome or for an operator. Null otherwise."`
}

func tripOf(r *dbgen.Ride) Trip {
	t := Trip{
		Capture: Capture(r.Capture), HoldExpiresAt: utcPtr(r.HoldExpiresAt), FareCents: r.FareCents, CapturedCents: r.CapturedCents,
		ExtraCents: r.ExtraCents, ExtraStatus: r.ExtraStatus, ExtraChargeID: r.ExtraChargeID,
		CompletedAt: utcPtr(r.CompletedAt), ReleasedAt: utcPtr(r.ReleasedAt), CaptureFailure: r.CaptureFailure,
	}
	if st := RideChargeStatus(r.ChargeStatus); st == RideChargeRequiresAction || st == RideChargeCancelling {
		t.CancelFailure = r.CancelFailure
	}
	if RideChargeStatus(r.ChargeStatus) != RideChargeAuthorized {
		t.HoldExpiresAt = nil
	}
	if r.ExtraStatus != nil && *r.ExtraStatus == ExtraDue && r.ExtraCents != nil {
		t.BalanceDueCents = *r.ExtraCents
	}
	return t
}

// Processor keys of a trip's calls: pure functions of the booking's
// processor key (itself a function of the client's booking request).
func captureKey(pkey string) string { return processorKeyCapture + digest("capture", pkey) }
func extraKey(pkey string) string   { return processorKeyExtra + digest("extra", pkey) }
func releaseKey(pkey string) string { return processorKeyRelease + digest("release", pkey) }
func balanceKey(pkey string, attempt int32) string {
	return processorKeyBalance + digest("balance", pkey, strconv.FormatInt(int64(attempt), 10))
}

// RideCompleteParams is the input of a trip's completion.
type RideCompleteParams struct {
	RideID    int64  `json:"ride_id"`
	FareCents int64  `json:"fare_cents"`
	Currency  string `json:"currency"`
}

// Validate checks what can be checked without the ride.
func (p RideCompleteParams) Validate() error {
	if p.RideID < 1 {
		return Invalid("path.id", "must be a ride id (1 or more)")
	}
	if p.FareCents < 1 {
		return Invalid("body.fare_cents", "must be a positive whole number of the currency's minor unit (cents)")
	}
	if !IsCurrency(p.Currency) {
		return Invalid("body.currency", "must be a three-letter ISO 4217 code in lower case, like usd")
	}
	return nil
}

// IsCurrency reports whether c reads as an ISO 4217 code in lower case, as
// rides record their currency.
func IsCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if c[i] < 'a' || c[i] > 'z' {
			return false
		}
	}
	return true
}

// RideComplete completes a trip with its final fare, for the dispatch side,
// under the dispatch side's idempotency key. A ride completes once, whatever
// the keys: the request that completed it gets 201, any other with the same
// fare 200 with the same ride, and one with another fare CodeNotCompletable.
// At a processor that captures asynchronously (Adyen) the answer is 202 with
// the ride capturing; the processor's notification completes it. A ride that
// holds nothing (charged at booking, not authorized yet, cancelled,
// expired, declined) is CodeNotCompletable; none of these refusals writes
// anything.
func (s *Service) RideComplete(ctx context.Context, idempotencyKey string, params RideCompleteParams, ip *netip.Addr) (*Response, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	return run(ctx, s, s.completions, idem.Request{
		UserID: s.dispatchID,
		Key:    idempotencyKey,
		Method: RideCompleteMethod,
		Path:   idem.RequestPath(RideCompletePath, params.RideID),
		Params: params,
		IP:     ip,
	})
}

// completionState is what the completion flow knows while it runs.
type completionState struct {
	params RideCompleteParams
	ride   *dbgen.Ride
	rider  *dbgen.User

	// Results of the call: the capture (nil when none was made now), or
	// why the processor could not capture; the extra payment, or its
	// decline.
	capture        *Charge
	captureFailure string
	extra          *Charge
	extraFailure   *PaymentError
}

func (s *Service) completionFlow() *idem.Flow[completionState] {
	return &idem.Flow[completionState]{
		Name:   "ride.complete",
		Method: RideCompleteMethod,
		Path:   RideCompletePath,
		Load: func(ctx context.Context, tx pgx.Tx, key *idem.Key) (*completionState, error) {
			st := &completionState{}
			var err error
			st.ride, st.rider, err = s.tripLoad(ctx, tx, key, &st.params, &st.params.RideID)
			return st, err
		},
		Steps: map[RecoveryPoint]idem.Step[completionState]{
			RecoveryPointStarted:          {Phase: s.completionRequestPhase},
			RecoveryPointCaptureRequested: {Call: s.captureCall, Phase: s.captureRecordPhase},
		},
	}
}

// tripLoad is the Load of a trip's flows: the key's stored params into
// params (whose ride is *rideID), and past the first phase, which reads
// them itself, the ride and its rider.
func (s *Service) tripLoad(ctx context.Context, tx pgx.Tx, key *idem.Key, params any, rideID *int64) (*dbgen.Ride, *dbgen.User, error) {
	if err := json.Unmarshal(key.Params, params); err != nil {
		return nil, nil, fmt.Errorf("params of key %d: %w", key.ID, err)
	}
	if key.Point == RecoveryPointStarted {
		return nil, nil, nil
	}
	return s.rideWithRider(ctx, tx, *rideID)
}

// rideWithRider reads a ride and its rider.
func (s *Service) rideWithRider(ctx context.Context, db dbgen.DBTX, rideID int64) (*dbgen.Ride, *dbgen.User, error) {
	ride, err := s.queries.RideGet(ctx, db, rideID)
	if err != nil {
		return nil, nil, fmt.Errorf("ride %d: %w", rideID, err)
	}
	rider, err := s.queries.UserGet(ctx, db, ride.UserID)
	if err != nil {
		return nil, nil, fmt.Errorf("rider of ride %d: %w", rideID, err)
	}
	return ride, rider, nil
}

// completionRequestPhase, in the claim's transaction: the ride, locked (a
// cancellation or another completion takes its turn), moves from
// authorized to capturing with its fare; a ride completed already is joined
// or answered; anything else is refused.
func (s *Service) completionRequestPhase(ctx context.Context, tx pgx.Tx, key *idem.Key, st *completionState) (idem.Outcome, error) {
	locked, err := s.queries.RideLockWithRider(ctx, tx, st.params.RideID)
	if IsNoRows(err) {
		return idem.Outcome{}, &Error{Code: CodeNotFound, Message: "no such ride"}
	}
	if err != nil {
		return idem.Outcome{}, err
	}
	ride := &locked.Ride
	st.rider = &locked.User
	if st.params.Currency != ride.Currency {
		return idem.Outcome{}, Invalid("body.currency", "must be the ride's currency, %s", ride.Currency)
	}
	if st.params.FareCents > MaxFareMultiple*ride.AmountCents {
		return idem.Outcome{}, Invalid("body.fare_cents", "must be at most %d times the ride's hold (%d): %d is taken for a mistake",
			MaxFareMultiple, ride.AmountCents, st.params.FareCents)
	}
	switch status := RideChargeStatus(ride.ChargeStatus); {
	case status == RideChargeAuthorized:
		var extra *int64
		if e := st.params.FareCents - ride.AmountCents; e > 0 {
			extra = &e
		}
		data, err := json.Marshal(map[string]any{"fare_cents": st.params.FareCents, "held_cents": ride.AmountCents, "extra_cents": extra})
		if err != nil {
			return idem.Outcome{}, err
		}
		started, err := s.queries.RideCompletionStartAudited(ctx, tx, dbgen.RideCompletionStartAuditedParams{
			FareCents: st.params.FareCents, CompletionKeyID: key.ID, ExtraCents: extra, ID: ride.ID,
			AuditData: data, OriginIP: key.IP,
		})
		if err != nil {
			return idem.Outcome{}, err
		}
		st.ride = &started.Ride
		return idem.MoveTo(RecoveryPointCaptureRequested), nil
	case status == RideChargeCapturing || status == RideChargeCompleted || status == RideChargeCaptureFailed:
		if ride.FareCents == nil || *ride.FareCents != st.params.FareCents {
			return idem.Outcome{}, &Error{Code: CodeNotCompletable, RideID: ride.ID, Message: fmt.Sprintf(
				"the ride was completed with a fare of %d; a trip completes once", deref(ride.FareCents))}
		}
		st.ride = ride
		if status == RideChargeCapturing && (ride.CaptureID == nil || ride.ExtraStatus == nil) {
			// Completed under another key whose request has not finished:
			// this one drives the same calls, under the same keys.
			return idem.MoveTo(RecoveryPointCaptureRequested), nil
		}
		return completionAnswer(key, ride), nil
	default:
		return idem.Outcome{}, notCompletable(ride)
	}
}

// notCompletable is why a ride that holds nothing cannot be completed.
func notCompletable(ride *dbgen.Ride) *Error {
	msg := "the ride holds nothing to capture"
	switch RideChargeStatus(ride.ChargeStatus) {
	case RideChargeCharged:
		msg = "the ride was charged in full when booked (capture booking); there is nothing to capture"
	case RideChargePending, RideChargeRequiresAction:
		msg = "the ride's hold is not placed yet; complete it once charge_status is authorized"
	case RideChargeDeclined:
		msg = "the ride's payment was declined; there is nothing to capture"
	case RideChargeCancelling, RideChargeCancelled:
		msg = "the ride was cancelled and its hold released"
	case RideChargeExpired:
		msg = "the ride expired and its hold was released (or never placed); nothing can be captured"
	}
	return &Error{Code: CodeNotCompletable, RideID: ride.ID, Message: msg}
}

// completionAnswer finishes a completion request with the ride: 201 for
// the request that completed it, 200 for any other, 202 while the
// processor has not confirmed the capture.
func completionAnswer(key *idem.Key, ride *dbgen.Ride) idem.Outcome {
	status := http.StatusOK
	if ride.CompletionKeyID != nil && *ride.CompletionKeyID == key.ID {
		status = http.StatusCreated
	}
	if RideChargeStatus(ride.ChargeStatus) == RideChargeCapturing {
		status = http.StatusAccepted
	}
	return idem.Finish(status, rideFromRow(ride))
}

// captureCall captures the fare (at most the hold) and charges the fare
// above the hold as a payment of its own, without the rider. No
// transaction is open here. Both go under keys derived from the booking's
// processor key, so a retry after a lost answer gets the same capture and
// the same payment. A capture or a payment already recorded is not made
// again.
func (s *Service) captureCall(ctx context.Context, key *idem.Key, st *completionState) error {
	st.capture, st.captureFailure, st.extra, st.extraFailure = nil, "", nil, nil
	ride := st.ride
	if RideChargeStatus(ride.ChargeStatus) != RideChargeCapturing {
		return nil
	}
	if ride.ChargeKey == nil || ride.PaymentID == nil || ride.FareCents == nil {
		return fmt.Errorf("ride %d: capturing without its payment or fare", ride.ID)
	}
	pkey := *ride.ChargeKey
	proc, err := s.proc(ride.Processor)
	if err != nil {
		return err
	}
	if ride.CaptureID == nil && ride.CapturedCents == nil {
		ch, err := proc.pay.PaymentCapture(ctx, PaymentCaptureParams{
			IdempotencyKey: captureKey(pkey), PaymentID: *ride.PaymentID, Reference: pkey,
			AmountCents: min(*ride.FareCents, ride.AmountCents), Currency: ride.Currency,
		})
		if pe := PaymentFinal(err); pe != nil && pe.Code == PaymentCodeUnexpectedState {
			// Captured already (a capture whose answer was lost, past the
			// key's window), or released by the processor: its state says.
			p, gerr := s.paymentNow(ctx, proc, ride)
			switch {
			case gerr != nil:
				return gerr
			case p != nil && p.Status == ChargeSucceeded && p.CapturedCents > 0:
				ch, err = p, nil
			case p != nil && p.Status == ChargeCanceled:
				st.captureFailure, err = CaptureFailureHoldGone, nil
			}
		}
		if err != nil {
			return err
		}
		st.capture = ch
	}
	if ride.ExtraCents != nil && ride.ExtraStatus == nil {
		// The customer the ride was booked with.
		reg, err := s.registration(ctx, s.pool, st.rider, ride.Processor, ride.PaymentSource)
		if err != nil {
			return Internal(err)
		}
		if reg == nil || reg.CustomerID == nil {
			return Internal(fmt.Errorf("ride %d: no customer of its payment source at %s", ride.ID, ride.Processor))
		}
		customerID := *reg.CustomerID
		ekey := extraKey(pkey)
		ch, err := proc.pay.ChargeCreate(ctx, ChargeCreateParams{
			IdempotencyKey: chargeIdempotencyKey(ekey, customerID), CustomerID: customerID,
			AmountCents: *ride.ExtraCents, Currency: ride.Currency, Description: rideExtraDescription,
			Tag: s.tag(st.rider.Email, ekey), API: PaymentAPI(ride.PaymentAPI), OffSession: true,
		})
		if pe := PaymentFinal(err); pe != nil {
			st.extraFailure = pe
			return nil
		}
		if err != nil {
			return err
		}
		if ch.Status != ChargeSucceeded {
			// Asked to authenticate without the rider: the rider pays it
			// later, present.
			st.extraFailure = &PaymentError{Class: PaymentClassDecline, Kind: PaymentDeclined, Code: "authentication_required",
				Message: "the bank asks the rider to authenticate this payment"}
			return nil
		}
		st.extra = ch
	}
	return nil
}

// rideExtraDescription is the description of a fare's payment above its
// hold: a constant, like every parameter of the payment.
const rideExtraDescription = "Atomic Rides fare above the hold"

// captureRecordPhase records what the processor did, and completes the
// ride when both its capture and its extra payment are decided.
func (s *Service) captureRecordPhase(ctx context.Context, tx pgx.Tx, key *idem.Key, st *completionState) (idem.Outcome, error) {
	rideID := st.ride.ID
	if ride, err := s.tripSettle(ctx, tx, st); err != nil || ride != nil {
		if err != nil {
			return idem.Outcome{}, err
		}
		return completionAnswer(key, ride), nil
	}
	if st.captureFailure != "" {
		if _, err := s.tripCaptureFailed(ctx, tx, rideID, st.captureFailure); err != nil {
			return idem.Outcome{}, err
		}
	}
	if c := st.capture; c != nil {
		switch c.Status {
		case ChargeSucceeded:
			if _, err := s.tripCaptured(ctx, tx, rideID, c.CapturedCents, c.ID); err != nil {
				return idem.Outcome{}, err
			}
		case ChargeCaptureRequested:
			if _, err := s.queries.RideCaptureRequested(ctx, tx, c.ID, rideID); err != nil {
				return idem.Outcome{}, err
			}
		}
	}
	if err := s.tripExtraRecord(ctx, tx, st); err != nil {
		return idem.Outcome{}, err
	}
	ride, err := s.queries.RideGet(ctx, tx, rideID)
	if err != nil {
		return idem.Outcome{}, err
	}
	return completionAnswer(key, ride), nil
}

// tripSettle completes, in one statement, a ride whose call just captured
// its fare (at once, as Stripe does) and decided the fare above the hold:
// the common completion. It returns nil when the call decided less, or
// another path recorded part of it first; the general path then records
// what is left.
func (s *Service) tripSettle(ctx context.Context, tx pgx.Tx, st *completionState) (*dbgen.Ride, error) {
	c := st.capture
	if c == nil || c.Status != ChargeSucceeded || c.ID == "" || st.captureFailure != "" || st.ride.ExtraStatus != nil {
		return nil, nil
	}
	extra, ok := st.extraDecided()
	if !ok {
		return nil, nil
	}
	params := dbgen.RideCompletionSettleParams{CapturedCents: c.CapturedCents, CaptureID: c.ID, ID: st.ride.ID,
		ExtraStatus: extra.status, ExtraChargeID: extra.chargeID, ExtraFailureCode: extra.failureCode}
	data, err := json.Marshal(map[string]any{
		"fare_cents": st.ride.FareCents, "captured_cents": c.CapturedCents, "capture_id": c.ID,
		"extra_status": params.ExtraStatus, "extra_charge_id": params.ExtraChargeID, "extra_failure_code": params.ExtraFailureCode,
	})
	if err != nil {
		return nil, err
	}
	params.AuditData = data
	row, err := s.queries.RideCompletionSettle(ctx, tx, params)
	if IsNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ride := &row.Ride
	if params.ExtraStatus != ExtraNone {
		s.metrics.tripExtras.WithLabelValues(ride.Processor, params.ExtraStatus).Inc()
	}
	return ride, s.tripCompleted(ctx, tx, ride)
}

// extraDecision is what became of the fare above a trip's hold: its
// extra_status, and the payment or why it failed.
type extraDecision struct {
	status      string
	chargeID    *string
	failureCode *string
}

// extraDecided is the decision about the fare above the hold that the call
// made; false when the fare is above the hold and the call decided
// nothing.
func (st *completionState) extraDecided() (extraDecision, bool) {
	switch {
	case st.extra != nil:
		return extraDecision{status: ExtraCharged, chargeID: &st.extra.ID}, true
	case st.extraFailure != nil:
		code := cmp.Or(st.extraFailure.Code, string(st.extraFailure.Kind))
		return extraDecision{status: ExtraDue, failureCode: &code}, true
	case st.ride.ExtraCents != nil:
		return extraDecision{}, false
	}
	return extraDecision{status: ExtraNone}, true
}

// tripExtraRecord records what became of the fare above the hold, and
// completes the ride if its capture is recorded.
func (s *Service) tripExtraRecord(ctx context.Context, tx pgx.Tx, st *completionState) error {
	if st.ride.ExtraStatus != nil {
		return nil
	}
	extra, ok := st.extraDecided()
	if !ok {
		return fmt.Errorf("ride %d: its fare above the hold was not decided", st.ride.ID)
	}
	params := dbgen.RideExtraRecordParams{ExtraStatus: extra.status, ExtraChargeID: extra.chargeID,
		ExtraFailureCode: extra.failureCode, ID: st.ride.ID}
	ride, err := s.queries.RideExtraRecord(ctx, tx, params)
	if IsNoRows(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if params.ExtraStatus != ExtraNone {
		if err := audit.Record(ctx, tx, "ride.extra_"+params.ExtraStatus, "ride", ride.ID, ride.UserID, nil, map[string]any{
			"extra_cents": ride.ExtraCents, "charge_id": params.ExtraChargeID, "code": params.ExtraFailureCode,
		}); err != nil {
			return err
		}
		s.metrics.tripExtras.WithLabelValues(ride.Processor, params.ExtraStatus).Inc()
	}
	_, err = s.tripFinish(ctx, tx, ride.ID)
	return err
}

// tripCaptured records that the processor captured captured cents of the
// ride's hold (capture captureID), once, and completes the ride if its
// extra payment is decided. It returns the outcome for an inbound event.
func (s *Service) tripCaptured(ctx context.Context, tx pgx.Tx, rideID, captured int64, captureID string) (string, error) {
	ride, err := s.queries.RideCaptured(ctx, tx, dbgen.RideCapturedParams{CapturedCents: captured, CaptureID: nonEmpty(captureID), ID: rideID})
	if IsNoRows(err) {
		return InboxOutcomeAlreadyRecorded, nil
	}
	if err != nil {
		return "", err
	}
	if err := audit.Record(ctx, tx, "ride.captured", "ride", ride.ID, ride.UserID, nil, map[string]any{
		"captured_cents": captured, "capture_id": captureID,
	}); err != nil {
		return "", err
	}
	if _, err := s.tripFinish(ctx, tx, ride.ID); err != nil {
		return "", err
	}
	return InboxOutcomeTripCaptured, nil
}

// tripFinish completes a capturing ride whose capture and extra payment are
// both recorded, once, with its receipt (the final fare). It reports
// whether it did.
func (s *Service) tripFinish(ctx context.Context, tx pgx.Tx, rideID int64) (bool, error) {
	ride, err := s.queries.RideCompletionFinish(ctx, tx, rideID)
	if IsNoRows(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := audit.Record(ctx, tx, "ride.completed", "ride", ride.ID, ride.UserID, nil, map[string]any{
		"fare_cents": ride.FareCents, "captured_cents": ride.CapturedCents, "extra_status": ride.ExtraStatus,
	}); err != nil {
		return false, err
	}
	return true, s.tripCompleted(ctx, tx, ride)
}

// tripCompleted is what every path that completes a trip does with it, in
// its transaction: the receipt, with the final fare, and the count.
func (s *Service) tripCompleted(ctx context.Context, tx pgx.Tx, ride *dbgen.Ride) error {
	if _, err := s.jobs.InsertTx(ctx, tx, RideReceiptArgs{RideID: ride.ID}, nil); err != nil {
		return err
	}
	s.metrics.tripsEnded.WithLabelValues(ride.Processor, string(RideChargeCompleted)).Inc()
	return nil
}

// tripCaptureFailed records that the processor failed the ride's capture,
// once. It returns the outcome for an inbound event.
func (s *Service) tripCaptureFailed(ctx context.Context, tx pgx.Tx, rideID int64, reason string) (string, error) {
	ride, err := s.queries.RideCaptureFailed(ctx, tx, truncateDeclineMessage(cmp.Or(reason, "capture_failed")), rideID)
	if IsNoRows(err) {
		return InboxOutcomeAlreadyRecorded, nil
	}
	if err != nil {
		return "", err
	}
	if err := audit.Record(ctx, tx, "ride.capture_failed", "ride", ride.ID, ride.UserID, nil, map[string]any{"reason": reason}); err != nil {
		return "", err
	}
	s.metrics.capturesFailed.WithLabelValues(ride.Processor).Inc()
	s.logger.ErrorContext(ctx, "the processor failed a ride's capture: follow docs/operations.md#capture-failed",
		"ride_id", ride.ID, "processor", ride.Processor, "reason", reason)
	return InboxOutcomeCaptureFailed, nil
}

// rideAuthorizedRecord records, in the booking's charge phase, that the
// ride's hold is placed: its payment and charge, and until when the hold is
// kept. No receipt yet: the receipt, with the final fare, comes with the
// capture. It answers 201 with the ride.
func (s *Service) rideAuthorizedRecord(ctx context.Context, tx pgx.Tx, key *idem.Key, st *rideState, pkey string) (idem.Outcome, error) {
	if st.charge.ID == "" {
		return idem.Outcome{}, fmt.Errorf("ride %d: hold %s without a charge", st.ride.ID, st.charge.PaymentID)
	}
	expires := key.ClaimedAt.Add(s.holdExpiry)
	audit, err := json.Marshal(map[string]any{
		"payment_id": st.charge.PaymentID, "charge_id": st.charge.ID, "held_cents": st.ride.AmountCents, "hold_expires_at": expires,
	})
	if err != nil {
		return idem.Outcome{}, err
	}
	params := dbgen.RideSetAuthorizedAuditedParams{
		StripeChargeID: st.charge.ID, PaymentID: nonEmpty(st.charge.PaymentID), ChargeKey: &pkey,
		HoldExpiresAt: expires, ID: st.ride.ID, AuditData: audit, OriginIP: key.IP,
	}
	n, err := s.queries.RideSetAuthorizedAudited(ctx, tx, params)
	if err != nil {
		return idem.Outcome{}, err
	}
	if n != 1 {
		return idem.Outcome{}, fmt.Errorf("ride %d: not pending when recording its hold %s", st.ride.ID, st.charge.ID)
	}
	r := *st.ride
	r.ChargeStatus, r.StripeChargeID, r.PaymentID, r.ChargeKey, r.HoldExpiresAt = string(RideChargeAuthorized), &st.charge.ID, params.PaymentID, &pkey, &expires
	return idem.Finish(http.StatusCreated, rideFromRow(&r)), nil
}

// prepareCapture: the processor captured a trip's hold, or failed to
// (Adyen's CAPTURE and CAPTURE_FAILED; Stripe's charge.captured). The ride
// of the payment records it once; a ride that recorded it already, or
// none of this deployment's, needs nothing.
func (s *Service) prepareCapture(ctx context.Context, ev *InboundEvent) (effect, error) {
	c := ev.Charge
	if c.Tag.Namespace != "" && c.Tag.Namespace != s.namespace {
		return constant(InboxOutcomeForeign), nil
	}
	processor := cmp.Or(ev.Processor, ProcessorStripe)
	ride, err := s.queries.RideGetByPayment(ctx, s.pool, processor, &c.PaymentID)
	if IsNoRows(err) {
		return s.lostCaptureEffect(processor, c), nil
	}
	if err != nil {
		return nil, Internal(err)
	}
	if Capture(ride.Capture) != CaptureTrip {
		return constant(InboxOutcomeAlreadyRecorded), nil
	}
	return func(ctx context.Context, tx pgx.Tx) (string, error) {
		if c.Status == ChargeFailed {
			return s.tripCaptureFailed(ctx, tx, ride.ID, cmp.Or(c.FailureMessage, c.FailureCode))
		}
		if out, err := s.tripCaptured(ctx, tx, ride.ID, c.CapturedCents, c.ID); err != nil || out != InboxOutcomeAlreadyRecorded {
			return out, err
		}
		return s.tripRecognised(ctx, tx, ride.ID, c.CapturedCents, c.ID)
	}, nil
}

// tripRecognised records a capture the processor made of a ride that still
// holds its fare: its completion was lost with a restore (or the hold was
// captured outside the service). The ride is completed with what was
// captured, once, with its receipt. A ride that moved on is
// InboxOutcomeAlreadyRecorded.
func (s *Service) tripRecognised(ctx context.Context, tx pgx.Tx, rideID, captured int64, captureID string) (string, error) {
	if captured <= 0 {
		return InboxOutcomeAlreadyRecorded, nil
	}
	ride, err := s.queries.RideCompletionRecognised(ctx, tx, dbgen.RideCompletionRecognisedParams{
		CapturedCents: captured, CaptureID: nonEmpty(captureID), ID: rideID,
	})
	if IsNoRows(err) {
		return InboxOutcomeAlreadyRecorded, nil
	}
	if err != nil {
		return "", err
	}
	if err := audit.Record(ctx, tx, "ride.completion_recognised", "ride", ride.ID, ride.UserID, nil, map[string]any{
		"captured_cents": captured, "capture_id": captureID,
	}); err != nil {
		return "", err
	}
	if err := s.tripCompleted(ctx, tx, ride); err != nil {
		return "", err
	}
	return InboxOutcomeTripCaptured, nil
}

// lostCaptureEffect is what the capture c of a payment no ride records
// does. A capture happens only after a completion recorded its ride, so
// the ride was lost with a restore, together with its booking. At a
// processor whose payments are read from its notifications (Adyen), the
// payment becomes a charge of what was captured, no longer a hold the
// orphan pass would only release: the orphan policy refunds it.
func (s *Service) lostCaptureEffect(processor string, c *Charge) effect {
	if processor == ProcessorStripe || c.Status != ChargeSucceeded || c.CapturedCents <= 0 || c.Tag.Key == "" || !IsCurrency(c.Currency) {
		return constant(InboxOutcomeUnknownCharge)
	}
	return func(ctx context.Context, tx pgx.Tx) (string, error) {
		if _, err := s.queries.NotifiedChargeCaptured(ctx, tx, dbgen.NotifiedChargeCapturedParams{
			Processor: processor, ChargeID: c.PaymentID, ChargeKey: c.Tag.Key,
			AmountCents: c.CapturedCents, Currency: c.Currency, ChargedAt: c.Created,
		}); err != nil {
			return "", err
		}
		return InboxOutcomeOrphanCharge, nil
	}
}

// utcPtr is *t in UTC, nil for nil.
func utcPtr(t *time.Time) *time.Time {
	if t != nil {
		u := t.UTC()
		t = &u
	}
	return t
}

// deref is *p, or T's zero value when p is nil.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
