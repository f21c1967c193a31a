package fakeadyen_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/adyen"
)

// TestAdapterAuthentication is what the adyen adapter asks of Adyen for a
// rider whose bank wants authentication: a shopper-present payment waits
// for the rider (requires_action, to the challenge page), the rider's
// return is exchanged for the charge, a declined one for the failure, and
// a payment the rider abandoned is cancelled by its reference.
func TestAdapterAuthentication(t *testing.T) {
	t.Parallel()
	fake := fakeadyen.New(fakeadyen.Options{})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	c := adyen.New(adyen.Config{
		APIBase: srv.URL, APIKey: "test", MerchantAccount: "AtomicRidesTest",
		Timeout: 5 * time.Second, MaxNetworkRetries: adyen.NoRetries, HTTPClient: &http.Client{},
	})
	ctx := context.Background()
	tag := func(key string) service.Tag { return service.Tag{Namespace: "ns", Rider: "shopper-1", Key: key} }
	cust, err := c.CustomerCreate(ctx, service.CustomerCreateParams{IdempotencyKey: "ar-cu-1-0123456789",
		Email: "auth@example.com", Source: fakeadyen.TokenAuthenticationRequired, Tag: tag("ar-cu-1-0123456789")})
	require.NoError(t, err)
	charge := func(key string, api service.PaymentAPI) (*service.Charge, error) {
		return c.ChargeCreate(ctx, service.ChargeCreateParams{
			IdempotencyKey: key, CustomerID: cust.ID, AmountCents: 2000, Currency: "usd", Description: "ride",
			Tag: tag(key), API: api, ReturnURL: "https://rides.example/return?key=" + key,
		})
	}

	ch, err := charge("ar-ch-1", service.PaymentAPIIntents)
	require.NoError(t, err)
	require.Equal(t, service.ChargeRequiresAction, ch.Status)
	require.Equal(t, fake.PendingChallenges()[0].ChallengeURL, ch.Action.URL)
	rr, err := fake.Authenticate("ar-ch-1", true)
	require.NoError(t, err)
	done, err := c.PaymentDetails(ctx, service.PaymentDetailsParams{IdempotencyKey: "ar-de-1", RedirectResult: rr})
	require.NoError(t, err)
	require.Equal(t, service.ChargeSucceeded, done.Status)
	require.Equal(t, "ar-ch-1", done.Tag.Key)
	require.Equal(t, fake.AuthorisedPayments()[0].PSPReference, done.ID)

	_, err = c.PaymentDetails(ctx, service.PaymentDetailsParams{IdempotencyKey: "ar-de-forged", RedirectResult: url.QueryEscape(rr) + "forged"})
	require.NotNil(t, service.PaymentFinal(err), "a forged redirectResult is refused: %v", err)

	_, err = charge("ar-ch-2", service.PaymentAPIIntents)
	require.NoError(t, err)
	rr, err = fake.Authenticate("ar-ch-2", false)
	require.NoError(t, err)
	failed, err := c.PaymentDetails(ctx, service.PaymentDetailsParams{IdempotencyKey: "ar-de-2", RedirectResult: rr})
	require.NoError(t, err)
	require.Equal(t, service.ChargeFailed, failed.Status)
	require.Equal(t, "11", failed.FailureCode)

	_, err = charge("ar-ch-3", service.PaymentAPIIntents)
	require.NoError(t, err)
	cancelled, err := c.PaymentCancel(ctx, service.PaymentCancelParams{IdempotencyKey: "ar-ca-3", Reference: "ar-ch-3"})
	require.NoError(t, err)
	require.Equal(t, service.ChargeCancelRequested, cancelled.Status)
	_, err = fake.Authenticate("ar-ch-3", true)
	require.Error(t, err, "the cancelled payment's authentication is over")

	_, err = charge("ar-ch-4", service.PaymentAPICharges)
	require.Error(t, err)
	require.NotNil(t, service.PaymentFinal(err), "without the rider, the card is declined: %v", err)
}
