package fakeadyen_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/adyen"
)

// TestOneShopperTwoStoredCards is what a rider who replaces its payment
// source asks of Adyen: a second stored card under the same shopper
// reference, made under its own idempotency key; a payment names the card
// it charges; a key sent again is answered with what it made, and a key
// sent with another card is refused.
func TestOneShopperTwoStoredCards(t *testing.T) {
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

	store := func(key, source string) (*service.Customer, error) {
		return c.CustomerCreate(ctx, service.CustomerCreateParams{IdempotencyKey: key, Email: "two@example.com", Source: source, Tag: tag(key)})
	}
	a, err := store("ar-cu-a-0123456789", "tok_visa")
	require.NoError(t, err)
	b, err := store("ar-cu-b-0123456789", fakeadyen.EncryptedCardPrefix+"mastercard")
	require.NoError(t, err)
	require.NotEqual(t, a.ID, b.ID)
	again, err := store("ar-cu-a-0123456789", "tok_visa")
	require.NoError(t, err)
	require.Equal(t, a.ID, again.ID, "the first card's key answers with its stored card")

	_, err = store("ar-cu-a-0123456789", "tok_amex")
	require.Error(t, err)
	var pe *service.PaymentError
	require.True(t, errors.As(err, &pe), "err: %v", err)
	require.Nil(t, service.PaymentFinal(err), "a key reused with another card is never the rider's answer: %v", err)
	require.Equal(t, service.PaymentCodeIdempotencyMismatch, pe.Code)

	cards := map[string]fakeadyen.StoredCard{}
	for _, sc := range fake.StoredCards() {
		cards[sc.ID] = sc
	}
	require.Len(t, cards, 2)
	require.Equal(t, "shopper-1", cards[a.ID].ShopperReference)
	require.Equal(t, "shopper-1", cards[b.ID].ShopperReference)

	pay := func(key, card string) *service.Charge {
		ch, err := c.ChargeCreate(ctx, service.ChargeCreateParams{
			IdempotencyKey: key, CustomerID: card, AmountCents: 2000, Currency: "usd", Description: "ride", Tag: tag(key),
		})
		require.NoError(t, err)
		return ch
	}
	pA := pay("ar-ch-1."+a.ID, a.ID)
	pB := pay("ar-ch-2."+b.ID, b.ID)
	require.Equal(t, pA.ID, pay("ar-ch-1."+a.ID, a.ID).ID, "a retried payment is the same payment")
	paid := map[string]string{}
	for _, p := range fake.AuthorisedPayments() {
		paid[p.PSPReference] = cards[p.StoredCardID].Source
	}
	require.Equal(t, map[string]string{pA.ID: "tok_visa", pB.ID: fakeadyen.EncryptedCardPrefix + "mastercard"}, paid)
}
