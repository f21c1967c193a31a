package pguuid_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/pguuid"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// TestUUIDParameters sends uuid.UUID parameters, bare, by pointer and nil,
// in each of pgx's query modes, to a real PostgreSQL, and reads them back
// as PostgreSQL sees them.
func TestUUIDParameters(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t) // registers the encoding, as the service's pools do
	ctx := context.Background()
	u := uuid.New()
	for _, mode := range []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
	} {
		var text string
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid::text`, mode, u).Scan(&text), mode)
		require.Equal(t, u.String(), text, mode)
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid::text`, mode, &u).Scan(&text), mode)
		require.Equal(t, u.String(), text, mode)
		var null *string
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid::text`, mode, (*uuid.UUID)(nil)).Scan(&null), mode)
		require.Nil(t, null, mode)
		var back uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid`, mode, u).Scan(&back), mode)
		require.Equal(t, u, back, mode)
	}
}

// TestRegisterTakesThePlan checks that a registered map encodes a uuid.UUID
// through this package's plan, not through its driver.Valuer.
func TestRegisterTakesThePlan(t *testing.T) {
	t.Parallel()
	m := pgtype.NewMap()
	require.Equal(t, "*pgtype.encodePlanDriverValuer", fmt.Sprintf("%T", m.PlanEncode(pgtype.UUIDOID, pgtype.BinaryFormatCode, uuid.New())))
	m = pgtype.NewMap()
	pguuid.Register(m)
	require.Equal(t, "*pguuid.encodePlan", fmt.Sprintf("%T", m.PlanEncode(pgtype.UUIDOID, pgtype.BinaryFormatCode, uuid.New())))
	u := uuid.New()
	buf, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, u, nil)
	require.NoError(t, err)
	require.Equal(t, u[:], buf)
}
