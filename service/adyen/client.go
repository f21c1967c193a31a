// Package adyen is the adapter from the service.Payments port to Adyen's
// Checkout API: a small typed client of exactly the endpoints a ride needs,
// written from Adyen's API reference (Adyen's Go library is not used).
//
//   - POST /storedPaymentMethods stores the rider's card for a shopper
//     (CustomerCreate): the registration of a rider at Adyen;
//   - POST /payments charges a stored card, a merchant-initiated payment
//     (shopperInteraction ContAuth, recurringProcessingModel
//     UnscheduledCardOnFile) (ChargeCreate);
//   - POST /payments/{pspReference}/refunds refunds a payment
//     (RefundCreate).
//
// Every POST carries the caller's idempotency key in the Idempotency-Key
// header (Adyen keeps a key at least 31 days and accepts at most 64
// characters: longer keys are shortened by a digest, a pure function of the
// key). Authentication is the X-API-Key header. Every failure is a
// *service.PaymentError, classified in one place (classify). Like the
// Stripe adapter, every call is bounded by Budget, its retries included:
// network failures, 409, 429 and 5xx are retried with the same key and
// jittered backoff.
//
// Checkout offers no search or list of payments: the lookups of the port
// (ChargeFind, ChargeGet, ChargeListSince, CustomerFind, RefundList,
// RefundListSince) answer ErrUnsupported, an indeterminate error, and
// KeyWindow tells the service that Adyen remembers keys for 31 days, so
// that it needs no lookup within that time.
package adyen

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/atomicrides/atomicrides/service"

	"github.com/atomicrides/atomicrides/internal/telemetry"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultTimeout           = 10 * time.Second
	DefaultMaxNetworkRetries = 2
	// DefaultAPIBase is Adyen's test Checkout API, version 71.
	DefaultAPIBase = "https://checkout-test.adyen.com/v71"
)

// NoRetries, as Config.MaxNetworkRetries, disables retries.
const NoRetries int64 = -1

// KeyWindow is how long Adyen remembers an idempotency key at least.
const KeyWindow = 31 * 24 * time.Hour

// maxIdempotencyKeyLen is Adyen's limit on the Idempotency-Key header.
const maxIdempotencyKeyLen = 64

// Backoff between retries: the n-th retry (n from 0) sleeps
// min(minRetryDelay*(1+n²), maxRetryDelay), less up to a quarter of
// jitter — the Stripe adapter's schedule.
const (
	minRetryDelay = 500 * time.Millisecond
	maxRetryDelay = 5 * time.Second
	budgetMargin  = time.Second
)

// maxIdleConnsPerHost is how many idle connections to the API are kept.
const maxIdleConnsPerHost = 256

// ErrUnsupported underlies the error of the port's lookups, which Adyen's
// Checkout API does not offer.
var ErrUnsupported = errors.New("adyen: the Checkout API has no lookup of earlier payments, refunds or stored cards by key")

// ErrMissingIdempotencyKey underlies the configuration error of a mutating
// call without an idempotency key. Nothing is sent.
var ErrMissingIdempotencyKey = errors.New("adyen: an idempotency key is required")

// Config configures a Client.
type Config struct {
	// APIKey is the X-API-Key of the web service user.
	APIKey string
	// MerchantAccount is the merchant account every request names.
	MerchantAccount string
	// APIBase is the Checkout API's base URL with its version, e.g.
	// "https://checkout-test.adyen.com/v71" or the fake's URL. Default
	// DefaultAPIBase.
	APIBase string
	// Timeout bounds each HTTP attempt. Default DefaultTimeout.
	Timeout time.Duration
	// MaxNetworkRetries is how many times a failed attempt that may be
	// retried (network errors, 409, 429, 5xx) is sent again with the same
	// key. 0 selects DefaultMaxNetworkRetries; NoRetries disables.
	MaxNetworkRetries int64
	// HTTPClient sends the requests; its Timeout is replaced by Timeout.
	HTTPClient *http.Client
	// KeyWindow is how long the API remembers an idempotency key: zero
	// for Adyen's KeyWindow. Another value is for a test API that forgets
	// sooner (the fake's KeyLifetime), so that the service's look-ups past
	// the window can be exercised.
	KeyWindow time.Duration
}

// Client implements service.Payments over Adyen's Checkout API. It is
// safe for concurrent use.
type Client struct {
	http     http.Client
	base     string
	key      string
	merchant string
	retries  int64
	budget   time.Duration
	window   time.Duration
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
	hc := telemetry.TracedHTTPClient(cfg.HTTPClient, "adyen", maxIdleConnsPerHost, timeout)
	apiBase := cfg.APIBase
	if apiBase == "" {
		apiBase = DefaultAPIBase
	}
	window := cfg.KeyWindow
	if window <= 0 {
		window = KeyWindow
	}
	return &Client{
		http:     *hc,
		base:     apiBase,
		key:      cfg.APIKey,
		merchant: cfg.MerchantAccount,
		retries:  retries,
		budget:   budget(timeout, retries),
		window:   window,
	}
}

// Budget is the longest a single call may take: every attempt at its full
// timeout plus the backoff between them, plus a margin.
func (c *Client) Budget() time.Duration { return c.budget }

// KeyWindow is how long Adyen remembers an idempotency key
// (Config.KeyWindow).
func (c *Client) KeyWindow() time.Duration { return c.window }

// budget is the upper bound of one call.
func budget(timeout time.Duration, retries int64) time.Duration {
	var backoff time.Duration
	for n := range retries {
		backoff += delay(n)
	}
	return time.Duration(retries+1)*timeout + backoff + budgetMargin
}

// delay is the longest sleep before the retry n (from 0).
func delay(n int64) time.Duration {
	return min(minRetryDelay+minRetryDelay*time.Duration(n*n), maxRetryDelay)
}

// jittered is delay(n) less up to a quarter, never below minRetryDelay.
func jittered(n int64) time.Duration {
	d := delay(n)
	d -= time.Duration(rand.Int64N(int64(d/4) + 1))
	return max(d, minRetryDelay)
}

// unsupported is the error of a lookup Checkout does not offer.
func unsupported() error {
	return &service.PaymentError{
		Class: service.PaymentClassUnavailable, Kind: service.PaymentUnavailable,
		Code: service.PaymentCodeUnsupported, Message: ErrUnsupported.Error(), Err: ErrUnsupported,
	}
}

// CustomerFind is not offered by Checkout for keys: ErrUnsupported.
func (c *Client) CustomerFind(context.Context, string) ([]*service.Customer, error) {
	return nil, unsupported()
}

// ChargeFind is not offered by Checkout: ErrUnsupported.
func (c *Client) ChargeFind(context.Context, service.ChargeFindParams) ([]*service.Charge, error) {
	return nil, unsupported()
}

// PaymentGet is not offered by Checkout: ErrUnsupported. A payment's
// outcome comes in its notification, or from PaymentDetails.
func (c *Client) PaymentGet(context.Context, string) (*service.Charge, error) {
	return nil, unsupported()
}

// ChargeGet is not offered by Checkout: ErrUnsupported.
func (c *Client) ChargeGet(context.Context, string) (*service.Charge, error) {
	return nil, unsupported()
}

// ChargeListSince is not offered by Checkout: ErrUnsupported.
func (c *Client) ChargeListSince(context.Context, time.Time) ([]*service.Charge, error) {
	return nil, unsupported()
}

// RefundList is not offered by Checkout: ErrUnsupported.
func (c *Client) RefundList(context.Context, string) ([]*service.Refund, error) {
	return nil, unsupported()
}

// RefundListSince is not offered by Checkout: ErrUnsupported.
func (c *Client) RefundListSince(context.Context, time.Time) ([]*service.Refund, error) {
	return nil, unsupported()
}
