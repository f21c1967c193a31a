package service_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/service"
)

func TestUserUpsert(t *testing.T) {
	t.Parallel()

	t.Run("CreatesOnceThenReturnsExisting", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first, err := b.svc.UserUpsert(b.ctx, service.UserUpsertParams{Email: "once@example.com"})
		require.NoError(t, err)
		require.True(t, first.Created)
		require.NotEmpty(t, first.APIKey)
		require.Equal(t, service.DefaultPaymentSource, first.User.PaymentSource)

		again, err := b.svc.UserUpsert(b.ctx, service.UserUpsertParams{Email: "once@example.com", PaymentSource: "tok_other"})
		require.NoError(t, err)
		require.False(t, again.Created)
		require.Empty(t, again.APIKey)
		require.Equal(t, first.User.ID, again.User.ID)
		require.Equal(t, service.DefaultPaymentSource, again.User.PaymentSource, "an existing user is not changed")

		u, err := b.svc.Authenticate(b.ctx, first.APIKey)
		require.NoError(t, err)
		require.Equal(t, first.User.ID, u.ID)
		require.Equal(t, 0, b.count(t, `SELECT count(*) FROM api_keys WHERE key_hash = convert_to($1, 'UTF8')`, first.APIKey), "only a hash is stored")
	})

	t.Run("ConcurrentPutsCreateOneUser", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 50
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			created int
			ids     = map[int64]bool{}
			errs    []error
		)
		start := make(chan struct{})
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := b.svc.UserUpsert(b.ctx, service.UserUpsertParams{Email: "crowd@example.com"})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				ids[res.User.ID] = true
				if res.Created {
					created++
				}
			}()
		}
		close(start)
		wg.Wait()
		require.Empty(t, errs, "serialization failures are retried, never surfaced")
		require.Equal(t, 1, created)
		require.Len(t, ids, 1)
		require.Equal(t, 1, b.count(t, `SELECT count(*) FROM users`))
		require.Equal(t, 1, b.count(t, `SELECT count(*) FROM audit_records WHERE action = 'user.created'`))
		require.Equal(t, 1, b.count(t, `SELECT count(*) FROM api_keys`))
		require.Equal(t, 1, b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'customer_create'`))
	})

	t.Run("InvalidInputWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		long := make([]byte, 250)
		for i := range long {
			long[i] = 'a'
		}
		for _, p := range []service.UserUpsertParams{
			{Email: ""},
			{Email: "not-an-email"},
			{Email: "Name <a@example.com>"},
			{Email: string(long) + "@example.com"},
			{Email: "ok@example.com", PaymentSource: "tok visa"},
		} {
			_, err := b.svc.UserUpsert(b.ctx, p)
			e := requireCode(t, err, service.CodeInvalid)
			require.NotEmpty(t, e.Field)
		}
		require.Equal(t, 0, b.count(t, `SELECT count(*) FROM users`))
	})
}

func TestAPIKeyMint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.svc.UserUpsert(b.ctx, service.UserUpsertParams{Email: "keys@example.com"})
	require.NoError(t, err)

	user, key, err := b.svc.APIKeyMint(b.ctx, "keys@example.com", nil)
	require.NoError(t, err)
	require.Equal(t, res.User.ID, user.ID)
	require.NotEqual(t, res.APIKey, key.Secret)
	require.NotEqual(t, res.APIKeyID, key.ID)
	for _, k := range []string{res.APIKey, key.Secret} {
		u, err := b.svc.Authenticate(b.ctx, k)
		require.NoError(t, err)
		require.Equal(t, user.ID, u.ID)
	}

	_, _, err = b.svc.APIKeyMint(b.ctx, "nobody@example.com", nil)
	requireCode(t, err, service.CodeNotFound)
	_, err = b.svc.Authenticate(b.ctx, "ark_wrong")
	requireCode(t, err, service.CodeUnauthenticated)
}

func TestCustomerCreate(t *testing.T) {
	t.Parallel()

	t.Run("OneCustomerHoweverOftenItRuns", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid := b.user(t, "customer@example.com", "tok_visa")
		var ids []string
		for range 3 {
			id, err := b.svc.CustomerCreate(b.ctx, uid)
			require.NoError(t, err)
			ids = append(ids, id)
		}
		require.Equal(t, ids[0], ids[1])
		require.Equal(t, ids[0], ids[2])
		require.Len(t, b.fake.Customers(), 1)
	})

	t.Run("RideBeforeTheJobUsesTheSameCustomer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		uid := b.user(t, "early@example.com", "tok_visa")
		_, err := b.svc.RideCreate(b.ctx, uid, newKey(), someRide, nil)
		require.NoError(t, err)
		id, err := b.svc.CustomerCreate(b.ctx, uid)
		require.NoError(t, err)
		require.Len(t, b.fake.Customers(), 1)
		require.Equal(t, b.fake.Customers()[0].ID, id)
	})
}
