package service

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/netip"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/service/audit"
	"github.com/atomicrides/atomicrides/service/idem"
)

// RecoveryPointBalanceRequested: the attempt to pay a ride's balance is
// recorded; the payment comes next.
const RecoveryPointBalanceRequested RecoveryPoint = "balance_requested"

// The route of paying a ride's balance, POST /rides/{id}/balance.
const (
	RideBalanceMethod = http.MethodPost
	RideBalancePath   = "/rides/{id}/balance"
)

// RideBalanceParams is the input of paying a ride's balance: the ride,
// from the path.
type RideBalanceParams struct {
	RideID int64 `json:"ride_id"`
}

// RideBalancePay pays the balance the rider owes for a ride (a fare above
// its hold whose payment failed), with the rider's current payment source,
// under the rider's idempotency key. It returns the stored response: 201
// with the ride once paid, or 402 when the payment is declined (the
// balance stays due; a later request under a new key tries again). A ride
// whose balance is paid already is answered 200; one that owes nothing is
// CodeNoBalanceDue and writes nothing.
func (s *Service) RideBalancePay(ctx context.Context, userID int64, idempotencyKey string, rideID int64, ip *netip.Addr) (*Response, error) {
	if rideID < 1 {
		return nil, Invalid("path.id", "must be a ride id (1 or more)")
	}
	return run(ctx, s, s.balances, idem.Request{
		UserID: userID,
		Key:    idempotencyKey,
		Method: RideBalanceMethod,
		Path:   idem.RequestPath(RideBalancePath, rideID),
		Params: RideBalanceParams{RideID: rideID},
		IP:     ip,
	})
}

// balanceState is what the balance flow knows while it runs.
type balanceState struct {
	params RideBalanceParams
	ride   *dbgen.Ride
	rider  *dbgen.User

	paid    *Charge
	failure *PaymentError
}

func (s *Service) balanceFlow() *idem.Flow[balanceState] {
	return &idem.Flow[balanceState]{
		Name:   "ride.balance",
		Method: RideBalanceMethod,
		Path:   RideBalancePath,
		Load: func(ctx context.Context, tx pgx.Tx, key *idem.Key) (*balanceState, error) {
			st := &balanceState{}
			var err error
			st.ride, st.rider, err = s.tripLoad(ctx, tx, key, &st.params, &st.params.RideID)
			return st, err
		},
		Steps: map[RecoveryPoint]idem.Step[balanceState]{
			RecoveryPointStarted:          {Phase: s.balanceRequestPhase},
			RecoveryPointBalanceRequested: {Call: s.balanceCall, Phase: s.balanceRecordPhase},
		},
	}
}

// balanceRequestPhase, in the claim's transaction: the rider's ride,
// locked, owes its balance: the attempt is counted (its processor key's
// attempt) and the payment comes next.
func (s *Service) balanceRequestPhase(ctx context.Context, tx pgx.Tx, key *idem.Key, st *balanceState) (idem.Outcome, error) {
	ride, err := s.queries.RideLockForUser(ctx, tx, st.params.RideID, key.UserID)
	if IsNoRows(err) {
		return idem.Outcome{}, &Error{Code: CodeNotFound, Message: "no such ride"}
	}
	if err != nil {
		return idem.Outcome{}, err
	}
	switch {
	case ride.ExtraStatus != nil && *ride.ExtraStatus == ExtraPaid:
		return idem.Finish(http.StatusOK, rideFromRow(ride)), nil
	case ride.ExtraStatus == nil || *ride.ExtraStatus != ExtraDue:
		return idem.Outcome{}, &Error{Code: CodeNoBalanceDue, RideID: ride.ID, Message: "the rider owes nothing for this ride"}
	}
	if st.ride, err = s.queries.RideBalanceAttempt(ctx, tx, ride.ID); err != nil {
		return idem.Outcome{}, err
	}
	if st.rider, err = s.queries.UserGet(ctx, tx, key.UserID); err != nil {
		return idem.Outcome{}, err
	}
	if err := audit.Record(ctx, tx, "ride.balance_payment_requested", "ride", ride.ID, ride.UserID, key.IP, map[string]any{
		"extra_cents": ride.ExtraCents, "attempt": st.ride.BalanceAttempt,
	}); err != nil {
		return idem.Outcome{}, err
	}
	return idem.MoveTo(RecoveryPointBalanceRequested), nil
}

// balanceCall charges the balance to the rider's current payment source at
// the ride's processor, under a key derived from the booking's processor
// key and the attempt. No transaction is open here.
func (s *Service) balanceCall(ctx context.Context, key *idem.Key, st *balanceState) error {
	st.paid, st.failure = nil, nil
	ride := st.ride
	if ride.ExtraStatus == nil || *ride.ExtraStatus != ExtraDue || ride.ExtraCents == nil || ride.ChargeKey == nil {
		return nil
	}
	proc, err := s.proc(ride.Processor)
	if err != nil {
		return err
	}
	customerID, err := s.currentCustomer(ctx, proc.name, st.rider, key)
	if err != nil {
		return st.definitive(err)
	}
	bkey := balanceKey(*ride.ChargeKey, ride.BalanceAttempt)
	ch, err := proc.pay.ChargeCreate(ctx, ChargeCreateParams{
		IdempotencyKey: chargeIdempotencyKey(bkey, customerID), CustomerID: customerID,
		AmountCents: *ride.ExtraCents, Currency: ride.Currency, Description: rideBalanceDescription,
		Tag: s.tag(st.rider.Email, bkey), API: PaymentAPI(ride.PaymentAPI), OffSession: true,
	})
	if err != nil {
		return st.definitive(err)
	}
	if ch.Status != ChargeSucceeded {
		st.failure = &PaymentError{Class: PaymentClassDecline, Kind: PaymentDeclined, Code: "authentication_required",
			Message: "the bank asks to authenticate this payment; register another card with PUT /users/{email} and pay again"}
		return nil
	}
	st.paid = ch
	return nil
}

func (st *balanceState) definitive(err error) error {
	if pe := PaymentFinal(err); pe != nil {
		st.failure = pe
		return nil
	}
	return err
}

// rideBalanceDescription is the description of a balance's payment.
const rideBalanceDescription = "Atomic Rides balance of a ride"

// currentCustomer is the rider's customer at the processor name for the
// rider's current payment source, made now if the rider has none there.
func (s *Service) currentCustomer(ctx context.Context, name string, rider *dbgen.User, key *idem.Key) (string, error) {
	reg, err := s.registration(ctx, s.pool, rider, name, rider.PaymentSource)
	switch {
	case err != nil:
		return "", Internal(err)
	case reg != nil && reg.Status == registrationRefused:
		return "", &PaymentError{Class: PaymentClassRefusal, Kind: PaymentInvalid, Code: PaymentCodeSourceRefused, Message: cmp.Or(deref(reg.Reason), "refused")}
	case reg != nil && reg.CustomerID != nil:
		return *reg.CustomerID, nil
	}
	c, err := s.processorCustomer(ctx, name, rider, rider.PaymentSource, key.ClaimedAt)
	if err != nil {
		return "", err
	}
	if _, err := s.storeCustomer(ctx, s.queries, s.pool, name, rider.ID, rider.PaymentSource, c.ID); err != nil {
		return "", Internal(err)
	}
	return c.ID, nil
}

// balanceRecordPhase records the balance paid, or why the payment failed.
func (s *Service) balanceRecordPhase(ctx context.Context, tx pgx.Tx, key *idem.Key, st *balanceState) (idem.Outcome, error) {
	if st.failure != nil {
		d := declineOf(st.failure)
		if _, err := s.queries.RideBalanceFailed(ctx, tx, d.code, st.ride.ID); err != nil {
			return idem.Outcome{}, err
		}
		if err := audit.Record(ctx, tx, "ride.balance_payment_declined", "ride", st.ride.ID, st.ride.UserID, key.IP, map[string]string{"code": d.code}); err != nil {
			return idem.Outcome{}, err
		}
		return idem.Finish(http.StatusPaymentRequired, d.problem(st.ride.ID)), nil
	}
	if st.paid != nil {
		ride, err := s.queries.RideBalancePaid(ctx, tx, st.paid.ID, st.ride.ID)
		switch {
		case IsNoRows(err):
		case err != nil:
			return idem.Outcome{}, err
		default:
			if err := audit.Record(ctx, tx, "ride.balance_paid", "ride", ride.ID, ride.UserID, key.IP, map[string]any{
				"charge_id": st.paid.ID, "extra_cents": ride.ExtraCents,
			}); err != nil {
				return idem.Outcome{}, err
			}
			s.metrics.tripExtras.WithLabelValues(ride.Processor, ExtraPaid).Inc()
			return idem.Finish(http.StatusCreated, rideFromRow(ride)), nil
		}
	}
	ride, err := s.queries.RideGet(ctx, tx, st.ride.ID)
	if err != nil {
		return idem.Outcome{}, err
	}
	return idem.Finish(http.StatusOK, rideFromRow(ride)), nil
}

// balanceDue is the refusal of a booking by a rider who owes the balance of
// a ride, naming it.
func (s *Service) balanceDue(ctx context.Context, db dbgen.DBTX, userID int64) error {
	owed, err := s.queries.RideBalanceDue(ctx, db, userID)
	if err != nil {
		return err
	}
	return &Error{Code: CodeBalanceDue, RideID: owed.ID, Message: fmt.Sprintf(
		"the rider owes %s for ride %d: pay it (POST /rides/%d/balance), then book again",
		FormatAmount(owed.ExtraCents, owed.Currency), owed.ID, owed.ID)}
}
