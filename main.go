// Command atomicrides books rides and charges riders exactly once.
//
//	atomicrides serve [-dev] run the HTTP API and the River workers (-dev: with the built-in fake Stripe and mail sink)
//	atomicrides migrate      apply pending migrations (the service's and River's)
//	atomicrides openapi      print the OpenAPI spec (YAML)
//	atomicrides keys …       list, show and complete stuck requests; reconcile with Stripe (operators)
//	atomicrides fakestripe   serve the built-in fake Stripe on its own address
//	atomicrides mailsink     serve an SMTP server that keeps what it receives
//	atomicrides db up|down|url   manage the throwaway development PostgreSQL
//	atomicrides book --from LAT,LON --to LAT,LON   book a ride through the API (client side)
//
// Configuration comes from the environment; see README.md.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel"
	"riverqueue.com/riverui"

	"github.com/atomicrides/atomicrides/internal/telemetry"
	"github.com/atomicrides/atomicrides/jobs"
	"github.com/atomicrides/atomicrides/openapi"
	"github.com/atomicrides/atomicrides/openapi/web"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/mail"
	"github.com/atomicrides/atomicrides/service/mail/mailsink"
	"github.com/atomicrides/atomicrides/service/payments"
	"github.com/atomicrides/atomicrides/service/payments/fakestripe"
	"github.com/atomicrides/atomicrides/sql/migrations"
	"github.com/atomicrides/atomicrides/sql/pgenv"
)

func main() {
	// Log lines written under a span carry its trace_id and span_id.
	logger := slog.New(telemetry.LogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := runCommand(ctx, os.Args[1:], logger); err != nil {
		logger.Error("exit", "err", err)
		os.Exit(1)
	}
}

func runCommand(ctx context.Context, args []string, logger *slog.Logger) error {
	if len(args) == 0 {
		args = []string{"serve"}
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], logger)
	case "migrate":
		return migrate(ctx, logger)
	case "openapi":
		spec, err := openapi.Spec()
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(spec)
		return err
	case "fakestripe":
		return serveFakeStripe(ctx, args[1:], logger)
	case "mailsink":
		return serveMailSink(ctx, args[1:], logger)
	case "keys":
		return keysCommand(ctx, args[1:], os.Stdout, logger)
	case "db":
		return dbCommand(ctx, args[1:], logger)
	case "book":
		return book(ctx, args[1:], os.Stdout, os.Stderr)
	default:
		return fmt.Errorf("unknown command %q: want serve, migrate, openapi, keys, book, fakestripe, mailsink or db", args[0])
	}
}

// databaseURL is DATABASE_URL, or else a local server or throwaway cluster
// found (and, when start, started) by pgenv.
func databaseURL(ctx context.Context, logger *slog.Logger, start bool) (string, error) {
	db, err := pgenv.Resolve(ctx, pgenv.Options{Start: start, Logger: logger})
	if err != nil {
		return "", err
	}
	return db.URL, nil
}

// connect opens a pool on the database of databaseURL and checks that it
// answers.
func connect(ctx context.Context, logger *slog.Logger, start bool) (*pgxpool.Pool, error) {
	url, err := databaseURL(ctx, logger, start)
	if err != nil {
		return nil, err
	}
	cfg, err := poolConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.Tracer = telemetry.PgxTracer{} // queries of traced requests and jobs only
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to the database: %w", err)
	}
	return pool, nil
}

func migrate(ctx context.Context, logger *slog.Logger) error {
	pool, err := connect(ctx, logger, true)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := migrations.Migrate(ctx, pool)
	if err != nil {
		return err
	}
	logger.Info("migrated", "applied", res.Applied, "river_applied", res.RiverApplied)
	return nil
}

func serve(ctx context.Context, args []string, logger *slog.Logger) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	noMigrate := fs.Bool("no-migrate", false, "do not apply pending migrations at start")
	dev := fs.Bool("dev", false, "development: without STRIPE_SECRET_KEY use the built-in fake Stripe, without SMTP_URL the built-in mail sink")
	if err := fs.Parse(args); err != nil {
		return err
	}
	needs := backends{stripe: true, mail: true, dev: *dev}
	// Refuse a missing configuration before anything is touched.
	if err := needs.check(); err != nil {
		return err
	}
	addr := envOr("ADDR", "127.0.0.1:8080")
	adminToken := os.Getenv("ADMIN_TOKEN")
	if adminToken == "" {
		adminToken = randomToken()
		logger.Warn("ADMIN_TOKEN not set: generated one for this run", "admin_token", adminToken)
	}

	stopTracing, err := setupTracing(ctx, logger)
	if err != nil {
		return err
	}
	defer stopTracing() // after everything that makes spans has stopped

	pool, err := connect(ctx, logger, true)
	if err != nil {
		return err
	}
	defer pool.Close() // last: after HTTP and River have stopped

	if !*noMigrate {
		if _, err := migrations.Migrate(ctx, pool); err != nil {
			return err
		}
	}

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	svc, devNote, stopDeps, err := newService(pool, registry, logger, needs)
	if err != nil {
		return err
	}
	defer stopDeps()
	// Revoked API keys are forgotten by this process's auth cache as they are
	// announced; the goroutine ends with ctx.
	go func() { _ = svc.ListenAPIKeyRevocations(ctx) }()

	jobsCfg, err := jobsConfigFromEnv(logger)
	if err != nil {
		return err
	}
	riverCfg := jobs.RiverConfig(jobsCfg, svc)
	// A job's run continues the trace of the phase that inserted it.
	riverCfg.Plugins = []rivertype.Plugin{telemetry.NewRiverMiddleware(nil)}
	riverClient, err := river.NewClient(riverpgxv5.New(pool), riverCfg)
	if err != nil {
		return err
	}
	if err := riverClient.Start(ctx); err != nil {
		return err
	}

	ui, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(riverClient, nil),
		Logger:    logger,
		Prefix:    "/riverui",
	})
	if err != nil {
		return err
	}
	if err := ui.Start(ctx); err != nil {
		return err
	}

	handler := openapi.NewHandler(openapi.Config{
		Service:    svc,
		AdminToken: adminToken,
		RiverUI:    ui,
		Ready:      func(ctx context.Context) error { return ready(ctx, pool) },
		Logger:     logger,
		Metrics:    registry,
		Pages:      web.New(web.Config{Service: svc, Secret: adminToken, Logger: logger}),
	})
	if metricsAddr := os.Getenv("METRICS_ADDR"); metricsAddr != "" {
		mln, err := net.Listen("tcp", metricsAddr)
		if err != nil {
			return err
		}
		msrv := &http.Server{Handler: openapi.MetricsHandler(registry), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = msrv.Serve(mln) }()
		defer msrv.Close()
		logger.Info("metrics serving", "url", "http://"+mln.Addr().String()+"/metrics")
	}
	if pprofAddr := os.Getenv("PPROF_ADDR"); pprofAddr != "" {
		stopPprof, err := servePprof(pprofAddr, logger)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	base := "http://" + ln.Addr().String()
	logger.Info("serving", "url", base, "river_ui", base+"/riverui/", "openapi", base+"/openapi.yaml", "docs", base+"/docs")
	if devNote != "" {
		devNote = "  DEVELOPMENT MODE (-dev): " + devNote + "\n"
	}
	fmt.Fprintf(os.Stderr, "\nAtomic Rides is serving on %s\n%s  admin token: %s\n  API docs:    %s/docs  (the reference, rendered from %s/openapi.yaml)\n  River UI:    %s/riverui/  (any user name, the admin token as password)\n  metrics:     %s/metrics  (Bearer admin token)\n  try:\n    curl -s -X PUT -H 'Authorization: Bearer %s' %s/users/rider@example.com\n\n",
		base, devNote, adminToken, base, base, base, base, adminToken, base)

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down: finishing in-flight requests")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), svc.Lease()+5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	if err := riverClient.Stop(shutdownCtx); err != nil {
		return fmt.Errorf("river stop: %w", err)
	}
	logger.Info("stopped")
	return nil
}

// setupTracing installs the tracer provider that the OTEL_* variables
// describe as the global one, which the service, the HTTP handler and River's
// middleware use; stop flushes the spans not yet exported.
func setupTracing(ctx context.Context, logger *slog.Logger) (stop func(), err error) {
	tracing, err := telemetry.Setup(ctx, os.Getenv)
	if err != nil {
		return nil, err
	}
	if !tracing.Enabled {
		return func() {}, nil
	}
	otel.SetTracerProvider(tracing.Provider)
	logger.Info("tracing", "exporter", tracing.Exporter)
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tracing.Shutdown(ctx); err != nil {
			logger.Warn("tracing: flush at exit", "err", err)
		}
	}, nil
}

// ready is the readiness check: the database answers and every migration is
// applied.
func ready(ctx context.Context, pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	pending, err := migrations.Pending(ctx, pool)
	if err != nil {
		return errors.New("database unreachable")
	}
	if len(pending) > 0 {
		return fmt.Errorf("%d migrations pending", len(pending))
	}
	return nil
}

// errNoStripe and errNoSMTP are the refusals of a command started without
// the configuration it needs: production never runs on a fake by accident.
var (
	errNoStripe = errors.New("STRIPE_SECRET_KEY is not set: set it (and STRIPE_API_BASE for a Stripe-compatible API), or run 'serve -dev' for the built-in fake Stripe")
	errNoSMTP   = errors.New("SMTP_URL is not set: set it to the SMTP server receipts go through, or run 'serve -dev' for the built-in mail sink")
)

// backends says what a command needs: the payment processor, the mailer,
// and whether the built-in fakes may stand in for them (-dev).
type backends struct {
	stripe, mail, dev bool
}

// check refuses a command whose configuration is missing, before it
// touches anything.
func (b backends) check() error {
	if b.dev {
		return nil
	}
	if b.stripe && os.Getenv("STRIPE_SECRET_KEY") == "" {
		return errNoStripe
	}
	if b.mail && os.Getenv("SMTP_URL") == "" {
		return errNoSMTP
	}
	return nil
}

// paymentsFromEnv returns the Stripe adapter with STRIPE_SECRET_KEY, pointed
// at STRIPE_API_BASE when set (any Stripe-compatible API). Without a key,
// and only with dev, it starts the built-in fake Stripe on a loopback port
// for this process, and says so loudly.
func paymentsFromEnv(logger *slog.Logger, dev bool) (pay service.Payments, note string, stop func(), err error) {
	key, base := os.Getenv("STRIPE_SECRET_KEY"), os.Getenv("STRIPE_API_BASE")
	if key == "" {
		if !dev {
			return nil, "", nil, errNoStripe
		}
		fake := fakestripe.New(fakestripe.Options{Logger: logger})
		url, stop, err := fake.Start("127.0.0.1:0")
		if err != nil {
			return nil, "", nil, err
		}
		logger.Warn("-dev: STRIPE_SECRET_KEY not set, charges go to the built-in FAKE Stripe; never use this mode for real riders",
			"url", url, "ledger", url+"/_fake/ledger")
		return payments.New(payments.Config{SecretKey: "sk_test_fake", APIBase: url}),
			"fake Stripe at " + url, func() { _ = stop(context.Background()) }, nil
	}
	timeout, err := envDuration("STRIPE_TIMEOUT")
	if err != nil {
		return nil, "", nil, err
	}
	return payments.New(payments.Config{SecretKey: key, APIBase: base, Timeout: timeout}), "", func() {}, nil
}

func serveFakeStripe(ctx context.Context, args []string, logger *slog.Logger) error {
	fs := flag.NewFlagSet("fakestripe", flag.ContinueOnError)
	addr := fs.String("addr", envOr("FAKESTRIPE_ADDR", "127.0.0.1:12111"), "listen address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	fake := fakestripe.New(fakestripe.Options{Logger: logger})
	url, stop, err := fake.Start(*addr)
	if err != nil {
		return err
	}
	logger.Info("fake Stripe serving", "url", url, "ledger", url+"/_fake/ledger")
	<-ctx.Done()
	return stop(context.WithoutCancel(ctx))
}

func dbCommand(ctx context.Context, args []string, logger *slog.Logger) error {
	if len(args) != 1 {
		return errors.New("usage: db up|down|url")
	}
	switch args[0] {
	case "up", "url":
		url, err := databaseURL(ctx, logger, true)
		if err != nil {
			return err
		}
		fmt.Println(url)
		return nil
	case "down":
		root, err := pgenv.FindProjectRoot(".")
		if err != nil {
			return err
		}
		return pgenv.StopCluster(ctx, root+"/.pgdata")
	}
	return fmt.Errorf("unknown db command %q: want up, down or url", args[0])
}

// newService builds the service over pool with what needs asks for: the
// payment processor and the mailer configured by the environment, or with
// needs.dev the built-in fakes in their place. A command that reaches
// neither (keys list, keys show) gets a Stripe client it never calls.
// devNote says which fakes run; stop releases what was started.
func newService(pool *pgxpool.Pool, reg prometheus.Registerer, logger *slog.Logger, needs backends) (svc *service.Service, devNote string, stop func(), err error) {
	var stops []func()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stopAll()
		}
	}()
	if err := needs.check(); err != nil {
		return nil, "", nil, err
	}
	var notes []string
	timeout, err := envDuration("STRIPE_TIMEOUT")
	if err != nil {
		return nil, "", nil, err
	}
	// Never called; its budget (from STRIPE_TIMEOUT) sizes the lease as in serve.
	var pay service.Payments = payments.New(payments.Config{Timeout: timeout})
	if needs.stripe {
		p, note, stopStripe, err := paymentsFromEnv(logger, needs.dev)
		if err != nil {
			return nil, "", nil, err
		}
		stops = append(stops, stopStripe)
		pay = p
		if note != "" {
			notes = append(notes, note)
		}
	}
	var mailer service.Mailer
	if needs.mail {
		m, note, stopMail, err := mailerFromEnv(logger, needs.dev)
		if err != nil {
			return nil, "", nil, err
		}
		stops = append(stops, stopMail)
		mailer = m
		if note != "" {
			notes = append(notes, note)
		}
	}
	cfg := service.Config{Pool: pool, Payments: pay, Mailer: mailer, MailFrom: os.Getenv("MAIL_FROM"), Logger: logger, Registerer: reg}
	if cfg.AbandonedAfter, err = envDuration("COMPLETER_IDLE"); err != nil {
		return nil, "", nil, err
	}
	if cfg.KeyRetention, err = envDuration("KEY_RETENTION"); err != nil {
		return nil, "", nil, err
	}
	if cfg.Lease, err = envDuration("LEASE"); err != nil {
		return nil, "", nil, err
	}
	svc, err = service.New(cfg)
	if err != nil {
		return nil, "", nil, err
	}
	return svc, strings.Join(notes, "; "), stopAll, nil
}

// jobsConfigFromEnv reads the configuration of the River client: the
// periodic jobs' intervals and River's job limits. Unset variables stay
// zero, and package jobs applies its defaults.
func jobsConfigFromEnv(logger *slog.Logger) (cfg jobs.Config, err error) {
	cfg.Logger = logger
	for _, v := range []struct {
		name string
		dst  *time.Duration
	}{
		{"COMPLETER_INTERVAL", &cfg.CompleterInterval},
		{"REAPER_INTERVAL", &cfg.ReaperInterval},
		{"RECONCILE_INTERVAL", &cfg.ReconcileInterval},
		{"JOB_TIMEOUT", &cfg.JobTimeout},
		{"JOB_RESCUE_AFTER", &cfg.RescueStuckJobsAfter},
	} {
		if *v.dst, err = envDuration(v.name); err != nil {
			return jobs.Config{}, err
		}
	}
	return cfg, nil
}

// defaultMailDir is where the built-in mail sink writes receipts when
// MAIL_DIR is unset.
const defaultMailDir = ".mail"

// mailerFromEnv returns the SMTP mailer of SMTP_URL. Without it, and only
// with dev, it starts a mail sink on a loopback port of this process that
// writes every receipt to MAIL_DIR (default .mail/) as an .eml file, and
// says so loudly.
func mailerFromEnv(logger *slog.Logger, dev bool) (m service.Mailer, note string, stop func(), err error) {
	if u := os.Getenv("SMTP_URL"); u != "" {
		m, err := mail.New(mail.Config{URL: u})
		return m, "", func() {}, err
	}
	if !dev {
		return nil, "", nil, errNoSMTP
	}
	dir := envOr("MAIL_DIR", defaultMailDir)
	sink := mailsink.New(mailsink.Options{Dir: dir, Logger: logger})
	url, stopSink, err := sink.Start("127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	logger.Warn("-dev: SMTP_URL not set, receipts go to the built-in mail sink, not to riders", "smtp", url, "dir", dir)
	mailer, err := mail.New(mail.Config{URL: url})
	return mailer, "receipts in " + dir + "/", func() { _ = stopSink(context.Background()) }, err
}

func serveMailSink(ctx context.Context, args []string, logger *slog.Logger) error {
	fs := flag.NewFlagSet("mailsink", flag.ContinueOnError)
	addr := fs.String("addr", envOr("MAILSINK_ADDR", "127.0.0.1:2525"), "listen address")
	dir := fs.String("dir", envOr("MAIL_DIR", defaultMailDir), "directory receiving each message as an .eml file (empty: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sink := mailsink.New(mailsink.Options{Dir: *dir, Logger: logger})
	url, stop, err := sink.Start(*addr)
	if err != nil {
		return err
	}
	logger.Info("mail sink serving", "smtp", url, "dir", *dir)
	<-ctx.Done()
	return stop(context.WithoutCancel(ctx))
}

// servePprof serves the runtime profiles (net/http/pprof) on their own
// address, for operators profiling a process under load.
func servePprof(addr string, logger *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	logger.Info("pprof serving", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() { _ = srv.Close() }, nil
}

// envDuration parses the environment variable name as a Go duration. Unset,
// it is zero: the package configured with it applies its own default.
func envDuration(name string) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration such as 90s or 5m", name, v)
	}
	return d, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func randomToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
