package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPoolConfig(t *testing.T) {
	t.Parallel()

	t.Run("SeveralHostsGetAConnectTimeout", func(t *testing.T) {
		t.Parallel()
		cfg, err := poolConfig("postgres://u@10.0.0.1:5432,10.0.0.2:5433/db?target_session_attrs=read-write")
		require.NoError(t, err)
		require.Equal(t, "10.0.0.1", cfg.ConnConfig.Host)
		require.Equal(t, 2, hosts(cfg))
		require.Equal(t, "10.0.0.2", cfg.ConnConfig.Fallbacks[len(cfg.ConnConfig.Fallbacks)-1].Host)
		require.Equal(t, uint16(5433), cfg.ConnConfig.Fallbacks[len(cfg.ConnConfig.Fallbacks)-1].Port)
		require.NotNil(t, cfg.ConnConfig.ValidateConnect, "target_session_attrs=read-write checks each host")
		require.Equal(t, failoverConnectTimeout, cfg.ConnConfig.ConnectTimeout)
	})

	t.Run("AConnectTimeoutGivenIsKept", func(t *testing.T) {
		t.Parallel()
		cfg, err := poolConfig("postgres://u@h1,h2/db?connect_timeout=2")
		require.NoError(t, err)
		require.Equal(t, 2*time.Second, cfg.ConnConfig.ConnectTimeout)
	})

	t.Run("OneHostIsLeftAlone", func(t *testing.T) {
		t.Parallel()
		cfg, err := poolConfig("postgres://u@h1/db")
		require.NoError(t, err)
		require.Equal(t, 1, hosts(cfg))
		require.Zero(t, cfg.ConnConfig.ConnectTimeout)
	})

	t.Run("AnInvalidURLNamesTheVariable", func(t *testing.T) {
		t.Parallel()
		_, err := poolConfig("postgres://u@h1/db?pool_max_conns=many")
		require.ErrorContains(t, err, "DATABASE_URL")
	})
}
