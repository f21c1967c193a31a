package pgenv

import (
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestResolveEnv(t *testing.T) {
	// Not parallel: it sets environment variables.
	const url = "postgres://someone@db.invalid:1/given?sslmode=disable"
	t.Setenv("PGENV_TEST_SECOND", url)
	t.Setenv("PGENV_TEST_FIRST", "")
	db, err := Resolve(t.Context(), Options{EnvVars: []string{"PGENV_TEST_FIRST", "PGENV_TEST_SECOND"}, Start: true})
	require.NoError(t, err)
	require.Equal(t, &Database{URL: url, Source: "env:PGENV_TEST_SECOND"}, db, "a URL from the environment is used as is, unchecked")

	t.Setenv("PGENV_TEST_FIRST", "postgres://bad:port:x/")
	_, err = Resolve(t.Context(), Options{EnvVars: []string{"PGENV_TEST_FIRST"}})
	require.ErrorContains(t, err, "PGENV_TEST_FIRST")
}

func TestResolveWithoutBinaries(t *testing.T) {
	// Not parallel: noBinaries swaps the search locations.
	noBinaries(t)
	_, err := Resolve(t.Context(), Options{EnvVars: []string{}, LocalAddr: "127.0.0.1:1", Start: true, ClusterDir: t.TempDir()})
	require.ErrorIs(t, err, ErrNoPostgres)
	require.ErrorIs(t, err, ErrNoBinaries)
	require.ErrorContains(t, err, "apt-get install postgresql")
	require.ErrorContains(t, err, "DATABASE_URL")
	t.Log(err)
}

func TestResolveNothingRunning(t *testing.T) {
	t.Parallel()
	_, err := Resolve(t.Context(), Options{EnvVars: []string{"PGENV_TEST_NEVER_SET"}, LocalAddr: "127.0.0.1:1", ClusterDir: t.TempDir()})
	require.ErrorIs(t, err, ErrNoPostgres)
	require.ErrorContains(t, err, "PGENV_TEST_NEVER_SET: not set")
	require.ErrorContains(t, err, "127.0.0.1:1")
	require.ErrorContains(t, err, "apt-get install postgresql")
}

func TestResolveClusterThenLocal(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := clusterDir(t)
	opts := Options{EnvVars: []string{}, LocalAddr: LocalOff, Start: true, ClusterDir: dir, Database: "pgenv_cluster"}

	db, err := Resolve(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, "cluster:"+dir, db.Source)
	require.True(t, db.Started)
	require.Equal(t, "pgenv_cluster", queryOne(t, db.URL, "SELECT current_database()::text"))

	again, err := Resolve(ctx, opts)
	require.NoError(t, err)
	require.False(t, again.Started)
	require.Equal(t, db.URL, again.URL)

	opts.Start = false
	running, err := Resolve(ctx, opts)
	require.NoError(t, err, "a running cluster is used even when starting one is not allowed")
	require.Equal(t, db.URL, running.URL)

	// The same server, found by the probe of a running server.
	cfg, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	addr := "127.0.0.1:" + strconv.Itoa(int(cfg.Port))
	local, err := Resolve(ctx, Options{EnvVars: []string{}, LocalAddr: addr, ClusterDir: t.TempDir(), Database: "pgenv_local"})
	require.NoError(t, err)
	require.Equal(t, "local:"+addr, local.Source)
	require.False(t, local.Started)
	require.Equal(t, "pgenv_local", queryOne(t, local.URL, "SELECT current_database()::text"))
}
