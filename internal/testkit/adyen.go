package testkit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	return NewAdyenWith(t, fakeadyen.Options{})
}

// NewAdyenWith serves a fresh fake Adyen with opts until t ends.
func NewAdyenWith(t testing.TB, opts fakeadyen.Options) *Adyen {
	t.Helper()
	fake := fakeadyen.New(opts)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return &Adyen{Server: fake, URL: srv.URL}
}

// Client returns an Adyen client of the fake: one attempt per call, a
// connection per request (a dropped connection reaches the service as the
// lost answer it is). Its key window is the fake's key lifetime.
func (a *Adyen) Client() *adyen.Client {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DisableKeepAlives = true
	return adyen.New(adyen.Config{
		APIBase:           a.URL,
		APIKey:            "test_testkit",
		MerchantAccount:   AdyenMerchantAccount,
		Timeout:           5 * time.Second,
		MaxNetworkRetries: adyen.NoRetries,
		HTTPClient:        &http.Client{Transport: transport},
		KeyWindow:         a.KeyLifetime(),
	})
}

// AdyenMerchantAccount is the merchant account of the tests' Adyen client.
const AdyenMerchantAccount = "AtomicRidesTest"

// AdyenHMACKey is the HMAC key (hex) of the tests' Adyen notifications.
const AdyenHMACKey = "7e57a0dbe9c0ffee7e57a0dbe9c0ffee7e57a0dbe9c0ffee7e57a0dbe9c0ffee"

// TwoProcessors is a world with Stripe then Adyen, in that order of
// preference (Adyen then Stripe with NewAdyenFirst). The service receives
// Adyen's notifications (source adyen, AdyenHMACKey).
type TwoProcessors struct {
	*Env
	Adyen *Adyen
	Mail  *mailsink.Sink

	mailer service.Mailer
	opts   TwoProcessorsOptions
}

// TwoProcessorsOptions configure a TwoProcessors world
// (NewTwoProcessorsWith).
type TwoProcessorsOptions struct {
	// Failures and OpenFor: a processor's circuit opens after Failures
	// consecutive indeterminate outcomes and stays open for OpenFor.
	Failures uint32
	OpenFor  time.Duration
	// AdyenFirst prefers Adyen to Stripe.
	AdyenFirst bool
	// Capture is when bookings take their money (service.Config.Capture);
	// HoldExpiry how long a trip's hold is kept.
	Capture    service.Capture
	HoldExpiry time.Duration
	// Registerer receives the collectors of the world's own Service (not
	// those of its other Instances). Nil: a private registry.
	Registerer prometheus.Registerer
}

// NewTwoProcessors builds a fresh world whose service routes to the fake
// Stripe, then the fake Adyen; a processor's circuit opens after failures
// consecutive indeterminate outcomes and stays open for openFor.
func NewTwoProcessors(t testing.TB, failures uint32, openFor time.Duration) *TwoProcessors {
	t.Helper()
	return NewTwoProcessorsWith(t, TwoProcessorsOptions{Failures: failures, OpenFor: openFor})
}

// NewAdyenFirst is NewTwoProcessors with Adyen preferred to Stripe.
func NewAdyenFirst(t testing.TB, failures uint32, openFor time.Duration) *TwoProcessors {
	t.Helper()
	return NewTwoProcessorsWith(t, TwoProcessorsOptions{Failures: failures, OpenFor: openFor, AdyenFirst: true})
}

// NewTwoProcessorsWith builds a fresh world of the two processors with
// opts.
func NewTwoProcessorsWith(t testing.TB, opts TwoProcessorsOptions) *TwoProcessors {
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
	w := &TwoProcessors{Env: e, Adyen: ady, Mail: sink, mailer: mailer, opts: opts}
	e.Service = w.instance(t, opts.Registerer)
	e.Accounts = NewAccounts(t, e.Service, e.Clock.Now)
	e.Settlements = NewSettlements(t, e.Service)
	e.Receipts = NewReceipts(t, e.Service, mailer, e.Clock.Now)
	return w
}

// Instance returns another process of the world's deployment: a service
// on the same database, fakes and mail sink, with circuits of its own.
func (w *TwoProcessors) Instance(t testing.TB) *service.Service {
	t.Helper()
	return w.instance(t, nil)
}

// instance is Instance with its collectors registered with reg (nil: a
// private registry).
func (w *TwoProcessors) instance(t testing.TB, reg prometheus.Registerer) *service.Service {
	t.Helper()
	procs := []service.Processor{
		{Name: service.ProcessorStripe, Payments: w.Payments},
		{Name: service.ProcessorAdyen, Payments: w.Adyen.Client()},
	}
	if w.opts.AdyenFirst {
		procs[0], procs[1] = procs[1], procs[0]
	}
	notes, err := adyen.NewNotifications([]string{AdyenHMACKey}, AdyenMerchantAccount)
	require.NoError(t, err)
	svc, err := service.New(service.Config{
		Pool:            w.Pool,
		Processors:      procs,
		Inbound:         map[string]service.EventSource{service.InboxSourceAdyen: notes},
		BreakerFailures: w.opts.Failures,
		BreakerOpenFor:  w.opts.OpenFor,
		Capture:         w.opts.Capture,
		HoldExpiry:      w.opts.HoldExpiry,
		Registerer:      reg,
		Clock:           w.Clock.Now,
		AbandonedAfter:  AbandonedAfter,
		// Replays come from the database, as after a restore or on
		// another instance.
		ReplayCacheTTL: -1,
	})
	require.NoError(t, err)
	return svc
}
