package pgenv

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
)

// WithDatabase returns connString (a postgres:// URL or a keyword/value DSN)
// changed to connect to the database name, everything else kept.
func WithDatabase(connString, name string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", fmt.Errorf("pgenv: parse database URL: %w", redactURLError(err))
		}
		u.Path, u.RawPath = "/"+name, ""
		return u.String(), nil
	}
	if _, err := pgx.ParseConfig(connString); err != nil {
		return "", fmt.Errorf("pgenv: parse connection string: %w", err)
	}
	// In a keyword/value string the last setting of a keyword wins.
	quoted := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(name)
	return strings.TrimSpace(connString) + " dbname='" + quoted + "'", nil
}

// redactURLError drops the URL (which may hold a password) from a
// *url.Error.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
