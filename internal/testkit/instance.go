package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/payments"
)

// Instance is a service on pool's database as another process would run
// it: with a pool and caches of its own, closed when t ends. Its payments
// client reaches no Stripe: it is for what needs none (users, API keys).
func Instance(t testing.TB, pool *pgxpool.Pool) *service.Service {
	t.Helper()
	own, err := pgxpool.NewWithConfig(context.Background(), pool.Config())
	require.NoError(t, err)
	t.Cleanup(own.Close)
	svc, err := service.New(service.Config{
		Pool:     own,
		Payments: payments.New(payments.Config{APIBase: "http://127.0.0.1:1", SecretKey: "sk_test_unused"}),
		// Like the world it joins.
		DevDefaultPaymentSource: true,
	})
	require.NoError(t, err)
	return svc
}

// ListenRevocations runs svc's listener of API-key revocations until t
// ends, and returns once it listens (svc trusts its cache of keys). The
// listener must end without an error.
func ListenRevocations(t testing.TB, svc *service.Service) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.ListenAPIKeyRevocations(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	require.Eventually(t, svc.APIKeyCacheTrusted, 10*time.Second, time.Millisecond, "the listener never listened")
}
