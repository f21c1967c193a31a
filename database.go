package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/atomicrides/atomicrides/internal/pguuid"
)

// failoverConnectTimeout bounds the connection attempt to each host of a
// DATABASE_URL that names several, when the URL sets no connect_timeout: a
// primary whose machine is gone drops packets rather than refusing them,
// and without a bound the attempt on it would outlast the request before
// the next host was tried.
const failoverConnectTimeout = 5 * time.Second

// pooledExecModes are the values of the URL's default_query_exec_mode that
// work through PgBouncer's transaction pooling, where consecutive round
// trips outside a transaction may reach different server connections: none
// of them names a prepared statement, and none binds, in a later round
// trip, the unnamed statement an earlier one parsed. cache_statement (pgx's
// default: named prepared statements, which PgBouncer 1.18 does not carry
// between server connections) and describe_exec (parse and describe, then
// bind in a second round trip) do not.
var pooledExecModes = map[string]bool{"cache_describe": true, "exec": true, "simple_protocol": true}

// pooledExecMode is the exec mode of a pool behind PgBouncer when the URL
// names none: statement descriptions are cached per connection, so a query
// is one round trip (parse, bind, describe and execute in one message
// train) once its first execution described it, and parameters and results
// keep pgx's binary formats.
const pooledExecMode = pgx.QueryExecModeCacheDescribe

// poolConfig parses the connection string url of the variable name,
// reaching PostgreSQL through pooler
// (poolerNone or poolerPgBouncer). A URL may name several hosts
// (postgres://h1:5432,h2:5432/db?target_session_attrs=read-write): pgx
// tries them in order for every new connection and keeps the first that
// takes writes, so after a failover the pool's new connections reach the
// promoted primary while the broken ones are dropped as they fail. Behind
// PgBouncer, queries run in pooledExecMode unless the URL's
// default_query_exec_mode names another of pooledExecModes.
func poolConfig(name, url, pooler string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's message may hold the password.
		return nil, errors.New(name + ": not a valid PostgreSQL connection string")
	}
	cfg.AfterConnect = pguuid.AfterConnect
	if hosts(cfg) > 1 && cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = failoverConnectTimeout
	}
	if pooler == poolerPgBouncer {
		switch mode := execModeOf(url); {
		case mode == "":
			cfg.ConnConfig.DefaultQueryExecMode = pooledExecMode
		case !pooledExecModes[mode]:
			return nil, fmt.Errorf("%s: default_query_exec_mode=%s does not work through PgBouncer's transaction pooling", name, mode)
		}
	}
	return cfg, nil
}

// execModeOf returns the default_query_exec_mode a connection string
// names, "" for none (or for a string that does not parse).
func execModeOf(url string) string {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		return ""
	}
	return cfg.RuntimeParams["default_query_exec_mode"]
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
