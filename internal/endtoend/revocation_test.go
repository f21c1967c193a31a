package endtoend

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// TestRevocationAcrossProcesses: two serve processes on one database; the
// same mailbox in two cases is one rider, and a key revoked through one
// process is refused by the other, which had it cached, within a second.
// Through PgBouncer in transaction pooling mode too: the listener hears
// the revocation on DATABASE_DIRECT_URL.
func TestRevocationAcrossProcesses(t *testing.T) {
	t.Parallel()
	t.Run("Direct", func(t *testing.T) {
		t.Parallel()
		revocationAcrossProcesses(t, func(url string) []string { return []string{"DATABASE_URL=" + url} })
	})
	t.Run("ThroughPgBouncer", func(t *testing.T) {
		t.Parallel()
		bouncer := testkit.PgBouncer(t, 4)
		revocationAcrossProcesses(t, func(url string) []string {
			cfg, err := pgx.ParseConfig(url)
			require.NoError(t, err)
			return []string{"DATABASE_URL=" + bouncer.URL(cfg.Database), "DATABASE_POOLER=pgbouncer", "DATABASE_DIRECT_URL=" + url}
		})
	})
}

// revocationAcrossProcesses runs the test with the database settings db
// gives for a fresh database's URL.
func revocationAcrossProcesses(t *testing.T, db func(url string) []string) {
	fake := testkit.NewStripe(t)
	_, smtpURL := testkit.NewMailSink(t)
	env := append(db(dbtest.NewURL(t)), "ADMIN_TOKEN=revocation-admin-token-0123456789abcdef0123",
		"STRIPE_API_BASE="+fake.URL, "STRIPE_SECRET_KEY=sk_test_revocation", "SMTP_URL="+smtpURL)
	a := startServe(t, env...)
	b := startServe(t, env...)

	status, body := a.do(t, http.MethodPut, "/users/Mailbox@Example.COM", "revocation-admin-token-0123456789abcdef0123", nil, "")
	require.Equal(t, http.StatusCreated, status, "%s", body)
	var created struct {
		User     struct{ ID int64 } `json:"user"`
		APIKey   string             `json:"api_key"`
		APIKeyID int64              `json:"api_key_id"`
	}
	require.NoError(t, json.Unmarshal(body, &created))
	status, body = b.do(t, http.MethodPut, "/users/mailbox@example.com", "revocation-admin-token-0123456789abcdef0123", nil, "")
	require.Equal(t, http.StatusOK, status, "the same mailbox in another case: %s", body)
	var again struct {
		User struct{ ID int64 } `json:"user"`
	}
	require.NoError(t, json.Unmarshal(body, &again))
	require.Equal(t, created.User.ID, again.User.ID)

	for _, in := range []*instance{a, b} {
		status, body := in.do(t, http.MethodGet, "/rides/1", created.APIKey, nil, "")
		require.Equal(t, http.StatusNotFound, status, "%s", body)
	}
	status, body = a.do(t, http.MethodDelete, "/users/mailbox@example.com/api_keys/"+strconv.FormatInt(created.APIKeyID, 10), "revocation-admin-token-0123456789abcdef0123", nil, "")
	require.Equal(t, http.StatusNoContent, status, "%s", body)
	require.Eventually(t, func() bool {
		status, _ := b.do(t, http.MethodGet, "/rides/1", created.APIKey, nil, "")
		return status == http.StatusUnauthorized
	}, time.Second, 5*time.Millisecond, "the other process still accepts the key a second after its revocation")
	status, _ = a.do(t, http.MethodGet, "/rides/1", created.APIKey, nil, "")
	require.Equal(t, http.StatusUnauthorized, status)
}
