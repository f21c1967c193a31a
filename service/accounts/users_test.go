package accounts_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
)

func TestUserUpsert(t *testing.T) {
	t.Parallel()

	t.Run("CreatesOnceThenReturnsExisting", func(t *testing.T) {
		t.Parallel()
		b := testkit.New(t)
		first, err := b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: "once@example.com"})
		require.NoError(t, err)
		require.True(t, first.Created)
		require.NotEmpty(t, first.APIKey)
		require.Equal(t, accounts.DefaultPaymentSource, first.User.PaymentSource)

		again, err := b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: "once@example.com"})
		require.NoError(t, err)
		require.False(t, again.Created)
		require.Empty(t, again.APIKey)
		require.Equal(t, first.User.ID, again.User.ID)
		require.False(t, again.Replaced)
		require.Equal(t, accounts.DefaultPaymentSource, again.User.PaymentSource, "an existing user sent no source (under -dev) keeps its own")

		u, err := b.Accounts.Authenticate(b.Ctx, first.APIKey)
		require.NoError(t, err)
		require.Equal(t, first.User.ID, u.ID)
		require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM api_keys WHERE key_hash = convert_to($1, 'UTF8')`, first.APIKey), "only a hash is stored")
	})

	t.Run("ConcurrentPutsCreateOneUser", func(t *testing.T) {
		t.Parallel()
		b := testkit.New(t)
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
				res, err := b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: "crowd@example.com"})
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
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM users WHERE role = 'rider'`))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'user.created'`))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM api_keys`))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'customer_create'`))
	})

	t.Run("InvalidInputWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := testkit.New(t)
		long := make([]byte, 250)
		for i := range long {
			long[i] = 'a'
		}
		for _, p := range []accounts.UserUpsertParams{
			{Email: ""},
			{Email: "not-an-email"},
			{Email: "Name <a@example.com>"},
			{Email: "rider@[127.0.0.1]"},
			{Email: string(long) + "@example.com"},
			{Email: "ok@example.com", PaymentSource: "tok visa"},
		} {
			_, err := b.Accounts.UserUpsert(b.Ctx, p)
			e := testkit.RequireCode(t, err, service.CodeInvalid)
			require.NotEmpty(t, e.Field)
		}
		require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM users WHERE role = 'rider'`))
	})
}

func TestAPIKeyMint(t *testing.T) {
	t.Parallel()
	b := testkit.New(t)
	res, err := b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: "keys@example.com"})
	require.NoError(t, err)

	user, key, err := b.Accounts.APIKeyMint(b.Ctx, "keys@example.com", nil)
	require.NoError(t, err)
	require.Equal(t, res.User.ID, user.ID)
	require.NotEqual(t, res.APIKey, key.Secret)
	require.NotEqual(t, res.APIKeyID, key.ID)
	for _, k := range []string{res.APIKey, key.Secret} {
		u, err := b.Accounts.Authenticate(b.Ctx, k)
		require.NoError(t, err)
		require.Equal(t, user.ID, u.ID)
	}

	_, _, err = b.Accounts.APIKeyMint(b.Ctx, "nobody@example.com", nil)
	testkit.RequireCode(t, err, service.CodeNotFound)
	_, err = b.Accounts.Authenticate(b.Ctx, "ark_wrong")
	testkit.RequireCode(t, err, service.CodeUnauthenticated)
}

func TestCustomerCreate(t *testing.T) {
	t.Parallel()

	t.Run("OneCustomerHoweverOftenItRuns", func(t *testing.T) {
		t.Parallel()
		b := testkit.New(t)
		uid := b.Rider(t, "customer@example.com", "tok_visa").ID
		var ids []string
		for range 3 {
			id, err := b.Service.CustomerCreate(b.Ctx, uid, "")
			require.NoError(t, err)
			ids = append(ids, id)
		}
		require.Equal(t, ids[0], ids[1])
		require.Equal(t, ids[0], ids[2])
		require.Len(t, b.Stripe.Customers(), 1)
	})

	t.Run("RideBeforeTheJobUsesTheSameCustomer", func(t *testing.T) {
		t.Parallel()
		b := testkit.New(t)
		uid := b.Rider(t, "early@example.com", "tok_visa").ID
		_, err := b.Service.RideCreate(b.Ctx, uid, testkit.NewKey(), testkit.SomeRide, nil)
		require.NoError(t, err)
		id, err := b.Service.CustomerCreate(b.Ctx, uid, "")
		require.NoError(t, err)
		require.Len(t, b.Stripe.Customers(), 1)
		require.Equal(t, b.Stripe.Customers()[0].ID, id)
	})
}
