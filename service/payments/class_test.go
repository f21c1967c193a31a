package payments

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/atomicrides/atomicrides/service"
)

// TestPaymentClass pins the class of each processor failure and its
// treatment: only declines and refusals are definitive answers; a
// configuration error is never the rider's outcome.
func TestPaymentClass(t *testing.T) {
	t.Parallel()
	stripeErr := func(typ stripe.ErrorType, code stripe.ErrorCode, status int) error {
		return &stripe.Error{Type: typ, Code: code, HTTPStatusCode: status, Msg: "msg"}
	}
	for name, tc := range map[string]struct {
		err   error
		class service.PaymentClass
		final bool
	}{
		"card declined":        {stripeErr(stripe.ErrorTypeCard, "card_declined", 402), service.PaymentClassDecline, true},
		"already refunded":     {stripeErr(stripe.ErrorTypeInvalidRequest, "charge_already_refunded", 400), service.PaymentClassRefusal, true},
		"amount too small":     {stripeErr(stripe.ErrorTypeInvalidRequest, "amount_too_small", 400), service.PaymentClassRefusal, true},
		"resource missing":     {stripeErr(stripe.ErrorTypeInvalidRequest, "resource_missing", 404), service.PaymentClassConfiguration, false},
		"authentication":       {stripeErr(stripe.ErrorTypeInvalidRequest, "", 401), service.PaymentClassConfiguration, false},
		"permission":           {stripeErr(stripe.ErrorTypeInvalidRequest, "", 403), service.PaymentClassConfiguration, false},
		"idempotency mismatch": {stripeErr(stripe.ErrorTypeIdempotency, "", 400), service.PaymentClassConfiguration, false},
		"key in use":           {stripeErr(stripe.ErrorTypeInvalidRequest, "idempotency_key_in_use", 409), service.PaymentClassUnavailable, false},
		"rate limit":           {stripeErr(stripe.ErrorTypeInvalidRequest, "rate_limit", 429), service.PaymentClassUnavailable, false},
		"card error with 5xx":  {stripeErr(stripe.ErrorTypeCard, "processing_error", 503), service.PaymentClassUnavailable, false},
		"unknown type":         {stripeErr("future_error", "", 400), service.PaymentClassUnavailable, false},
		"deadline":             {context.DeadlineExceeded, service.PaymentClassUnavailable, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := fmt.Errorf("charge: %w", translateError(tc.err))
			require.Equal(t, tc.class, service.PaymentClassOf(err))
			require.Equal(t, tc.final, service.PaymentFinal(err) != nil)
		})
	}

	t.Run("missing idempotency key", func(t *testing.T) {
		t.Parallel()
		err := checkKey("")
		require.Equal(t, service.PaymentClassConfiguration, service.PaymentClassOf(err))
		require.Nil(t, service.PaymentFinal(err))
	})

	t.Run("not from the processor", func(t *testing.T) {
		t.Parallel()
		err := &service.Error{Code: service.CodeInternal, Message: "internal"}
		require.Equal(t, service.PaymentClassUnavailable, service.PaymentClassOf(err))
		require.Nil(t, service.PaymentFinal(err))
	})
}
