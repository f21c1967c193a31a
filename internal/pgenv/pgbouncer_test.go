package pgenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestPgBouncerTransactionPooling: clients reach the cluster through
// PgBouncer in transaction pooling mode: more clients than server
// connections share them, each transaction runs whole on one server
// connection, and pgx's default mode (named prepared statements) breaks
// there while cache_describe works.
func TestPgBouncerTransactionPooling(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c, err := StartClusterWith(ctx, clusterDir(t), ClusterOptions{})
	require.NoError(t, err)
	dir, err := os.MkdirTemp("", "pgenv-bouncer-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	b, err := StartPgBouncer(ctx, dir, c.Port, PgBouncerOptions{PoolSize: 2})
	require.NoError(t, err)
	t.Cleanup(b.Stop)
	require.NotEqual(t, c.Port, b.Port)
	// The test's own connections to the cluster are named, so that the
	// count of server connections below is PgBouncer's alone: a backend
	// whose client just closed may still be listed while it exits.
	direct := c.URL + "&application_name=pgenv-direct"
	execSQL(t, direct, "CREATE TABLE counted (client int, v text)")

	// Eight clients on two server connections: a transaction sees its own
	// transaction-local setting from its first statement to its last.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			errs <- func() error {
				conn, err := pgx.Connect(ctx, b.URL("postgres")+"&default_query_exec_mode=cache_describe")
				if err != nil {
					return err
				}
				defer conn.Close(context.Background())
				for j := range 20 {
					want := fmt.Sprintf("%d-%d", i, j)
					err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
						if _, err := tx.Exec(ctx, "SELECT set_config('pgenv.v', $1, true)", want); err != nil {
							return err
						}
						_, err := tx.Exec(ctx, "INSERT INTO counted VALUES ($1, current_setting('pgenv.v'))", i)
						return err
					})
					if err != nil {
						return err
					}
				}
				return nil
			}()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, "160", queryOne(t, direct, "SELECT count(*)::text FROM counted WHERE v LIKE client || '-%'"))
	require.Equal(t, "true", queryOne(t, direct, "SELECT (count(*) <= 2)::text FROM pg_stat_activity WHERE datname = 'postgres' AND backend_type = 'client backend' AND application_name <> 'pgenv-direct'"),
		"PgBouncer opened at most its pool size of server connections")

	// The default mode names its prepared statements after the query: a
	// second client handed the server connection the first prepared on
	// finds the name taken.
	var failed error
	for range 4 {
		conn, err := pgx.Connect(ctx, b.URL("postgres"))
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "SELECT count(*) FROM counted WHERE client = $1", 1)
		conn.Close(context.Background())
		if err != nil {
			failed = err
			break
		}
	}
	var pgErr *pgconn.PgError
	require.ErrorAs(t, failed, &pgErr, "named prepared statements break under transaction pooling")
	require.Equal(t, "42P05", pgErr.Code, "duplicate prepared statement")
}
