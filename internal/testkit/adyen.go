package testkit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
	"github.com/atomicrides/atomicrides/internal/fake/mailsink"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/adyen"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// Adyen is a fake Adyen served over HTTP for one test.
type Adyen struct {
	*fakeadyen.Server
	// URL is the base URL the fake is served at.
	URL string
}

// NewAdyen serves a fresh fake Adyen until t ends.
func NewAdyen(t testing.TB) *Adyen {
	t.Helper()
	fake := fakeadyen.New(fakeadyen.Options{})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return &Adyen{Server: fake, URL: srv.URL}
}

// Client returns an Adyen client of the fake: one attempt per call, a
// connection per request (a dropped connection reaches the service as the
// lost answer it is).
func (a *Adyen) Client() *adyen.Client {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DisableKeepAlives = true
	return adyen.New(adyen.Config{
		APIBase:           a.URL,
		APIKey:            "test_testkit",
		MerchantAccount:   "AtomicRidesTest",
		Timeout:           5 * time.Second,
		MaxNetworkRetries: adyen.NoRetries,
		HTTPClient:        &http.Client{Transport: transport},
	})
}

// TwoProcessors is a world with Stripe then Adyen, in that order of
// preference.
type TwoProcessors struct {
	*Env
	Adyen *Adyen
	Mail  *mailsink.Sink
}

// NewTwoProcessors builds a fresh world whose service routes to the fake
// Stripe, then the fake Adyen; a processor's circuit opens after failures
// consecutive indeterminate outcomes and stays open for openFor.
func NewTwoProcessors(t testing.TB, failures uint32, openFor time.Duration) *TwoProcessors {
	t.Helper()
	stripe := NewStripe(t)
	ady := NewAdyen(t)
	sink, mailer := NewMail(t)
	e := &Env{
		Ctx:      context.Background(),
		Pool:     dbtest.New(t),
		Stripe:   stripe,
		Payments: stripe.Payments(),
		Sink:     sink,
		Clock:    &Clock{},
	}
	svc, err := service.New(service.Config{
		Pool: e.Pool,
		Processors: []service.Processor{
			{Name: service.ProcessorStripe, Payments: e.Payments},
			{Name: service.ProcessorAdyen, Payments: ady.Client()},
		},
		BreakerFailures:         failures,
		BreakerOpenFor:          openFor,
		Mailer:                  mailer,
		Clock:                   e.Clock.Now,
		AbandonedAfter:          AbandonedAfter,
		DevDefaultPaymentSource: true,
		// Replays come from the database, as after a restore or on
		// another instance.
		ReplayCacheTTL: -1,
	})
	require.NoError(t, err)
	e.Service = svc
	return &TwoProcessors{Env: e, Adyen: ady, Mail: sink}
}
