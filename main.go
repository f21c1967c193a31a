// Command atomicrides books rides and charges riders exactly once.
//
//	atomicrides serve [-dev] run the HTTP API and the River workers (-dev: with the built-in fake Stripe and mail sink)
//	atomicrides migrate      apply pending migrations (the service's and River's)
//	atomicrides openapi      print the OpenAPI spec (YAML)
//	atomicrides keys …       list, show and complete stuck requests; reconcile with Stripe (operators)
//	atomicrides fakestripe   serve the built-in fake Stripe on its own address
//	atomicrides fakeadyen    serve the built-in fake Adyen on its own address
//	atomicrides mailsink     serve an SMTP server that keeps what it receives
//	atomicrides db up|down|url   manage the throwaway development PostgreSQL
//	atomicrides book --from LAT,LON --to LAT,LON   book a ride through the API (client side)
//	atomicrides healthcheck  exit 0 when the instance serving on ADDR answers 200 on /readyz (the image's HEALTHCHECK)
//
// Configuration comes from the environment; docs/operations.md lists every
// variable.
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel"
	"riverqueue.com/riverui"

	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/fake/mailsink"
	"github.com/atomicrides/atomicrides/internal/pgenv"
	"github.com/atomicrides/atomicrides/internal/telemetry"
	"github.com/atomicrides/atomicrides/jobs"
	"github.com/atomicrides/atomicrides/openapi"
	"github.com/atomicrides/atomicrides/openapi/web"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
	"github.com/atomicrides/atomicrides/service/adyen"
	"github.com/atomicrides/atomicrides/service/mail"
	"github.com/atomicrides/atomicrides/service/payments"
	"github.com/atomicrides/atomicrides/service/receipts"
	"github.com/atomicrides/atomicrides/service/settlements"
	"github.com/atomicrides/atomicrides/sql/migrations"
)

func main() {
	// Log lines written under a span carry its trace_id and span_id.
	logger := slog.New(telemetry.LogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := runCommand(ctx, os.Args[1:], os.Stdout, os.Stderr, logger)
	stop()
	var usage *usageError
	var invalidConfig *configError
	switch {
	case err == nil, errors.Is(err, errHelpShown):
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, "atomicrides: "+oneLine(usage.msg))
		os.Exit(2)
	case errors.As(err, &invalidConfig):
		// One line per invalid variable.
		for _, e := range joined(err) {
			fmt.Fprintln(os.Stderr, "atomicrides: "+oneLine(e.Error()))
		}
		os.Exit(1)
	default:
		logger.Error("exit", "err", err)
		os.Exit(1)
	}
}

// joined returns the errors joined in err (errors.Join), or err alone.
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// runCommand runs the command of args (serve when there is none).
func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) error {
	if len(args) == 0 {
		args = []string{"serve"}
	}
	switch args[0] {
	case "-h", "-help", "--help":
		printMainUsage(stdout)
		return errHelpShown
	case "help":
		if len(args) > 1 {
			return runCommand(ctx, []string{args[1], "--help"}, stdout, stderr, logger)
		}
		printMainUsage(stdout)
		return errHelpShown
	case "serve":
		return serve(ctx, args[1:], stdout, logger)
	case "migrate":
		return migrate(ctx, args[1:], stdout, logger)
	case "openapi":
		if err := newCommand("openapi", "openapi\n\nPrints the OpenAPI spec of the API (YAML) to stdout.", stdout).parse(args[1:], 0); err != nil {
			return err
		}
		spec, err := openapi.Spec()
		if err != nil {
			return err
		}
		_, err = stdout.Write(spec)
		return err
	case "fakestripe":
		return serveFakeStripe(ctx, args[1:], stdout, logger)
	case "fakeadyen":
		return serveFakeAdyen(ctx, args[1:], stdout, logger)
	case "mailsink":
		return serveMailSink(ctx, args[1:], stdout, logger)
	case "keys":
		return keysCommand(ctx, args[1:], stdout, logger)
	case "settlements":
		return settlementsCommand(ctx, args[1:], stdout, logger)
	case "db":
		return dbCommand(ctx, args[1:], stdout, logger)
	case "book":
		return book(ctx, args[1:], stdout, stderr)
	case "healthcheck":
		return healthcheck(ctx, args[1:], stdout)
	default:
		return usagef("unknown command %q (see atomicrides --help)", args[0])
	}
}

// databaseURL is the configured DATABASE_URL, or else a local server or
// throwaway cluster found (and, when start, started) by pgenv.
func databaseURL(ctx context.Context, cfg *config, logger *slog.Logger, start bool) (string, error) {
	if cfg.DatabaseURL != "" {
		return cfg.DatabaseURL, nil
	}
	db, err := pgenv.Resolve(ctx, pgenv.Options{Start: start, Logger: logger, EnvVars: []string{}})
	if err != nil {
		return "", err
	}
	return db.URL, nil
}

// connect opens a pool on the database of databaseURL and checks that it
// answers. Every connection traces its queries for the request or job in
// their context, and a non-nil counter counts its statements and round trips
// too.
func connect(ctx context.Context, cfg *config, logger *slog.Logger, start bool, counter *service.DBCounter) (*pgxpool.Pool, error) {
	url, err := databaseURL(ctx, cfg, logger, start)
	if err != nil {
		return nil, err
	}
	poolCfg, err := poolConfig("DATABASE_URL", url, cfg.DatabasePooler)
	if err != nil {
		return nil, err
	}
	// Query spans of traced requests and jobs only.
	poolCfg.ConnConfig.Tracer = telemetry.PgxTracer{}
	if counter != nil {
		// Both see every query and batch, in this order.
		poolCfg.ConnConfig.Tracer = multitracer.New(telemetry.PgxTracer{}, counter)
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
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

// directPool is PostgreSQL itself, for what needs a session of its own: a
// pool of its own on DATABASE_DIRECT_URL behind a pooler, else the pool.
type directPool struct {
	*pgxpool.Pool
	own bool
}

// Close closes the pool if it is one of its own.
func (d directPool) Close() {
	if d.own {
		d.Pool.Close()
	}
}

// connectDirect opens the direct pool: on DATABASE_DIRECT_URL when it is
// set, else pool (DATABASE_URL reaches PostgreSQL itself).
func connectDirect(ctx context.Context, cfg *config, pool *pgxpool.Pool) (directPool, error) {
	if cfg.DatabaseDirectURL == "" {
		return directPool{Pool: pool}, nil
	}
	poolCfg, err := poolConfig("DATABASE_DIRECT_URL", cfg.DatabaseDirectURL, poolerNone)
	if err != nil {
		return directPool{}, err
	}
	poolCfg.ConnConfig.Tracer = telemetry.PgxTracer{}
	direct, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return directPool{}, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := direct.Ping(pingCtx); err != nil {
		direct.Close()
		return directPool{}, fmt.Errorf("connect to the database (DATABASE_DIRECT_URL): %w", err)
	}
	return directPool{Pool: direct, own: true}, nil
}

func migrate(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	if err := newCommand("migrate", "migrate\n\nApplies the pending migrations, the service's and River's, to DATABASE_URL.", stdout).parse(args, 0); err != nil {
		return err
	}
	cfg, err := configFromEnv(backends{})
	if err != nil {
		return err
	}
	pool, err := connect(ctx, cfg, logger, true, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	direct, err := connectDirect(ctx, cfg, pool)
	if err != nil {
		return err
	}
	defer direct.Close()
	res, err := migrations.Migrate(ctx, direct.Pool)
	if err != nil {
		return err
	}
	logger.Info("migrated", "applied", res.Applied, "river_applied", res.RiverApplied)
	return nil
}

func serve(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	cmd := newCommand("serve", "serve [-no-migrate] [-dev]\n\nServes the HTTP API, the booking pages and River UI, and runs the River workers.\nConfiguration comes from the environment: see docs/operations.md. Without -dev, STRIPE_SECRET_KEY\nand SMTP_URL are required.", stdout)
	noMigrate := cmd.fs.Bool("no-migrate", false, "do not apply pending migrations at start")
	dev := cmd.fs.Bool("dev", false, "development: without STRIPE_SECRET_KEY use the built-in fake Stripe, without SMTP_URL the built-in mail sink")
	if err := cmd.parse(args, 0); err != nil {
		return err
	}
	// A missing or invalid configuration is refused before anything is
	// touched.
	needs := backends{stripe: true, mail: true, dev: *dev}
	cfg, err := configFromEnv(needs)
	if err != nil {
		return err
	}
	stopTracing, err := setupTracing(ctx, logger)
	if err != nil {
		return err
	}
	defer stopTracing() // after everything that makes spans has stopped

	adminToken, generated := cfg.AdminToken, cfg.AdminTokenGenerated
	if generated {
		logger.Warn("ADMIN_TOKEN not set: generated one for this run, printed in the banner", "admin_token_sha256", fingerprint(adminToken))
	}

	// Statements and round trips to the database, on /metrics.
	dbCounter := &service.DBCounter{}
	pool, err := connect(ctx, cfg, logger, true, dbCounter)
	if err != nil {
		return err
	}
	defer pool.Close() // last: after HTTP and River have stopped
	// PostgreSQL itself, behind a pooler: for the migrations' advisory lock
	// and the listeners.
	direct, err := connectDirect(ctx, cfg, pool)
	if err != nil {
		return err
	}
	defer direct.Close()

	if !*noMigrate {
		if _, err := migrations.Migrate(ctx, direct.Pool); err != nil {
			return err
		}
	}

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), dbCounter)
	p, devNote, stopDeps, err := newService(pool, direct.Pool, cfg, registry, logger, needs)
	if err != nil {
		return err
	}
	defer stopDeps()
	svc, acc := p.svc, p.accounts
	if svc.InboxEnabled(service.InboxSourceStripe) {
		logger.Info("webhooks on: Stripe events are received at POST /webhooks/stripe", "secrets", len(cfg.StripeWebhookSecrets))
	} else {
		logger.Warn("webhooks off: STRIPE_WEBHOOK_SECRET not set, POST /webhooks/stripe answers 404; refunds and disputes made at Stripe are seen only by reconciliation")
	}
	if svc.InboxEnabled(service.InboxSourceAdyen) {
		logger.Info("Adyen notifications on: received at POST /webhooks/adyen", "hmac_keys", len(cfg.AdyenHMACKeys), "merchant_account", cfg.AdyenMerchantAccount)
	} else if slices.Contains(svc.Processors(), service.ProcessorAdyen) {
		logger.Warn("Adyen notifications off: ADYEN_HMAC_KEY not set, POST /webhooks/adyen answers 404; Adyen payments no ride records (double charges after a lost commit) are not seen")
	}
	// Revoked API keys are forgotten by this process's auth cache as they are
	// announced; the goroutine ends with ctx.
	go func() { _ = acc.ListenAPIKeyRevocations(ctx) }()
	// The database's heartbeat: a restore or a failover that lost commits
	// is noticed by the beat it left stale (service/database_gaps.go). The
	// first beat runs before any request or job; the goroutine ends with ctx.
	if _, err := svc.Heartbeat(ctx); err != nil {
		logger.Warn("database heartbeat", "err", err)
	}
	go svc.RunHeartbeat(ctx)

	riverCfg := jobs.RiverConfig(cfg.jobsConfig(logger), jobs.Parts{Service: svc, Settlements: p.settlements, Receipts: p.receipts})
	// A job's run continues the trace of the phase that inserted it.
	riverCfg.Plugins = []rivertype.Plugin{telemetry.NewRiverMiddleware(nil)}
	riverClient, err := river.NewClient(riverDriver(pool, direct.Pool), riverCfg)
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

	admission, stopLimits := newLimits(cfg, pool, svc, registry, logger)
	defer stopLimits()
	handler := openapi.NewHandler(openapi.Config{
		Limits:        admission,
		Service:       svc,
		Accounts:      acc,
		AdminToken:    adminToken,
		DispatchToken: cfg.DispatchToken,
		RiverUI:       ui,
		Ready:         func(ctx context.Context) error { return ready(ctx, pool) },
		Logger:        logger,
		Metrics:       registry,
		Pages:         web.New(web.Config{Service: svc, Accounts: acc, Secret: adminToken, Logger: logger, PublicURL: cfg.PublicURL}),
	})
	if metricsAddr := cfg.MetricsAddr; metricsAddr != "" {
		mln, err := net.Listen("tcp", metricsAddr)
		if err != nil {
			return err
		}
		msrv := newHTTPServer(openapi.MetricsHandler(registry))
		go func() { _ = msrv.Serve(mln) }()
		defer msrv.Close()
		logger.Info("metrics serving", "url", "http://"+mln.Addr().String()+"/metrics")
	}
	if pprofAddr := cfg.PprofAddr; pprofAddr != "" {
		stopPprof, err := servePprof(pprofAddr, logger)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	srv := newHTTPServer(handler)
	base := "http://" + ln.Addr().String()
	logger.Info("serving", "url", base, "river_ui", base+"/riverui/", "openapi", base+"/openapi.yaml", "docs", base+"/docs", "admin_token_sha256", fingerprint(adminToken))
	printBanner(os.Stderr, base, adminToken, generated, devNote)

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
// middleware use; stop flushes the spans not yet exported. The OTEL_*
// variables are read by package telemetry, as the OpenTelemetry
// specification defines them.
func setupTracing(ctx context.Context, logger *slog.Logger) (stop func(), err error) {
	tracing, err := telemetry.Setup(ctx, os.Getenv)
	if err != nil {
		// Its message names the OTEL_* variable at fault.
		return nil, &configError{msg: err.Error()}
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

// paymentsFrom returns the Stripe adapter with STRIPE_SECRET_KEY, pointed
// at STRIPE_API_BASE when set (any Stripe-compatible API). Without a key,
// and only with dev, it starts the built-in fake Stripe on a loopback port
// for this process, and says so loudly.
func paymentsFrom(cfg *config, logger *slog.Logger, dev bool) (pay service.Payments, fake *fakestripe.Server, note string, stop func(), err error) {
	if cfg.StripeSecretKey == "" {
		if !dev {
			return nil, nil, "", nil, errors.New("STRIPE_SECRET_KEY: not set") // refused by loadConfig first
		}
		fake := fakestripe.New(fakestripe.Options{Logger: logger})
		url, stop, err := fake.Start("127.0.0.1:0")
		if err != nil {
			return nil, nil, "", nil, err
		}
		logger.Warn("-dev: STRIPE_SECRET_KEY not set, charges go to the built-in FAKE Stripe; never use this mode for real riders",
			"url", url, "ledger", url+"/_fake/ledger")
		// The fake delivers its events to this server, signed with its
		// development secret, which the inbox then verifies.
		if len(cfg.StripeWebhookSecrets) == 0 {
			cfg.StripeWebhookSecrets = []string{fakestripe.DevWebhookSecret}
		}
		fake.SetWebhookEndpoint(&fakestripe.WebhookEndpoint{URL: webhookURL(cfg.Addr), Secret: cfg.StripeWebhookSecrets[0]})
		return payments.New(payments.Config{SecretKey: "sk_test_fake", APIBase: url, Timeout: cfg.StripeTimeout}), fake,
			"fake Stripe at " + url, func() { _ = stop(context.Background()) }, nil
	}
	if cfg.StripeKeyWindow > 0 && cfg.StripeKeyWindow != service.ProcessorKeyWindow {
		logger.Warn("STRIPE_KEY_WINDOW: the Stripe API at STRIPE_API_BASE is taken to forget idempotency keys after this window, not Stripe's 24h: a test API only, never Stripe",
			"key_window", cfg.StripeKeyWindow, "api_base", cfg.StripeAPIBase)
	}
	return payments.New(payments.Config{SecretKey: cfg.StripeSecretKey, APIBase: cfg.StripeAPIBase, Timeout: cfg.StripeTimeout,
		KeyWindow: cfg.StripeKeyWindow}), nil, "", func() {}, nil
}

// adyenFrom returns the Adyen adapter with ADYEN_API_KEY and
// ADYEN_MERCHANT_ACCOUNT, pointed at ADYEN_API_BASE when set. Without a
// key, and only with dev, it starts the built-in fake Adyen on a loopback
// port for this process, and says so loudly.
func adyenFrom(cfg *config, logger *slog.Logger, dev bool) (pay service.Payments, note string, stop func(), err error) {
	if cfg.AdyenAPIKey != "" {
		return adyen.New(adyen.Config{APIKey: cfg.AdyenAPIKey, MerchantAccount: cfg.AdyenMerchantAccount,
			APIBase: cfg.AdyenAPIBase, Timeout: cfg.StripeTimeout}), "", func() {}, nil
	}
	if !dev {
		return nil, "", nil, errors.New("ADYEN_API_KEY: not set") // refused by loadConfig first
	}
	fake := fakeadyen.New(fakeadyen.Options{Logger: logger})
	url, stopFake, err := fake.Start("127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	logger.Warn("-dev: ADYEN_API_KEY not set, Adyen payments go to the built-in FAKE Adyen; never use this mode for real riders", "url", url)
	// The fake notifies this server, signing with its development HMAC
	// key, which the inbox then verifies.
	if cfg.AdyenMerchantAccount == "" {
		cfg.AdyenMerchantAccount = fakeadyen.DevMerchantAccount
	}
	if len(cfg.AdyenHMACKeys) == 0 {
		cfg.AdyenHMACKeys = []string{fakeadyen.DevHMACKey}
	}
	fake.SetNotificationEndpoint(&fakeadyen.NotificationEndpoint{URL: webhookURLOf(cfg.Addr, "/webhooks/adyen"), HMACKey: cfg.AdyenHMACKeys[0]})
	return adyen.New(adyen.Config{APIKey: "test_fake", MerchantAccount: cfg.AdyenMerchantAccount, APIBase: url, Timeout: cfg.StripeTimeout}),
		"fake Adyen at " + url, func() { _ = stopFake(context.Background()) }, nil
}

// webhookURL is the Stripe webhook endpoint of a server listening on addr,
// as the built-in fake reaches it.
func webhookURL(addr string) string { return webhookURLOf(addr, "/webhooks/stripe") }

// webhookURLOf is the URL of path on a server listening on addr, as a
// built-in fake reaches it.
func webhookURLOf(addr, path string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + path
}

func serveFakeStripe(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	cmd := newCommand("fakestripe", "fakestripe [-addr HOST:PORT] [-key-window 24h]\n\nServes the built-in fake Stripe (for development and tests) until interrupted.", stdout)
	addr := cmd.fs.String("addr", "", "listen address (default FAKESTRIPE_ADDR, else "+defaultFakeStripeAddr+")")
	keyWindow := cmd.fs.Duration("key-window", fakestripe.KeyLifetime, "how long idempotency keys are remembered (Stripe: 24h); shorter only for tests, with STRIPE_KEY_WINDOW the same at the service")
	if err := cmd.parse(args, 0); err != nil {
		return err
	}
	cfg, err := configFromEnv(backends{})
	if err != nil {
		return err
	}
	if *addr == "" {
		*addr = cfg.FakeStripeAddr
	}
	if *keyWindow <= 0 {
		return usagef("fakestripe: -key-window must be a positive duration, e.g. 24h")
	}
	fake := fakestripe.New(fakestripe.Options{Logger: logger, KeyLifetime: *keyWindow})
	url, stop, err := fake.Start(*addr)
	if err != nil {
		return err
	}
	if *keyWindow != fakestripe.KeyLifetime {
		logger.Warn("fake Stripe: idempotency keys are forgotten after -key-window, not Stripe's 24h: the service must run with the same STRIPE_KEY_WINDOW",
			"key_window", *keyWindow)
	}
	logger.Info("fake Stripe serving", "url", url, "ledger", url+"/_fake/ledger", "key_window", *keyWindow)
	<-ctx.Done()
	return stop(context.WithoutCancel(ctx))
}

func serveFakeAdyen(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	cmd := newCommand("fakeadyen", "fakeadyen [-addr HOST:PORT]\n\nServes the built-in fake Adyen (for development and tests) until interrupted.", stdout)
	addr := cmd.fs.String("addr", "", "listen address (default FAKEADYEN_ADDR, else "+defaultFakeAdyenAddr+")")
	if err := cmd.parse(args, 0); err != nil {
		return err
	}
	cfg, err := configFromEnv(backends{})
	if err != nil {
		return err
	}
	if *addr == "" {
		*addr = cfg.FakeAdyenAddr
	}
	fake := fakeadyen.New(fakeadyen.Options{Logger: logger})
	url, stop, err := fake.Start(*addr)
	if err != nil {
		return err
	}
	logger.Info("fake Adyen serving", "url", url, "api_base", url+"/v71", "ledger", url+"/_fake/ledger")
	<-ctx.Done()
	return stop(context.WithoutCancel(ctx))
}

func dbCommand(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	cmd := newCommand("db", "db up|down|url\n\n  up    start the throwaway development PostgreSQL if needed, and print its URL\n  url   the same: print the URL of the database the service uses\n  down  stop the throwaway development PostgreSQL", stdout)
	if err := cmd.parse(args, 1); err != nil {
		return err
	}
	if cmd.fs.NArg() != 1 {
		return usagef("db: missing subcommand: up, down or url (see atomicrides db --help)")
	}
	switch cmd.fs.Arg(0) {
	case "up", "url", "down":
	default:
		return usagef("db: unknown subcommand %q: want up, down or url", cmd.fs.Arg(0))
	}
	cfg, err := configFromEnv(backends{})
	if err != nil {
		return err
	}
	switch cmd.fs.Arg(0) {
	case "up", "url":
		url, err := databaseURL(ctx, cfg, logger, true)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, url)
		return nil
	case "down":
		root, err := pgenv.FindProjectRoot(".")
		if err != nil {
			return err
		}
		return pgenv.StopCluster(ctx, root+"/.pgdata")
	}
	return usagef("db: unknown subcommand %q: want up, down or url", cmd.fs.Arg(0))
}

// newService builds the service over pool with what needs asks for: the
// payment processor and the mailer of cfg, or with needs.dev the built-in
// fakes in place of those cfg lacks. A command that reaches neither (keys
// list, keys show) gets a Stripe client it never calls. devNote says which
// fakes run; stop releases what was started.
func newService(pool, direct *pgxpool.Pool, cfg *config, reg prometheus.Registerer, logger *slog.Logger, needs backends) (p *parts, devNote string, stop func(), err error) {
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
	var notes []string
	// Never called; its budget (from STRIPE_TIMEOUT) sizes the lease as in serve.
	var pay service.Payments = payments.New(payments.Config{Timeout: cfg.StripeTimeout})
	if needs.stripe {
		p, fake, note, stopStripe, err := paymentsFrom(cfg, logger, needs.dev)
		if err != nil {
			return nil, "", nil, err
		}
		stops = append(stops, stopStripe)
		pay = p
		if note != "" {
			notes = append(notes, note)
		}
		// With the fake Stripe and no bank configured, a fake bank settles
		// the fake's ledger into an inbox served over SFTP, and cfg points
		// the settlement fetch at it.
		if fake != nil && cfg.SettlementInbox == nil {
			note, stopBank, err := startDevBank(cfg, fake, logger)
			if err != nil {
				return nil, "", nil, err
			}
			stops = append(stops, stopBank)
			notes = append(notes, note)
		}
	}
	procs := []service.Processor{{Name: service.ProcessorStripe, Payments: pay}}
	if needs.stripe {
		names := cfg.Processors
		if needs.dev && !cfg.ProcessorsSet {
			names = []string{service.ProcessorStripe, service.ProcessorAdyen}
		}
		procs = procs[:0]
		for _, name := range names {
			switch name {
			case service.ProcessorStripe:
				procs = append(procs, service.Processor{Name: name, Payments: pay})
			case service.ProcessorAdyen:
				a, note, stopAdyen, err := adyenFrom(cfg, logger, needs.dev)
				if err != nil {
					return nil, "", nil, err
				}
				stops = append(stops, stopAdyen)
				procs = append(procs, service.Processor{Name: name, Payments: a})
				if note != "" {
					notes = append(notes, note)
				}
			}
		}
	}
	var mailer service.Mailer
	if needs.mail {
		m, note, stopMail, err := mailerFrom(cfg, logger, needs.dev)
		if err != nil {
			return nil, "", nil, err
		}
		stops = append(stops, stopMail)
		mailer = m
		if note != "" {
			notes = append(notes, note)
		}
	}
	inbound := map[string]service.EventSource{}
	if len(cfg.StripeWebhookSecrets) > 0 {
		events, err := payments.NewEvents(cfg.StripeWebhookSecrets, 0)
		if err != nil {
			return nil, "", nil, err
		}
		inbound[service.InboxSourceStripe] = events
	}
	if len(cfg.AdyenHMACKeys) > 0 {
		notes, err := adyen.NewNotifications(cfg.AdyenHMACKeys, cfg.AdyenMerchantAccount)
		if err != nil {
			return nil, "", nil, err
		}
		inbound[service.InboxSourceAdyen] = notes
	}
	svc, err := service.New(service.Config{
		Inbound:    inbound,
		Pool:       pool,
		Processors: procs, Logger: logger, Registerer: reg,
		// Zero values take the service's defaults.
		AbandonedAfter: cfg.CompleterIdle, KeyRetention: cfg.KeyRetention, Lease: cfg.Lease,
		OrphanRefundAfter: cfg.OrphanRefundAfter,
		ActionDeadline:    cfg.ActionDeadline, PublicURL: publicURL(cfg),
		Capture: cfg.Capture, HoldExpiry: cfg.HoldExpiry,
		BreakerOpenFor: cfg.CircuitOpenFor,
	})
	if err != nil {
		return nil, "", nil, err
	}
	p, err = newParts(svc, mailer, direct.Config().ConnConfig, cfg, reg, logger, needs.dev)
	if err != nil {
		return nil, "", nil, err
	}
	return p, strings.Join(notes, "; "), stopAll, nil
}

// parts are the service and the domain's packages beside it, built on its
// engine and job client: what serve's adapters, the jobs and the commands
// call.
type parts struct {
	svc         *service.Service
	accounts    *accounts.Service
	settlements *settlements.Service
	receipts    *receipts.Service
}

// newParts builds the parts over svc; receipts go out through mailer (nil:
// their jobs fail and are retried), the revocation listener connects with
// listen (PostgreSQL itself, never through PgBouncer), and riders may come
// without a payment source only with dev.
func newParts(svc *service.Service, mailer service.Mailer, listen *pgx.ConnConfig, cfg *config, reg prometheus.Registerer, logger *slog.Logger, dev bool) (*parts, error) {
	acc, err := accounts.New(accounts.Config{
		Engine: svc.Engine(), Jobs: svc.Jobs(), ListenConfig: listen, DevDefaultPaymentSource: dev, Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	st, err := settlements.New(settlements.Config{
		Engine: svc.Engine(), Jobs: svc.Jobs(), Registerer: reg,
		// Zero values take the settlements' defaults.
		MaxAge: cfg.SettlementMaxAge,
	})
	if err != nil {
		return nil, err
	}
	rec, err := receipts.New(receipts.Config{Engine: svc.Engine(), Mailer: mailer, From: cfg.MailFrom, Registerer: reg})
	if err != nil {
		return nil, err
	}
	return &parts{svc: svc, accounts: acc, settlements: st, receipts: rec}, nil
}

// mailConfig is the mailer's configuration for the SMTP server at url. It
// keeps as many idle sessions as receipts the process sends at once (its
// job workers), so that no session is ended under load only to be dialled
// again for the next receipt.
func mailConfig(url string) mail.Config {
	return mail.Config{URL: url, MaxIdle: jobs.DefaultMaxWorkers}
}

// mailerFrom returns the SMTP mailer of SMTP_URL. Without it, and only with
// dev, it starts a mail sink on a loopback port of this process that writes
// every receipt to MAIL_DIR (default .mail/) as an .eml file, or to no file
// with MAIL_DIR=off, and says so loudly.
func mailerFrom(cfg *config, logger *slog.Logger, dev bool) (m service.Mailer, note string, stop func(), err error) {
	if cfg.SMTPURL != "" {
		m, err := mail.New(mailConfig(cfg.SMTPURL))
		if err != nil {
			return nil, "", nil, fmt.Errorf("SMTP_URL: %w", err)
		}
		return m, "", func() { _ = m.Close() }, nil
	}
	if !dev {
		return nil, "", nil, errors.New("SMTP_URL: not set") // refused by loadConfig first
	}
	sink := mailsink.New(mailsink.Options{Dir: cfg.MailDir, Logger: logger})
	url, stopSink, err := sink.Start("127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	logger.Warn("-dev: SMTP_URL not set, receipts go to the built-in mail sink, not to riders", "smtp", url, "dir", cfg.MailDir)
	mailer, err := mail.New(mailConfig(url))
	if err != nil {
		_ = stopSink(context.Background())
		return nil, "", nil, err
	}
	note = "receipts in " + cfg.MailDir + "/"
	if cfg.MailDir == "" {
		note = "receipts kept in no file (MAIL_DIR=off)"
	}
	return mailer, note, func() {
		_ = mailer.Close()
		_ = stopSink(context.Background())
	}, nil
}

func serveMailSink(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	cmd := newCommand("mailsink", "mailsink [-addr HOST:PORT] [-dir DIR]\n\nServes an SMTP server that keeps what it receives (for development) until interrupted.", stdout)
	addr := cmd.fs.String("addr", "", "listen address (default MAILSINK_ADDR, else "+defaultMailSinkAddr+")")
	dir := cmd.fs.String("dir", "", "directory receiving each message as an .eml file (default MAIL_DIR, else "+defaultMailDir+"; \"-\": none)")
	if err := cmd.parse(args, 0); err != nil {
		return err
	}
	cfg, err := configFromEnv(backends{})
	if err != nil {
		return err
	}
	if *addr == "" {
		*addr = cfg.MailSinkAddr
	}
	switch *dir {
	case "":
		*dir = cfg.MailDir
	case "-":
		*dir = ""
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
	srv := newHTTPServer(pprofHandlers())
	go func() { _ = srv.Serve(ln) }()
	logger.Info("pprof serving", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() { _ = srv.Close() }, nil
}

// minAdminTokenLen is the shortest ADMIN_TOKEN accepted: 32 characters,
// e.g. `openssl rand -hex 24` (48).
const minAdminTokenLen = 32

// fingerprint tells operator tokens apart in logs without revealing them:
// the first 8 hex digits of the token's SHA-256.
func fingerprint(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:4])
}

// printBanner tells the person who started the server where everything is.
// The admin token itself is printed only when this process generated it
// (there is no other way to learn it); a supplied one is referred to as
// $ADMIN_TOKEN, so that the banner never copies an operator's secret into
// a log.
//
// devNote, when set, says which built-in fakes stand in for Stripe and SMTP
// (serve -dev).
func printBanner(w io.Writer, base, adminToken string, generated bool, devNote string) {
	token, shown := "$ADMIN_TOKEN", "from ADMIN_TOKEN (sha256 "+fingerprint(adminToken)+"…)"
	if generated {
		token, shown = adminToken, adminToken+"  (generated for this run: set ADMIN_TOKEN to keep one)"
	}
	if devNote != "" {
		devNote = "  DEVELOPMENT MODE (-dev): " + devNote + "\n"
	}
	fmt.Fprintf(w, "\nAtomic Rides is serving on %s\n%s  admin token: %s\n  API docs:    %s/docs  (the reference, rendered from %s/openapi.yaml)\n  River UI:    %s/riverui/  (any user name, the admin token as password)\n  metrics:     %s/metrics  (Bearer admin token)\n  try:\n    curl -s -X PUT -H \"Authorization: Bearer %s\" %s/users/rider@example.com\n\n",
		base, devNote, shown, base, base, base, base, token, base)
}

func randomToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// publicURL is where riders reach the service: PUBLIC_URL, or else this
// machine at the API's port (config.go requires PUBLIC_URL with a live
// Stripe key).
func publicURL(cfg *config) string {
	if cfg.PublicURL != "" {
		return cfg.PublicURL
	}
	_, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil || port == "" {
		return ""
	}
	return "http://localhost:" + port
}
