package testkit

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/service/payments"
)

// Stripe is a fake Stripe served over HTTP for one test.
type Stripe struct {
	*fakestripe.Server
	// URL is the base URL the fake is served at.
	URL string
}

// NewStripe serves a fresh fake Stripe until t ends.
func NewStripe(t testing.TB) *Stripe {
	t.Helper()
	fake := fakestripe.New(fakestripe.Options{})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return &Stripe{Server: fake, URL: srv.URL}
}

// Payments returns a payments client of the fake. It makes one attempt per
// call (the service's retries are under test, not stripe-go's) and opens a
// connection per request: a connection the fake drops must reach the service
// as the lost answer it is, not be retried by net/http on a new connection.
func (s *Stripe) Payments() *payments.Client {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DisableKeepAlives = true
	return payments.New(payments.Config{
		APIBase:           s.URL,
		SecretKey:         "sk_test_testkit",
		Timeout:           5 * time.Second,
		MaxNetworkRetries: payments.NoRetries,
		HTTPClient:        &http.Client{Transport: transport},
	})
}

// Executed counts the requests of op (fakestripe.Op…) the fake executed
// and answered 200: replays of a saved answer are not counted.
func (s *Stripe) Executed(op string) int {
	n := 0
	for _, r := range s.Requests() {
		if r.Op == op && !r.Replayed && r.Status == http.StatusOK {
			n++
		}
	}
	return n
}
