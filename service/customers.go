package service

import (
	"context"
	"fmt"

	"github.com/atomicrides/atomicrides/dbgen"
)

// customerKey is the entity-level processor key of a user's customer: every
// path that creates the customer uses it with the same parameters, so the
// processor creates one customer per user.
func customerKey(userID int64) string { return fmt.Sprintf("user-%d-customer", userID) }

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
	customer, err := s.processorCustomer(ctx, user)
	if err != nil {
		return "", err
	}
	return s.customerStore(ctx, user.ID, customer.ID)
}

// processorCustomer gets the user's customer from the processor, creating it
// under the entity-level key. Once the processor may have forgotten that key
// it looks the customer up first.
func (s *Service) processorCustomer(ctx context.Context, user *dbgen.User) (*Customer, error) {
	if s.pastProcessorWindow(user.CreatedAt) {
		c, err := s.payments.CustomerFind(ctx, user.ID)
		if err != nil || c != nil {
			return c, err
		}
	}
	return s.payments.CustomerCreate(ctx, CustomerCreateParams{
		IdempotencyKey: customerKey(user.ID),
		UserID:         user.ID,
		Email:          user.Email,
		Source:         user.PaymentSource,
	})
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
