package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
	"github.com/atomicrides/atomicrides/internal/fake/fakebank"
	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/payments"
	"github.com/atomicrides/atomicrides/service/settlements"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// TestSettlementsCommand lists the settlement files and their
// discrepancies, and shows one file, with the operator CLI of the real
// binary.
func TestSettlementsCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := dbtest.NewURL(t)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	svc, err := service.New(service.Config{Pool: pool, Payments: payments.New(payments.Config{})})
	require.NoError(t, err)
	st := testkit.NewSettlements(t, svc)

	// A file of one charge we never made and one malformed line.
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	lines := fakebank.Statement([]fakestripe.Charge{{
		ID: "ch_notours", Amount: 1500, Currency: "usd", Status: fakestripe.ChargeSucceeded, Created: at,
	}}, nil, "po_cli", at)
	content := append(fakebank.Render(lines), []byte("po_cli,tomorrow\n")...)
	rec, err := st.Receive(ctx, "settlement_cli.csv", content)
	require.NoError(t, err)
	_, err = st.Apply(ctx, rec.FileID)
	require.NoError(t, err)

	run := func(wantExit int, args ...string) string {
		t.Helper()
		res, err := binrun.Cmd{Bin: binrun.Build(t), Args: append([]string{"settlements"}, args...), Dir: t.TempDir(),
			Env: []string{"DATABASE_URL=" + dbURL},
		}.Run(ctx)
		require.NoError(t, err)
		require.Equal(t, wantExit, res.ExitCode, "settlements %v: %s", args, res.Stderr)
		return res.Stdout
	}

	var rep settlements.Report
	require.NoError(t, json.Unmarshal([]byte(run(1, "list", "-json")), &rep))
	require.Len(t, rep.Files, 1)
	require.Equal(t, 1, rep.Files[0].Quarantined)
	require.Len(t, rep.Discrepancies, 1)
	require.Equal(t, "unknown_reference", rep.Discrepancies[0].Kind)
	require.Equal(t, "ch_notours", rep.Discrepancies[0].ProcessorReference)

	table := run(1, "list")
	require.Contains(t, table, "settlement_cli.csv")
	require.Contains(t, table, "unknown_reference")
	require.Contains(t, table, "1 discrepancies")

	shown := run(0, "show", strconv.FormatInt(rec.FileID, 10))
	require.Contains(t, shown, "ch_notours")
	require.Contains(t, shown, "unknown")
	require.Contains(t, shown, "QUARANTINED LINE")
	require.Contains(t, shown, "4 ") // the malformed line's number

	// Usage errors name the command and exit 2 before the database.
	for args, says := range map[string]string{
		"":          "settlements: missing subcommand",
		"purge":     `settlements: unknown subcommand "purge"`,
		"show":      "settlements show: missing the file's ID",
		"show abc":  `settlements show: file id "abc"`,
		"list -x 1": "settlements list:",
	} {
		a := []string{"settlements"}
		if args != "" {
			a = append(a, strings.Fields(args)...)
		}
		res, err := binrun.Cmd{Bin: binrun.Build(t), Args: a, Dir: t.TempDir(), Env: []string{"DATABASE_URL=postgres://127.0.0.1:1/none"}}.Run(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, res.ExitCode, "%q: %s", args, res.Stderr)
		require.Contains(t, res.Stderr, says)
	}
}
