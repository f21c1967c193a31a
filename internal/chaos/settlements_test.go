package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
	"github.com/atomicrides/atomicrides/internal/failpoint"
	"github.com/atomicrides/atomicrides/internal/fake/fakebank"
	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/fake/sftpserver"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service/settlements"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// TestChaosSettlementKilledMidFile serves with the bank's inbox on a real
// sshd and a settlement file of three batches, killed (SIGKILL, by a
// failpoint) right after its first batch committed; the restart takes the
// dead process's job over (JOB_RESCUE_AFTER) and resumes after the last
// committed batch, and the applied totals equal the bank's file exactly.
func TestChaosSettlementKilledMidFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := sftpserver.Start(t)
	stripe := testkit.NewStripe(t)
	dbURL := dbtest.NewURL(t)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	// 1200 charges no ride of ours made, and the payout: three batches.
	at := time.Now().UTC()
	charges := make([]fakestripe.Charge, 1200)
	for i := range charges {
		charges[i] = fakestripe.Charge{ID: fmt.Sprintf("ch_chaos%05d", i), Amount: int64(500 + i), Currency: "usd",
			Status: fakestripe.ChargeSucceeded, Created: at}
	}
	lines := fakebank.Statement(charges, nil, "po_chaos", at)
	var want settlements.Totals
	for _, l := range lines {
		want.Lines++
		want.GrossCents += l.GrossCents
		want.FeeCents += l.FeeCents
		want.NetCents += l.NetCents
	}
	srv.Put(t, "settlement_chaos.csv", fakebank.Render(lines))

	bin := binrun.Build(t, "failpoints")
	logDir, starts := t.TempDir(), 0
	serve := func(spec string) *binrun.Process {
		env := []string{
			"DATABASE_URL=" + dbURL, "ADDR=127.0.0.1:0", "MAIL_DIR=off",
			"STRIPE_SECRET_KEY=sk_test_chaos", "STRIPE_API_BASE=" + stripe.URL, "SMTP_URL=smtp://127.0.0.1:1",
			"SETTLEMENT_SFTP_URL=" + srv.URL(), "SETTLEMENT_SFTP_HOST_KEY=" + srv.HostKeyLine,
			"SETTLEMENT_SFTP_KEY_FILE=" + srv.KeyFile,
			// The dead process's job is taken over soon after it died.
			"JOB_RESCUE_AFTER=65s",
		}
		if spec != "" {
			env = append(env, failpoint.EnvVar+"="+spec)
		}
		starts++
		logPath := filepath.Join(logDir, fmt.Sprintf("serve.%d.log", starts))
		t.Cleanup(func() {
			if t.Failed() {
				b, _ := os.ReadFile(logPath)
				t.Logf("%s:\n%s", logPath, b)
			}
		})
		return binrun.Start(t, binrun.Cmd{Bin: bin, Args: []string{"serve"}, Env: env, LogPath: logPath})
	}
	file := func() (status string, cursor, lines int) {
		t.Helper()
		err := pool.QueryRow(ctx, `SELECT f.status, f.cursor_line, (SELECT count(*) FROM settlement_lines)
			FROM settlement_files f WHERE f.name = 'settlement_chaos.csv'`).Scan(&status, &cursor, &lines)
		require.NoError(t, err)
		return status, cursor, lines
	}
	waitExit := func(p *binrun.Process) {
		t.Helper()
		select {
		case <-p.Done():
		case <-time.After(time.Minute):
			t.Fatal("the failpoint did not kill the process")
		}
	}

	// Killed after the first batch: 500 lines applied, the cursor on the
	// 500th line (the header is line 1).
	waitExit(serve("settlement.apply:after_batch=crash"))
	status, cursor, applied := file()
	require.Equal(t, "pending", status)
	require.Equal(t, 501, cursor)
	require.Equal(t, 500, applied)

	// The restart resumes there and finishes the file.
	p := serve("")
	require.NoError(t, binrun.Poll(ctx, 4*time.Minute, func() error {
		if status, _, _ := file(); status != "applied" {
			return fmt.Errorf("file %s", status)
		}
		return nil
	}))
	p.Kill()
	var got settlements.Totals
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), sum(gross_cents), sum(fee_cents), sum(net_cents) FROM settlement_lines`).
		Scan(&got.Lines, &got.GrossCents, &got.FeeCents, &got.NetCents))
	require.Equal(t, want, got, "applied totals equal the bank's file")
	require.Equal(t, 1, srvCount(t, pool, `SELECT count(*) FROM settlement_files`))
	require.Len(t, srv.ArchiveNames(t), 1)
	require.Empty(t, srv.InboxNames(t))
}

func srvCount(t *testing.T, pool *pgxpool.Pool, q string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), q).Scan(&n))
	return n
}
