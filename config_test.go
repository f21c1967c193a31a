package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/atomicrides/atomicrides/internal/binrun"
)

// TestInvalidConfiguration starts the built binary with each variable set
// to something invalid: the process exits non-zero with one line that names
// the variable, no panic, and none of the secrets it was given. serve runs
// with -dev, so that only the variable under test is wrong.
func TestInvalidConfiguration(t *testing.T) {
	t.Parallel()
	const (
		dbPassword   = "s3cret-db-pw"
		smtpPassword = "s3cret-smtp-pw"
		stripeSecret = "s3cretStripeKey"
		adminSecret  = "s3cret-admin"
	)
	secrets := []string{dbPassword, smtpPassword, stripeSecret, adminSecret}
	keyFile, hostKey := sshKeyFile(t)
	inbox := func(except string) []string {
		var env []string
		for name, v := range map[string]string{
			"SETTLEMENT_SFTP_URL": "sftp://bank@127.0.0.1:2222/inbox", "SETTLEMENT_SFTP_HOST_KEY": hostKey,
			"SETTLEMENT_SFTP_KEY_FILE": keyFile,
		} {
			if name != except {
				env = append(env, name+"="+v)
			}
		}
		return env
	}
	for _, c := range []struct {
		name, value string
		extra       []string // other variables, valid
		says        string
		args        []string // the command; default serve -dev
	}{
		{"DATABASE_URL", "postgres://rider:" + dbPassword + "@db.example:notaport/rides", nil, "not a valid PostgreSQL connection string", nil},
		{"DATABASE_URL", "postgres://rider:" + dbPassword + "@[::1/rides", nil, "not a valid PostgreSQL connection string", nil},
		{"DATABASE_POOLER", "pgpool", nil, "is not a pooler", nil},
		{"DATABASE_DIRECT_URL", "", []string{"DATABASE_POOLER=pgbouncer"}, "not set: with DATABASE_POOLER=pgbouncer", nil},
		{"DATABASE_DIRECT_URL", "postgres://rider:" + dbPassword + "@[::1/rides", nil, "not a valid PostgreSQL connection string", nil},
		{"DATABASE_URL", "postgres://rider:" + dbPassword + "@127.0.0.1:1/rides?default_query_exec_mode=describe_exec",
			[]string{"DATABASE_POOLER=pgbouncer", "DATABASE_DIRECT_URL=postgres://127.0.0.1:1/rides"}, "does not work through PgBouncer's transaction pooling", nil},
		{"ADDR", "nowhere", nil, "not a listen address", nil},
		{"ADMIN_TOKEN", adminSecret, nil, "too short", nil},
		{"ADMIN_TOKEN", adminSecret + " with spaces in it, long enough", nil, "printable ASCII", nil},
		{"PUBLIC_URL", "rides.example.com", nil, "absolute http or https URL", nil},
		{"METRICS_ADDR", "localhost", nil, "not a listen address", nil},
		{"PPROF_ADDR", "127.0.0.1:99999", nil, "not a listen address", nil},
		{"STRIPE_SECRET_KEY", "pk_live_" + stripeSecret, nil, "not a Stripe secret key", nil},
		{"STRIPE_SECRET_KEY", "sk_live_" + stripeSecret + "\n", nil, "not a Stripe secret key", nil},
		{"STRIPE_API_BASE", "ftp://stripe.example", nil, "absolute http or https URL", nil},
		{"STRIPE_TIMEOUT", "bogus", nil, "not a positive duration", nil},
		{"PROCESSORS", "stripe,paypal", nil, "comma-separated list of stripe and adyen", nil},
		{"PROCESSORS", "adyen,adyen", nil, "each once", nil},
		{"ADYEN_API_KEY", "key with spaces", nil, "not an Adyen API key", nil},
		{"ADYEN_MERCHANT_ACCOUNT", "Merchant/Account", nil, "merchant account name", nil},
		{"ADYEN_API_BASE", "ftp://adyen.example", nil, "absolute http or https URL", nil},
		{"ADYEN_HMAC_KEY", "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056,not-hex", nil, "key 2 is not an HMAC key", nil},
		{"ADYEN_HMAC_KEY", "abc", nil, "key 1 is not an HMAC key", nil},
		{"STRIPE_WEBHOOK_SECRET", "sk_live_" + stripeSecret, nil, "secret 1 is not a webhook signing secret", nil},
		{"STRIPE_WEBHOOK_SECRET", "whsec_ok,whsec_" + stripeSecret + "!", nil, "secret 2 is not a webhook signing secret", nil},
		{"SMTP_URL", "smtp://mailer:" + smtpPassword + "@mail.example:25%zz", nil, "not a URL", nil},
		{"SMTP_URL", "smtp://mailer:" + smtpPassword + "@:25", nil, "no host", nil},
		{"SMTP_URL", "https://mailer:" + smtpPassword + "@mail.example", nil, "want smtp or smtps", nil},
		{"SMTP_URL", "smtp://mailer:" + smtpPassword + "@mail.example?starttls=maybe", nil, "starttls", nil},
		{"MAIL_FROM", "not an address", nil, "not an email address", nil},
		{"MAIL_DIR", os.DevNull, nil, "is not a directory", nil},
		{"MAIL_DIR", "receipts\tdir", nil, "holds control characters", nil},
		{"LEASE", "1s", nil, "does not outlast the Stripe budget", nil},
		{"LEASE", "soon", nil, "not a positive duration", nil},
		{"COMPLETER_IDLE", "-5m", nil, "not a positive duration", nil},
		{"KEY_RETENTION", "1h", nil, "must exceed Stripe's 24h0m0s idempotency window", nil},
		{"ORPHAN_REFUND_AFTER", "12h", nil, "must exceed Stripe's 24h0m0s idempotency window", nil},
		{"ORPHAN_REFUND_AFTER", "later", nil, "not a positive duration", nil},
		{"ORPHAN_REFUND_AFTER", "20s", []string{"STRIPE_KEY_WINDOW=30s", "STRIPE_API_BASE=http://127.0.0.1:12111"}, "must exceed Stripe's 30s idempotency window", nil},
		{"STRIPE_KEY_WINDOW", "30s", nil, "only for a Stripe-compatible test API named by STRIPE_API_BASE", nil},
		{"STRIPE_KEY_WINDOW", "30s", []string{"STRIPE_API_BASE=https://api.stripe.com"}, "only for a Stripe-compatible test API", nil},
		{"STRIPE_KEY_WINDOW", "a day", nil, "not a positive duration", nil},
		{"EVENTS_PASS_INTERVAL", "often", nil, "not a positive duration", nil},
		{"COMPLETER_INTERVAL", "0s", nil, "not a positive duration", nil},
		{"REAPER_INTERVAL", "hourly", nil, "not a positive duration", nil},
		{"RECONCILE_INTERVAL", "daily", nil, "not a positive duration", nil},
		{"JOB_TIMEOUT", "forever", nil, "not a positive duration", nil},
		{"JOB_RESCUE_AFTER", "2m", []string{"JOB_TIMEOUT=5m"}, "must outlast JOB_TIMEOUT (5m0s)", nil},
		{"JOB_RESCUE_AFTER", "30s", nil, "must outlast JOB_TIMEOUT (1m0s)", nil},
		{"OTEL_TRACES_EXPORTER", "bogus", nil, "want otlp or none", nil},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon", []string{"OTEL_TRACES_EXPORTER=otlp"}, "want http/protobuf or grpc", nil},
		{"RATE_LIMIT_WRITES", "50", nil, "want QUOTA/WINDOW", nil},
		{"RATE_LIMIT_READS", "0/10s", nil, "not a whole number from 1 to 1000000", nil},
		{"RATE_LIMIT_AUTH_FAILURES", "20/500ms", nil, "not a duration from 1s to 24h", nil},
		{"RATE_LIMIT_IN_FLIGHT", "0", nil, "want a whole number of requests from 1 to 100000, or off", nil},
		{"LOAD_SHED_IN_FLIGHT", "lots", nil, "want auto, a whole number of requests from 1 to 100000, or off", nil},
		{"LOAD_SHED_RESERVED", "0.25", nil, "no longer read: the admission limit learns", nil},
		{"LOAD_SHED_DB_WAIT", "500ms", nil, "no longer read: the admission limit learns", nil},
		{"REDIS_URL", "http://cache:" + dbPassword + "@redis.example", nil, "not a valid redis:// or rediss:// URL", nil},
		{"SETTLEMENT_SFTP_URL", "https://bank@sftp.example/inbox", inbox("SETTLEMENT_SFTP_URL"), "the scheme must be sftp", nil},
		{"SETTLEMENT_SFTP_URL", "sftp://sftp.example/inbox", inbox("SETTLEMENT_SFTP_URL"), "a user is required", nil},
		{"SETTLEMENT_SFTP_HOST_KEY", "AAAAC3NzaC1lZDI1NTE5", inbox("SETTLEMENT_SFTP_HOST_KEY"), "not a public key", nil},
		{"SETTLEMENT_SFTP_HOST_KEY", "", inbox("SETTLEMENT_SFTP_HOST_KEY"), "not set", nil},
		{"SETTLEMENT_SFTP_KEY_FILE", os.DevNull, inbox("SETTLEMENT_SFTP_KEY_FILE"), "not a private key", nil},
		{"SETTLEMENT_SFTP_KEY_FILE", "/nonexistent/id_ed25519", inbox("SETTLEMENT_SFTP_KEY_FILE"), "cannot read it", nil},
		{"SETTLEMENT_INTERVAL", "hourly", nil, "not a positive duration", nil},
		{"SETTLEMENT_MAX_AGE", "3 days", nil, "not a positive duration", nil},
		{"FAKESTRIPE_ADDR", "12111", nil, "not a listen address", []string{"fakestripe"}},
		{"FAKEADYEN_ADDR", "12112", nil, "not a listen address", []string{"fakeadyen"}},
		{"PROCESSOR_CIRCUIT_OPEN_FOR", "0s", nil, "not a positive duration", nil},
		{"MAILSINK_ADDR", "host:port", nil, "not a listen address", []string{"mailsink"}},
		{"ATOMICRIDES_URL", "localhost:8080", []string{"ATOMICRIDES_API_KEY=ar_key"}, "absolute http or https URL", []string{"book", "--from", "1,2", "--to", "3,4"}},
		// Without -dev, what serve reaches must be configured.
		{"STRIPE_SECRET_KEY", "", []string{"SMTP_URL=smtp://127.0.0.1:1"}, "not set", []string{"serve"}},
		{"SMTP_URL", "", []string{"STRIPE_SECRET_KEY=sk_test_config"}, "not set", []string{"serve"}},
		{"ADYEN_API_KEY", "", []string{"STRIPE_SECRET_KEY=sk_test_config", "SMTP_URL=smtp://127.0.0.1:1", "PROCESSORS=stripe,adyen"}, "not set", []string{"serve"}},
		{"ADYEN_MERCHANT_ACCOUNT", "", []string{"STRIPE_SECRET_KEY=sk_test_config", "SMTP_URL=smtp://127.0.0.1:1",
			"ADYEN_HMAC_KEY=44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"}, "ADYEN_HMAC_KEY turns Adyen's notifications on", []string{"serve"}},
	} {
		env := bareEnv(append([]string{unreachableDB, c.name + "=" + c.value}, c.extra...)...)
		args := c.args
		if args == nil {
			args = []string{"serve", "-dev"}
		}
		r := binrun.RunT(t, env, args...)
		what := fmt.Sprintf("%v with %s=%q", args, c.name, c.value)
		require.NotZero(t, r.ExitCode, what)
		require.Empty(t, r.Stdout, what)
		require.Equal(t, 1, strings.Count(r.Stderr, "\n"), "%s: one line: %q", what, r.Stderr)
		require.True(t, strings.HasPrefix(r.Stderr, "atomicrides: "+c.name+": "), "%s: %q", what, r.Stderr)
		require.Contains(t, r.Stderr, c.says, what)
		require.NotContains(t, strings.ToLower(r.Stderr), "panic", what)
		for _, secret := range secrets {
			require.NotContains(t, r.Stderr, secret, what)
		}
	}

	// Several invalid variables: one line each.
	r := binrun.RunT(t, []string{unreachableDB, "LEASE=x", "STRIPE_TIMEOUT=y"}, "serve", "-dev")
	require.Equal(t, 1, r.ExitCode)
	require.Equal(t, "atomicrides: STRIPE_TIMEOUT: \"y\" is not a positive duration: want e.g. 90s, 5m or 72h\n"+
		"atomicrides: LEASE: \"x\" is not a positive duration: want e.g. 90s, 5m or 72h\n", r.Stderr)

	// A valid URL whose server does not answer: the failure to connect
	// does not repeat the password either.
	r = binrun.RunT(t, []string{"DATABASE_URL=postgres://rider:" + dbPassword + "@127.0.0.1:1/rides?connect_timeout=2"}, "serve", "-dev")
	require.Equal(t, 1, r.ExitCode)
	require.Contains(t, r.Stderr, "connect to the database")
	require.NotContains(t, r.Stderr, dbPassword)
	require.NotContains(t, strings.ToLower(r.Stderr), "panic")
}

// TestMailDir: MAIL_DIR defaults to .mail, takes a directory as given, and
// off keeps no file.
func TestMailDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for value, want := range map[string]string{"": defaultMailDir, "off": "", dir: dir, dir + "/new": dir + "/new"} {
		cfg, err := loadConfig(func(name string) string {
			if name == "MAIL_DIR" {
				return value
			}
			return ""
		}, backends{})
		require.NoError(t, err, "MAIL_DIR=%q", value)
		require.Equal(t, want, cfg.MailDir, "MAIL_DIR=%q", value)
	}
}

// TestWebhookSecrets: STRIPE_WEBHOOK_SECRET lists one or more signing
// secrets, every one of which verifies deliveries (a rotation).
func TestWebhookSecrets(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(func(name string) string {
		if name == "STRIPE_WEBHOOK_SECRET" {
			return "whsec_new_1, whsec_old_2"
		}
		return ""
	}, backends{})
	require.NoError(t, err)
	require.Equal(t, []string{"whsec_new_1", "whsec_old_2"}, cfg.StripeWebhookSecrets)
}

func TestAdyenHMACKeys(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(func(name string) string {
		if name == "ADYEN_HMAC_KEY" {
			return "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056, 00112233445566778899aabbccddeeff"
		}
		return ""
	}, backends{})
	require.NoError(t, err)
	require.Equal(t, []string{"44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056", "00112233445566778899aabbccddeeff"}, cfg.AdyenHMACKeys)
}

// TestStripeKeyRule: STRIPE_SECRET_KEY takes secret and restricted keys,
// live or test (the tests' and the fake's sk_test_… keys among them), and
// nothing that cannot charge or that a copy and paste has damaged.
func TestStripeKeyRule(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"sk_test_fake", "sk_test_money", "sk_test_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_51Habc", "rk_live_abc_DEF_123", "rk_test_x"} {
		require.True(t, validStripeKey(key), key)
	}
	for _, key := range []string{"", "sk_test_", "sk_", "pk_live_abc", "pk_test_abc", "whsec_abc", "sk_test_abc def", "sk_test_abc\n", " sk_test_abc", "sk_test_abc-def", "sk_test_ä"} {
		require.False(t, validStripeKey(key), "%q", key)
	}
}

// sshKeyFile writes a throwaway ed25519 private key for t and returns its
// path and its public key in the authorized_keys format.
func sshKeyFile(t *testing.T) (file, public string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	block, err := ssh.MarshalPrivateKey(priv, "")
	require.NoError(t, err)
	file = filepath.Join(t.TempDir(), "id_ed25519")
	require.NoError(t, os.WriteFile(file, pem.EncodeToMemory(block), 0o600))
	key, err := ssh.NewPublicKey(pub)
	require.NoError(t, err)
	return file, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
}
