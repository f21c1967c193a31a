package accounts_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
)

func TestAPIKeyRevoke(t *testing.T) {
	t.Parallel()

	t.Run("ListRevokeAndRevokeAgain", func(t *testing.T) {
		t.Parallel()
		b := testkit.New(t)
		testkit.ListenRevocations(t, b.Accounts)
		res, err := b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: "revoke@example.com"})
		require.NoError(t, err)
		require.NotZero(t, res.APIKeyID)
		_, second, err := b.Accounts.APIKeyMint(b.Ctx, "Revoke@Example.com", nil)
		require.NoError(t, err)

		keys, err := b.Accounts.APIKeyList(b.Ctx, "revoke@example.com")
		require.NoError(t, err)
		require.Len(t, keys, 2)
		require.Equal(t, res.APIKeyID, keys[0].ID)
		require.Equal(t, second.ID, keys[1].ID)
		for _, k := range keys {
			require.Nil(t, k.LastUsedAt)
			require.Nil(t, k.RevokedAt)
		}

		_, id, err := b.Accounts.AuthenticateKey(b.Ctx, res.APIKey)
		require.NoError(t, err)
		require.Equal(t, res.APIKeyID, id)
		keys, err = b.Accounts.APIKeyList(b.Ctx, "revoke@example.com")
		require.NoError(t, err)
		require.NotNil(t, keys[0].LastUsedAt, "the use is recorded")
		require.Nil(t, keys[1].LastUsedAt)

		live, err := b.Accounts.APIKeyLive(b.Ctx, res.APIKeyID)
		require.NoError(t, err)
		require.True(t, live)

		require.NoError(t, b.Accounts.APIKeyRevoke(b.Ctx, "revoke@example.com", res.APIKeyID, nil))
		_, err = b.Accounts.Authenticate(b.Ctx, res.APIKey)
		testkit.RequireCode(t, err, service.CodeUnauthenticated)
		live, err = b.Accounts.APIKeyLive(b.Ctx, res.APIKeyID)
		require.NoError(t, err)
		require.False(t, live)
		u, err := b.Accounts.Authenticate(b.Ctx, second.Secret)
		require.NoError(t, err, "the other key is untouched")
		require.Equal(t, res.User.ID, u.ID)

		require.NoError(t, b.Accounts.APIKeyRevoke(b.Ctx, "revoke@example.com", res.APIKeyID, nil), "a second revocation succeeds")
		keys, err = b.Accounts.APIKeyList(b.Ctx, "revoke@example.com")
		require.NoError(t, err)
		require.NotNil(t, keys[0].RevokedAt)
		require.Nil(t, keys[1].RevokedAt)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM audit_records WHERE action = 'api_key.revoked' AND resource_id = $1`, res.APIKeyID))
	})

	t.Run("UnknownOrAnotherUsersKeyIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := testkit.New(t)
		mine, err := b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: "mine@example.com"})
		require.NoError(t, err)
		theirs, err := b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: "theirs@example.com"})
		require.NoError(t, err)

		testkit.RequireCode(t, b.Accounts.APIKeyRevoke(b.Ctx, "mine@example.com", theirs.APIKeyID, nil), service.CodeNotFound)
		testkit.RequireCode(t, b.Accounts.APIKeyRevoke(b.Ctx, "mine@example.com", 1<<53, nil), service.CodeNotFound) // above every id drawn
		testkit.RequireCode(t, b.Accounts.APIKeyRevoke(b.Ctx, "nobody@example.com", mine.APIKeyID, nil), service.CodeNotFound)
		_, err = b.Accounts.APIKeyList(b.Ctx, "nobody@example.com")
		testkit.RequireCode(t, err, service.CodeNotFound)
		e := testkit.RequireCode(t, b.Accounts.APIKeyRevoke(b.Ctx, "not an email", mine.APIKeyID, nil), service.CodeInvalid)
		require.Equal(t, "path.email", e.Field)

		_, err = b.Accounts.Authenticate(b.Ctx, theirs.APIKey)
		require.NoError(t, err, "their key still works")
		require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM api_keys WHERE revoked_at IS NOT NULL`))
	})

	t.Run("LastUseIsWrittenAtMostOnceAMinute", func(t *testing.T) {
		t.Parallel()
		b := testkit.New(t) // no listener: every call reads the database
		res, err := b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: "used@example.com"})
		require.NoError(t, err)
		lastUse := func() time.Time {
			var at time.Time
			require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT last_used_at FROM api_keys WHERE id = $1`, res.APIKeyID).Scan(&at))
			return at
		}
		_, err = b.Accounts.Authenticate(b.Ctx, res.APIKey)
		require.NoError(t, err)
		first := lastUse()
		for range 5 {
			_, err = b.Accounts.Authenticate(b.Ctx, res.APIKey)
			require.NoError(t, err)
		}
		require.Equal(t, first, lastUse(), "uses within the minute write nothing")

		b.Exec(t, `UPDATE api_keys SET last_used_at = now() - interval '61 seconds' WHERE id = $1`, res.APIKeyID)
		stale := lastUse()
		_, err = b.Accounts.Authenticate(b.Ctx, res.APIKey)
		require.NoError(t, err)
		require.True(t, lastUse().After(stale))
	})
}

// TestAPIKeyRevocationAcrossInstances revokes a key through one instance
// while the other answers requests with it from its cache, concurrently.
func TestAPIKeyRevocationAcrossInstances(t *testing.T) {
	t.Parallel()
	b := testkit.New(t)
	_, other := testkit.Instance(t, b.Pool)
	testkit.ListenRevocations(t, b.Accounts)
	testkit.ListenRevocations(t, other)

	res, err := b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: "two@example.com"})
	require.NoError(t, err)
	for _, svc := range []*accounts.Service{b.Accounts, other} {
		_, err := svc.Authenticate(b.Ctx, res.APIKey)
		require.NoError(t, err)
	}

	// Riders keep using the key on the other instance while it is revoked.
	type outcome struct {
		at time.Time
		ok bool
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		outcomes []outcome
		stop     = make(chan struct{})
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				_, err := other.Authenticate(b.Ctx, res.APIKey)
				if err != nil && service.ErrorCode(err) != service.CodeUnauthenticated {
					t.Errorf("authenticate: %v", err)
					return
				}
				mu.Lock()
				outcomes = append(outcomes, outcome{at: start, ok: err == nil})
				mu.Unlock()
			}
		}()
	}
	require.NoError(t, b.Accounts.APIKeyRevoke(b.Ctx, "two@example.com", res.APIKeyID, nil))
	at := time.Now()
	require.Eventually(t, func() bool {
		_, err := other.Authenticate(b.Ctx, res.APIKey)
		return service.ErrorCode(err) == service.CodeUnauthenticated
	}, time.Second, time.Millisecond, "the other instance still accepts the key a second after its revocation")
	refusedAt := time.Now()
	// Keep the riders going a little past the first refusal.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(outcomes) > 0 && outcomes[len(outcomes)-1].at.After(refusedAt)
	}, 10*time.Second, time.Millisecond)
	close(stop)
	wg.Wait()

	after := 0
	for _, o := range outcomes {
		switch {
		case o.ok && o.at.Before(at):
			// Before the revocation was committed.
		case o.at.After(refusedAt):
			require.False(t, o.ok, "accepted after the other instance had refused it")
			after++
		case o.ok:
			require.WithinDuration(t, at, o.at, time.Second, "accepted more than a second after its revocation")
		}
	}
	require.NotZero(t, after)
	_, err = b.Accounts.Authenticate(b.Ctx, res.APIKey)
	testkit.RequireCode(t, err, service.CodeUnauthenticated)
}

// TestAPIKeyRevocationListenerLost: while the listener's connection is
// down, nothing is answered from the cache, and what was cached before is
// forgotten when it listens again.
func TestAPIKeyRevocationListenerLost(t *testing.T) {
	t.Parallel()
	b := testkit.New(t)
	testkit.ListenRevocations(t, b.Accounts)
	res, err := b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: "lost@example.com"})
	require.NoError(t, err)
	_, second, err := b.Accounts.APIKeyMint(b.Ctx, "lost@example.com", nil)
	require.NoError(t, err)
	for _, k := range []string{res.APIKey, second.Secret} {
		_, err := b.Accounts.Authenticate(b.Ctx, k)
		require.NoError(t, err)
	}

	// Revocations from now on are not announced, as if their notifications
	// were lost with the connection.
	b.Exec(t, `ALTER TABLE api_keys DISABLE TRIGGER USER`)
	var pid int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'atomicrides api key revocations'`).Scan(&pid))
	b.Exec(t, `SELECT pg_terminate_backend($1)`, pid)

	// The loss is noticed as soon as the server reports the termination;
	// from then on the cache is not used until the listener listens again on
	// a new connection, and it is emptied on the way.
	require.Eventually(t, func() bool {
		return !b.Accounts.APIKeyCacheTrusted() || b.Count(t, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'atomicrides api key revocations' AND pid <> $1`, pid) > 0
	}, 5*time.Second, time.Millisecond)
	b.Exec(t, `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, res.APIKeyID)
	_, err = b.Accounts.Authenticate(b.Ctx, res.APIKey)
	testkit.RequireCode(t, err, service.CodeUnauthenticated)

	b.Exec(t, `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, second.ID)
	require.Eventually(t, b.Accounts.APIKeyCacheTrusted, 10*time.Second, time.Millisecond, "the listener never reconnected")
	_, err = b.Accounts.Authenticate(b.Ctx, second.Secret)
	testkit.RequireCode(t, err, service.CodeUnauthenticated)
}
