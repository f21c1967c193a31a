package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/mailsink"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
	"github.com/atomicrides/atomicrides/service/payments"
	"github.com/atomicrides/atomicrides/service/receipts"
	"github.com/atomicrides/atomicrides/service/settlements"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// AbandonedAfter is the completer's grace period in every world; tests pass
// it by ageing the records (Env.Age).
const AbandonedAfter = 5 * time.Minute

// OrphanRefundAfter is the orphan grace period in every world: short, so
// that a pass run by River's workers finds a charge orphaned a moment ago;
// tests that check the grace pass their own to
// Service.OrphanRefundsSchedule.
const OrphanRefundAfter = time.Millisecond

// WebhookSecret is the signing secret of the Stripe webhook endpoint in
// every world: the fake signs its deliveries with it (Env.Webhooks), and
// the service verifies them with it.
const WebhookSecret = "whsec_testkit_webhooks"

// Env is one isolated world of a test: a database, a fake Stripe, a mail
// sink and a clock, with a service over them. Everything in it ends with
// the test.
type Env struct {
	// Ctx is for the test's calls; it is never cancelled, so that cleanups
	// may use it too.
	Ctx      context.Context
	Pool     *pgxpool.Pool
	Stripe   *Stripe
	Payments *payments.Client
	Sink     *mailsink.Sink
	Clock    *Clock
	Service  *service.Service
	// Accounts keeps the world's riders and API keys, in the service's
	// engine.
	Accounts *accounts.Service
	// Settlements applies the world's settlement files, in the service's
	// engine.
	Settlements *settlements.Service
	// Receipts sends the world's receipts to its mail sink.
	Receipts *receipts.Service
}

// Options change a world from New's defaults.
type Options struct {
	// PublicURL is where riders reach the service: their bank sends them
	// back to it after authenticating a payment (see Listen).
	PublicURL string
	// Capture is when bookings take their money (service.Config.Capture);
	// HoldExpiry how long a trip's hold is kept.
	Capture    service.Capture
	HoldExpiry time.Duration
}

// New builds a fresh world for t.
func New(t testing.TB) *Env {
	t.Helper()
	return NewWith(t, Options{})
}

// NewWith builds a fresh world for t with opts.
func NewWith(t testing.TB, opts Options) *Env {
	t.Helper()
	stripe := NewStripe(t)
	sink, mailer := NewMail(t)
	e := &Env{
		Ctx:      context.Background(),
		Pool:     dbtest.New(t),
		Stripe:   stripe,
		Payments: stripe.Payments(),
		Sink:     sink,
		Clock:    &Clock{},
	}
	events, err := payments.NewEvents([]string{WebhookSecret}, 0)
	require.NoError(t, err)
	svc, err := service.New(service.Config{
		Inbound:           map[string]service.EventSource{service.InboxSourceStripe: events},
		Pool:              e.Pool,
		Payments:          e.Payments,
		Clock:             e.Clock.Now,
		AbandonedAfter:    AbandonedAfter,
		OrphanRefundAfter: OrphanRefundAfter,
		PublicURL:         opts.PublicURL,
		Capture:           opts.Capture,
		HoldExpiry:        opts.HoldExpiry,
	})
	require.NoError(t, err)
	e.Service, e.Accounts, e.Settlements = svc, NewAccounts(t, svc, e.Clock.Now), NewSettlements(t, svc)
	e.Receipts = NewReceipts(t, svc, mailer, e.Clock.Now)
	return e
}

// Count runs a query that returns one number, such as a count(*), and
// returns it.
func (e *Env) Count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, e.Pool.QueryRow(e.Ctx, query, args...).Scan(&n))
	return n
}

// Exec runs a statement that must succeed.
func (e *Env) Exec(t testing.TB, query string, args ...any) {
	t.Helper()
	_, err := e.Pool.Exec(e.Ctx, query, args...)
	require.NoError(t, err)
}
