package service

import (
	"context"
	"errors"
	"time"

	"github.com/atomicrides/atomicrides/dbgen"
)

// CustomerCreate registers the user's payment source at every configured
// processor that has no answer for it yet, and returns the customer id at
// the first processor ("" when that one refused the card). It is the
// entity-level customer job: each processor sees one registration per
// rider and source through the entity-level key (CustomerKey). No
// transaction is open while a processor is called; each answer is stored
// afterwards, once, as the registration of that source.
//
// source is the payment source the job was inserted for; "" (a job
// inserted before sources could be replaced) means the rider's current
// one. A job whose source the rider has replaced since still registers it:
// the job is unique per rider and source, and stays so once completed, so
// a rider who comes back to that source finds every processor's answer
// for it (the answers are kept per source; only the current source's are
// shown and routed on).
//
// A processor's refusal of the rider's source is recorded as the rider's
// registration state at that processor (GET /users/{email} shows it) and is
// no error: nothing is retried for it. An indeterminate failure at any
// processor is returned after the others were tried, so that the job
// retries it.
func (s *Service) CustomerCreate(ctx context.Context, userID int64, source string) (string, error) {
	user, err := s.queries.UserGet(ctx, s.pool, userID)
	if err != nil {
		if IsNoRows(err) {
			return "", &Error{Code: CodeNotFound, Message: "no such user"}
		}
		return "", Internal(err)
	}
	if source == "" {
		source = user.PaymentSource
	}
	regs, err := s.registrations(ctx, user, source)
	if err != nil {
		return "", err
	}
	now, err := s.queries.ClockNow(ctx, s.pool)
	if err != nil {
		return "", Internal(err)
	}
	var (
		first   string
		pending error
	)
	for i, name := range s.order {
		reg, done := regs[name]
		if !done {
			reg, err = s.register(ctx, name, user, source, now)
			if err != nil {
				pending = errors.Join(pending, err)
				continue
			}
		}
		if i == 0 && reg.Status == registrationRegistered {
			first = *reg.CustomerID
		}
	}
	if pending != nil {
		return first, pending
	}
	return first, nil
}

// registrations returns the answered registrations of the rider's payment
// source by processor. For the rider's current source, a Stripe customer
// recorded on the user (users.stripe_customer_id) counts too, as the ride
// flow reads it.
func (s *Service) registrations(ctx context.Context, user *dbgen.User, source string) (map[string]*dbgen.ProcessorRegistration, error) {
	rows, err := s.queries.ProcessorRegistrationListForSource(ctx, s.pool, user.ID, source)
	if err != nil {
		return nil, Internal(err)
	}
	out := map[string]*dbgen.ProcessorRegistration{}
	for _, r := range rows {
		out[r.Processor] = r
	}
	if user.StripeCustomerID != nil && user.PaymentSource == source {
		out[ProcessorStripe] = &dbgen.ProcessorRegistration{
			UserID: user.ID, Processor: ProcessorStripe, PaymentSource: source, Status: registrationRegistered, CustomerID: user.StripeCustomerID,
		}
	}
	return out, nil
}

// register registers the rider's payment source at the processor name and
// records the answer: the customer, or the processor's refusal of the
// source.
func (s *Service) register(ctx context.Context, name string, user *dbgen.User, source string, now time.Time) (*dbgen.ProcessorRegistration, error) {
	c, err := s.processorCustomer(ctx, name, user, source, now)
	if pe := PaymentFinal(err); pe != nil {
		reason := refusalReason(name, pe)
		if err := s.registrationRefused(ctx, s.pool, user.ID, name, source, reason); err != nil {
			return nil, err
		}
		s.logger.InfoContext(ctx, "payment processor refused the rider's payment source; the rider is told on GET /users and at booking",
			"processor", name, "user_id", user.ID, "code", pe.Code)
		return &dbgen.ProcessorRegistration{UserID: user.ID, Processor: name, PaymentSource: source, Status: registrationRefused, Reason: &reason}, nil
	}
	if err != nil {
		return nil, err
	}
	id, err := s.customerStore(ctx, name, user.ID, source, c.ID)
	if err != nil {
		return nil, err
	}
	return &dbgen.ProcessorRegistration{UserID: user.ID, Processor: name, PaymentSource: source, Status: registrationRegistered, CustomerID: &id}, nil
}

// refusalReason is what the rider is shown for a refused source.
func refusalReason(processor string, pe *PaymentError) string {
	msg := pe.Message
	if msg == "" {
		msg = string(pe.Class)
	}
	r := processor + " refused the payment source: " + msg
	if len(r) > 500 {
		r = r[:500]
	}
	return r
}

// registrationRefused records the processor's refusal of the rider's
// payment source, unless that source is registered there already.
func (s *Service) registrationRefused(ctx context.Context, db dbgen.DBTX, userID int64, name, source, reason string) error {
	if _, err := s.queries.ProcessorRegistrationSetRefused(ctx, db, dbgen.ProcessorRegistrationSetRefusedParams{
		UserID: userID, Processor: name, PaymentSource: source, Reason: reason,
	}); err != nil {
		return Internal(err)
	}
	return nil
}

// processorCustomer gets the customer of the rider's payment source from
// the processor name, creating it under the entity-level key derived from
// the namespace, the rider's email and the source. Once the processor may
// have forgotten that key (judged at now, by the database's clock, from
// the rider's creation: no source of the rider was sent earlier), or when
// it saw the key with other parameters, the customer made for this rider
// and source by this deployment is looked up and adopted. The rider's
// record may be younger than the key when the database lost an earlier
// one: an open gap in its past counts as the earliest first send.
func (s *Service) processorCustomer(ctx context.Context, name string, user *dbgen.User, source string, now time.Time) (*Customer, error) {
	proc, err := s.proc(name)
	if err != nil {
		return nil, err
	}
	pkey := CustomerKey(s.namespace, user.Email, source)
	// A rider whose row a restore lost may have been registered before
	// the database's open gap began.
	lostFrom, err := s.lostFrom(ctx)
	if err != nil {
		return nil, err
	}
	if s.keyWindowPassed(name, now, user.CreatedAt, lostFrom) {
		c, err := s.processorCustomerOf(ctx, proc, pkey, user.Email)
		switch {
		case isUnsupported(err):
			// The processor cannot look customers up (Adyen): create under
			// the key. Past its window this may store the card a second
			// time, which charges nothing: charges go to the recorded
			// registration, and the charge flow guards its own key window.
		case err != nil || c != nil:
			return c, err
		}
	}
	c, err := proc.pay.CustomerCreate(ctx, CustomerCreateParams{
		IdempotencyKey: pkey,
		Email:          user.Email,
		Source:         source,
		Tag:            s.tag(user.Email, pkey),
	})
	if isIdempotencyMismatch(err) {
		found, ferr := s.processorCustomerOf(ctx, proc, pkey, user.Email)
		if ferr != nil {
			return nil, ferr
		}
		if found != nil {
			return found, nil
		}
	}
	return c, err
}

// processorCustomerOf returns the customer made under pkey by this
// deployment for the rider with email, or nil when the processor has none.
func (s *Service) processorCustomerOf(ctx context.Context, proc *processor, pkey, email string) (*Customer, error) {
	customers, err := proc.pay.CustomerFind(ctx, pkey)
	if err != nil {
		return nil, err
	}
	for _, c := range customers {
		if c.Tag.Key == pkey && s.owns(c.Tag, email) {
			return c, nil
		}
	}
	return nil, nil
}

// customerStore records the customer id of the rider's source at the
// processor name unless another is already recorded, and returns the
// recorded one.
func (s *Service) customerStore(ctx context.Context, name string, userID int64, source, customerID string) (string, error) {
	n, err := s.storeCustomer(ctx, s.queries, s.pool, name, userID, source, customerID)
	if err != nil {
		return "", Internal(err)
	}
	if n == 1 {
		return customerID, nil
	}
	user, err := s.queries.UserGet(ctx, s.pool, userID)
	if err != nil {
		return "", Internal(err)
	}
	regs, err := s.registrations(ctx, user, source)
	if err != nil {
		return "", err
	}
	reg := regs[name]
	if reg == nil || reg.CustomerID == nil {
		return "", Internal(errors.New("customer not recorded and none stored"))
	}
	s.logger.WarnContext(ctx, "user already has another customer", "processor", name, "user_id", userID,
		"stored", *reg.CustomerID, "offered", customerID)
	return *reg.CustomerID, nil
}

// storeCustomer records the customer id made for the rider's source at the
// processor name as that source's registration, and returns 1 when the id
// is the recorded one. A Stripe customer is also mirrored on the user
// (users.stripe_customer_id) while the source is the rider's current one.
func (s *Service) storeCustomer(ctx context.Context, q *dbgen.Queries, db dbgen.DBTX, name string, userID int64, source, customerID string) (int64, error) {
	n, err := q.ProcessorRegistrationSetRegistered(ctx, db, dbgen.ProcessorRegistrationSetRegisteredParams{
		UserID: userID, Processor: name, PaymentSource: source, CustomerID: customerID,
	})
	if err != nil || n != 1 || name != ProcessorStripe {
		return n, err
	}
	if _, err := q.UserSetStripeCustomer(ctx, db, dbgen.UserSetStripeCustomerParams{
		StripeCustomerID: customerID, ID: userID, PaymentSource: source,
	}); err != nil {
		return 0, err
	}
	return n, nil
}
