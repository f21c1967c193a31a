package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
	"github.com/atomicrides/atomicrides/service/payments"
	"github.com/atomicrides/atomicrides/service/receipts"
	"github.com/atomicrides/atomicrides/service/settlements"
)

// NewAccounts returns the accounts of a world's service svc, on its
// database and engine, on the clock now (nil: the real one). Riders may come without a source: the
// tests of riders without one are those of the development default, and
// the requirement is tested on its own.
func NewAccounts(t testing.TB, svc *service.Service, now func() time.Time) *accounts.Service {
	t.Helper()
	acc, err := accounts.New(accounts.Config{
		Engine: svc.Engine(), Jobs: svc.Jobs(), Clock: now, DevDefaultPaymentSource: true,
	})
	require.NoError(t, err)
	return acc
}

// NewSettlements returns the settlements of a world's service svc, on its
// database and engine, at their defaults.
func NewSettlements(t testing.TB, svc *service.Service) *settlements.Service {
	t.Helper()
	st, err := settlements.New(settlements.Config{Engine: svc.Engine(), Jobs: svc.Jobs()})
	require.NoError(t, err)
	return st
}

// NewReceipts returns the receipts of a world's service svc, sent with
// mailer, dated by now (nil: the real clock).
func NewReceipts(t testing.TB, svc *service.Service, mailer service.Mailer, now func() time.Time) *receipts.Service {
	t.Helper()
	r, err := receipts.New(receipts.Config{Engine: svc.Engine(), Mailer: mailer, Clock: now})
	require.NoError(t, err)
	return r
}

// Instance is a service and its accounts on pool's database as another
// process would run them: with a pool and caches of their own, closed when
// t ends. Its payments client reaches no Stripe: it is for what needs none
// (users, API keys).
func Instance(t testing.TB, pool *pgxpool.Pool) (*service.Service, *accounts.Service) {
	t.Helper()
	own, err := pgxpool.NewWithConfig(context.Background(), pool.Config())
	require.NoError(t, err)
	t.Cleanup(own.Close)
	svc, err := service.New(service.Config{
		Pool:     own,
		Payments: payments.New(payments.Config{APIBase: "http://127.0.0.1:1", SecretKey: "sk_test_unused"}),
	})
	require.NoError(t, err)
	return svc, NewAccounts(t, svc, nil)
}

// ListenRevocations runs acc's listener of API-key revocations until t
// ends, and returns once it listens (acc trusts its cache of keys). The
// listener must end without an error.
func ListenRevocations(t testing.TB, acc *accounts.Service) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- acc.ListenAPIKeyRevocations(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	require.Eventually(t, acc.APIKeyCacheTrusted, 10*time.Second, time.Millisecond, "the listener never listened")
}
