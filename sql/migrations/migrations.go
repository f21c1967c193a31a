// Package migrations holds the service's schema as SQL files and applies them,
// together with River's own migrations, to a PostgreSQL database.
//
// The SQL files in this directory are the single source of the schema: sqlc
// reads them to type the queries, and Migrate applies them in lexical order.
// Each file is applied at most once, in its own transaction, under a
// session-level advisory lock so that several processes may migrate the same
// database at once.
package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed *.sql
var files embed.FS

// advisoryLockID serialises concurrent migrators on one database.
const advisoryLockID = 0x61746f6d6963 // "atomic"

// Migration is one schema file.
type Migration struct {
	// Version is the file name without its ".sql" suffix, e.g. "0001_init".
	Version string
	// SQL is the file's content.
	SQL string
}

// All returns every migration in the order it is applied.
func All() []Migration {
	entries, err := fs.Glob(files, "*.sql")
	if err != nil {
		panic(err) // the pattern is constant
	}
	sort.Strings(entries)
	out := make([]Migration, 0, len(entries))
	for _, name := range entries {
		b, err := files.ReadFile(name)
		if err != nil {
			panic(err) // embedded
		}
		out = append(out, Migration{Version: strings.TrimSuffix(name, ".sql"), SQL: string(b)})
	}
	return out
}

// Hash identifies the full set of migrations; databases migrated from the
// same set are interchangeable (the test template is keyed by it).
func Hash() string {
	h := sha256.New()
	for _, m := range All() {
		fmt.Fprintf(h, "%s\x00%s\x00", m.Version, m.SQL)
	}
	// River's migrations are part of the schema too.
	fmt.Fprintf(h, "river:%d", len(riverMigrator(nil).AllVersions()))
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func riverMigrator(pool *pgxpool.Pool) *rivermigrate.Migrator[pgx.Tx] {
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		panic(err) // only fails on an invalid configuration, which is constant
	}
	return m
}

// Result reports what Migrate did.
type Result struct {
	// Applied lists the service's migrations applied by this call.
	Applied []string
	// RiverApplied lists River's migration versions applied by this call.
	RiverApplied []int
}

// Migrate applies every pending migration, the service's and River's. It is
// idempotent: on an up-to-date database it applies nothing.
func Migrate(ctx context.Context, pool *pgxpool.Pool) (*Result, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()

	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", advisoryLockID); err != nil {
		return nil, fmt.Errorf("migrate: take advisory lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", advisoryLockID)
	}()

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    TEXT        PRIMARY KEY,
		applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
	)`); err != nil {
		return nil, fmt.Errorf("migrate: create schema_migrations: %w", err)
	}

	applied, err := appliedVersions(ctx, conn.Conn())
	if err != nil {
		return nil, err
	}

	res := &Result{}
	for _, m := range All() {
		if applied[m.Version] {
			continue
		}
		if err := pgx.BeginFunc(ctx, conn.Conn(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version) VALUES ($1)", m.Version)
			return err
		}); err != nil {
			return nil, fmt.Errorf("migrate: apply %s: %w", m.Version, err)
		}
		res.Applied = append(res.Applied, m.Version)
	}

	riverRes, err := riverMigrator(pool).Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return nil, fmt.Errorf("migrate: river: %w", err)
	}
	for _, v := range riverRes.Versions {
		res.RiverApplied = append(res.RiverApplied, v.Version)
	}
	return res, nil
}

// Pending returns the versions not yet applied to the database, River's
// included (as "river:<version>"). An empty result means the schema is current.
func Pending(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pending migrations: %w", err)
	}
	defer conn.Release()

	var pending []string
	applied, err := appliedVersions(ctx, conn.Conn())
	if err != nil {
		return nil, err
	}
	for _, m := range All() {
		if !applied[m.Version] {
			pending = append(pending, m.Version)
		}
	}

	rm := riverMigrator(pool)
	existing, err := rm.ExistingVersions(ctx)
	if err != nil {
		return nil, fmt.Errorf("pending migrations: river: %w", err)
	}
	have := make(map[int]bool, len(existing))
	for _, v := range existing {
		have[v.Version] = true
	}
	for _, v := range rm.AllVersions() {
		if !have[v.Version] {
			pending = append(pending, fmt.Sprintf("river:%d", v.Version))
		}
	}
	return pending, nil
}

func appliedVersions(ctx context.Context, conn *pgx.Conn) (map[string]bool, error) {
	rows, err := conn.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		var missing bool
		if pgErr := (interface{ SQLState() string })(nil); errors.As(err, &pgErr) {
			missing = pgErr.SQLState() == "42P01" // undefined_table
		}
		if missing {
			return map[string]bool{}, nil
		}
		return nil, fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	out := make(map[string]bool, len(versions))
	for _, v := range versions {
		out[v] = true
	}
	return out, nil
}
