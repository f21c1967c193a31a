package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/service/audit"
	"github.com/atomicrides/atomicrides/service/idem"
)

// RecoveryPointRideCreated: the ride and its audit record are committed; the
// charge comes next.
const RecoveryPointRideCreated RecoveryPoint = "ride_created"

// The route of a ride booking, POST /rides.
const (
	RideCreateMethod = http.MethodPost
	RideCreatePath   = "/rides"
)

// RideChargeStatus is the state of a ride's charge: RideChargePending until
// the processor's answer is recorded, then RideChargeCharged or
// RideChargeDeclined for good. The database's CHECK on rides.charge_status
// and the enum of Ride.ChargeStatus in the spec list the same values.
type RideChargeStatus string

const (
	// RideChargePending: the ride is booked; the charge is not decided yet.
	RideChargePending RideChargeStatus = "pending"
	// RideChargeCharged: the processor charged the ride; its charge id is
	// recorded.
	RideChargeCharged RideChargeStatus = "charged"
	// RideChargeDeclined: the processor declined or rejected the charge.
	RideChargeDeclined RideChargeStatus = "declined"
	// RideChargeRequiresAction: the rider's bank asked the rider to
	// authenticate the payment; the ride waits for its rider (its
	// next_action) until its deadline, then moves once to charged,
	// declined or expired.
	RideChargeRequiresAction RideChargeStatus = "requires_action"
	// RideChargeExpired: the rider did not authenticate the payment before
	// its deadline; the payment was cancelled at the processor and nothing
	// was charged.
	RideChargeExpired RideChargeStatus = "expired"

	// The states of a ride booked with CaptureTrip (trips.go), after its
	// hold is placed.

	// RideChargeAuthorized: the quoted fare is held on the rider's card;
	// nothing is captured.
	RideChargeAuthorized RideChargeStatus = "authorized"
	// RideChargeCapturing: the trip is completed with its fare; the
	// processor's capture (and the payment of a fare above the hold) is
	// being made.
	RideChargeCapturing RideChargeStatus = "capturing"
	// RideChargeCompleted: the fare is captured (and any fare above the
	// hold charged, or owed as the ride's balance).
	RideChargeCompleted RideChargeStatus = "completed"
	// RideChargeCaptureFailed: the processor failed the capture; an
	// operator follows it up.
	RideChargeCaptureFailed RideChargeStatus = "capture_failed"
	// RideChargeCancelling: the ride is cancelled; its hold is being
	// released.
	RideChargeCancelling RideChargeStatus = "cancelling"
	// RideChargeCancelled: the ride was cancelled and its hold released;
	// nothing was captured.
	RideChargeCancelled RideChargeStatus = "cancelled"
)

// Every ride costs the same for now.
const (
	RideAmountCents = 2000
	RideCurrency    = "usd"
)

// RideCreateParams is the input of a ride booking.
type RideCreateParams struct {
	OriginLat float64 `json:"origin_lat"`
	OriginLon float64 `json:"origin_lon"`
	TargetLat float64 `json:"target_lat"`
	TargetLon float64 `json:"target_lon"`
}

// AppendJSON appends p as encoding/json writes it, without its reflection:
// the stored form of a booking's request (idem.Request.Params).
func (p RideCreateParams) AppendJSON(b []byte) []byte {
	b = append(b, `{"origin_lat":`...)
	b = appendJSONFloat(b, p.OriginLat)
	b = append(b, `,"origin_lon":`...)
	b = appendJSONFloat(b, p.OriginLon)
	b = append(b, `,"target_lat":`...)
	b = appendJSONFloat(b, p.TargetLat)
	b = append(b, `,"target_lon":`...)
	b = appendJSONFloat(b, p.TargetLon)
	return append(b, '}')
}

// appendJSONFloat appends f as encoding/json writes a float64: the shortest
// decimal that reads back as f, in exponent form below 1e-6 and from 1e21
// on, with the exponent's leading zero dropped (1e-07 is 1e-7). f must be
// finite.
func appendJSONFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// Validate checks that the coordinates are finite and in range (bounds
// inclusive), naming the first field at fault.
func (p RideCreateParams) Validate() error {
	for _, c := range []struct {
		field string
		v     float64
		limit float64
	}{
		{"body.origin_lat", p.OriginLat, 90},
		{"body.origin_lon", p.OriginLon, 180},
		{"body.target_lat", p.TargetLat, 90},
		{"body.target_lon", p.TargetLon, 180},
	} {
		if math.IsNaN(c.v) || math.IsInf(c.v, 0) || c.v < -c.limit || c.v > c.limit {
			return Invalid(c.field, "must be a number between %v and %v", -c.limit, c.limit)
		}
	}
	return nil
}

// Ride is a booked ride as its owner sees it.
type Ride struct {
	// ID is drawn at random (in [1, 2^53 - 1]) when the ride is booked and
	// never names another ride, even in a database restored from a backup.
	ID           int64            `json:"id" doc:"Drawn at random (1 to 2^53 - 1) when the ride is booked; never names another ride, even after a restore."`
	CreatedAt    time.Time        `json:"created_at"`
	OriginLat    float64          `json:"origin_lat"`
	OriginLon    float64          `json:"origin_lon"`
	TargetLat    float64          `json:"target_lat"`
	TargetLon    float64          `json:"target_lon"`
	AmountCents  int64            `json:"amount_cents"`
	Currency     string           `json:"currency"`
	ChargeStatus RideChargeStatus `json:"charge_status" enum:"pending,requires_action,charged,declined,expired,authorized,capturing,completed,capture_failed,cancelling,cancelled" doc:"pending until the payment is decided; requires_action while the rider's bank asks the rider to authenticate the payment (next_action says how); declined; expired when the rider did not authenticate before next_action.expires_at, or when a trip's hold was released unended (nothing is charged). A ride with capture booking is then charged. A ride with capture trip is authorized (amount_cents is held), then capturing once completed (the fare is being captured), completed (captured), or capture_failed; or cancelling, then cancelled (the hold released)."`
	// NextAction is what the rider must do while ChargeStatus is
	// requires_action.
	NextAction *RideNextAction `json:"next_action" doc:"While charge_status is requires_action: where to send the rider to authenticate the payment, and until when. Null otherwise."`
	// PaymentID is the processor's payment: a Stripe PaymentIntent, an
	// Adyen pspReference; for a ride charged through Stripe's Charges API,
	// its charge.
	PaymentID *string `json:"payment_id" nullable:"true" doc:"The processor's payment: a Stripe PaymentIntent (pi_…), an Adyen pspReference; for rides charged before PaymentIntents, the charge. Set once the processor made it (a waiting ride has it at Stripe); null otherwise."`
	// ChargeID is set once the ride is charged.
	ChargeID *string `json:"charge_id" nullable:"true" doc:"The processor's charge, once the ride is charged: a Stripe charge (ch_…, the PaymentIntent's latest_charge), an Adyen pspReference. Null otherwise."`
	// StripeChargeID is ChargeID, under its former name.
	StripeChargeID *string          `json:"stripe_charge_id" nullable:"true" deprecated:"true" doc:"Deprecated: read charge_id, which holds the same value whatever the processor (this field held Adyen's pspReference too)."`
	RefundStatus   RideRefundStatus `json:"refund_status" enum:"none,pending,refunded,failed" doc:"none until a refund is asked for; pending until the processor's answer is recorded; failed when the processor refused it"`
	// RefundID is set once the ride is refunded.
	RefundID *string `json:"refund_id" nullable:"true" doc:"The processor's refund, once the ride is refunded (a Stripe re_…, an Adyen pspReference). Null otherwise."`
	// StripeRefundID is RefundID, under its former name.
	StripeRefundID *string `json:"stripe_refund_id" nullable:"true" deprecated:"true" doc:"Deprecated: read refund_id, which holds the same value whatever the processor."`
	// Processor is the payment processor the ride's charge goes to, chosen
	// once when the ride is booked.
	Processor string `json:"processor" enum:"stripe,adyen" doc:"The payment processor the ride's charge goes to, chosen once when the ride is booked; payment_id, charge_id and refund_id are that processor's ids."`
	// RefundFailureCode is the processor's reason for refusing the last
	// refund asked for, while RefundStatus is failed.
	RefundFailureCode *string `json:"refund_failure_code" nullable:"true" doc:"The processor's reason for refusing the refund, while refund_status is failed; null otherwise."`
	// DeclineCode and DeclineMessage are what the rider was told when the
	// charge was declined (the 402 answer); null for every other ride.
	DeclineCode    *string `json:"decline_code" nullable:"true" example:"card_declined" doc:"Why the charge was declined, while charge_status is declined: the processor's code (e.g. card_declined), or payment_rejected when the processor refused the charge for a reason other than the card. Null otherwise (and for rides declined before the service recorded it)."`
	DeclineMessage *string `json:"decline_message" nullable:"true" example:"Your card was declined." doc:"The message the rider was shown with the 402 answer, while charge_status is declined; null otherwise."`
	// DisputeStatus is the dispute (chargeback) of the ride's charge, as
	// the processor reported it; it only moves forward.
	DisputeStatus DisputeStatus `json:"dispute_status" enum:"none,disputed,won,lost" doc:"none unless the rider's bank disputes the charge; disputed while the dispute is open; won or lost once decided"`
	// Trip is the ride's money when it follows the trip: its hold, fare,
	// capture and balance.
	Trip
}

func rideFromRow(r *dbgen.Ride) *Ride {
	ride := &Ride{
		ID:             r.ID,
		CreatedAt:      r.CreatedAt.UTC(),
		OriginLat:      r.OriginLat,
		OriginLon:      r.OriginLon,
		TargetLat:      r.TargetLat,
		TargetLon:      r.TargetLon,
		AmountCents:    r.AmountCents,
		Currency:       r.Currency,
		ChargeStatus:   RideChargeStatus(r.ChargeStatus),
		NextAction:     nextActionOf(r),
		PaymentID:      r.PaymentID,
		ChargeID:       r.StripeChargeID,
		StripeChargeID: r.StripeChargeID,
		RefundStatus:   RideRefundNone,
		Processor:      r.Processor,
		DeclineCode:    r.DeclineCode,
		DeclineMessage: r.DeclineMessage,
		DisputeStatus:  DisputeStatus(r.DisputeStatus),
	}
	ride.Trip = tripOf(r)
	if ride.PaymentID == nil && r.PaymentAPI == string(PaymentAPICharges) {
		// A Charges API charge is its own payment.
		ride.PaymentID = r.StripeChargeID
	}
	return ride
}

// rideWithRefund is rideFromRow with the ride's refund, when it has one
// (status nil: none asked for).
func rideWithRefund(r *dbgen.Ride, status, refundID, failureCode *string) *Ride {
	ride := rideFromRow(r)
	if status != nil {
		ride.RefundStatus = RideRefundStatus(*status)
		ride.RefundID, ride.StripeRefundID, ride.RefundFailureCode = refundID, refundID, failureCode
	}
	return ride
}

// RideCreate books and charges a ride under the client's idempotency key. It
// returns the stored response of the request: 201 with the ride, or 402 when
// the card was declined. Every other failure is an *Error and leaves the
// request resumable with the same key.
func (s *Service) RideCreate(ctx context.Context, userID int64, idempotencyKey string, params RideCreateParams, ip *netip.Addr) (*Response, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	return run(ctx, s, s.rides, rideCreateRequest(userID, idempotencyKey, params, ip))
}

// RideReplay answers a booking from memory when this process saw its key
// finish lately with the same request: the stored response, and true. It
// reads nothing and writes nothing; false leaves the request to RideCreate
// (a key not in memory, or one used with another request, which RideCreate
// refuses). params must be valid.
func (s *Service) RideReplay(userID int64, idempotencyKey string, params RideCreateParams) (*Response, bool) {
	resp, ok, err := idem.Replay(s.engine, s.rides, rideCreateRequest(userID, idempotencyKey, params, nil))
	if !ok || err != nil {
		return nil, false
	}
	return resp, true
}

// rideCreateRequest is the request of a ride booking, as stored and
// fingerprinted. Coordinates are kept as sent except -0, which is 0: equal
// coordinates make one request, however a client writes them.
func rideCreateRequest(userID int64, idempotencyKey string, params RideCreateParams, ip *netip.Addr) idem.Request {
	for _, c := range []*float64{&params.OriginLat, &params.OriginLon, &params.TargetLat, &params.TargetLon} {
		*c += 0 // IEEE 754: -0 + 0 = +0; every other value is unchanged
	}
	return idem.Request{
		UserID: userID,
		Key:    idempotencyKey,
		Method: RideCreateMethod,
		Path:   RideCreatePath,
		Params: params,
		IP:     ip,
	}
}

// RideGet returns the user's ride with everything its rider may know of
// it: its charge (or why it was declined) and its refund. Another user's
// ride is not found.
func (s *Service) RideGet(ctx context.Context, userID, rideID int64) (*Ride, error) {
	row, err := s.queries.RideGetWithRefund(ctx, s.pool, rideID, userID)
	if err != nil {
		if IsNoRows(err) {
			return nil, &Error{Code: CodeNotFound, Message: "no such ride"}
		}
		return nil, Internal(err)
	}
	return rideWithRefund(&row.Ride, row.RefundStatus, row.StripeRefundID, row.RefundFailureCode), nil
}

// rideState is what the ride flow knows while it runs.
type rideState struct {
	user   *dbgen.User
	params RideCreateParams
	ride   *dbgen.Ride

	// reg is the rider's registration at the ride's processor, nil when
	// the rider has none there yet.
	reg *dbgen.ProcessorRegistration

	// Results of the charge call: pkey is the processor key it charged
	// under.
	pkey        string
	customerID  string
	newCustomer bool
	charge      *Charge
	failure     *PaymentError
	// lostRefund is the orphan refund of this request's charge: its
	// booking was lost and the charge refunded by the orphan policy.
	lostRefund *dbgen.OrphanRefund
	// refundedOrphans: the rider has a refunded orphan charge, so the
	// charge call looks for this request's among them.
	refundedOrphans bool
	// lostFrom is the start of the database's oldest open gap, read with
	// the phase before the call: nil when none is open.
	lostFrom *time.Time
}

func (s *Service) rideFlow() *idem.Flow[rideState] {
	return &idem.Flow[rideState]{
		Name:   "ride.create",
		Method: RideCreateMethod,
		Path:   RideCreatePath,
		Load:   s.rideLoad,
		Steps: map[RecoveryPoint]idem.Step[rideState]{
			RecoveryPointStarted:     {Phase: s.rideCreatePhase},
			RecoveryPointRideCreated: {Call: s.rideChargeCall, Phase: s.rideChargePhase},
		},
	}
}

func (s *Service) rideLoad(ctx context.Context, tx pgx.Tx, key *idem.Key) (*rideState, error) {
	st := &rideState{}
	if err := json.Unmarshal(key.Params, &st.params); err != nil {
		return nil, fmt.Errorf("ride params of key %d: %w", key.ID, err)
	}
	if key.Point == RecoveryPointStarted {
		// The ride phase reads the rider with the ride it books.
		return st, nil
	}
	var err error
	if st.user, err = s.queries.UserGet(ctx, tx, key.UserID); err != nil {
		return nil, err
	}
	if st.ride, err = s.queries.RideGetByIdempotencyKey(ctx, tx, &key.ID); err != nil {
		return nil, fmt.Errorf("ride of key %d at %s: %w", key.ID, key.Point, err)
	}
	orphans, err := s.queries.OrphanRefundExistsForUser(ctx, tx, &key.UserID)
	if err != nil {
		return nil, err
	}
	st.refundedOrphans, st.lostFrom = orphans.RefundedOrphans, gapLostFrom(orphans.GapOpen, orphans.GapLostFrom)
	if err := s.loadRegistration(ctx, tx, st); err != nil {
		return nil, err
	}
	return st, nil
}

// loadRegistration reads the rider's registration, at the ride's
// processor, of the payment source the ride was routed with (rides.payment_source,
// committed with the ride): a continuation after the rider replaced the
// source still charges the source, customer and key the ride started with.
func (s *Service) loadRegistration(ctx context.Context, tx pgx.Tx, st *rideState) (err error) {
	st.reg, err = s.registration(ctx, tx, st.user, st.ride.Processor, st.ride.PaymentSource)
	return err
}

// registration is user's registration of the payment source at the
// processor; nil when there is none.
func (s *Service) registration(ctx context.Context, db dbgen.DBTX, user *dbgen.User, processor, source string) (*dbgen.ProcessorRegistration, error) {
	if processor == ProcessorStripe && user.StripeCustomerID != nil && user.PaymentSource == source {
		// The user row mirrors the Stripe customer of its current source:
		// no second round trip.
		return &dbgen.ProcessorRegistration{
			UserID: user.ID, Processor: ProcessorStripe, PaymentSource: source,
			Status: registrationRegistered, CustomerID: user.StripeCustomerID,
		}, nil
	}
	regs, err := s.queries.ProcessorRegistrationListForSource(ctx, db, user.ID, source)
	if err != nil {
		return nil, err
	}
	var reg *dbgen.ProcessorRegistration
	for _, r := range regs {
		if r.Processor == processor {
			reg = r
		}
	}
	return reg, nil
}

// rideCreatePhase: the ride and its audit record; the rider comes back with
// them.
//
// The ride's processor is chosen here (route) and committed with the ride,
// with the request's charge key, before any call: every continuation reads
// it and goes back to it.
func (s *Service) rideCreatePhase(ctx context.Context, tx pgx.Tx, key *idem.Key, st *rideState) (idem.Outcome, error) {
	proc, err := s.route(ctx, tx, key.UserID, "", nil)
	if err != nil {
		return idem.Outcome{}, err
	}
	// The audit record's data is the request's stored input: the ride's
	// coordinates, as normalised.
	row, err := s.queries.RideCreateAudited(ctx, tx, dbgen.RideCreateAuditedParams{
		Processor:        proc,
		PaymentAPI:       string(s.paymentAPI(proc)),
		Capture:          string(s.capture),
		IdempotencyKeyID: &key.ID,
		OriginLat:        st.params.OriginLat,
		OriginLon:        st.params.OriginLon,
		TargetLat:        st.params.TargetLat,
		TargetLon:        st.params.TargetLon,
		AmountCents:      RideAmountCents,
		Currency:         RideCurrency,
		UserID:           key.UserID,
		AuditAction:      "ride.created",
		AuditData:        key.Params,
		OriginIP:         key.IP,
	})
	if IsNoRows(err) {
		// The rider owes the balance of a ride: nothing is booked, and
		// nothing is stored on the key.
		return idem.Outcome{}, s.balanceDue(ctx, tx, key.UserID)
	}
	if err != nil {
		return idem.Outcome{}, err
	}
	st.ride, st.user, st.refundedOrphans = &row.Ride, &row.User, row.RefundedOrphans
	st.lostFrom = gapLostFrom(row.GapOpen, row.GapLostFrom)
	if err := s.loadRegistration(ctx, tx, st); err != nil {
		return idem.Outcome{}, err
	}
	return idem.MoveTo(RecoveryPointRideCreated), nil
}

// rideDescription is the description of every ride's charge: a constant,
// so that the charge's parameters hold nothing a lost commit could change.
const rideDescription = "Atomic Rides ride"

// rideChargeCall charges the ride, creating the customer first if the
// background job has not. No transaction is open here. The charge's
// processor key and parameters are a pure function of the client's request
// (namespace, rider, client key; amount and currency are the same for
// every ride), so a retry after a lost commit sends the same request and
// gets the same charge, never a second one.
func (s *Service) rideChargeCall(ctx context.Context, key *idem.Key, st *rideState) error {
	st.customerID, st.newCustomer, st.charge, st.failure, st.lostRefund = "", false, nil, nil, nil

	pkey := ChargeKey(s.namespace, st.user.Email, key.ClientKey)
	st.pkey = pkey
	// The client of a booking lost with a restore, back after the orphan
	// policy refunded its charge: the processor may have forgotten the key
	// and would charge again, so the request ends without a charge. Only a
	// rider with such a refund (read with the ride) pays for the look-up.
	if st.refundedOrphans {
		if o, err := s.queries.OrphanRefundGetByChargeKey(ctx, s.pool, pkey); err == nil {
			st.lostRefund = o
			return nil
		} else if !IsNoRows(err) {
			return Internal(err)
		}
	}

	// The processor recorded with the ride, whatever the circuits say now:
	// while it is down the request waits at its recovery point (503).
	proc, err := s.proc(st.ride.Processor)
	if err != nil {
		return err
	}
	switch {
	case st.reg != nil && st.reg.Status == registrationRefused:
		// The processor refused the rider's card: nothing can be charged
		// there; the phase records it and routes the ride on or answers
		// 402.
		st.failure = &PaymentError{
			Class: PaymentClassRefusal, Kind: PaymentInvalid, Code: PaymentCodeSourceRefused,
			Message: *st.reg.Reason,
		}
		return nil
	case st.reg != nil:
		st.customerID = *st.reg.CustomerID
	default:
		c, err := s.processorCustomer(ctx, proc.name, st.user, st.ride.PaymentSource, key.ClaimedAt)
		if err != nil {
			if pe := PaymentFinal(err); pe != nil {
				// The rider's registration state at this processor,
				// as the customer job would have recorded it.
				refused := *pe
				refused.Code, refused.Message = PaymentCodeSourceRefused, refusalReason(proc.name, pe)
				err = &refused
			}
			return st.definitive(err)
		}
		st.customerID, st.newCustomer = c.ID, true
	}

	// Past the processor's key window a retried charge would not be
	// deduplicated: adopt the charge if it was made. The key was first
	// sent no earlier than its own record, or than the database's open
	// gap, which may have lost an earlier record of it.
	api := PaymentAPI(st.ride.PaymentAPI)
	find := ChargeFindParams{Key: pkey, API: api, CustomerID: st.customerID, Since: key.CreatedAt}
	if st.lostFrom != nil && st.lostFrom.Before(find.Since) {
		find.Since = *st.lostFrom
	}
	if s.keyWindowPassed(proc.name, key.ClaimedAt, key.CreatedAt, st.lostFrom) {
		if err := st.adopt(s.processorChargeOf(ctx, proc, find, st.user.Email)); err != nil || st.charge != nil || st.failure != nil {
			return err
		}
	}

	ch, err := proc.pay.ChargeCreate(ctx, ChargeCreateParams{
		IdempotencyKey: chargeIdempotencyKey(pkey, st.customerID),
		CustomerID:     st.customerID,
		AmountCents:    st.ride.AmountCents,
		Currency:       st.ride.Currency,
		Description:    rideDescription,
		Tag:            s.tag(st.user.Email, pkey),
		API:            api,
		ReturnURL:      s.returnURLFor(api, pkey),
		ManualCapture:  Capture(st.ride.Capture) == CaptureTrip,
	})
	if isIdempotencyMismatch(err) {
		// The key was used with other parameters, which none of ours
		// should cause: whatever payment it made is this request's.
		if ferr := st.adopt(s.processorChargeOf(ctx, proc, find, st.user.Email)); ferr != nil || st.charge != nil || st.failure != nil {
			return ferr
		}
	}
	if err != nil {
		return st.definitive(err)
	}
	st.charge = ch
	return nil
}

// paymentAPI is the API a new charge at the processor name goes to,
// committed with the ride: the rider-present payments API, where the
// rider's bank may ask for authentication — except at Adyen without its
// notifications (no ADYEN_HMAC_KEY): Adyen reads no payments back, so the
// outcome of one whose shopper never returns could not be learnt, and its
// payments stay merchant-initiated (a bank that insists refuses them: 402).
func (s *Service) paymentAPI(name string) PaymentAPI {
	if name == ProcessorAdyen && s.inbound[InboxSourceAdyen] == nil {
		return PaymentAPICharges
	}
	return PaymentAPIIntents
}

// returnURLFor is the return URL of a charge on api: the rider-present API
// sends the rider back to the service; the Charges API has no rider.
func (s *Service) returnURLFor(api PaymentAPI, pkey string) string {
	if api != PaymentAPIIntents {
		return ""
	}
	return s.rideReturnURL(pkey)
}

// adopt takes a payment found at the processor as the charge call's
// answer: a succeeded one is the charge; one waiting for its rider is the
// wait; a failed one is the decline the rider was given. A payment
// cancelled, or none, leaves the call to send its request.
func (st *rideState) adopt(p *Charge, err error) error {
	if err != nil || p == nil {
		return err
	}
	switch p.Status {
	case ChargeSucceeded, ChargeRequiresAction, ChargeAuthorized:
		st.charge = p
	case ChargeFailed:
		st.failure = &PaymentError{Class: PaymentClassDecline, Kind: PaymentDeclined, Code: p.FailureCode, Message: p.FailureMessage}
	}
	return nil
}

// processorChargeOf returns the payment made under the processor key
// find.Key by this deployment for the rider with email (succeeded, waiting
// for its rider, or failed; a succeeded one first), or nil when the
// processor has none.
func (s *Service) processorChargeOf(ctx context.Context, proc *processor, find ChargeFindParams, email string) (*Charge, error) {
	charges, err := proc.pay.ChargeFind(ctx, find)
	if isUnsupported(err) {
		// The processor lists no payments (Adyen): the charges its
		// notifications told us of are what we know of it.
		charges, err = s.notifiedChargesOf(ctx, proc.name, find.Key)
	}
	if err != nil {
		return nil, err
	}
	var found *Charge
	for _, ch := range charges {
		if ch.Tag.Key != find.Key || !s.owns(ch.Tag, email) {
			continue
		}
		switch {
		case ch.Status == ChargeSucceeded, ch.Status == ChargeAuthorized:
			return ch, nil
		case ch.Status == ChargeRequiresAction, ch.Status == ChargeFailed && found == nil:
			found = ch
		}
	}
	return found, nil
}

// notifiedChargesOf returns the charges made under the processor key pkey
// that the notifications of the processor name recorded.
func (s *Service) notifiedChargesOf(ctx context.Context, name, pkey string) ([]*Charge, error) {
	rows, err := s.queries.NotifiedChargeListByKey(ctx, s.pool, name, pkey)
	if err != nil {
		return nil, Internal(err)
	}
	out := make([]*Charge, len(rows))
	for i, r := range rows {
		out[i] = notifiedCharge(s.namespace, r)
	}
	return out, nil
}

// isIdempotencyMismatch reports whether the processor refused a key it saw
// with other parameters.
func isIdempotencyMismatch(err error) bool {
	var pe *PaymentError
	return errors.As(err, &pe) && pe.Class == PaymentClassConfiguration && pe.Code == PaymentCodeIdempotencyMismatch
}

// definitive keeps a definitive payment failure — the rider's outcome — for
// the phase to record and passes every other error on.
func (st *rideState) definitive(err error) error {
	if pe := PaymentFinal(err); pe != nil {
		st.failure = pe
		return nil
	}
	return err
}

// rideChargePhase records the charge's outcome and finishes the request.
func (s *Service) rideChargePhase(ctx context.Context, tx pgx.Tx, key *idem.Key, st *rideState) (idem.Outcome, error) {
	if o := st.lostRefund; o != nil {
		detail := fmt.Sprintf("this request's booking was lost and its charge %s refunded; nothing was charged now: book again under a new idempotency key",
			o.StripeChargeID)
		if _, err := s.queries.RideSetDeclined(ctx, tx, dbgen.RideSetDeclinedParams{
			DeclineCode: RideDeclineCodeBookingRefunded, DeclineMessage: detail, ID: st.ride.ID,
		}); err != nil {
			return idem.Outcome{}, err
		}
		if err := audit.Record(ctx, tx, "ride.charge_refunded_orphan", "ride", st.ride.ID, key.UserID, key.IP,
			map[string]string{"stripe_charge_id": o.StripeChargeID}); err != nil {
			return idem.Outcome{}, err
		}
		return idem.Finish(http.StatusConflict, Problem{Type: ProblemBookingRefunded, Title: "Booking refunded",
			Status: http.StatusConflict, Detail: detail}), nil
	}
	if st.failure != nil && st.failure.Code == PaymentCodeSourceRefused {
		// Definitively not charged: the processor refused the rider's card.
		// It is the rider's registration state there; the ride moves on to
		// a processor that may take the card, as a recorded new attempt,
		// or answers 402 naming the refusal.
		if err := s.registrationRefused(ctx, tx, st.user.ID, st.ride.Processor, st.ride.PaymentSource, st.failure.Message); err != nil {
			return idem.Outcome{}, err
		}
		next, err := s.rerouteTarget(ctx, tx, st)
		if err != nil {
			return idem.Outcome{}, err
		}
		if next != "" {
			api := string(s.paymentAPI(next))
			n, err := s.queries.RideReroute(ctx, tx, dbgen.RideRerouteParams{Processor: next, PaymentAPI: api, ID: st.ride.ID, ChargeAttempt: st.ride.ChargeAttempt})
			if err != nil {
				return idem.Outcome{}, err
			}
			if n != 1 {
				return idem.Outcome{}, fmt.Errorf("ride %d: not pending at attempt %d when rerouting", st.ride.ID, st.ride.ChargeAttempt)
			}
			if err := audit.Record(ctx, tx, "ride.charge_rerouted", "ride", st.ride.ID, key.UserID, key.IP,
				map[string]any{"from": st.ride.Processor, "to": next, "attempt": st.ride.ChargeAttempt + 1, "reason": st.failure.Message}); err != nil {
				return idem.Outcome{}, err
			}
			st.ride.Processor, st.ride.PaymentAPI, st.ride.ChargeAttempt = next, api, st.ride.ChargeAttempt+1
			if err := s.loadRegistration(ctx, tx, st); err != nil {
				return idem.Outcome{}, err
			}
			return idem.MoveTo(RecoveryPointRideCreated), nil
		}
	}
	if st.failure != nil {
		d := declineOf(st.failure)
		if _, err := s.queries.RideSetDeclined(ctx, tx, dbgen.RideSetDeclinedParams{
			DeclineCode: d.code, DeclineMessage: d.message, ID: st.ride.ID,
		}); err != nil {
			return idem.Outcome{}, err
		}
		if err := audit.Record(ctx, tx, "ride.charge_declined", "ride", st.ride.ID, key.UserID, key.IP,
			map[string]string{"code": st.failure.Code, "kind": string(st.failure.Kind)}); err != nil {
			return idem.Outcome{}, err
		}
		return idem.Finish(http.StatusPaymentRequired, d.problem(st.ride.ID)), nil
	}

	if st.newCustomer {
		if _, err := s.storeCustomer(ctx, s.queries, tx, st.ride.Processor, key.UserID, st.ride.PaymentSource, st.customerID); err != nil {
			return idem.Outcome{}, err
		}
	}
	pkey := st.pkey
	if st.charge.Status == ChargeRequiresAction {
		// The rider's bank asks the rider to authenticate: the booking is
		// neither charged nor declined; its answer (202) says what the
		// rider must do, and the ride moves on by itself.
		ride, err := s.rideActionRecord(ctx, tx, key, st, pkey)
		if err != nil {
			return idem.Outcome{}, err
		}
		s.metrics.actionsRequired.WithLabelValues(st.ride.Processor).Inc()
		return idem.Finish(http.StatusAccepted, ride), nil
	}
	if Capture(st.ride.Capture) == CaptureTrip {
		return s.rideAuthorizedRecord(ctx, tx, key, st, pkey)
	}
	params := dbgen.RideSetChargedParams{StripeChargeID: st.charge.ID, ID: st.ride.ID}
	if PaymentAPI(st.ride.PaymentAPI) == PaymentAPIIntents {
		params.PaymentID, params.ChargeKey = nonEmpty(st.charge.PaymentID), &pkey
	}
	n, err := s.queries.RideSetCharged(ctx, tx, params)
	if err != nil {
		return idem.Outcome{}, err
	}
	if n != 1 {
		return idem.Outcome{}, fmt.Errorf("ride %d: not pending when recording charge %s", st.ride.ID, st.charge.ID)
	}
	if _, err := s.jobs.InsertTx(ctx, tx, RideReceiptArgs{RideID: st.ride.ID}, nil); err != nil {
		return idem.Outcome{}, err
	}
	r := *st.ride
	r.ChargeStatus, r.StripeChargeID, r.PaymentID, r.ChargeKey = string(RideChargeCharged), &st.charge.ID, params.PaymentID, params.ChargeKey
	return idem.Finish(http.StatusCreated, rideFromRow(&r)), nil
}

// rerouteTarget is the processor a ride refused at its processor moves to:
// the next by preference whose circuit is closed and where the ride's
// payment source is not refused, or "" when there is none.
func (s *Service) rerouteTarget(ctx context.Context, tx pgx.Tx, st *rideState) (string, error) {
	if st.ride.ChargeAttempt >= int32(len(s.order)) {
		return "", nil
	}
	next, err := s.route(ctx, tx, st.user.ID, st.ride.PaymentSource, map[string]bool{st.ride.Processor: true})
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Code == CodeProcessorUnavailable {
			return "", nil
		}
		return "", err
	}
	return next, nil
}

// pastProcessorWindow reports whether, at now, the processor name may have
// forgotten a key first sent at since (both by the database's clock).
func (s *Service) pastProcessorWindow(name string, now, since time.Time) bool {
	window := ProcessorKeyWindow
	if p, ok := s.processors[name]; ok {
		window = p.window
	}
	// The margin is at most a quarter of the window, so that a window
	// shorter than the margin (a test API's) still leaves keys young.
	return now.Sub(since) > window-min(s.margin, window/4)
}
