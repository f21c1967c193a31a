package web_test

import (
	"crypto/sha256"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/openapi"
	"github.com/atomicrides/atomicrides/openapi/web"
)

// sessionCookie returns the value of bl's session cookie, "" without one.
func (bl *browserless) sessionCookie() string {
	u, err := url.Parse(bl.base + "/book")
	require.NoError(bl.t, err)
	for _, c := range bl.c.Jar.Cookies(u) {
		if c.Name == "atomicrides_book" {
			return c.Value
		}
	}
	return ""
}

// withCookie is a client that presents value as its session cookie, as a
// copy of a cookie taken from a browser would.
func withCookie(t *testing.T, base, value string) *browserless {
	bl := newBrowserless(t, base)
	u, err := url.Parse(base + "/book")
	require.NoError(t, err)
	bl.c.Jar.SetCookies(u, []*http.Cookie{{Name: "atomicrides_book", Value: value, Path: "/book"}})
	return bl
}

// signedIn reports whether GET /book answers as to a signed-in rider (a
// redirect to a fresh form) rather than with the sign-in form.
func (bl *browserless) signedIn() bool {
	bl.t.Helper()
	p := bl.do(http.MethodGet, "/book", nil, nil)
	if p.status == http.StatusSeeOther {
		return true
	}
	require.Contains(bl.t, p.body, `action="/book/signin"`)
	return false
}

func sha(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// The session cookie is a random session id, stored hashed, and never the
// API key; the session ends when its key is revoked, at sign-out and when
// it expires, whoever still holds a copy of the cookie.
func TestBookingSessions(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("the cookie is not the API key", func(t *testing.T) {
		apiKey := b.rider(t, "cookie@example.com", "")
		bl := newBrowserless(t, b.url)
		bl.signIn(apiKey)
		id := bl.sessionCookie()
		require.NotEmpty(t, id)
		require.NotContains(t, id, apiKey)
		require.NotContains(t, apiKey, id)
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM booking_sessions WHERE id_hash = $1`, sha(id)), "stored as its hash")
		require.Zero(t, b.Count(t, `SELECT count(*) FROM booking_sessions WHERE id_hash = $1::text::bytea`, id), "never as itself")
		require.True(t, bl.signedIn())
		other := newBrowserless(t, b.url)
		other.signIn(apiKey)
		require.NotEqual(t, id, other.sessionCookie(), "a new id per sign-in")
	})

	t.Run("a revoked key ends its sessions", func(t *testing.T) {
		apiKey := b.rider(t, "revoked@example.com", "")
		bl := newBrowserless(t, b.url)
		bl.signIn(apiKey)
		require.True(t, bl.signedIn())
		_, keyID, err := b.Accounts.AuthenticateKey(b.Ctx, apiKey)
		require.NoError(t, err)
		require.NoError(t, b.Accounts.APIKeyRevoke(b.Ctx, "revoked@example.com", keyID, nil))
		require.False(t, bl.signedIn())
		require.Empty(t, bl.sessionCookie(), "the dead cookie is cleared")
		p := newBrowserless(t, b.url).do(http.MethodPost, "/book/signin", url.Values{"api_key": {apiKey}}, sameSite)
		require.Equal(t, http.StatusUnauthorized, p.status, "a revoked key signs nobody in")
	})

	t.Run("a deleted key ends its sessions", func(t *testing.T) {
		apiKey := b.rider(t, "deleted@example.com", "")
		bl := newBrowserless(t, b.url)
		bl.signIn(apiKey)
		b.Exec(t, `DELETE FROM api_keys WHERE key_hash = $1`, sha(apiKey))
		require.False(t, bl.signedIn())
	})

	t.Run("sign-out ends the session", func(t *testing.T) {
		bl := newBrowserless(t, b.url)
		bl.signIn(b.rider(t, "signout@example.com", ""))
		id := bl.sessionCookie()
		csrf := bl.form().hidden(t, "csrf_token")
		out := bl.do(http.MethodPost, "/book/signout", url.Values{"csrf_token": {csrf}}, sameSite)
		require.Equal(t, http.StatusSeeOther, out.status)
		require.Zero(t, b.Count(t, `SELECT count(*) FROM booking_sessions WHERE id_hash = $1`, sha(id)))
		require.False(t, withCookie(t, b.url, id).signedIn(), "a copy of the cookie is worthless")
	})

	t.Run("expiry", func(t *testing.T) {
		bl := newBrowserless(t, b.url)
		bl.signIn(b.rider(t, "expiry@example.com", ""))
		id := bl.sessionCookie()
		expiresIn := func() float64 {
			var s float64
			require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT extract(epoch FROM expires_at - now()) FROM booking_sessions WHERE id_hash = $1`, sha(id)).Scan(&s))
			return s
		}
		require.InDelta(t, 12*3600, expiresIn(), 60, "12 hours unused")

		// Use moves the expiry forward...
		b.Exec(t, `UPDATE booking_sessions SET expires_at = now() + interval '1 hour' WHERE id_hash = $1`, sha(id))
		require.True(t, bl.signedIn())
		require.InDelta(t, 12*3600, expiresIn(), 60)
		// ...but never past 7 days from the sign-in.
		b.Exec(t, `UPDATE booking_sessions SET created_at = now() - interval '7 days' + interval '2 hours',
			expires_at = now() + interval '1 hour' WHERE id_hash = $1`, sha(id))
		require.True(t, bl.signedIn())
		require.InDelta(t, 2*3600, expiresIn(), 60)

		b.Exec(t, `UPDATE booking_sessions SET expires_at = now() - interval '1 second' WHERE id_hash = $1`, sha(id))
		require.False(t, bl.signedIn())
		// The next sign-in sweeps it away.
		newBrowserless(t, b.url).signIn(b.rider(t, "sweeper@example.com", ""))
		require.Zero(t, b.Count(t, `SELECT count(*) FROM booking_sessions WHERE id_hash = $1`, sha(id)))
	})

	t.Run("cookie attributes", func(t *testing.T) {
		bl := newBrowserless(t, b.url)
		p := bl.do(http.MethodPost, "/book/signin", url.Values{"api_key": {b.rider(t, "attrs@example.com", "")}}, sameSite)
		cookie := p.header.Get("Set-Cookie")
		require.Contains(t, cookie, "Max-Age=604800", "the browser keeps it for the session's absolute lifetime")
		require.NotContains(t, cookie, "Secure", "plain HTTP, no public https URL")
	})
}

// Behind a TLS-terminating proxy the request reaches Go over plain HTTP;
// an https PUBLIC_URL still makes the cookie Secure, also when it is cleared.
func TestBookingSessionSecureBehindProxy(t *testing.T) {
	t.Parallel()
	env := testkit.New(t)
	logger := slog.New(slog.DiscardHandler)
	pages := web.New(web.Config{Service: env.Service, Accounts: env.Accounts, Secret: "test-secret", Logger: logger, PublicURL: "https://rides.example"})
	url := testkit.ServeAPI(t, openapi.NewHandler(openapi.Config{Service: env.Service, Accounts: env.Accounts, Logger: logger, Pages: pages}))
	apiKey := env.Rider(t, "proxied@example.com", "").APIKey
	bl := newBrowserless(t, url)
	p := bl.do(http.MethodPost, "/book/signin", urlValues("api_key", apiKey), sameSite)
	require.Equal(t, http.StatusSeeOther, p.status)
	require.Contains(t, p.header.Get("Set-Cookie"), "; Secure")
	cleared := withCookie(t, url, "ars_unknown").do(http.MethodGet, "/book", nil, nil)
	require.True(t, strings.Contains(cleared.header.Get("Set-Cookie"), "Max-Age=0") && strings.Contains(cleared.header.Get("Set-Cookie"), "; Secure"))
}

func urlValues(k, v string) url.Values { return url.Values{k: {v}} }
