package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/sql/migrations"
)

// schemaTables must exist in every test database: the service's and River's.
var schemaTables = []string{"users", "rides", "idempotency_keys", "audit_records", "api_keys", "river_job"}

func TestNewGivesEachTestItsOwnMigratedDatabase(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	names := map[string]string{}
	t.Run("group", func(t *testing.T) {
		for _, sub := range []string{"a", "b"} {
			t.Run(sub, func(t *testing.T) {
				t.Parallel()
				pool := New(t)
				ctx := t.Context()
				name := currentDatabase(t, pool)
				require.True(t, strings.HasPrefix(name, testDBPrefix), name)
				requireSchema(t, pool)

				email := sub + "@example.com"
				_, err := pool.Exec(ctx, "INSERT INTO users (email, payment_source) VALUES ($1, 'tok_visa')", email)
				require.NoError(t, err)
				emails, err := pgx.CollectRows(must(pool.Query(ctx, "SELECT email FROM users WHERE role = 'rider'")), pgx.RowTo[string])
				require.NoError(t, err)
				require.Equal(t, []string{email}, emails, "only this test's writes are visible")

				mu.Lock()
				names[sub] = name
				mu.Unlock()
			})
		}
	})
	// "group" returns once both subtests and their cleanups are done.
	require.Len(t, names, 2)
	require.NotEqual(t, names["a"], names["b"])
	for _, name := range names {
		require.False(t, databaseExists(t, name), "%s is dropped after its test", name)
	}
}

func TestWritesAreInvisibleAcrossDatabases(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b := New(t), New(t, WithMaxConns(2))
	require.EqualValues(t, 2, b.Config().MaxConns)
	require.EqualValues(t, DefaultMaxConns, a.Config().MaxConns)

	_, err := a.Exec(ctx, "INSERT INTO users (email, payment_source) VALUES ('x@example.com', 'tok_visa')")
	require.NoError(t, err)
	var inA, inB int
	require.NoError(t, a.QueryRow(ctx, "SELECT count(*) FROM users WHERE role = 'rider'").Scan(&inA))
	require.NoError(t, b.QueryRow(ctx, "SELECT count(*) FROM users WHERE role = 'rider'").Scan(&inB))
	require.Equal(t, 1, inA)
	require.Equal(t, 0, inB)
}

func TestNewURLIsMigratedAndDroppedEvenWhileConnected(t *testing.T) {
	t.Parallel()
	var name string
	t.Run("inner", func(t *testing.T) {
		url := NewURL(t)
		pool, err := pgxpool.New(t.Context(), url)
		require.NoError(t, err)
		// Deliberately left open: the drop ends its sessions.
		name = currentDatabase(t, pool)
		pending, err := migrations.Pending(t.Context(), pool)
		require.NoError(t, err)
		require.Empty(t, pending)
		require.Equal(t, url, DatabaseURL(t, name))
		t.Cleanup(pool.Close) // after the drop (first in, last out), which must not have waited for it
	})
	require.NotEmpty(t, name)
	require.False(t, databaseExists(t, name))
}

func TestManyParallelDatabases(t *testing.T) {
	t.Parallel()
	for i := range 24 {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			pool := New(t, WithMaxConns(2))
			_, err := pool.Exec(t.Context(), "INSERT INTO users (email, payment_source) VALUES ($1, 'tok_visa')", "p"+string(rune('a'+i))+"@example.com")
			require.NoError(t, err)
		})
	}
}

func TestEnsureTemplateConcurrently(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin := AdminURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	tpl := "atomicrides_tpl_race_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "ALTER DATABASE "+ident(tpl)+" WITH IS_TEMPLATE false")
		assert.NoError(t, err)
		_, err = conn.Exec(ctx, "DROP DATABASE "+ident(tpl))
		assert.NoError(t, err)
	})

	// Separate pools stand for separate test processes.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			pool, err := pgxpool.New(ctx, admin)
			if !assert.NoError(t, err) {
				return
			}
			defer pool.Close()
			assert.NoError(t, ensureTemplate(ctx, admin, pool, tpl))
		})
	}
	wg.Wait()

	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var isTemplate, allowConn bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT datistemplate, datallowconn FROM pg_database WHERE datname = $1", tpl).Scan(&isTemplate, &allowConn))
	require.True(t, isTemplate)
	require.False(t, allowConn)
	require.False(t, databaseExists(t, tpl+"_build"))
}

func TestDatabaseNames(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	name := newDatabaseName(now)
	require.LessOrEqual(t, len(name), 63, "PostgreSQL truncates longer names")
	require.NotEqual(t, name, newDatabaseName(now))
	at, ok := createdAt(name)
	require.True(t, ok)
	require.Equal(t, now, at)
	_, ok = createdAt("atomicrides")
	require.False(t, ok)
	require.LessOrEqual(t, len(templateName()+"_build"), 63)
}

func currentDatabase(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var name string
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT current_database()").Scan(&name))
	return name
}

func requireSchema(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	for _, table := range schemaTables {
		var found *string
		require.NoError(t, pool.QueryRow(t.Context(), "SELECT to_regclass($1)::text", table).Scan(&found))
		require.NotNil(t, found, "table %s", table)
	}
}

func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, AdminURL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var exists bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists))
	return exists
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
