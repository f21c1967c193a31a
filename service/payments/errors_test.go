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
		kind   service.PaymentErrorKind
		code   string
		status int
	}{
		"card declined":         {stripeErr(stripe.ErrorTypeCard, "card_declined", 402), service.PaymentDeclined, "card_declined", 402},
		"expired card":          {stripeErr(stripe.ErrorTypeCard, "expired_card", 402), service.PaymentDeclined, "expired_card", 402},
		"resource missing":      {stripeErr(stripe.ErrorTypeInvalidRequest, "resource_missing", 400), service.PaymentConfiguration, "resource_missing", 400},
		"already refunded":      {stripeErr(stripe.ErrorTypeInvalidRequest, "charge_already_refunded", 400), service.PaymentInvalid, "charge_already_refunded", 400},
		"not found":             {stripeErr(stripe.ErrorTypeInvalidRequest, "resource_missing", 404), service.PaymentConfiguration, "resource_missing", 404},
		"key in use":            {stripeErr(stripe.ErrorTypeInvalidRequest, "idempotency_key_in_use", 409), service.PaymentUnavailable, "idempotency_key_in_use", 409},
		"lock conflict":         {stripeErr(stripe.ErrorTypeInvalidRequest, "", 409), service.PaymentUnavailable, "", 409},
		"idempotency mismatch":  {stripeErr(stripe.ErrorTypeIdempotency, "", 400), service.PaymentConfiguration, service.PaymentCodeIdempotencyMismatch, 400},
		"unauthorized":          {stripeErr(stripe.ErrorTypeInvalidRequest, "", 401), service.PaymentConfiguration, "", 401},
		"forbidden":             {stripeErr(stripe.ErrorTypeInvalidRequest, "secret_key_required", 403), service.PaymentConfiguration, "secret_key_required", 403},
		"rate limit":            {stripeErr(stripe.ErrorTypeInvalidRequest, "rate_limit", 429), service.PaymentUnavailable, "rate_limit", 429},
		"lock timeout":          {stripeErr(stripe.ErrorTypeInvalidRequest, "lock_timeout", 429), service.PaymentUnavailable, "lock_timeout", 429},
		"api error":             {stripeErr(stripe.ErrorTypeAPI, "", 500), service.PaymentUnavailable, "", 500},
		"api error without 5xx": {stripeErr(stripe.ErrorTypeAPI, "", 400), service.PaymentUnavailable, "", 400},
		"bad gateway":           {stripeErr(stripe.ErrorTypeInvalidRequest, "", 502), service.PaymentUnavailable, "", 502},
		"card error with 5xx":   {stripeErr(stripe.ErrorTypeCard, "processing_error", 503), service.PaymentUnavailable, "processing_error", 503},
		"unknown type":          {stripeErr("future_error", "", 400), service.PaymentUnavailable, "", 400},
		"wrapped stripe error":  {fmt.Errorf("call: %w", stripeErr(stripe.ErrorTypeCard, "card_declined", 402)), service.PaymentDeclined, "card_declined", 402},
		"url error":             {&url.Error{Op: "Post", URL: "http://x", Err: io.EOF}, service.PaymentUnavailable, "", 0},
		"connection reset":      {&url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "read", Err: syscall.ECONNRESET}}, service.PaymentUnavailable, "", 0},
		"unexpected EOF":        {io.ErrUnexpectedEOF, service.PaymentUnavailable, "", 0},
		"deadline":              {context.DeadlineExceeded, service.PaymentUnavailable, "", 0},
		"canceled":              {context.Canceled, service.PaymentUnavailable, "", 0},
		"undecodable answer":    {errors.New("Couldn't deserialize JSON"), service.PaymentUnavailable, "", 0},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := translateError(tc.err)
			var pe *service.PaymentError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, tc.kind, pe.Kind)
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
