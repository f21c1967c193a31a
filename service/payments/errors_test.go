package payments

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/atomicrides/atomicrides/service"
)

func TestTranslateError(t *testing.T) {
	t.Parallel()
	stripeErr := func(typ stripe.ErrorType, code stripe.ErrorCode, status int) *stripe.Error {
		return &stripe.Error{Type: typ, Code: code, HTTPStatusCode: status, Msg: "msg " + string(code)}
	}
	for name, tc := range map[string]struct {
		err    error
		class  service.PaymentClass
		code   string
		status int
	}{
		"card declined":         {stripeErr(stripe.ErrorTypeCard, "card_declined", 402), service.PaymentClassDecline, "card_declined", 402},
		"expired card":          {stripeErr(stripe.ErrorTypeCard, "expired_card", 402), service.PaymentClassDecline, "expired_card", 402},
		"resource missing":      {stripeErr(stripe.ErrorTypeInvalidRequest, "resource_missing", 400), service.PaymentClassConfiguration, "resource_missing", 400},
		"already refunded":      {stripeErr(stripe.ErrorTypeInvalidRequest, "charge_already_refunded", 400), service.PaymentClassRefusal, "charge_already_refunded", 400},
		"not found":             {stripeErr(stripe.ErrorTypeInvalidRequest, "resource_missing", 404), service.PaymentClassConfiguration, "resource_missing", 404},
		"key in use":            {stripeErr(stripe.ErrorTypeInvalidRequest, "idempotency_key_in_use", 409), service.PaymentClassUnavailable, "idempotency_key_in_use", 409},
		"lock conflict":         {stripeErr(stripe.ErrorTypeInvalidRequest, "", 409), service.PaymentClassUnavailable, "", 409},
		"idempotency mismatch":  {stripeErr(stripe.ErrorTypeIdempotency, "", 400), service.PaymentClassConfiguration, service.PaymentCodeIdempotencyMismatch, 400},
		"unauthorized":          {stripeErr(stripe.ErrorTypeInvalidRequest, "", 401), service.PaymentClassConfiguration, "", 401},
		"forbidden":             {stripeErr(stripe.ErrorTypeInvalidRequest, "secret_key_required", 403), service.PaymentClassConfiguration, "secret_key_required", 403},
		"rate limit":            {stripeErr(stripe.ErrorTypeInvalidRequest, "rate_limit", 429), service.PaymentClassUnavailable, "rate_limit", 429},
		"lock timeout":          {stripeErr(stripe.ErrorTypeInvalidRequest, "lock_timeout", 429), service.PaymentClassUnavailable, "lock_timeout", 429},
		"api error":             {stripeErr(stripe.ErrorTypeAPI, "", 500), service.PaymentClassUnavailable, "", 500},
		"api error without 5xx": {stripeErr(stripe.ErrorTypeAPI, "", 400), service.PaymentClassUnavailable, "", 400},
		"bad gateway":           {stripeErr(stripe.ErrorTypeInvalidRequest, "", 502), service.PaymentClassUnavailable, "", 502},
		"card error with 5xx":   {stripeErr(stripe.ErrorTypeCard, "processing_error", 503), service.PaymentClassUnavailable, "processing_error", 503},
		"unknown type":          {stripeErr("future_error", "", 400), service.PaymentClassUnavailable, "", 400},
		"wrapped stripe error":  {fmt.Errorf("call: %w", stripeErr(stripe.ErrorTypeCard, "card_declined", 402)), service.PaymentClassDecline, "card_declined", 402},
		"url error":             {&url.Error{Op: "Post", URL: "http://x", Err: io.EOF}, service.PaymentClassUnavailable, "", 0},
		"connection reset":      {&url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "read", Err: syscall.ECONNRESET}}, service.PaymentClassUnavailable, "", 0},
		"unexpected EOF":        {io.ErrUnexpectedEOF, service.PaymentClassUnavailable, "", 0},
		"deadline":              {context.DeadlineExceeded, service.PaymentClassUnavailable, "", 0},
		"canceled":              {context.Canceled, service.PaymentClassUnavailable, "", 0},
		"undecodable answer":    {errors.New("Couldn't deserialize JSON"), service.PaymentClassUnavailable, "", 0},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := translateError(tc.err)
			var pe *service.PaymentError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, tc.class, pe.Class)
			require.Equal(t, tc.code, pe.Code)
			require.Equal(t, tc.status, pe.HTTPStatus)
			require.ErrorIs(t, err, tc.err, "the original error is wrapped")
			require.NotEmpty(t, pe.Message)
		})
	}
	require.NoError(t, translateError(nil))
}

func TestMaxBackoffFollowsStripeGo(t *testing.T) {
	t.Parallel()
	// stripe-go sleeps min(0.5s*(1+n²), 5s) before retry n+1.
	require.Zero(t, maxBackoff(0))
	require.Equal(t, 500_000_000, int(maxBackoff(1)))
	require.Equal(t, 1_500_000_000, int(maxBackoff(2)))
	require.Equal(t, 4_000_000_000, int(maxBackoff(3)))
	require.Equal(t, 9_000_000_000, int(maxBackoff(4)))
	require.Equal(t, 14_000_000_000, int(maxBackoff(5)))
}
