package fakestripe_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/payments"
)

const testKey = "sk_test_x"

// env is a fake Stripe served over HTTP for one test.
type env struct {
	fake *fakestripe.Server
	url  string
}

func newEnv(t *testing.T, opts fakestripe.Options) *env {
	t.Helper()
	fake := fakestripe.New(opts)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return &env{fake: fake, url: srv.URL}
}

// client is an adapter pointed at the fake; cfg's APIBase and a missing
// SecretKey are filled in.
func (e *env) client(cfg payments.Config) *payments.Client {
	cfg.APIBase = e.url
	if cfg.SecretKey == "" {
		cfg.SecretKey = testKey
	}
	return payments.New(cfg)
}

// customer creates a customer of userID with source and returns its id.
func (e *env) customer(t *testing.T, userID int64, source string) string {
	t.Helper()
	cust, err := e.client(payments.Config{}).CustomerCreate(context.Background(), service.CustomerCreateParams{
		IdempotencyKey: "user-" + source + "-" + t.Name() + "-customer",
		Email:          "rider@example.com",
		Source:         source,
	})
	require.NoError(t, err)
	return cust.ID
}

// post sends a raw form POST to the fake.
func (e *env) post(t *testing.T, path, secret, idemKey string, form url.Values) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	return do(t, req)
}

// get sends a raw GET to the fake.
func (e *env) get(t *testing.T, pathAndQuery string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.url+pathAndQuery, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testKey)
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, body
}

// paymentError asserts that err is a *service.PaymentError of kind.
func paymentError(t *testing.T, err error, class service.PaymentClass) *service.PaymentError {
	t.Helper()
	var pe *service.PaymentError
	require.True(t, errors.As(err, &pe), "want *service.PaymentError, got %T: %v", err, err)
	require.Equal(t, class, pe.Class, "error: %v (underlying: %v)", pe, pe.Err)
	return pe
}

func chargeForm(customer string, amount string) url.Values {
	return url.Values{
		"amount":            {amount},
		"currency":          {"usd"},
		"customer":          {customer},
		"metadata[ride_id]": {"1"},
	}
}
