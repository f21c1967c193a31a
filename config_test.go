package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestInvalidConfiguration starts the built binary with each variable set
// to something invalid: the process exits non-zero with one line that names
// the variable, no panic, and none of the secrets it was given.
func TestInvalidConfiguration(t *testing.T) {
	t.Parallel()
	const (
		dbPassword   = "s3cret-db-pw"
		smtpPassword = "s3cret-smtp-pw"
		stripeSecret = "s3cretStripeKey"
		adminSecret  = "s3cret-admin"
	)
	secrets := []string{dbPassword, smtpPassword, stripeSecret, adminSecret}
	for _, c := range []struct {
		name, value string
		extra       []string // other variables, valid
		says        string
	}{
		{"DATABASE_URL", "postgres://rider:" + dbPassword + "@db.example:notaport/rides", nil, "not a valid PostgreSQL connection string"},
		{"DATABASE_URL", "postgres://rider:" + dbPassword + "@[::1/rides", nil, "not a valid PostgreSQL connection string"},
		{"ADDR", "nowhere", nil, "not a listen address"},
		{"ADMIN_TOKEN", adminSecret, nil, "too short"},
		{"ADMIN_TOKEN", adminSecret + " with spaces in it, long enough", nil, "printable ASCII"},
		{"PUBLIC_URL", "rides.example.com", nil, "absolute http or https URL"},
		{"METRICS_ADDR", "localhost", nil, "not a listen address"},
		{"PPROF_ADDR", "127.0.0.1:99999", nil, "not a listen address"},
		{"STRIPE_SECRET_KEY", "pk_live_" + stripeSecret, nil, "not a Stripe secret key"},
		{"STRIPE_SECRET_KEY", "sk_live_" + stripeSecret + "\n", nil, "not a Stripe secret key"},
		{"STRIPE_API_BASE", "ftp://stripe.example", nil, "absolute http or https URL"},
		{"STRIPE_TIMEOUT", "bogus", nil, "not a positive duration"},
		{"SMTP_URL", "smtp://mailer:" + smtpPassword + "@mail.example:25%zz", nil, "not a URL"},
		{"SMTP_URL", "smtp://mailer:" + smtpPassword + "@:25", nil, "no host"},
		{"SMTP_URL", "https://mailer:" + smtpPassword + "@mail.example", nil, "want smtp or smtps"},
		{"SMTP_URL", "smtp://mailer:" + smtpPassword + "@mail.example?starttls=maybe", nil, "starttls"},
		{"MAIL_FROM", "not an address", nil, "not an email address"},
		{"LEASE", "1s", nil, "does not outlast the Stripe budget"},
		{"LEASE", "soon", nil, "not a positive duration"},
		{"COMPLETER_IDLE", "-5m", nil, "not a positive duration"},
		{"KEY_RETENTION", "1h", nil, "must exceed Stripe's 24h0m0s idempotency window"},
		{"COMPLETER_INTERVAL", "0s", nil, "not a positive duration"},
		{"REAPER_INTERVAL", "hourly", nil, "not a positive duration"},
		{"JOB_TIMEOUT", "forever", nil, "not a positive duration"},
		{"JOB_TIMEOUT", "2h", nil, "JOB_RESCUE_AFTER"},
		{"JOB_RESCUE_AFTER", "2m", []string{"JOB_TIMEOUT=5m"}, "must outlast JOB_TIMEOUT"},
		{"FAKESTRIPE_ADDR", "12111", nil, "not a listen address"},
		{"MAILSINK_ADDR", "host:port", nil, "not a listen address"},
		{"ATOMICRIDES_URL", "localhost:8080", nil, "absolute http or https URL"},
	} {
		env := append([]string{unreachableDB, c.name + "=" + c.value}, c.extra...)
		r := runBinary(t, env, "serve")
		what := c.name + "=" + c.value
		require.NotZero(t, r.code, what)
		require.Empty(t, r.stdout, what)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "%s: one line: %q", what, r.stderr)
		require.True(t, strings.HasPrefix(r.stderr, "atomicrides: "+c.name+": "), "%s: %q", what, r.stderr)
		require.Contains(t, r.stderr, c.says, what)
		require.NotContains(t, strings.ToLower(r.stderr), "panic", what)
		for _, secret := range secrets {
			require.NotContains(t, r.stderr, secret, what)
		}
	}

	// Several invalid variables: one line each.
	r := runBinary(t, []string{unreachableDB, "LEASE=x", "STRIPE_TIMEOUT=y"}, "serve")
	require.Equal(t, 1, r.code)
	require.Equal(t, "atomicrides: STRIPE_TIMEOUT: \"y\" is not a positive duration: want e.g. 90s, 5m or 72h\n"+
		"atomicrides: LEASE: \"x\" is not a positive duration: want e.g. 90s, 5m or 72h\n", r.stderr)

	// A valid URL whose server does not answer: the failure to connect
	// does not repeat the password either.
	r = runBinary(t, []string{"DATABASE_URL=postgres://rider:" + dbPassword + "@127.0.0.1:1/rides?connect_timeout=2"}, "serve")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "connect to the database")
	require.NotContains(t, r.stderr, dbPassword)
	require.NotContains(t, strings.ToLower(r.stderr), "panic")
}
