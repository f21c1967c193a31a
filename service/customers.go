package service

import (
	"context"
	"errors"
	"time"

	"github.com/atomicrides/atomicrides/dbgen"
)

// CustomerCreate registers the user's card at every configured processor
// that has no answer for it yet, and returns the customer id at the first
// processor ("" when that one refused the card). It is the entity-level
// customer job: each processor sees one registration per rider through the
// entity-level key. No transaction is open while a processor is called;
// each answer is stored afterwards, once.
//
// A processor's refusal of the rider's source is recorded as the rider's
// registration state at that processor (GET /users/{email} shows it) and is
// no error: nothing is retried for it. An indeterminate failure at any
// processor is returned after the others were tried, so that the job
// retries it.
func (s *Service) CustomerCreate(ctx context.Context, userID int64) (string, error) {
	user, err := s.queries.UserGet(ctx, s.pool, userID)
	if err != nil {
		if isNoRows(err) {
			return "", &Error{Code: CodeNotFound, Message: "no such user"}
		}
		return "", internal(err)
	}
	regs, err := s.registrations(ctx, user)
	if err != nil {
		return "", err
	}
	now, err := s.queries.ClockNow(ctx, s.pool)
	if err != nil {
		return "", internal(err)
	}
	var (
		first   string
		pending error
	)
	for i, name := range s.order {
		reg, done := regs[name]
		if !done {
			reg, err = s.register(ctx, name, user, now)
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

// registrations returns the rider's answered registrations by processor:
// Stripe's from users.stripe_customer_id (and a refusal row), the others'
// from processor_registrations.
func (s *Service) registrations(ctx context.Context, user *dbgen.User) (map[string]*dbgen.ProcessorRegistration, error) {
	rows, err := s.queries.ProcessorRegistrationList(ctx, s.pool, user.ID)
	if err != nil {
		return nil, internal(err)
	}
	out := map[string]*dbgen.ProcessorRegistration{}
	for _, r := range rows {
		out[r.Processor] = r
	}
	if user.StripeCustomerID != nil {
		out[ProcessorStripe] = &dbgen.ProcessorRegistration{
			UserID: user.ID, Processor: ProcessorStripe, Status: registrationRegistered, CustomerID: user.StripeCustomerID,
		}
	}
	return out, nil
}

// register registers the rider's card at the processor name and records
// the answer: the customer, or the processor's refusal of the source.
func (s *Service) register(ctx context.Context, name string, user *dbgen.User, now time.Time) (*dbgen.ProcessorRegistration, error) {
	c, err := s.processorCustomer(ctx, name, user, now)
	if pe := PaymentFinal(err); pe != nil {
		reason := refusalReason(name, pe)
		if err := s.registrationRefused(ctx, s.pool, user.ID, name, reason); err != nil {
			return nil, err
		}
		s.logger.InfoContext(ctx, "payment processor refused the rider's payment source; the rider is told on GET /users and at booking",
			"processor", name, "user_id", user.ID, "code", pe.Code)
		return &dbgen.ProcessorRegistration{UserID: user.ID, Processor: name, Status: registrationRefused, Reason: &reason}, nil
	}
	if err != nil {
		return nil, err
	}
	id, err := s.customerStore(ctx, name, user.ID, c.ID)
	if err != nil {
		return nil, err
	}
	return &dbgen.ProcessorRegistration{UserID: user.ID, Processor: name, Status: registrationRegistered, CustomerID: &id}, nil
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
// source, unless the card is registered there already.
func (s *Service) registrationRefused(ctx context.Context, db dbgen.DBTX, userID int64, name, reason string) error {
	if _, err := s.queries.ProcessorRegistrationSetRefused(ctx, db, dbgen.ProcessorRegistrationSetRefusedParams{UserID: userID, Processor: name, Reason: reason}); err != nil {
		return internal(err)
	}
	return nil
}

// processorCustomer gets the user's customer from the processor name,
// creating it under the entity-level key derived from the namespace and
// the rider's email. Once the processor may have forgotten that key
// (judged at now, by the database's clock), or when it saw the key with
// other parameters (a rider created again with another source after a
// restore), the customer made for this rider by this deployment is looked
// up and adopted.
func (s *Service) processorCustomer(ctx context.Context, name string, user *dbgen.User, now time.Time) (*Customer, error) {
	proc, err := s.proc(name)
	if err != nil {
		return nil, err
	}
	pkey := CustomerKey(s.namespace, user.Email)
	if s.pastProcessorWindow(name, now, user.CreatedAt) {
		c, err := s.processorCustomerOf(ctx, proc, pkey, user.Email)
		if err != nil || c != nil {
			return c, err
		}
	}
	c, err := proc.pay.CustomerCreate(ctx, CustomerCreateParams{
		IdempotencyKey: pkey,
		Email:          user.Email,
		Source:         user.PaymentSource,
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

// customerStore records the customer id at the processor name unless
// another is already recorded, and returns the recorded one.
func (s *Service) customerStore(ctx context.Context, name string, userID int64, customerID string) (string, error) {
	n, err := s.storeCustomer(ctx, s.queries, s.pool, name, userID, customerID)
	if err != nil {
		return "", internal(err)
	}
	if n == 1 {
		return customerID, nil
	}
	user, err := s.queries.UserGet(ctx, s.pool, userID)
	if err != nil {
		return "", internal(err)
	}
	regs, err := s.registrations(ctx, user)
	if err != nil {
		return "", err
	}
	reg := regs[name]
	if reg == nil || reg.CustomerID == nil {
		return "", internal(errors.New("customer not recorded and none stored"))
	}
	s.logger.WarnContext(ctx, "user already has another customer", "processor", name, "user_id", userID,
		"stored", *reg.CustomerID, "offered", customerID)
	return *reg.CustomerID, nil
}

// storeCustomer writes the customer id at the processor name: Stripe's on
// the user (and as a registration), the others' as a registration. It
// returns 1 when the id is the recorded one.
func (s *Service) storeCustomer(ctx context.Context, q *dbgen.Queries, db dbgen.DBTX, name string, userID int64, customerID string) (int64, error) {
	if name == ProcessorStripe {
		n, err := q.UserSetStripeCustomer(ctx, db, customerID, userID)
		if err != nil || n != 1 {
			return n, err
		}
	}
	return q.ProcessorRegistrationSetRegistered(ctx, db, dbgen.ProcessorRegistrationSetRegisteredParams{UserID: userID, Processor: name, CustomerID: customerID})
}
