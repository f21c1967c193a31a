package service

import (
	"context"
	"time"

	"github.com/atomicrides/atomicrides/dbgen"
)

// CustomerCreate makes sure the user has a customer at the payment processor
// and returns its id. No transaction is open while the processor is called;
// the id is stored afterwards, once.
func (s *Service) CustomerCreate(ctx context.Context, userID int64) (string, error) {
	user, err := s.queries.UserGet(ctx, s.pool, userID)
	if err != nil {
		if isNoRows(err) {
			return "", &Error{Code: CodeNotFound, Message: "no such user"}
		}
		return "", internal(err)
	}
	if user.StripeCustomerID != nil {
		return *user.StripeCustomerID, nil
	}
	now, err := s.queries.ClockNow(ctx, s.pool)
	if err != nil {
		return "", internal(err)
	}
	customer, err := s.processorCustomer(ctx, user, now)
	if err != nil {
		return "", err
	}
	return s.customerStore(ctx, user.ID, customer.ID)
}

// processorCustomer gets the user's customer from the processor, creating it
// under the entity-level key derived from the namespace and the rider's
// email. Once the processor may have forgotten that key (judged at now, by
// the database's clock), or when it saw the key with other parameters (a
// rider created again with another source after a restore), the customer
// made for this rider by this deployment is looked up and adopted.
func (s *Service) processorCustomer(ctx context.Context, user *dbgen.User, now time.Time) (*Customer, error) {
	pkey := CustomerKey(s.namespace, user.Email)
	if s.pastProcessorWindow(now, user.CreatedAt) {
		c, err := s.processorCustomerOf(ctx, pkey, user.Email)
		if err != nil || c != nil {
			return c, err
		}
	}
	c, err := s.payments.CustomerCreate(ctx, CustomerCreateParams{
		IdempotencyKey: pkey,
		Email:          user.Email,
		Source:         user.PaymentSource,
		Tag:            s.tag(user.Email, pkey),
	})
	if isIdempotencyMismatch(err) {
		found, ferr := s.processorCustomerOf(ctx, pkey, user.Email)
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
func (s *Service) processorCustomerOf(ctx context.Context, pkey, email string) (*Customer, error) {
	customers, err := s.payments.CustomerFind(ctx, pkey)
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

// customerStore records the customer id unless another is already recorded,
// and returns the recorded one.
func (s *Service) customerStore(ctx context.Context, userID int64, customerID string) (string, error) {
	n, err := s.queries.UserSetStripeCustomer(ctx, s.pool, customerID, userID)
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
	s.logger.WarnContext(ctx, "user already has another customer", "user_id", userID,
		"stored", user.StripeCustomerID, "offered", customerID)
	return *user.StripeCustomerID, nil
}
