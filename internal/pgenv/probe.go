package pgenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os/user"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// probeTimeout bounds each connection attempt to an already running server.
const probeTimeout = 2 * time.Second

// probeLocal looks for a server on addr that accepts user postgres, then the
// current OS user, without a password (trust, peer-less TCP, or ~/.pgpass and
// PGPASSWORD, which pgx honours), and returns a URL for its "postgres"
// database.
func probeLocal(ctx context.Context, addr string) (string, error) {
	users := []string{Superuser}
	if u, err := user.Current(); err == nil && u.Username != Superuser {
		users = append(users, u.Username)
	}
	var errs []error
	for _, name := range users {
		u := (&url.URL{Scheme: "postgres", User: url.User(name), Host: addr, Path: "/postgres", RawQuery: "sslmode=disable"}).String()
		err := ping(ctx, u, probeTimeout)
		if err == nil {
			return u, nil
		}
		errs = append(errs, fmt.Errorf("as %s: %w", name, err))
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			break // nothing answers there: another user will not help
		}
	}
	return "", errors.Join(errs...)
}
