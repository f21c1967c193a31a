package main

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestPoolConfig(t *testing.T) {
	t.Parallel()

	t.Run("SeveralHostsGetAConnectTimeout", func(t *testing.T) {
		t.Parallel()
		cfg, err := poolConfig("DATABASE_URL", "postgres://u@10.0.0.1:5432,10.0.0.2:5433/db?target_session_attrs=read-write", poolerNone)
		require.NoError(t, err)
		require.Equal(t, "10.0.0.1", cfg.ConnConfig.Host)
		require.Equal(t, 2, hosts(cfg))
		require.Equal(t, "10.0.0.2", cfg.ConnConfig.Fallbacks[len(cfg.ConnConfig.Fallbacks)-1].Host)
		require.Equal(t, uint16(5433), cfg.ConnConfig.Fallbacks[len(cfg.ConnConfig.Fallbacks)-1].Port)
		require.NotNil(t, cfg.ConnConfig.ValidateConnect, "target_session_attrs=read-write checks each host", poolerNone)
		require.Equal(t, failoverConnectTimeout, cfg.ConnConfig.ConnectTimeout)
	})

	t.Run("AConnectTimeoutGivenIsKept", func(t *testing.T) {
		t.Parallel()
		cfg, err := poolConfig("DATABASE_URL", "postgres://u@h1,h2/db?connect_timeout=2", poolerNone)
		require.NoError(t, err)
		require.Equal(t, 2*time.Second, cfg.ConnConfig.ConnectTimeout)
	})

	t.Run("OneHostIsLeftAlone", func(t *testing.T) {
		t.Parallel()
		cfg, err := poolConfig("DATABASE_URL", "postgres://u@h1/db", poolerNone)
		require.NoError(t, err)
		require.Equal(t, 1, hosts(cfg))
		require.Zero(t, cfg.ConnConfig.ConnectTimeout)
	})

	t.Run("BehindPgBouncerQueriesNameNoPreparedStatement", func(t *testing.T) {
		t.Parallel()
		cfg, err := poolConfig("DATABASE_URL", "postgres://u@h1:6432/db", poolerPgBouncer)
		require.NoError(t, err)
		require.Equal(t, pgx.QueryExecModeCacheDescribe, cfg.ConnConfig.DefaultQueryExecMode)
		direct, err := poolConfig("DATABASE_URL", "postgres://u@h1:5432/db", poolerNone)
		require.NoError(t, err)
		require.Equal(t, pgx.QueryExecModeCacheStatement, direct.ConnConfig.DefaultQueryExecMode, "pgx's default without a pooler")
	})

	t.Run("BehindPgBouncerTheURLsModeIsKeptIfItWorksThere", func(t *testing.T) {
		t.Parallel()
		cfg, err := poolConfig("DATABASE_URL", "postgres://u@h1:6432/db?default_query_exec_mode=simple_protocol", poolerPgBouncer)
		require.NoError(t, err)
		require.Equal(t, pgx.QueryExecModeSimpleProtocol, cfg.ConnConfig.DefaultQueryExecMode)
		for _, mode := range []string{"cache_statement", "describe_exec"} {
			_, err = poolConfig("DATABASE_URL", "postgres://u@h1:6432/db?default_query_exec_mode="+mode, poolerPgBouncer)
			require.ErrorContains(t, err, "DATABASE_URL: default_query_exec_mode="+mode+" does not work through PgBouncer")
		}
	})

	t.Run("AnInvalidURLNamesTheVariable", func(t *testing.T) {
		t.Parallel()
		_, err := poolConfig("DATABASE_URL", "postgres://u@h1/db?pool_max_conns=many", poolerNone)
		require.ErrorContains(t, err, "DATABASE_URL", poolerNone)
	})
}
