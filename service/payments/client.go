// Package payments is the adapter from the service.Payments port to Stripe,
// over stripe-go. It is the only package that imports stripe-go.
//
// Every mutating call carries the caller's idempotency key; stripe-go is
// never allowed to invent one. Every failure is a *service.PaymentError,
// classified in one place (translateError). Every call is bounded by
// Budget, stripe-go's own retries included.
package payments

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/charge"
	"github.com/stripe/stripe-go/v76/customer"
	"github.com/stripe/stripe-go/v76/event"
	"github.com/stripe/stripe-go/v76/paymentintent"
	"github.com/stripe/stripe-go/v76/refund"

	"github.com/atomicrides/atomicrides/service"

	"github.com/atomicrides/atomicrides/internal/telemetry"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultTimeout           = 10 * time.Second
	DefaultMaxNetworkRetries = 2
)

// NoRetries, as Config.MaxNetworkRetries, disables stripe-go's retries
// (the zero value selects DefaultMaxNetworkRetries).
const NoRetries int64 = -1

// maxIdleConnsPerHost is how many connections to the API stay open for
// reuse between calls in the default transport: as many as calls are
// usually in flight at once, so that a busy service does not open (and, on
// the real API, handshake) a connection per call. net/http keeps 2.
const maxIdleConnsPerHost = 256

// maxIdempotencyKeyLen is Stripe's limit on the Idempotency-Key header.
const maxIdempotencyKeyLen = 255

// ErrMissingIdempotencyKey is the underlying error of the
// PaymentClassConfiguration error returned when a mutating call has no
// idempotency key (or one longer than Stripe accepts). No request is sent,
// and like every configuration error it is never the rider's outcome.
var ErrMissingIdempotencyKey = errors.New("payments: an idempotency key of 1 to 255 characters is required")

// Config configures a Client.
type Config struct {
	// SecretKey is the Stripe secret key, e.g. "sk_test_...".
	SecretKey string
	// APIBase is the API's base URL, e.g. "http://127.0.0.1:12111" for
	// stripe-mock or the fake; empty means the real Stripe API.
	APIBase string
	// Timeout bounds each HTTP attempt, connection to end of body.
	// Defaults to DefaultTimeout.
	Timeout time.Duration
	// MaxNetworkRetries is how many times stripe-go retries an attempt that
	// failed in a way it deems safe to retry (network errors, 409, 503,
	// 5xx on GET). 0 selects DefaultMaxNetworkRetries; NoRetries disables.
	MaxNetworkRetries int64
	// HTTPClient is the client to send requests with; its Timeout is
	// replaced by Timeout (the client is copied, not modified). Defaults to
	// a client with its own transport, which keeps up to 256 idle
	// connections for reuse.
	HTTPClient *http.Client
	// KeyWindow is how long the API remembers an idempotency key: Stripe's
	// 24 hours (service.ProcessorKeyWindow) when zero. Only a
	// Stripe-compatible test API (the fake Stripe with -key-window) has
	// another; config.go refuses one for Stripe's own API.
	KeyWindow time.Duration
}

// Client implements service.Payments over stripe-go with its own backend:
// it uses no stripe-go global state and may be used concurrently.
type Client struct {
	customers customer.Client
	charges   charge.Client
	intents   paymentintent.Client
	refunds   refund.Client
	events    event.Client
	budget    time.Duration
	window    time.Duration
}

var _ service.Payments = (*Client)(nil)

// New returns a Client for cfg.
func New(cfg Config) *Client {
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	retries := cfg.MaxNetworkRetries
	switch {
	case retries == 0:
		retries = DefaultMaxNetworkRetries
	case retries < 0:
		retries = 0
	}
	httpClient := telemetry.TracedHTTPClient(cfg.HTTPClient, "stripe", maxIdleConnsPerHost, timeout)

	backendCfg := &stripe.BackendConfig{
		HTTPClient:        httpClient,
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		MaxNetworkRetries: stripe.Int64(retries),
		EnableTelemetry:   stripe.Bool(false),
	}
	if cfg.APIBase != "" {
		backendCfg.URL = stripe.String(cfg.APIBase)
	}
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, backendCfg)
	return &Client{
		customers: customer.Client{B: backend, Key: cfg.SecretKey},
		charges:   charge.Client{B: backend, Key: cfg.SecretKey},
		intents:   paymentintent.Client{B: backend, Key: cfg.SecretKey},
		refunds:   refund.Client{B: backend, Key: cfg.SecretKey},
		events:    event.Client{B: backend, Key: cfg.SecretKey},
		budget:    budget(timeout, retries),
		window:    cmp.Or(cfg.KeyWindow, service.ProcessorKeyWindow),
	}
}

// KeyWindow is how long the API remembers an idempotency key
// (Config.KeyWindow): the service looks a charge up before sending its key
// again once it may have been forgotten, and the orphan grace outlasts it.
func (c *Client) KeyWindow() time.Duration { return c.window }

// Budget is the longest a single call may take: every attempt at its full
// timeout plus stripe-go's longest backoff between them, plus a margin.
// Calls are also cut off at Budget through their context.
func (c *Client) Budget() time.Duration { return c.budget }

// bound derives the context of one call: the caller's, cut off at Budget.
func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(telemetry.WithAttempts(ctx), c.budget)
}

// checkKey rejects a missing or over-long idempotency key before anything
// is sent, so that stripe-go never generates a key of its own.
func checkKey(key string) error {
	if n := len(key); n == 0 || n > maxIdempotencyKeyLen {
		return &service.PaymentError{
			Class:   service.PaymentClassConfiguration,
			Kind:    service.PaymentUnavailable,
			Message: ErrMissingIdempotencyKey.Error(),
			Err:     ErrMissingIdempotencyKey,
		}
	}
	return nil
}
