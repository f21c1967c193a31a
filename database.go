package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// failoverConnectTimeout bounds the connection attempt to each host of a
// DATABASE_URL that names several, when the URL sets no connect_timeout: a
// primary whose machine is gone drops packets rather than refusing them,
// and without a bound the attempt on it would outlast the request before
// the next host was tried.
const failoverConnectTimeout = 5 * time.Second

// poolConfig parses DATABASE_URL. A URL may name several hosts
// (postgres://h1:5432,h2:5432/db?target_session_attrs=read-write): pgx
// tries them in order for every new connection and keeps the first that
// takes writes, so after a failover the pool's new connections reach the
// promoted primary while the broken ones are dropped as they fail.
func poolConfig(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's message may hold the password.
		return nil, errors.New("DATABASE_URL: not a valid PostgreSQL connection string")
	}
	if hosts(cfg) > 1 && cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = failoverConnectTimeout
	}
	return cfg, nil
}

// hosts counts the distinct host:port pairs cfg connects to (pgx also
// lists one host twice, with and without TLS, for sslmode=prefer).
func hosts(cfg *pgxpool.Config) int {
	seen := map[string]bool{fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port): true}
	for _, f := range cfg.ConnConfig.Fallbacks {
		seen[fmt.Sprintf("%s:%d", f.Host, f.Port)] = true
	}
	return len(seen)
}
