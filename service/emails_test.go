package service_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
)

func TestNormalizeEmail(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"rider@example.com":         "rider@example.com",
		"Alice@Example.COM":         "alice@example.com",
		"A.B+Tag@Sub.Example.co.UK": "a.b+tag@sub.example.co.uk",
		// The domain is a host name: letters, digits and inner hyphens.
		"x@a-b.com":                             "x@a-b.com",
		"x@a--b.com":                            "x@a--b.com",
		"x@9.example":                           "x@9.example",
		"x@xn--bcher-kva.example":               "x@xn--bcher-kva.example", // an IDN in its ASCII form
		"x@" + strings.Repeat("a", 63) + ".com": "x@" + strings.Repeat("a", 63) + ".com",
		"x@localhost":                           "x@localhost",
	} {
		got, err := service.NormalizeEmail(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got)
	}
	for _, in := range []string{
		"", "a@", "not-an-email", "Name <a@example.com>", strings.Repeat("a", 244) + "@example.com",
		"alice\u202e@example.com", "bob\u200b@example.com", "bob\x07@example.com", "bob\x00@example.com", "bob\n@example.com",
		"b\u00f6b@example.com", "bob@\u4f8b\u3048.jp", "\xff@example.com",
		// Domains that are no host name.
		"x@-y.com", "x@y-.com", "x@y..com", "x@.y.com", "x@y.com.", "x@y.-com", "x@y.com-", "x@-",
		"x@y_z.com", "x@y!z.com", "x@y+z.com", "x@y~.com", "x@" + strings.Repeat("a", 64) + ".com",
	} {
		_, err := service.NormalizeEmail(in)
		e := testkit.RequireCode(t, err, service.CodeInvalid)
		require.Equal(t, "path.email", e.Field, in)
	}
}

func TestOneRiderPerMailbox(t *testing.T) {
	t.Parallel()

	t.Run("ConcurrentPutsInDifferentCasesCreateOneUser", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		emails := []string{"crowd@example.com", "Crowd@Example.com", "CROWD@EXAMPLE.COM", "crowd@EXAMPLE.com"}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			created int
			ids     = map[int64]bool{}
		)
		start := make(chan struct{})
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: emails[i%len(emails)]})
				mu.Lock()
				defer mu.Unlock()
				if !assertNoError(t, err) {
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
		require.Equal(t, 1, created)
		require.Len(t, ids, 1)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM users WHERE email = 'crowd@example.com'`))
	})

	t.Run("TheDatabaseRefusesTheSameMailboxInAnotherCase", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.Rider(t, "db@example.com", "tok_visa")
		_, err := b.Pool.Exec(b.Ctx, `INSERT INTO users (email, payment_source) VALUES ('DB@Example.com', 'tok_visa')`)
		require.ErrorContains(t, err, "users_email_lower")
	})

	t.Run("ARiderStoredInAnotherCaseIsFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// As a rider created before addresses were lower-cased.
		var id int64
		require.NoError(t, b.Pool.QueryRow(b.Ctx,
			`INSERT INTO users (email, payment_source) VALUES ('Legacy@Example.com', 'tok_visa') RETURNING id`).Scan(&id))
		res, err := b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: "legacy@example.com"})
		require.NoError(t, err)
		require.False(t, res.Created)
		require.Equal(t, id, res.User.ID)
		user, _, err := b.Accounts.APIKeyMint(b.Ctx, "LEGACY@example.com", nil)
		require.NoError(t, err)
		require.Equal(t, id, user.ID)
	})
}

// assertNoError reports err as a test failure from any goroutine.
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}
