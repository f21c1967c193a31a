package fakebank_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakebank"
	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/service/bankinbox"
	"github.com/atomicrides/atomicrides/service/settlementfile"
)

func TestStatementFeesAndPayout(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	lines := fakebank.Statement(
		[]fakestripe.Charge{
			{ID: "ch_a", Amount: 1000, Currency: "usd", Status: fakestripe.ChargeSucceeded, Created: at},
			{ID: "ch_declined", Amount: 1000, Currency: "usd", Status: fakestripe.ChargeFailed, Created: at},
		},
		[]fakestripe.Refund{{ID: "re_a", Charge: "ch_a", Amount: 1000, Currency: "usd", Status: "succeeded", Created: at}},
		"po_x", at)
	require.Len(t, lines, 3)
	require.Equal(t, int64(59), lines[0].FeeCents, "2.9% of 10.00 plus 0.30")
	require.Equal(t, int64(941), lines[0].NetCents)
	require.Equal(t, int64(-1000), lines[1].NetCents)
	require.Equal(t, settlementfile.CategoryPayout, lines[2].Category)
	require.Equal(t, int64(59), lines[2].NetCents, "the payout moves the net balance out: 9.41 - 10.00")
}

// A hold settles once captured, for what was captured; a hold never
// captured, and the refund by which Stripe shows a hold released, moved no
// money and settle nothing.
func TestStatementSettlesCapturedMoneyOnly(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	lines := fakebank.Statement(
		[]fakestripe.Charge{
			{ID: "ch_partial", Amount: 1000, AmountReleased: 300, AmountRefunded: 300, Currency: "usd", Status: fakestripe.ChargeSucceeded, Created: at},
			{ID: "ch_held", Amount: 1000, Uncaptured: true, Currency: "usd", Status: fakestripe.ChargeSucceeded, Created: at},
			{ID: "ch_released", Amount: 1000, AmountReleased: 1000, AmountRefunded: 1000, Refunded: true, Uncaptured: true,
				Currency: "usd", Status: fakestripe.ChargeSucceeded, Created: at},
		},
		[]fakestripe.Refund{{ID: "re_release", Charge: "ch_released", Amount: 1000, Currency: "usd", Status: "succeeded",
			Release: true, Created: at}},
		"po_x", at)
	require.Len(t, lines, 2, "the partial capture and the payout")
	require.Equal(t, "ch_partial", lines[0].SourceID)
	require.Equal(t, int64(700), lines[0].GrossCents, "what was captured")
	require.Equal(t, fakebank.Fee(700), lines[0].FeeCents)
	require.Equal(t, settlementfile.CategoryPayout, lines[1].Category)
}

func TestDevSFTPServerServesTheInbox(t *testing.T) {
	t.Parallel()
	srv, err := fakebank.ServeSFTP(slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	dir := t.TempDir()
	require.NoError(t, fakebank.Upload(dir, "settlement_dev.csv", []byte("x")))

	inbox, err := bankinbox.Dial(context.Background(), bankinbox.Config{
		Addr: srv.Addr, User: srv.User, Dir: dir, HostKey: srv.HostKey, Signer: srv.ClientSigner,
	})
	require.NoError(t, err)
	defer inbox.Close()
	files, err := inbox.List()
	require.NoError(t, err)
	require.Len(t, files, 1)
	content, err := inbox.Read(files[0].Name, 10)
	require.NoError(t, err)
	require.Equal(t, "x", string(content))
	require.NoError(t, inbox.Archive(files[0], content))
	files, err = inbox.List()
	require.NoError(t, err)
	require.Empty(t, files)
}
