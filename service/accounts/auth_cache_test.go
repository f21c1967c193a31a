package accounts_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
)

func TestAuthenticateCache(t *testing.T) {
	t.Parallel()

	t.Run("FoundKeyIsTrustedForTheTTLOnly", func(t *testing.T) {
		t.Parallel()
		b := testkit.New(t)
		testkit.ListenRevocations(t, b.Accounts)
		res, err := b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: "cached@example.com"})
		require.NoError(t, err)
		u, err := b.Accounts.Authenticate(b.Ctx, res.APIKey)
		require.NoError(t, err)
		require.Equal(t, "cached@example.com", u.Email)

		// A change that revokes nothing is not announced: the cached read
		// stands for the TTL.
		b.Exec(t, `UPDATE users SET email = 'renamed@example.com' WHERE id = $1`, res.User.ID)
		u, err = b.Accounts.Authenticate(b.Ctx, res.APIKey)
		require.NoError(t, err, "within the TTL the key is not read again")
		require.Equal(t, "cached@example.com", u.Email)

		b.Clock.Advance(accounts.DefaultAuthCacheTTL)
		u, err = b.Accounts.Authenticate(b.Ctx, res.APIKey)
		require.NoError(t, err)
		require.Equal(t, "renamed@example.com", u.Email)
	})

	t.Run("WithoutListenerEveryCallReadsTheDatabase", func(t *testing.T) {
		t.Parallel()
		b := testkit.New(t)
		res, err := b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: "unlistened@example.com"})
		require.NoError(t, err)
		_, err = b.Accounts.Authenticate(b.Ctx, res.APIKey)
		require.NoError(t, err)
		require.False(t, b.Accounts.APIKeyCacheTrusted())

		b.Exec(t, `ALTER TABLE api_keys DISABLE TRIGGER USER`) // not even announced
		b.Exec(t, `UPDATE api_keys SET revoked_at = now() WHERE user_id = $1`, res.User.ID)
		_, err = b.Accounts.Authenticate(b.Ctx, res.APIKey)
		testkit.RequireCode(t, err, service.CodeUnauthenticated)
	})

	t.Run("UnknownKeyIsNotRemembered", func(t *testing.T) {
		t.Parallel()
		b := testkit.New(t)
		uid := b.Rider(t, "later@example.com", "tok_visa").ID
		const key = "ark_inserted-after-a-failed-attempt"
		_, err := b.Accounts.Authenticate(b.Ctx, key)
		testkit.RequireCode(t, err, service.CodeUnauthenticated)

		b.Exec(t, `INSERT INTO api_keys (key_hash, user_id) VALUES (sha256(convert_to($1::text, 'UTF8')), $2)`, key, uid)
		u, err := b.Accounts.Authenticate(b.Ctx, key)
		require.NoError(t, err)
		require.Equal(t, uid, u.ID)
	})

	t.Run("NegativeTTLDisablesTheCache", func(t *testing.T) {
		t.Parallel()
		b := testkit.New(t)
		svc, err := accounts.New(accounts.Config{
			Engine: b.Service.Engine(), Jobs: b.Service.Jobs(), DevDefaultPaymentSource: true,
			AuthCacheTTL: -1,
		})
		require.NoError(t, err)
		res, err := svc.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: "uncached@example.com"})
		require.NoError(t, err)
		_, err = svc.Authenticate(b.Ctx, res.APIKey)
		require.NoError(t, err)

		b.Exec(t, `DELETE FROM api_keys WHERE user_id = $1`, res.User.ID)
		_, err = svc.Authenticate(b.Ctx, res.APIKey)
		testkit.RequireCode(t, err, service.CodeUnauthenticated)
	})

	t.Run("ReturnsACopy", func(t *testing.T) {
		t.Parallel()
		b := testkit.New(t)
		res, err := b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: "copy@example.com"})
		require.NoError(t, err)
		u, err := b.Accounts.Authenticate(b.Ctx, res.APIKey)
		require.NoError(t, err)
		u.Email = "changed@example.com"
		again, err := b.Accounts.Authenticate(b.Ctx, res.APIKey)
		require.NoError(t, err)
		require.Equal(t, "copy@example.com", again.Email)
	})
}
