package service

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/service/audit"
	"github.com/atomicrides/atomicrides/service/idem"
)

// DefaultActionDeadline is how long a ride waits for its rider to
// authenticate the payment before the payment is cancelled at the
// processor and the ride expires.
const DefaultActionDeadline = 30 * time.Minute

// DefaultPublicURL is where riders reach the service when Config.PublicURL
// is empty (a development machine).
const DefaultPublicURL = "http://localhost:8080"

// ReturnPath is the service's page a rider's bank sends the rider back to
// after authenticating a payment (the booking pages serve it).
const ReturnPath = "/book/return"

// Outcomes of moving a ride that waits for its rider, as recorded on an
// inbound event (outcome) and counted
// (atomicrides_ride_actions_total{outcome}).
const (
	RideActionCharged = "ride_charged"
	// RideActionAuthorized: a trip's hold was authenticated and placed.
	RideActionAuthorized = "ride_authorized"
	RideActionDeclined   = "ride_declined"
	RideActionExpired    = "ride_expired"
	// RideActionWaiting: the payment is still undecided; nothing moved.
	RideActionWaiting = "ride_waiting"
	// RideActionCancelRequested: past its deadline, the payment's cancel
	// was taken on (Adyen); the processor's notification decides.
	RideActionCancelRequested = "ride_cancel_requested"
)

// Ways a waiting ride is moved on, in its audit record (via).
const (
	actionViaEvent  = "event"
	actionViaReturn = "return"
	actionViaExpiry = "expiry"
)

// RideNextAction is what a rider must do before the processor decides a
// ride's payment, while its charge_status is requires_action.
type RideNextAction struct {
	Type         string    `json:"type" enum:"redirect_to_url" doc:"redirect_to_url: send the rider to redirect_url; their bank asks them to authenticate the payment, then sends them back to the service."`
	RedirectURL  string    `json:"redirect_url" doc:"Where the rider authenticates the payment with their bank."`
	ClientSecret *string   `json:"client_secret" nullable:"true" doc:"For Stripe's mobile and web SDKs (handleNextAction): the PaymentIntent's client secret. Null at processors without one (adyen)."`
	ExpiresAt    time.Time `json:"expires_at" doc:"After this time the payment is cancelled and the ride expires."`
}

// RideActionExpireArgs is the job that ends the wait of a ride for its
// rider at its deadline: a payment still undecided is cancelled at the
// processor and the ride expires. It is inserted, scheduled at the
// deadline, in the phase that records the wait.
type RideActionExpireArgs struct {
	RideID int64 `json:"ride_id"`
}

// Kind is the job's kind in River.
func (RideActionExpireArgs) Kind() string { return "ride_action_expire" }

// InsertOpts makes the job unique per ride.
func (RideActionExpireArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 25, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// rideReturnURL is where the rider's bank sends the rider back to for the
// ride whose charge goes under the processor key pkey: a pure function of
// the request, like every parameter of the charge.
func (s *Service) rideReturnURL(pkey string) string {
	return s.returnBase + ReturnPath + "?key=" + url.QueryEscape(pkey)
}

// actionCancelKey and actionDetailsKey are the processor idempotency keys of
// cancelling the payment made under pkey, and of submitting a redirect
// result of it: pure functions of the request (and of what the rider came
// back with).
func actionCancelKey(pkey string) string { return processorKeyCancel + digest("cancel", pkey) }

func actionDetailsKey(pkey, redirectResult string) string {
	return processorKeyDetails + digest("details", pkey, redirectResult)
}

// nextActionOf is the action of a waiting ride row, nil for every other.
func nextActionOf(r *dbgen.Ride) *RideNextAction {
	if RideChargeStatus(r.ChargeStatus) != RideChargeRequiresAction || r.ActionURL == nil || r.ActionExpiresAt == nil {
		return nil
	}
	return &RideNextAction{Type: "redirect_to_url", RedirectURL: *r.ActionURL, ClientSecret: r.ActionClientSecret, ExpiresAt: r.ActionExpiresAt.UTC()}
}

// rideActionRecord records, in the booking's charge phase, that the ride
// waits for its rider to authenticate payment p: its payment and action,
// its deadline, and the job that ends the wait then. It returns the ride as
// answered (202).
func (s *Service) rideActionRecord(ctx context.Context, tx pgx.Tx, key *idem.Key, st *rideState, pkey string) (*Ride, error) {
	p := st.charge
	deadline := key.ClaimedAt.Add(s.actionDeadline)
	params := dbgen.RideSetRequiresActionParams{
		PaymentID: nonEmpty(p.PaymentID), ChargeKey: pkey, ActionURL: &p.Action.URL,
		ActionClientSecret: nonEmpty(p.Action.ClientSecret), ActionExpiresAt: deadline, ID: st.ride.ID,
	}
	n, err := s.queries.RideSetRequiresAction(ctx, tx, params)
	if err != nil {
		return nil, err
	}
	if n != 1 {
		return nil, fmt.Errorf("ride %d: not pending when recording its payment's action", st.ride.ID)
	}
	if st.newCustomer {
		if _, err := s.storeCustomer(ctx, s.queries, tx, st.ride.Processor, key.UserID, st.ride.PaymentSource, st.customerID); err != nil {
			return nil, err
		}
	}
	if err := audit.Record(ctx, tx, "ride.charge_requires_action", "ride", st.ride.ID, key.UserID, key.IP,
		map[string]any{"payment_id": p.PaymentID, "expires_at": deadline}); err != nil {
		return nil, err
	}
	if _, err := s.jobs.InsertTx(ctx, tx, RideActionExpireArgs{RideID: st.ride.ID}, &river.InsertOpts{ScheduledAt: deadline}); err != nil {
		return nil, err
	}
	r := *st.ride
	r.ChargeStatus, r.PaymentID, r.ChargeKey = string(RideChargeRequiresAction), params.PaymentID, &pkey
	r.ActionURL, r.ActionClientSecret, r.ActionExpiresAt = params.ActionURL, params.ActionClientSecret, &deadline
	return rideFromRow(&r), nil
}

// rideActionApply moves the waiting ride rideID to payment p's outcome, in
// tx, once: charged (with its receipt), declined, or expired; a payment
// still undecided moves nothing. A ride that moved on already is
// InboxOutcomeAlreadyRecorded.
func (s *Service) rideActionApply(ctx context.Context, tx pgx.Tx, waiting *dbgen.Ride, p *Charge, via string) (string, error) {
	rideID, trip := waiting.ID, Capture(waiting.Capture) == CaptureTrip
	var (
		ride    *dbgen.Ride
		err     error
		outcome string
		data    = map[string]any{"payment_id": p.PaymentID, "via": via}
	)
	switch p.Status {
	case ChargeSucceeded, ChargeAuthorized:
		if p.ID == "" {
			return "", fmt.Errorf("ride %d: payment %s succeeded without a charge", rideID, p.PaymentID)
		}
		outcome, data["charge_id"] = RideActionCharged, p.ID
		if trip {
			// A trip's hold: authorized, and kept from now on.
			outcome = RideActionAuthorized
			ride, err = s.queries.RideActionAuthorized(ctx, tx, dbgen.RideActionAuthorizedParams{
				StripeChargeID: p.ID, PaymentID: nonEmpty(p.PaymentID), HoldSeconds: s.holdExpiry.Seconds(), ID: rideID,
			})
			break
		}
		ride, err = s.queries.RideActionCharged(ctx, tx, dbgen.RideActionChargedParams{
			StripeChargeID: p.ID, PaymentID: nonEmpty(p.PaymentID), ID: rideID,
		})
	case ChargeFailed:
		d := declineOf(&PaymentError{Class: PaymentClassDecline, Kind: PaymentDeclined, Code: p.FailureCode, Message: p.FailureMessage})
		outcome, data["code"] = RideActionDeclined, d.code
		ride, err = s.queries.RideActionDeclined(ctx, tx, dbgen.RideActionDeclinedParams{
			DeclineCode: d.code, DeclineMessage: d.message, PaymentID: nonEmpty(p.PaymentID), ID: rideID,
		})
	case ChargeCanceled:
		outcome = RideActionExpired
		ride, err = s.queries.RideActionExpired(ctx, tx, rideID)
	default:
		return RideActionWaiting, nil
	}
	if IsNoRows(err) {
		return InboxOutcomeAlreadyRecorded, nil
	}
	if err != nil {
		return "", err
	}
	action := map[string]string{RideActionCharged: "ride.charged", RideActionAuthorized: "ride.authorized",
		RideActionDeclined: "ride.charge_declined", RideActionExpired: "ride.expired"}[outcome]
	if err := audit.Record(ctx, tx, action, "ride", ride.ID, ride.UserID, nil, data); err != nil {
		return "", err
	}
	if outcome == RideActionCharged {
		if _, err := s.jobs.InsertTx(ctx, tx, RideReceiptArgs{RideID: ride.ID}, nil); err != nil {
			return "", err
		}
	}
	return outcome, nil
}

// applyAction runs rideActionApply in its own transaction and counts what
// it did.
func (s *Service) applyAction(ctx context.Context, ride *dbgen.Ride, p *Charge, via string) (string, error) {
	var outcome string
	err := s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) (err error) {
		outcome, err = s.rideActionApply(ctx, tx, ride, p, via)
		return err
	})
	if err != nil {
		return "", Internal(err)
	}
	s.countAction(outcome, via)
	return outcome, nil
}

// countAction counts a waiting ride moved on.
func (s *Service) countAction(outcome, via string) {
	switch outcome {
	case RideActionCharged, RideActionAuthorized, RideActionDeclined, RideActionExpired:
		s.metrics.rideActions.WithLabelValues(outcome, via).Inc()
	}
}

// paymentNow reads the payment of the waiting ride at its processor, when
// the processor reads payments (Stripe); nil when it does not (Adyen).
func (s *Service) paymentNow(ctx context.Context, proc *processor, ride *dbgen.Ride) (*Charge, error) {
	if ride.PaymentID == nil {
		return nil, nil
	}
	p, err := proc.pay.PaymentGet(ctx, *ride.PaymentID)
	if isUnsupported(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("ride %d: the processor has no payment %s", ride.ID, *ride.PaymentID)}
	}
	return p, nil
}

// RideActionExpire ends the wait of ride rideID for its rider (the job
// RideActionExpireArgs, at the deadline): a payment decided meanwhile is
// applied as it is; one still undecided is cancelled at the processor and
// the ride expires. A ride no longer waiting needs nothing. It returns the
// outcome.
func (s *Service) RideActionExpire(ctx context.Context, rideID int64) (string, error) {
	ride, err := s.queries.RideGet(ctx, s.pool, rideID)
	if IsNoRows(err) {
		return "", &Error{Code: CodeNotFound, Message: fmt.Sprintf("no ride %d", rideID)}
	}
	if err != nil {
		return "", Internal(err)
	}
	if RideChargeStatus(ride.ChargeStatus) != RideChargeRequiresAction || ride.ChargeKey == nil {
		return InboxOutcomeAlreadyRecorded, nil
	}
	proc, err := s.proc(ride.Processor)
	if err != nil {
		return "", err
	}
	if p, err := s.paymentNow(ctx, proc, ride); err != nil {
		return "", err
	} else if p != nil && p.Status != ChargeRequiresAction && p.Status != ChargeProcessing {
		return s.applyAction(ctx, ride, p, actionViaExpiry)
	}
	params := PaymentCancelParams{IdempotencyKey: actionCancelKey(*ride.ChargeKey), Reference: *ride.ChargeKey}
	if ride.PaymentID != nil {
		params.PaymentID = *ride.PaymentID
	}
	p, err := proc.pay.PaymentCancel(ctx, params)
	if pe := PaymentFinal(err); pe != nil && pe.Code == PaymentCodeUnexpectedState {
		// Decided between the read and the cancel: read it again.
		if p, err = s.paymentNow(ctx, proc, ride); err == nil && p == nil {
			err = pe
		}
	}
	if err != nil {
		return "", err
	}
	if p.Status == ChargeCancelRequested {
		// Taken on (Adyen): the payment may have been decided before the
		// cancel reached it. The cancel's notification (TECHNICAL_CANCEL:
		// a cancel by the payment's reference) expires the ride, or the
		// payment's AUTHORISATION moves it to its outcome; either may have
		// come already, and then the ride is left as it moved.
		if _, err := s.queries.RideCancelRequested(ctx, s.pool, ride.ID); err != nil {
			return "", Internal(err)
		}
		s.logger.InfoContext(ctx, "ride past its deadline: cancel requested, its outcome comes in a notification",
			"ride_id", ride.ID, "processor", ride.Processor)
		return RideActionCancelRequested, nil
	}
	return s.applyAction(ctx, ride, p, actionViaExpiry)
}

// RideActionReturn applies what the rider came back with from
// authenticating the payment made under the processor key pkey, and
// returns the ride's id (its owner sees the outcome on the ride). The
// truth is the processor's: at Stripe the PaymentIntent is read; at Adyen
// the redirect result is submitted (/payments/details) and its answer must
// be this payment's. A ride no longer waiting is left as it is; a link
// that names no ride is CodeNotFound.
func (s *Service) RideActionReturn(ctx context.Context, pkey, redirectResult string) (int64, error) {
	if pkey == "" || len(pkey) > 255 {
		return 0, Invalid("query.key", "must name a booking's payment (1 to 255 characters)")
	}
	if len(redirectResult) > 16<<10 {
		return 0, Invalid("query.redirectResult", "must be at most 16384 characters")
	}
	ride, err := s.queries.RideGetByChargeKey(ctx, s.pool, &pkey)
	if IsNoRows(err) {
		return 0, &Error{Code: CodeNotFound, Message: "no booking waits under this return link"}
	}
	if err != nil {
		return 0, Internal(err)
	}
	if RideChargeStatus(ride.ChargeStatus) != RideChargeRequiresAction {
		return ride.ID, nil
	}
	proc, err := s.proc(ride.Processor)
	if err != nil {
		return 0, err
	}
	p, err := s.paymentNow(ctx, proc, ride)
	if err != nil {
		return 0, err
	}
	if p == nil {
		if redirectResult == "" {
			return 0, Invalid("query.redirectResult", "is required: the processor's result of the authentication")
		}
		p, err = proc.pay.PaymentDetails(ctx, PaymentDetailsParams{IdempotencyKey: actionDetailsKey(pkey, redirectResult), RedirectResult: redirectResult})
		if pe := PaymentFinal(err); pe != nil {
			return 0, Invalid("query.redirectResult", "was refused by the processor: %s", pe.Message)
		}
		if err != nil {
			return 0, err
		}
		if p.Tag.Key != pkey {
			return 0, Invalid("query.redirectResult", "is another payment's result, not this booking's")
		}
	}
	if _, err := s.applyAction(ctx, ride, p, actionViaReturn); err != nil {
		return 0, err
	}
	return ride.ID, nil
}

// nonEmpty is s, or nil when s is empty.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
