package pgenv

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"postgres://u:p%40ss@db.example:6543/app?sslmode=require&application_name=x",
		"postgresql://u@db.example:6543?sslmode=require",
		"host=db.example port=6543 user=u password='p ss' dbname=app sslmode=require",
	} {
		out, err := WithDatabase(in, "other_db")
		require.NoError(t, err, in)
		cfg, err := pgx.ParseConfig(out)
		require.NoError(t, err, out)
		require.Equal(t, "other_db", cfg.Database, out)
		require.Equal(t, "db.example", cfg.Host)
		require.Equal(t, uint16(6543), cfg.Port)
		require.Equal(t, "u", cfg.User)
	}
	_, err := WithDatabase("host=x port=notaport", "db")
	require.Error(t, err)
}
