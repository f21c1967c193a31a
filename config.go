package main

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	netmail "net/mail"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/atomicrides/atomicrides/internal/limits"
	"github.com/atomicrides/atomicrides/jobs"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/adyen"
	"github.com/atomicrides/atomicrides/service/bankinbox"
	"github.com/atomicrides/atomicrides/service/mail"
	"github.com/atomicrides/atomicrides/service/payments"
)

// config is the process's configuration: every environment variable the
// binary reads, read and checked here and nowhere else (docs/operations.md,
// "Configuration", documents them). A variable that is unset stays zero, and
// the package that owns the setting applies its default; the few defaults
// below belong to the binary itself.
//
// An invalid variable is a configError that names it and says what is
// wrong, and never repeats a secret: a password in DATABASE_URL or SMTP_URL,
// STRIPE_SECRET_KEY or ADMIN_TOKEN.
type config struct {
	// DatabaseURL is DATABASE_URL; empty lets pgenv find or start a
	// development server.
	DatabaseURL string
	// DatabasePooler is DATABASE_POOLER: poolerNone (unset) when
	// DATABASE_URL reaches PostgreSQL itself, poolerPgBouncer when it
	// reaches a PgBouncer in transaction pooling mode (see poolConfig).
	DatabasePooler string
	// DatabaseDirectURL is DATABASE_DIRECT_URL: PostgreSQL itself, for what
	// needs a session of its own (LISTEN, the migrations' advisory lock).
	// Required with a pooler; unset otherwise, DATABASE_URL serves.
	DatabaseDirectURL string
	// Addr is the API's listen address (ADDR).
	Addr string
	// AdminToken is ADMIN_TOKEN, or one generated for this run.
	AdminToken string
	// DispatchToken is DISPATCH_TOKEN: the dispatch side's credential,
	// which completes and cancels trips; "" when unset (no request is the
	// dispatch side's).
	DispatchToken string
	// Capture is CAPTURE: when a new booking's money is taken, booking
	// (the default) or trip.
	Capture service.Capture
	// HoldExpiry is HOLD_EXPIRY: how long an unended trip's hold is kept.
	HoldExpiry time.Duration
	// AdminTokenGenerated says that AdminToken was generated.
	AdminTokenGenerated bool
	// PublicURL is PUBLIC_URL: where riders reach the service.
	PublicURL string
	// MetricsAddr and PprofAddr are METRICS_ADDR and PPROF_ADDR; empty
	// serves neither.
	MetricsAddr, PprofAddr string

	// StripeSecretKey and StripeAPIBase are STRIPE_SECRET_KEY and
	// STRIPE_API_BASE (empty: Stripe's own API). A command that reaches
	// Stripe refuses to run without the key, unless it runs with -dev,
	// which uses the built-in fake Stripe instead.
	StripeSecretKey, StripeAPIBase string
	// StripeTimeout is STRIPE_TIMEOUT.
	StripeTimeout time.Duration
	// StripeKeyWindow is STRIPE_KEY_WINDOW: how long the Stripe API
	// remembers an idempotency key, zero (unset) for Stripe's 24 hours.
	// Another value is a development convenience, accepted only with a
	// STRIPE_API_BASE that is not Stripe's (a test API such as fakestripe
	// -key-window), and logged loudly at start.
	StripeKeyWindow time.Duration
	// Processors is PROCESSORS: the payment processors in order of
	// preference, e.g. [stripe adyen]; default stripe alone.
	Processors []string
	// ProcessorsSet says that PROCESSORS was set; 'serve -dev' without it
	// routes to the fake Stripe, then the fake Adyen.
	ProcessorsSet bool
	// AdyenAPIKey, AdyenMerchantAccount and AdyenAPIBase are
	// ADYEN_API_KEY, ADYEN_MERCHANT_ACCOUNT and ADYEN_API_BASE (empty:
	// Adyen's test Checkout API). Required when PROCESSORS names adyen,
	// unless -dev runs the built-in fake Adyen.
	AdyenAPIKey, AdyenMerchantAccount, AdyenAPIBase string
	// CircuitOpenFor is PROCESSOR_CIRCUIT_OPEN_FOR: how long an open
	// processor circuit keeps new bookings away before real traffic tries
	// it again (0: the service's default).
	CircuitOpenFor time.Duration
	// StripeWebhookSecrets are STRIPE_WEBHOOK_SECRET, comma-separated: the
	// signing secrets of the webhook endpoint, several during a rotation.
	// None: webhooks are off (POST /webhooks/stripe answers 404), unless
	// serve -dev configures the built-in fake's.
	StripeWebhookSecrets []string
	// AdyenHMACKeys are ADYEN_HMAC_KEY, comma-separated: the HMAC keys
	// (hex) of Adyen's standard notifications, several during a rotation.
	// None: Adyen notifications are off (POST /webhooks/adyen answers
	// 404), unless serve -dev configures the built-in fake's.
	AdyenHMACKeys []string
	// SMTPURL is SMTP_URL. A command that sends mail refuses to run
	// without it, unless it runs with -dev, which sends receipts to the
	// built-in mail sink (writing them to MailDir) instead.
	SMTPURL string
	// MailFrom is MAIL_FROM.
	MailFrom string
	// MailDir is MAIL_DIR: where the built-in mail sink writes each
	// message as an .eml file; "" (MAIL_DIR=off) writes no file.
	MailDir string

	// Service and job timings: LEASE, COMPLETER_IDLE, KEY_RETENTION,
	// COMPLETER_INTERVAL, REAPER_INTERVAL, RECONCILE_INTERVAL, JOB_TIMEOUT,
	// JOB_RESCUE_AFTER, ORPHAN_REFUND_AFTER, EVENTS_PASS_INTERVAL,
	// ACTION_DEADLINE.
	Lease, CompleterIdle, KeyRetention                   time.Duration
	ActionDeadline                                       time.Duration
	OrphanRefundAfter, EventsPassInterval                time.Duration
	CompleterInterval, ReaperInterval, ReconcileInterval time.Duration
	JobTimeout, JobRescueAfter                           time.Duration

	// RateLimitWrites, RateLimitReads and RateLimitAuthFailures are
	// RATE_LIMIT_WRITES, RATE_LIMIT_READS and RATE_LIMIT_AUTH_FAILURES
	// (QUOTA/WINDOW or off); nil is unset, for package limits' default.
	RateLimitWrites, RateLimitReads, RateLimitAuthFailures *limits.Policy
	// RateLimitInFlight is RATE_LIMIT_IN_FLIGHT, each rider's limit of
	// requests in flight: 0 unset (limits.DefaultRiderConcurrency), a
	// number, or -1 off.
	RateLimitInFlight int
	// ShedInFlight is LOAD_SHED_IN_FLIGHT: 0 auto (the admission limit is
	// learnt; the default), a fixed limit, or -1 off.
	ShedInFlight int
	// RedisURL is REDIS_URL: when set, the rate limits are shared by every
	// replica through this Redis.
	RedisURL string
	// SettlementInbox is the bank's SFTP inbox of settlement files, from
	// SETTLEMENT_SFTP_URL, SETTLEMENT_SFTP_HOST_KEY and
	// SETTLEMENT_SFTP_KEY_FILE (all three or none); nil turns fetching off.
	SettlementInbox *bankinbox.Config
	// SettlementInterval and SettlementMaxAge are SETTLEMENT_INTERVAL and
	// SETTLEMENT_MAX_AGE.
	SettlementInterval, SettlementMaxAge time.Duration

	// FakeStripeAddr, FakeAdyenAddr and MailSinkAddr are where the
	// fakestripe, fakeadyen and mailsink commands listen by default
	// (FAKESTRIPE_ADDR, FAKEADYEN_ADDR, MAILSINK_ADDR).
	FakeStripeAddr, FakeAdyenAddr, MailSinkAddr string
}

// bookConfig is the configuration of the book command, a client of the
// API: it reads only its own variables, so that a server's settings (valid
// or not) never stand in its way.
type bookConfig struct {
	// APIKey is ATOMICRIDES_API_KEY, the rider's API key.
	APIKey string
	// URL is ATOMICRIDES_URL, the server.
	URL string
}

// backends says what a command reaches: the payment processor, the mailer,
// and whether the built-in fakes may stand in for them (dev, serve -dev).
// loadConfig refuses a command that reaches one whose configuration is
// missing, so that production never runs on a fake by accident.
type backends struct {
	stripe, mail, dev bool
}

// Defaults that belong to the binary rather than to a package.
const (
	defaultAddr           = "127.0.0.1:8080"
	defaultMailDir        = ".mail"
	defaultFakeStripeAddr = "127.0.0.1:12111"
	defaultFakeAdyenAddr  = "127.0.0.1:12112"
	defaultMailSinkAddr   = "127.0.0.1:2525"
	defaultBookURL        = "http://127.0.0.1:8080"
)

// stripeKeyPrefixes are the kinds of Stripe key that may charge: secret
// (sk_) and restricted (rk_) keys, live or test. Publishable keys (pk_)
// cannot.
var stripeKeyPrefixes = []string{"sk_live_", "sk_test_", "rk_live_", "rk_test_"}

// configError is an invalid environment variable. The process prints it as
// one line and exits 1.
type configError struct {
	name string
	msg  string
}

func (e *configError) Error() string {
	if e.name == "" { // msg names the variable itself
		return e.msg
	}
	return e.name + ": " + e.msg
}

func invalid(name, format string, args ...any) error {
	return &configError{name: name, msg: fmt.Sprintf(format, args...)}
}

// configFromEnv reads and checks the configuration of a command that
// reaches needs from the process's environment.
func configFromEnv(needs backends) (*config, error) { return loadConfig(os.Getenv, needs) }

// loadConfig reads and checks the configuration of a command that reaches
// needs from getenv. It reports every invalid or missing variable, each on
// its own.
func loadConfig(getenv func(string) string, needs backends) (*config, error) {
	r := &envReader{getenv: getenv}
	c := &config{
		DatabaseURL:          r.databaseURL("DATABASE_URL"),
		DatabasePooler:       r.pooler("DATABASE_POOLER"),
		DatabaseDirectURL:    r.databaseURL("DATABASE_DIRECT_URL"),
		Addr:                 r.addr("ADDR", defaultAddr),
		PublicURL:            r.httpURL("PUBLIC_URL"),
		MetricsAddr:          r.addr("METRICS_ADDR", ""),
		PprofAddr:            r.addr("PPROF_ADDR", ""),
		StripeSecretKey:      r.stripeKey("STRIPE_SECRET_KEY"),
		StripeAPIBase:        r.httpURL("STRIPE_API_BASE"),
		StripeTimeout:        r.duration("STRIPE_TIMEOUT"),
		StripeKeyWindow:      r.duration("STRIPE_KEY_WINDOW"),
		Processors:           r.processors("PROCESSORS"),
		AdyenAPIKey:          r.adyenKey("ADYEN_API_KEY"),
		AdyenAPIBase:         r.httpURL("ADYEN_API_BASE"),
		AdyenMerchantAccount: r.adyenMerchant("ADYEN_MERCHANT_ACCOUNT"),
		CircuitOpenFor:       r.duration("PROCESSOR_CIRCUIT_OPEN_FOR"),
		SMTPURL:              r.smtpURL("SMTP_URL"),
		MailFrom:             r.mailFrom("MAIL_FROM"),
		StripeWebhookSecrets: r.webhookSecrets("STRIPE_WEBHOOK_SECRET"),
		AdyenHMACKeys:        r.adyenHMACKeys("ADYEN_HMAC_KEY"),
		MailDir:              r.mailDir("MAIL_DIR"),

		Lease:              r.duration("LEASE"),
		CompleterIdle:      r.duration("COMPLETER_IDLE"),
		KeyRetention:       r.duration("KEY_RETENTION"),
		OrphanRefundAfter:  r.duration("ORPHAN_REFUND_AFTER"),
		ActionDeadline:     r.duration("ACTION_DEADLINE"),
		EventsPassInterval: r.duration("EVENTS_PASS_INTERVAL"),
		CompleterInterval:  r.duration("COMPLETER_INTERVAL"),
		ReaperInterval:     r.duration("REAPER_INTERVAL"),
		ReconcileInterval:  r.duration("RECONCILE_INTERVAL"),
		JobTimeout:         r.duration("JOB_TIMEOUT"),
		JobRescueAfter:     r.duration("JOB_RESCUE_AFTER"),

		RateLimitWrites:       r.policy("RATE_LIMIT_WRITES", "writes"),
		RateLimitReads:        r.policy("RATE_LIMIT_READS", "reads"),
		RateLimitAuthFailures: r.policy("RATE_LIMIT_AUTH_FAILURES", "auth-failures"),
		RateLimitInFlight:     r.riderInFlight("RATE_LIMIT_IN_FLIGHT"),
		ShedInFlight:          r.inFlight("LOAD_SHED_IN_FLIGHT"),
		RedisURL:              r.redisURL("REDIS_URL"),
		SettlementInbox:       r.settlementInbox("SETTLEMENT_SFTP_URL", "SETTLEMENT_SFTP_HOST_KEY", "SETTLEMENT_SFTP_KEY_FILE"),
		SettlementInterval:    r.duration("SETTLEMENT_INTERVAL"),
		SettlementMaxAge:      r.duration("SETTLEMENT_MAX_AGE"),

		FakeStripeAddr: r.addr("FAKESTRIPE_ADDR", defaultFakeStripeAddr),
		FakeAdyenAddr:  r.addr("FAKEADYEN_ADDR", defaultFakeAdyenAddr),
		MailSinkAddr:   r.addr("MAILSINK_ADDR", defaultMailSinkAddr),
	}
	c.AdminToken, c.AdminTokenGenerated = r.adminToken("ADMIN_TOKEN")
	c.DispatchToken = r.token("DISPATCH_TOKEN")
	c.Capture = r.capture("CAPTURE")
	c.HoldExpiry = r.duration("HOLD_EXPIRY")
	c.ProcessorsSet = getenv("PROCESSORS") != ""
	// The admission limit learns what these tuned by hand; a deployment
	// that still sets one is told so rather than silently ignored.
	for _, name := range []string{"LOAD_SHED_RESERVED", "LOAD_SHED_DB_WAIT"} {
		if getenv(name) != "" {
			r.fail(invalid(name, "no longer read: the admission limit learns the service's capacity by itself (docs/limits.md); unset it"))
		}
	}

	// What the command reaches must be configured, unless -dev lets the
	// built-in fakes stand in. A variable set but invalid is reported
	// above, not as missing. A missing configuration is one line, Stripe's
	// first: a machine that lacks both is one set up for development, and
	// the line points to -dev.
	if !needs.dev {
		switch {
		case needs.stripe && getenv("STRIPE_SECRET_KEY") == "":
			r.fail(invalid("STRIPE_SECRET_KEY", "not set: set it (and STRIPE_API_BASE for a Stripe-compatible API); only 'serve -dev' runs without it, on the built-in fake Stripe"))
		case needs.stripe && slices.Contains(c.Processors, service.ProcessorAdyen) && getenv("ADYEN_API_KEY") == "":
			r.fail(invalid("ADYEN_API_KEY", "not set: PROCESSORS names adyen; set it (with ADYEN_MERCHANT_ACCOUNT); only 'serve -dev' runs without it, on the built-in fake Adyen"))
		case needs.stripe && slices.Contains(c.Processors, service.ProcessorAdyen) && getenv("ADYEN_MERCHANT_ACCOUNT") == "":
			r.fail(invalid("ADYEN_MERCHANT_ACCOUNT", "not set: PROCESSORS names adyen; set it to the merchant account payments are made for"))
		case needs.stripe && len(c.AdyenHMACKeys) > 0 && getenv("ADYEN_MERCHANT_ACCOUNT") == "":
			r.fail(invalid("ADYEN_MERCHANT_ACCOUNT", "not set: ADYEN_HMAC_KEY turns Adyen's notifications on; set it to the merchant account they are about"))
		case needs.mail && getenv("SMTP_URL") == "":
			r.fail(invalid("SMTP_URL", "not set: set it to the SMTP server receipts go through; only 'serve -dev' runs without it, on the built-in mail sink"))
		}
	}

	// Settings that must agree with others.
	if c.DatabasePooler == poolerPgBouncer {
		if getenv("DATABASE_DIRECT_URL") == "" {
			r.fail(invalid("DATABASE_DIRECT_URL", "not set: with DATABASE_POOLER=%s it must reach PostgreSQL itself, not the pooler (River's and the API key revocations' LISTEN and the migrations' advisory lock need a session of their own)", poolerPgBouncer))
		}
		if mode := execModeOf(c.DatabaseURL); mode != "" && !pooledExecModes[mode] {
			r.fail(invalid("DATABASE_URL", "default_query_exec_mode=%s does not work through PgBouncer's transaction pooling: leave it out (cache_describe is used) or set cache_describe, exec or simple_protocol", mode))
		}
	}
	if c.Lease > 0 {
		budget := payments.New(payments.Config{Timeout: c.StripeTimeout}).Budget()
		if c.Lease <= budget {
			r.fail(invalid("LEASE", "%s does not outlast the Stripe budget of %s (every attempt of STRIPE_TIMEOUT and the backoff between them); want more, or unset for twice the budget plus 30s", c.Lease, budget))
		}
	}
	if c.PublicURL == "" && (strings.HasPrefix(c.StripeSecretKey, "sk_live_") || strings.HasPrefix(c.StripeSecretKey, "rk_live_")) {
		r.fail(invalid("PUBLIC_URL", "required with a live Stripe key: riders whose bank asks them to authenticate a payment are sent back to it (%s); e.g. https://rides.example.com", service.ReturnPath))
	}
	if c.KeyRetention > 0 && c.KeyRetention <= service.ProcessorKeyWindow {
		r.fail(invalid("KEY_RETENTION", "%s: must exceed Stripe's %s idempotency window, e.g. 72h", c.KeyRetention, service.ProcessorKeyWindow))
	}
	if c.StripeKeyWindow > 0 && c.StripeKeyWindow != service.ProcessorKeyWindow && stripesOwnAPI(c.StripeAPIBase) {
		r.fail(invalid("STRIPE_KEY_WINDOW", "%s: Stripe remembers idempotency keys for %s; another window is only for a Stripe-compatible test API named by STRIPE_API_BASE (e.g. fakestripe -key-window): unset it", c.StripeKeyWindow, service.ProcessorKeyWindow))
	}
	if grace := cmp.Or(c.OrphanRefundAfter, service.DefaultOrphanRefundAfter); c.ActionDeadline >= grace {
		r.fail(invalid("ACTION_DEADLINE", "%s: must be shorter than the orphan grace (%s): a payment authenticated by its deadline is recorded on its ride before an orphan pass could refund it; e.g. 30m", c.ActionDeadline, grace))
	}
	if window := cmp.Or(c.StripeKeyWindow, service.ProcessorKeyWindow); c.OrphanRefundAfter > 0 && c.OrphanRefundAfter <= window {
		r.fail(invalid("ORPHAN_REFUND_AFTER", "%s: must exceed Stripe's %s idempotency window, within which a client's retry still claims the charge; e.g. 48h", c.OrphanRefundAfter, window))
	}
	// Unset, JOB_RESCUE_AFTER defaults above every job timeout
	// (jobs.DefaultRescueStuckJobsAfter); set, it must outlast JOB_TIMEOUT
	// or River's default job timeout, or live jobs would be retried.
	if timeout := cmp.Or(c.JobTimeout, river.JobTimeoutDefault); c.JobRescueAfter > 0 && c.JobRescueAfter <= timeout {
		r.fail(invalid("JOB_RESCUE_AFTER", "%s: must outlast JOB_TIMEOUT (%s), or a running job would be taken for a dead one", c.JobRescueAfter, timeout))
	}
	if c.HoldExpiry > service.MaxHoldExpiry {
		r.fail(invalid("HOLD_EXPIRY", "%s: must be at most %s, inside the shortest time a card network keeps a hold (Visa: 4 days 18 hours); e.g. 24h", c.HoldExpiry, service.MaxHoldExpiry))
	}
	if c.Capture == service.CaptureTrip {
		switch {
		case c.DispatchToken == "":
			r.fail(invalid("DISPATCH_TOKEN", "not set: CAPTURE=trip holds each booking's fare until the dispatch side completes or cancels the trip with this token; e.g. the output of `openssl rand -hex 24`"))
		case slices.Contains(c.Processors, service.ProcessorAdyen) && len(c.AdyenHMACKeys) == 0 && !needs.dev:
			r.fail(invalid("ADYEN_HMAC_KEY", "not set: with CAPTURE=trip, Adyen tells a capture's outcome only in its CAPTURE notifications; set it"))
		}
	}
	if len(r.errs) > 0 {
		return nil, errors.Join(r.errs...)
	}
	return c, nil
}

// jobsConfig is the configuration of the River client: zero for what is
// unset, so that package jobs applies its defaults.
func (c *config) jobsConfig(logger *slog.Logger) jobs.Config {
	return jobs.Config{
		CompleterInterval:    c.CompleterInterval,
		ReaperInterval:       c.ReaperInterval,
		ReconcileInterval:    c.ReconcileInterval,
		EventsPassInterval:   c.EventsPassInterval,
		JobTimeout:           c.JobTimeout,
		RescueStuckJobsAfter: c.JobRescueAfter,
		SettlementInbox:      c.SettlementInbox,
		SettlementInterval:   c.SettlementInterval,
		Logger:               logger,
	}
}

// bookConfigFromEnv reads and checks the book command's configuration
// from the process's environment.
func bookConfigFromEnv() (*bookConfig, error) { return loadBookConfig(os.Getenv) }

// loadBookConfig reads and checks the book command's configuration from
// getenv: ATOMICRIDES_URL and ATOMICRIDES_API_KEY, nothing else.
func loadBookConfig(getenv func(string) string) (*bookConfig, error) {
	r := &envReader{getenv: getenv}
	c := &bookConfig{APIKey: getenv("ATOMICRIDES_API_KEY"), URL: cmp.Or(r.httpURL("ATOMICRIDES_URL"), defaultBookURL)}
	if len(r.errs) > 0 {
		return nil, errors.Join(r.errs...)
	}
	return c, nil
}

// stripesOwnAPI reports whether STRIPE_API_BASE (base, "" when unset)
// reaches Stripe itself rather than a Stripe-compatible test API.
func stripesOwnAPI(base string) bool {
	if base == "" {
		return true
	}
	u, err := url.Parse(base)
	if err != nil {
		return true
	}
	host := strings.ToLower(u.Hostname())
	return host == "stripe.com" || strings.HasSuffix(host, ".stripe.com")
}

// envReader reads variables, collecting what is wrong with them.
type envReader struct {
	getenv func(string) string
	errs   []error
}

func (r *envReader) fail(err error) { r.errs = append(r.errs, err) }

func (r *envReader) str(name, def string) string {
	if v := r.getenv(name); v != "" {
		return v
	}
	return def
}

// duration reads a positive Go duration; unset is zero.
func (r *envReader) duration(name string) time.Duration {
	v := r.getenv(name)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		r.fail(invalid(name, "%q is not a positive duration: want e.g. 90s, 5m or 72h", v))
		return 0
	}
	return d
}

// addr reads a listen address, HOST:PORT (HOST may be empty).
func (r *envReader) addr(name, def string) string {
	v := r.str(name, def)
	if v == "" {
		return ""
	}
	_, port, err := net.SplitHostPort(v)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
		r.fail(invalid(name, "%q is not a listen address: want HOST:PORT, e.g. 127.0.0.1:8080 or :8080", v))
		return ""
	}
	return v
}

// httpURL reads an absolute http or https URL; unset is "".
func (r *envReader) httpURL(name string) string {
	v := r.getenv(name)
	if v == "" {
		return ""
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		r.fail(invalid(name, "not an absolute http or https URL without credentials, e.g. https://rides.example.com"))
		return ""
	}
	return strings.TrimSuffix(v, "/")
}

// databaseURL reads a PostgreSQL connection URL or DSN. Its parse errors
// are not repeated: they can hold the password.
func (r *envReader) databaseURL(name string) string {
	v := r.getenv(name)
	if v == "" {
		return ""
	}
	if _, err := pgxpool.ParseConfig(v); err != nil {
		r.fail(invalid(name, "not a valid PostgreSQL connection string: want postgres://USER:PASSWORD@HOST:PORT/DATABASE (the value is not shown: it may hold a password)"))
		return ""
	}
	return v
}

// Values of DATABASE_POOLER.
const (
	poolerNone      = "none"
	poolerPgBouncer = "pgbouncer"
)

// pooler reads DATABASE_POOLER: unset or none, or pgbouncer.
func (r *envReader) pooler(name string) string {
	switch v := r.str(name, poolerNone); v {
	case poolerNone, poolerPgBouncer:
		return v
	default:
		r.fail(invalid(name, "%q is not a pooler: want %s (PgBouncer in transaction pooling mode between DATABASE_URL and PostgreSQL) or %s", v, poolerPgBouncer, poolerNone))
		return poolerNone
	}
}

// smtpURL reads SMTP_URL as package mail reads it; its errors never
// contain the URL.
func (r *envReader) smtpURL(name string) string {
	v := r.getenv(name)
	if v == "" {
		return ""
	}
	if _, err := mail.New(mail.Config{URL: v}); err != nil {
		r.fail(invalid(name, "%s (want smtp://USER:PASSWORD@HOST:587 or smtps://USER:PASSWORD@HOST:465)", strings.TrimPrefix(err.Error(), "SMTP URL: ")))
		return ""
	}
	return v
}

// mailDirOff is the MAIL_DIR that keeps no file of a received message.
const mailDirOff = "off"

// mailDir reads the mail sink's directory: defaultMailDir when unset, ""
// for mailDirOff (no file), else a path that is a directory or does not
// exist yet (the sink creates it).
func (r *envReader) mailDir(name string) string {
	v := r.str(name, defaultMailDir)
	if v == mailDirOff {
		return ""
	}
	if strings.ContainsFunc(v, unicode.IsControl) {
		r.fail(invalid(name, "holds control characters: want a directory, or %q for no file", mailDirOff))
		return ""
	}
	if fi, err := os.Stat(v); err == nil && !fi.IsDir() {
		r.fail(invalid(name, "%q is not a directory: want a directory, or %q for no file", v, mailDirOff))
		return ""
	}
	return v
}

// mailFrom reads an RFC 5322 address, e.g. "Atomic Rides <receipts@example.com>".
func (r *envReader) mailFrom(name string) string {
	v := r.getenv(name)
	if v == "" {
		return ""
	}
	if _, err := netmail.ParseAddress(v); err != nil {
		r.fail(invalid(name, "%q is not an email address: want e.g. Atomic Rides <receipts@example.com>", v))
		return ""
	}
	return v
}

// webhookSecrets reads Stripe webhook signing secrets, comma-separated,
// never repeating them: each whsec_ followed by letters, digits or
// underscores.
func (r *envReader) webhookSecrets(name string) []string {
	v := r.getenv(name)
	if v == "" {
		return nil
	}
	var out []string
	for i, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		rest, ok := strings.CutPrefix(s, "whsec_")
		if !ok || rest == "" || strings.ContainsFunc(rest, func(c rune) bool {
			return !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z')
		}) {
			r.fail(invalid(name, "secret %d is not a webhook signing secret: want whsec_… of letters, digits and underscores, several separated by commas (the value is not shown)", i+1))
			return nil
		}
		out = append(out, s)
	}
	return out
}

// stripeKey reads a Stripe secret key, never repeating it: one of
// stripeKeyPrefixes followed by one or more ASCII letters, digits or
// underscores (sk_test_… keys of Stripe's test mode, of the built-in fake
// and of the tests included).
// processors reads a comma-separated list of known processors, each once;
// empty means stripe alone.
func (r *envReader) processors(name string) []string {
	v := r.getenv(name)
	if v == "" {
		return []string{service.ProcessorStripe}
	}
	var out []string
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(service.ProcessorNames(), p) || slices.Contains(out, p) {
			r.fail(invalid(name, "%q: want a comma-separated list of stripe and adyen in order of preference, each once, e.g. stripe,adyen", v))
			return []string{service.ProcessorStripe}
		}
		out = append(out, p)
	}
	return out
}

// adyenKey reads an Adyen API key: printable ASCII without spaces.
func (r *envReader) adyenKey(name string) string {
	v := r.getenv(name)
	if v != "" && (len(v) > 512 || strings.ContainsFunc(v, func(c rune) bool { return c <= ' ' || c > '~' })) {
		r.fail(invalid(name, "not an Adyen API key: want printable ASCII without spaces, at most 512 characters (the value is not shown)"))
		return ""
	}
	return v
}

// adyenHMACKeys reads Adyen HMAC keys, comma-separated, never repeating
// them: each an even number (32 or more) of hex digits.
func (r *envReader) adyenHMACKeys(name string) []string {
	v := r.getenv(name)
	if v == "" {
		return nil
	}
	var out []string
	for i, k := range strings.Split(v, ",") {
		k = strings.TrimSpace(k)
		if _, err := adyen.ParseHMACKey(k); err != nil {
			r.fail(invalid(name, "key %d is not an HMAC key: %v, several separated by commas (the value is not shown)", i+1, err))
			return nil
		}
		out = append(out, k)
	}
	return out
}

// adyenMerchant reads an Adyen merchant account name.
func (r *envReader) adyenMerchant(name string) string {
	v := r.getenv(name)
	if v != "" && (len(v) > 255 || strings.ContainsFunc(v, func(c rune) bool {
		return !(c == '_' || c == '-' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z')
	})) {
		r.fail(invalid(name, "%q: want a merchant account name of letters, digits, '_', '-' or '.'", v))
		return ""
	}
	return v
}

func (r *envReader) stripeKey(name string) string {
	v := r.getenv(name)
	if v == "" {
		return ""
	}
	if !validStripeKey(v) {
		r.fail(invalid(name, "not a Stripe secret key: want sk_live_…, sk_test_… or a restricted rk_live_…/rk_test_… key of letters, digits and underscores (the value is not shown)"))
		return ""
	}
	return v
}

func validStripeKey(v string) bool {
	for _, p := range stripeKeyPrefixes {
		if rest, ok := strings.CutPrefix(v, p); ok {
			return rest != "" && !strings.ContainsFunc(rest, func(c rune) bool {
				return !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z')
			})
		}
	}
	return false
}

// adminToken reads the operator credential, or generates one for this run
// when it is unset.
func (r *envReader) adminToken(name string) (token string, generated bool) {
	v := r.getenv(name)
	if v == "" {
		return randomToken(), true
	}
	if len(v) < minAdminTokenLen {
		r.fail(invalid(name, "too short (%d characters): want at least %d, e.g. the output of `openssl rand -hex 24`", len(v), minAdminTokenLen))
		return "", false
	}
	if strings.ContainsFunc(v, func(c rune) bool { return c <= ' ' || c > '~' }) {
		r.fail(invalid(name, "holds spaces or characters other than printable ASCII (the value is not shown)"))
		return "", false
	}
	return v, false
}

// token reads a bearer credential, like ADMIN_TOKEN; unset is "".
func (r *envReader) token(name string) string {
	if r.getenv(name) == "" {
		return ""
	}
	v, _ := r.adminToken(name)
	return v
}

// capture reads CAPTURE: booking or trip; unset is booking.
func (r *envReader) capture(name string) service.Capture {
	switch v := service.Capture(r.getenv(name)); v {
	case "", service.CaptureBooking:
		return service.CaptureBooking
	case service.CaptureTrip:
		return v
	default:
		r.fail(invalid(name, "%q: want booking (charge in full at booking) or trip (hold at booking, capture the fare when the trip is completed)", string(v)))
		return ""
	}
}

// policy reads a budget, QUOTA/WINDOW or off (limits.ParsePolicy); unset
// is nil.
func (r *envReader) policy(name, policyName string) *limits.Policy {
	v := r.getenv(name)
	if v == "" {
		return nil
	}
	p, err := limits.ParsePolicy(policyName, v)
	if err != nil {
		r.fail(invalid(name, "%s", err))
		return nil
	}
	return &p
}

// inFlight reads the admission limit: auto or unset (0, learnt), a fixed
// whole number from 1 to 100000, or off (-1).
func (r *envReader) inFlight(name string) int {
	v := r.getenv(name)
	if v == "" || v == "auto" {
		return 0
	}
	if v == "off" {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100_000 {
		r.fail(invalid(name, "%q: want auto, a whole number of requests from 1 to 100000, or off", v))
		return 0
	}
	return n
}

// riderInFlight reads a rider's limit of requests in flight: unset (0),
// a whole number, or off (-1).
func (r *envReader) riderInFlight(name string) int {
	v := r.getenv(name)
	switch v {
	case "":
		return 0
	case "off":
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100_000 {
		r.fail(invalid(name, "%q: want a whole number of requests from 1 to 100000, or off", v))
		return 0
	}
	return n
}

// redisURL reads a redis:// or rediss:// URL; the message never repeats it,
// since it may hold a password.
func (r *envReader) redisURL(name string) string {
	v := r.getenv(name)
	if v == "" {
		return ""
	}
	if _, err := limits.RedisOptions(v); err != nil {
		r.fail(invalid(name, "not a valid redis:// or rediss:// URL, e.g. redis://127.0.0.1:6379/0"))
		return ""
	}
	return v
}

// settlementInbox reads the bank's SFTP inbox from its three variables:
// none set turns the feature off; some set names each one missing.
func (r *envReader) settlementInbox(urlName, hostKeyName, keyFileName string) *bankinbox.Config {
	rawURL, hostKey, keyFile := r.getenv(urlName), r.getenv(hostKeyName), r.getenv(keyFileName)
	if rawURL == "" && hostKey == "" && keyFile == "" {
		return nil
	}
	var cfg bankinbox.Config
	ok := true
	for _, v := range []struct{ name, value string }{{urlName, rawURL}, {hostKeyName, hostKey}, {keyFileName, keyFile}} {
		if v.value == "" {
			r.fail(invalid(v.name, "not set: the settlement inbox needs %s, %s and %s together", urlName, hostKeyName, keyFileName))
			ok = false
		}
	}
	if rawURL != "" {
		if err := cfg.ParseURL(rawURL); err != nil {
			r.fail(invalid(urlName, "%v; want sftp://user@host[:port]/inbox/path", err))
			ok = false
		}
	}
	if hostKey != "" {
		key, err := bankinbox.ParseHostKey(hostKey)
		if err != nil {
			r.fail(invalid(hostKeyName, "%v", err))
			ok = false
		}
		cfg.HostKey = key
	}
	if keyFile != "" {
		signer, err := bankinbox.LoadSigner(keyFile)
		if err != nil {
			r.fail(invalid(keyFileName, "%s: %v", keyFile, err))
			ok = false
		}
		cfg.Signer = signer
	}
	if !ok {
		return nil
	}
	return &cfg
}
