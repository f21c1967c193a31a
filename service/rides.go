package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/dbgen"
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
			return invalid(c.field, "must be a number between %v and %v", -c.limit, c.limit)
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
	ChargeStatus RideChargeStatus `json:"charge_status" enum:"pending,charged,declined" doc:"pending until the charge is decided"`
	// StripeChargeID is set once the ride is charged.
	StripeChargeID *string          `json:"stripe_charge_id" nullable:"true"`
	RefundStatus   RideRefundStatus `json:"refund_status" enum:"none,pending,refunded,failed" doc:"none until a refund is asked for; pending until the processor's answer is recorded; failed when the processor refused it"`
	// StripeRefundID is set once the ride is refunded.
	StripeRefundID *string `json:"stripe_refund_id" nullable:"true"`
	// DisputeStatus is the dispute (chargeback) of the ride's charge, as
	// the processor reported it; it only moves forward.
	DisputeStatus DisputeStatus `json:"dispute_status" enum:"none,disputed,won,lost" doc:"none unless the rider's bank disputes the charge; disputed while the dispute is open; won or lost once decided"`
}

func rideFromRow(r *dbgen.Ride) *Ride {
	return &Ride{
		ID:             r.ID,
		CreatedAt:      r.CreatedAt.UTC(),
		OriginLat:      r.OriginLat,
		OriginLon:      r.OriginLon,
		TargetLat:      r.TargetLat,
		TargetLon:      r.TargetLon,
		AmountCents:    r.AmountCents,
		Currency:       r.Currency,
		ChargeStatus:   RideChargeStatus(r.ChargeStatus),
		StripeChargeID: r.StripeChargeID,
		RefundStatus:   RideRefundNone,
		DisputeStatus:  DisputeStatus(r.DisputeStatus),
	}
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

// rideCreateRequest is the request of a ride booking, as stored and
// fingerprinted. Coordinates are kept as sent except -0, which is 0: equal
// coordinates make one request, however a client writes them.
func rideCreateRequest(userID int64, idempotencyKey string, params RideCreateParams, ip *netip.Addr) Request {
	for _, c := range []*float64{&params.OriginLat, &params.OriginLon, &params.TargetLat, &params.TargetLon} {
		*c += 0 // IEEE 754: -0 + 0 = +0; every other value is unchanged
	}
	return Request{
		UserID: userID,
		Key:    idempotencyKey,
		Method: RideCreateMethod,
		Path:   RideCreatePath,
		Params: params,
		IP:     ip,
	}
}

// RideGet returns the user's ride with its charge and refund state. Another
// user's ride is not found.
func (s *Service) RideGet(ctx context.Context, userID, rideID int64) (*Ride, error) {
	row, err := s.queries.RideGetForUser(ctx, s.pool, rideID, userID)
	if err != nil {
		if isNoRows(err) {
			return nil, &Error{Code: CodeNotFound, Message: "no such ride"}
		}
		return nil, internal(err)
	}
	ride := rideFromRow(row)
	// Read after the ride, the refund is at least as recent as the charge.
	ref, err := s.queries.RefundGetByRide(ctx, s.pool, rideID)
	switch {
	case isNoRows(err):
	case err != nil:
		return nil, internal(err)
	default:
		ride.RefundStatus, ride.StripeRefundID = RideRefundStatus(ref.Status), ref.StripeRefundID
	}
	return ride, nil
}

// rideState is what the ride flow knows while it runs.
type rideState struct {
	user   *dbgen.User
	params RideCreateParams
	ride   *dbgen.Ride

	// Results of the charge call.
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
}

func (s *Service) rideFlow() *Flow[rideState] {
	return &Flow[rideState]{
		Name:   "ride.create",
		Method: RideCreateMethod,
		Path:   RideCreatePath,
		Load:   s.rideLoad,
		Steps: map[RecoveryPoint]Step[rideState]{
			RecoveryPointStarted:     {Phase: s.rideCreatePhase},
			RecoveryPointRideCreated: {Call: s.rideChargeCall, Phase: s.rideChargePhase},
		},
	}
}

func (s *Service) rideLoad(ctx context.Context, tx pgx.Tx, key *Key) (*rideState, error) {
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
	if st.refundedOrphans, err = s.queries.OrphanRefundExistsForUser(ctx, tx, &key.UserID); err != nil {
		return nil, err
	}
	return st, nil
}

// rideCreatePhase: the ride and its audit record; the rider comes back with
// them.
func (s *Service) rideCreatePhase(ctx context.Context, tx pgx.Tx, key *Key, st *rideState) (Outcome, error) {
	// The audit record's data is the request's stored input: the ride's
	// coordinates, as normalised.
	row, err := s.queries.RideCreateAudited(ctx, tx, dbgen.RideCreateAuditedParams{
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
	if err != nil {
		return Outcome{}, err
	}
	st.ride, st.user, st.refundedOrphans = &row.Ride, &row.User, row.RefundedOrphans
	return MoveTo(RecoveryPointRideCreated), nil
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
func (s *Service) rideChargeCall(ctx context.Context, key *Key, st *rideState) error {
	st.customerID, st.newCustomer, st.charge, st.failure, st.lostRefund = "", false, nil, nil, nil

	pkey := ChargeKey(s.namespace, st.user.Email, key.ClientKey)
	// The client of a booking lost with a restore, back after the orphan
	// policy refunded its charge: the processor may have forgotten the key
	// and would charge again, so the request ends without a charge. Only a
	// rider with such a refund (read with the ride) pays for the look-up.
	if st.refundedOrphans {
		if o, err := s.queries.OrphanRefundGetByChargeKey(ctx, s.pool, pkey); err == nil {
			st.lostRefund = o
			return nil
		} else if !isNoRows(err) {
			return internal(err)
		}
	}

	if st.user.StripeCustomerID != nil {
		st.customerID = *st.user.StripeCustomerID
	} else {
		c, err := s.processorCustomer(ctx, st.user, key.ClaimedAt)
		if err != nil {
			return st.definitive(err)
		}
		st.customerID, st.newCustomer = c.ID, true
	}

	// Past the processor's key window a retried charge would not be
	// deduplicated: adopt the charge if it was made.
	if s.pastProcessorWindow(key.ClaimedAt, key.CreatedAt) {
		ch, err := s.processorChargeOf(ctx, pkey, st.user.Email)
		if err != nil {
			return err
		}
		if ch != nil {
			st.charge = ch
			return nil
		}
	}

	ch, err := s.payments.ChargeCreate(ctx, ChargeCreateParams{
		IdempotencyKey: chargeIdempotencyKey(pkey, st.customerID),
		CustomerID:     st.customerID,
		AmountCents:    st.ride.AmountCents,
		Currency:       st.ride.Currency,
		Description:    rideDescription,
		Tag:            s.tag(st.user.Email, pkey),
	})
	if isIdempotencyMismatch(err) {
		// The key was used with other parameters, which none of ours
		// should cause: whatever charge it made is this request's.
		found, ferr := s.processorChargeOf(ctx, pkey, st.user.Email)
		if ferr != nil {
			return ferr
		}
		if found != nil {
			st.charge = found
			return nil
		}
	}
	if err != nil {
		return st.definitive(err)
	}
	st.charge = ch
	return nil
}

// processorChargeOf returns the succeeded charge made under the processor
// key pkey by this deployment for the rider with email, or nil when the
// processor has none.
func (s *Service) processorChargeOf(ctx context.Context, pkey, email string) (*Charge, error) {
	charges, err := s.payments.ChargeFind(ctx, pkey)
	if err != nil {
		return nil, err
	}
	for _, ch := range charges {
		if ch.Status == ChargeSucceeded && ch.Tag.Key == pkey && s.owns(ch.Tag, email) {
			return ch, nil
		}
	}
	return nil, nil
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
func (s *Service) rideChargePhase(ctx context.Context, tx pgx.Tx, key *Key, st *rideState) (Outcome, error) {
	if o := st.lostRefund; o != nil {
		if _, err := s.queries.RideSetDeclined(ctx, tx, st.ride.ID); err != nil {
			return Outcome{}, err
		}
		if err := s.audit(ctx, tx, "ride.charge_refunded_orphan", "ride", st.ride.ID, key.UserID, key.IP,
			map[string]string{"stripe_charge_id": o.StripeChargeID}); err != nil {
			return Outcome{}, err
		}
		return Finish(http.StatusConflict, Problem{Type: ProblemBookingRefunded, Title: "Booking refunded",
			Status: http.StatusConflict,
			Detail: fmt.Sprintf("this request's booking was lost and its charge %s refunded; nothing was charged now: book again under a new idempotency key",
				o.StripeChargeID)}), nil
	}
	if st.failure != nil {
		if _, err := s.queries.RideSetDeclined(ctx, tx, st.ride.ID); err != nil {
			return Outcome{}, err
		}
		if err := s.audit(ctx, tx, "ride.charge_declined", "ride", st.ride.ID, key.UserID, key.IP,
			map[string]string{"code": st.failure.Code, "kind": string(st.failure.Kind)}); err != nil {
			return Outcome{}, err
		}
		p := Problem{Type: ProblemCardDeclined, Title: "Card declined", Status: http.StatusPaymentRequired,
			Detail: "the card was declined: " + st.failure.Message}
		if st.failure.Class != PaymentClassDecline {
			p.Type, p.Title = ProblemPaymentRejected, "Payment rejected"
			p.Detail = "the payment processor rejected the charge"
		}
		return Finish(http.StatusPaymentRequired, p), nil
	}

	if st.newCustomer {
		if _, err := s.queries.UserSetStripeCustomer(ctx, tx, st.customerID, key.UserID); err != nil {
			return Outcome{}, err
		}
	}
	n, err := s.queries.RideSetCharged(ctx, tx, st.charge.ID, st.ride.ID)
	if err != nil {
		return Outcome{}, err
	}
	if n != 1 {
		return Outcome{}, fmt.Errorf("ride %d: not pending when recording charge %s", st.ride.ID, st.charge.ID)
	}
	if _, err := s.jobs.InsertTx(ctx, tx, RideReceiptArgs{RideID: st.ride.ID}, nil); err != nil {
		return Outcome{}, err
	}
	ride := rideFromRow(st.ride)
	ride.ChargeStatus, ride.StripeChargeID = RideChargeCharged, &st.charge.ID
	return Finish(http.StatusCreated, ride), nil
}

// pastProcessorWindow reports whether, at now, the processor may have
// forgotten a key first sent at since (both by the database's clock).
func (s *Service) pastProcessorWindow(now, since time.Time) bool {
	return now.Sub(since) > ProcessorKeyWindow-s.margin
}
