package dbtest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/atomicrides/atomicrides/internal/pgenv"
	"github.com/atomicrides/atomicrides/sql/migrations"
)

// templateLockID is the advisory lock (in the maintenance database) under
// which test processes look for, and build, the template.
const templateLockID = 0x64627470_6c746d70 // "dbtplmp"

// templateName names the template of the current migrations.
func templateName() string { return "atomicrides_tpl_" + migrations.Hash() }

// ensureTemplate makes sure the database tpl exists and is migrated. Many
// processes may call it at once: under an advisory lock, the first builds
// it as tpl_build and renames it into place only when migrated, so a
// database named tpl is always complete. It is left unconnectable
// (ALLOW_CONNECTIONS false), so copying it never meets "source database is
// being accessed by other users", and marked IS_TEMPLATE.
func ensureTemplate(ctx context.Context, adminURL string, admin *pgxpool.Pool, tpl string) error {
	conn, err := admin.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect to the maintenance database: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(templateLockID)); err != nil {
		return fmt.Errorf("lock the template: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(templateLockID))
	}()

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", tpl).Scan(&exists); err != nil {
		return fmt.Errorf("look for the template %s: %w", tpl, err)
	}
	if exists {
		return nil
	}

	build := tpl + "_build"
	for _, sql := range []string{
		"DROP DATABASE IF EXISTS " + ident(build) + " WITH (FORCE)", // left by a crashed builder
		"CREATE DATABASE " + ident(build) + " TEMPLATE template0",
	} {
		if err := retryInUse(ctx, func() error { _, err := conn.Exec(ctx, sql); return err }); err != nil {
			return fmt.Errorf("build the template: %w", err)
		}
	}
	if err := migrate(ctx, adminURL, build); err != nil {
		return err
	}
	for _, sql := range []string{
		"ALTER DATABASE " + ident(build) + " WITH ALLOW_CONNECTIONS false",
		// The migration's sessions end a moment after its pool closes.
		"ALTER DATABASE " + ident(build) + " RENAME TO " + ident(tpl),
		"ALTER DATABASE " + ident(tpl) + " WITH IS_TEMPLATE true",
	} {
		if err := retryInUse(ctx, func() error { _, err := conn.Exec(ctx, sql); return err }); err != nil {
			return fmt.Errorf("publish the template %s: %w", tpl, err)
		}
	}
	return nil
}

// migrate applies every migration to the database name.
func migrate(ctx context.Context, adminURL, name string) error {
	url, err := pgenv.WithDatabase(adminURL, name)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("migrate the template: %w", err)
	}
	defer pool.Close()
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("migrate the template: %w", err)
	}
	return nil
}

// retryInUse runs f until it does not fail with object_in_use (SQLSTATE
// 55006, "database … is being accessed by other users"), backing off
// exponentially for at most about half a minute.
func retryInUse(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		err := f()
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || time.Now().Add(delay).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(delay):
		}
	}
}
