// Command atomicrides books rides and charges riders exactly once.
//
//	atomicrides serve        run the HTTP API and the River workers
//	atomicrides migrate      apply pending migrations (the service's and River's)
//	atomicrides openapi      print the OpenAPI spec (YAML)
//	atomicrides keys …       list, show and complete stuck requests (operators)
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
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"riverqueue.com/riverui"

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
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
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
// answers. A non-nil tracer traces every connection of the pool.
func connect(ctx context.Context, logger *slog.Logger, start bool, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	url, err := databaseURL(ctx, logger, start)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if tracer != nil {
		cfg.ConnConfig.Tracer = tracer
	}
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
	pool, err := connect(ctx, logger, true, nil)
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
	if err := fs.Parse(args); err != nil {
		return err
	}
	addr := envOr("ADDR", "127.0.0.1:8080")
	adminToken := os.Getenv("ADMIN_TOKEN")
	if adminToken == "" {
		adminToken = randomToken()
		logger.Warn("ADMIN_TOKEN not set: generated one for this run", "admin_token", adminToken)
	}

	// Statements and round trips to the database, on /metrics.
	dbCounter := &service.DBCounter{}
	pool, err := connect(ctx, logger, true, dbCounter)
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
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), dbCounter)
	svc, stopDeps, err := newService(pool, registry, logger)
	if err != nil {
		return err
	}
	defer stopDeps()

	jobsCfg, err := jobsConfigFromEnv(logger)
	if err != nil {
		return err
	}
	riverCfg := jobs.RiverConfig(jobsCfg, svc)
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
	logger.Info("serving", "url", base, "river_ui", base+"/riverui/", "openapi", base+"/openapi.yaml")
	fmt.Fprintf(os.Stderr, "\nAtomic Rides is serving on %s\n  admin token: %s\n  River UI:    %s/riverui/  (any user name, the admin token as password)\n  metrics:     %s/metrics  (Bearer admin token)\n  try:\n    curl -s -X PUT -H 'Authorization: Bearer %s' %s/users/rider@example.com\n\n",
		base, adminToken, base, base, adminToken, base)

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

// paymentsFromEnv returns the Stripe adapter pointed at STRIPE_API_BASE (any
// Stripe-compatible API) with STRIPE_SECRET_KEY; with neither set, at the
// built-in fake Stripe served on a loopback port for this process.
func paymentsFromEnv(logger *slog.Logger) (service.Payments, func(), error) {
	key, base := os.Getenv("STRIPE_SECRET_KEY"), os.Getenv("STRIPE_API_BASE")
	if key == "" && base == "" {
		fake := fakestripe.New(fakestripe.Options{Logger: logger})
		url, stop, err := fake.Start("127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		logger.Info("STRIPE_SECRET_KEY and STRIPE_API_BASE not set: using the built-in fake Stripe", "url", url, "ledger", url+"/_fake/ledger")
		return payments.New(payments.Config{SecretKey: "sk_test_fake", APIBase: url}),
			func() { _ = stop(context.Background()) }, nil
	}
	if key == "" {
		key = "sk_test_123" // stripe-mock and most fakes accept any key
	}
	timeout, err := envDuration("STRIPE_TIMEOUT")
	if err != nil {
		return nil, nil, err
	}
	return payments.New(payments.Config{SecretKey: key, APIBase: base, Timeout: timeout}), func() {}, nil
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

// newService builds the service over pool with the payment processor and the
// mailer configured by the environment; stop releases what it started.
func newService(pool *pgxpool.Pool, reg prometheus.Registerer, logger *slog.Logger) (svc *service.Service, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	pay, stopStripe, err := paymentsFromEnv(logger)
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, stopStripe)
	mailer, stopMail, err := mailerFromEnv(logger)
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, stopMail)
	cfg := service.Config{Pool: pool, Payments: pay, Mailer: mailer, MailFrom: os.Getenv("MAIL_FROM"), Logger: logger, Registerer: reg}
	if cfg.AbandonedAfter, err = envDuration("COMPLETER_IDLE"); err != nil {
		return nil, nil, err
	}
	if cfg.KeyRetention, err = envDuration("KEY_RETENTION"); err != nil {
		return nil, nil, err
	}
	if cfg.Lease, err = envDuration("LEASE"); err != nil {
		return nil, nil, err
	}
	svc, err = service.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	return svc, stop, nil
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

// mailerFromEnv returns the SMTP mailer of SMTP_URL; without it, a mail sink
// on a loopback port of this process that writes every receipt to MAIL_DIR
// (default .mail/) as an .eml file, or to no file with MAIL_DIR=off.
func mailerFromEnv(logger *slog.Logger) (service.Mailer, func(), error) {
	if u := os.Getenv("SMTP_URL"); u != "" {
		m, err := mail.New(mail.Config{URL: u})
		return m, func() {}, err
	}
	dir := envOr("MAIL_DIR", defaultMailDir)
	if dir == "off" {
		dir = ""
	}
	sink := mailsink.New(mailsink.Options{Dir: dir, Logger: logger})
	url, stop, err := sink.Start("127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	logger.Info("SMTP_URL not set: receipts go to the built-in mail sink", "smtp", url, "dir", dir)
	m, err := mail.New(mail.Config{URL: url})
	return m, func() { _ = stop(context.Background()) }, err
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
