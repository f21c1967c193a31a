package main

import (
	"errors"
	"fmt"
	"net"
	netmail "net/mail"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/mail"
	"github.com/atomicrides/atomicrides/service/payments"
)

// config is the process's configuration: every environment variable the
// binary reads, read and checked here and nowhere else (README.md,
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
	// Addr is the API's listen address (ADDR).
	Addr string
	// AdminToken is ADMIN_TOKEN, or one generated for this run.
	AdminToken string
	// AdminTokenGenerated says that AdminToken was generated.
	AdminTokenGenerated bool
	// PublicURL is PUBLIC_URL: where riders reach the service.
	PublicURL string
	// MetricsAddr and PprofAddr are METRICS_ADDR and PPROF_ADDR; empty
	// serves neither.
	MetricsAddr, PprofAddr string

	// StripeSecretKey and StripeAPIBase are STRIPE_SECRET_KEY and
	// STRIPE_API_BASE; with neither, the built-in fake Stripe is used.
	StripeSecretKey, StripeAPIBase string
	// StripeTimeout is STRIPE_TIMEOUT.
	StripeTimeout time.Duration
	// SMTPURL is SMTP_URL; empty sends receipts to the built-in mail sink,
	// which writes them to MailDir.
	SMTPURL string
	// MailFrom is MAIL_FROM.
	MailFrom string
	// MailDir is MAIL_DIR.
	MailDir string

	// Service and job timings: LEASE, COMPLETER_IDLE, KEY_RETENTION,
	// COMPLETER_INTERVAL, REAPER_INTERVAL, JOB_TIMEOUT, JOB_RESCUE_AFTER.
	Lease, CompleterIdle, KeyRetention time.Duration
	CompleterInterval, ReaperInterval  time.Duration
	JobTimeout, JobRescueAfter         time.Duration

	// FakeStripeAddr and MailSinkAddr are where the fakestripe and
	// mailsink commands listen by default (FAKESTRIPE_ADDR, MAILSINK_ADDR).
	FakeStripeAddr, MailSinkAddr string
	// BookAPIKey and BookURL are the book command's rider API key and server
	// (ATOMICRIDES_API_KEY, ATOMICRIDES_URL).
	BookAPIKey, BookURL string
}

// Defaults that belong to the binary rather than to a package.
const (
	defaultAddr           = "127.0.0.1:8080"
	defaultMailDir        = ".mail"
	defaultFakeStripeAddr = "127.0.0.1:12111"
	defaultMailSinkAddr   = "127.0.0.1:2525"
	defaultBookURL        = "http://127.0.0.1:8080"
)

// configError is an invalid environment variable. The process prints it as
// one line and exits 1.
type configError struct {
	name string
	msg  string
}

func (e *configError) Error() string { return e.name + ": " + e.msg }

func invalid(name, format string, args ...any) error {
	return &configError{name: name, msg: fmt.Sprintf(format, args...)}
}

// configFromEnv reads and checks the configuration from the process's
// environment.
func configFromEnv() (*config, error) { return loadConfig(os.Getenv) }

// loadConfig reads and checks the configuration from getenv. It reports
// every invalid variable, each on its own.
func loadConfig(getenv func(string) string) (*config, error) {
	r := &envReader{getenv: getenv}
	c := &config{
		DatabaseURL:     r.databaseURL("DATABASE_URL"),
		Addr:            r.addr("ADDR", defaultAddr),
		PublicURL:       r.httpURL("PUBLIC_URL"),
		MetricsAddr:     r.addr("METRICS_ADDR", ""),
		PprofAddr:       r.addr("PPROF_ADDR", ""),
		StripeSecretKey: r.stripeKey("STRIPE_SECRET_KEY"),
		StripeAPIBase:   r.httpURL("STRIPE_API_BASE"),
		StripeTimeout:   r.duration("STRIPE_TIMEOUT"),
		SMTPURL:         r.smtpURL("SMTP_URL"),
		MailFrom:        r.mailFrom("MAIL_FROM"),
		MailDir:         r.str("MAIL_DIR", defaultMailDir),

		Lease:             r.duration("LEASE"),
		CompleterIdle:     r.duration("COMPLETER_IDLE"),
		KeyRetention:      r.duration("KEY_RETENTION"),
		CompleterInterval: r.duration("COMPLETER_INTERVAL"),
		ReaperInterval:    r.duration("REAPER_INTERVAL"),
		JobTimeout:        r.duration("JOB_TIMEOUT"),
		JobRescueAfter:    r.duration("JOB_RESCUE_AFTER"),

		FakeStripeAddr: r.addr("FAKESTRIPE_ADDR", defaultFakeStripeAddr),
		MailSinkAddr:   r.addr("MAILSINK_ADDR", defaultMailSinkAddr),
		BookAPIKey:     getenv("ATOMICRIDES_API_KEY"),
		BookURL:        r.httpURL("ATOMICRIDES_URL"),
	}
	if c.BookURL == "" {
		c.BookURL = defaultBookURL
	}
	c.AdminToken, c.AdminTokenGenerated = r.adminToken("ADMIN_TOKEN")

	// Settings that must agree with others.
	if c.Lease > 0 {
		budget := payments.New(payments.Config{Timeout: c.StripeTimeout}).Budget()
		if c.Lease <= budget {
			r.fail(invalid("LEASE", "%s does not outlast the Stripe budget of %s (every attempt of STRIPE_TIMEOUT and the backoff between them); want more, or unset for twice the budget plus 30s", c.Lease, budget))
		}
	}
	if c.KeyRetention > 0 && c.KeyRetention <= service.ProcessorKeyWindow {
		r.fail(invalid("KEY_RETENTION", "%s: must exceed Stripe's %s idempotency window, e.g. 72h", c.KeyRetention, service.ProcessorKeyWindow))
	}
	if c.JobTimeout > 0 && c.JobRescueAfter > 0 && c.JobRescueAfter < c.JobTimeout {
		r.fail(invalid("JOB_RESCUE_AFTER", "%s: must outlast JOB_TIMEOUT (%s)", c.JobRescueAfter, c.JobTimeout))
	}
	if c.JobTimeout > time.Hour && c.JobRescueAfter == 0 {
		r.fail(invalid("JOB_TIMEOUT", "%s: longer than JOB_RESCUE_AFTER's default of 1h; set JOB_RESCUE_AFTER above it", c.JobTimeout))
	}
	if len(r.errs) > 0 {
		return nil, errors.Join(r.errs...)
	}
	return c, nil
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

// stripeKey reads a Stripe secret key, never repeating it.
func (r *envReader) stripeKey(name string) string {
	v := r.getenv(name)
	if v == "" {
		return ""
	}
	if !(strings.HasPrefix(v, "sk_") || strings.HasPrefix(v, "rk_")) || strings.ContainsFunc(v, func(c rune) bool { return c <= ' ' || c > '~' }) {
		r.fail(invalid(name, "not a Stripe secret key: want sk_live_…, sk_test_… or a restricted rk_… key, without spaces (the value is not shown)"))
		return ""
	}
	return v
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
