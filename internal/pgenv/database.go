package pgenv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ensureDatabase creates the database name on the server of adminURL unless
// it exists, and returns adminURL changed to connect to it. Concurrent
// callers, in any processes, may race: losing the race is success.
func ensureDatabase(ctx context.Context, adminURL, name string) (string, error) {
	target, err := WithDatabase(adminURL, name)
	if err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("pgenv: connect to create database %q: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("pgenv: look for database %q: %w", name, err)
	}
	if exists {
		return target, nil
	}
	create := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	for delay := 20 * time.Millisecond; ; delay *= 2 {
		_, err = conn.Exec(ctx, create)
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			return target, nil
		case errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505"):
			return target, nil // duplicate_database, or a concurrent creation's unique_violation
		case errors.As(err, &pgErr) && pgErr.Code == "55006" && delay < 2*time.Second:
			// object_in_use: someone is connected to template1; retry.
		default:
			return "", fmt.Errorf("pgenv: create database %q: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(delay):
		}
	}
}
