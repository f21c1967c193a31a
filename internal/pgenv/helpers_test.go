package pgenv

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clusterDir returns a fresh directory for a cluster that the PostgreSQL
// account can reach (t.TempDir's parent is private to root), and stops and
// removes whatever cluster is left there at the end.
func clusterDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgenv-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, StopCluster(ctx, dir))
		assert.NoError(t, os.RemoveAll(dir))
	})
	return dir
}

// queryOne connects to url and returns the text of the first column of the
// first row of query.
func queryOne(t *testing.T, url, query string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var out string
	require.NoError(t, conn.QueryRow(ctx, query).Scan(&out))
	return out
}

// execSQL connects to url and runs sql.
func execSQL(t *testing.T, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	require.NoError(t, err)
}
