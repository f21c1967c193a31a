package fakestripe_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/payments"
)

// TestOneRiderTwoSources is what a rider who replaces its payment source
// asks of Stripe: one customer per source, each under its own key, each
// charged with its own card; a key sent again (the source the rider comes
// back to, a charge retried after its answer was lost) is answered with
// what it made, and a key sent with another source is refused.
func TestOneRiderTwoSources(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	c := e.client(payments.Config{})
	ctx := context.Background()

	create := func(key, source string) (*service.Customer, error) {
		return c.CustomerCreate(ctx, service.CustomerCreateParams{
			IdempotencyKey: key, Email: "two@example.com", Source: source, Tag: testTag(key),
		})
	}
	a, err := create("cu-a", "tok_visa")
	require.NoError(t, err)
	b, err := create("cu-b", "tok_mastercard")
	require.NoError(t, err)
	require.NotEqual(t, a.ID, b.ID)
	again, err := create("cu-a", "tok_visa")
	require.NoError(t, err)
	require.Equal(t, a.ID, again.ID, "the first source's key answers with its customer")
	require.Len(t, e.fake.Customers(), 2)

	_, err = create("cu-a", "tok_amex")
	var pe *service.PaymentError
	require.True(t, errors.As(err, &pe), "err: %v", err)
	require.Equal(t, service.PaymentCodeIdempotencyMismatch, pe.Code)

	charge := func(key, customer string) *service.Charge {
		ch, err := c.ChargeCreate(ctx, service.ChargeCreateParams{
			IdempotencyKey: key, CustomerID: customer, AmountCents: 2000, Currency: "usd",
			Description: "ride", Tag: testTag(key),
		})
		require.NoError(t, err)
		return ch
	}
	chA := charge("ch-1."+a.ID, a.ID)
	chB := charge("ch-2."+b.ID, b.ID)
	require.Equal(t, chA.ID, charge("ch-1."+a.ID, a.ID).ID, "a retried charge is the same charge")
	require.Len(t, e.fake.SucceededCharges(), 2)

	sources := map[string]string{}
	for _, cu := range e.fake.Customers() {
		sources[cu.ID] = cu.Source
	}
	byID := map[string]string{}
	for _, ch := range e.fake.SucceededCharges() {
		byID[ch.ID] = sources[ch.Customer]
	}
	require.Equal(t, map[string]string{chA.ID: "tok_visa", chB.ID: "tok_mastercard"}, byID)
}
