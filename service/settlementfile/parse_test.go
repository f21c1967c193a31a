package settlementfile_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/service/settlementfile"
)

const header = "automatic_payout_id,automatic_payout_effective_at,balance_transaction_id,created_utc,currency,gross,fee,net,reporting_category,source_id,description\n"

func TestParseGoodFile(t *testing.T) {
	t.Parallel()
	in := header +
		"po_1,2026-11-26 00:00:00,txn_1,2026-11-24 10:00:00,usd,12.00,0.65,11.35,charge,ch_1,Ride\n" +
		"po_1,2026-11-26 00:00:00,txn_2,2026-11-24 11:00:00,usd,-12.00,0.00,-12.00,refund,re_1,\n" +
		"\n" +
		"po_1,2026-11-26 00:00:00,txn_3,2026-11-24 12:00:00,jpy,1500,45,1455,charge,ch_2,\n"
	entries, err := settlementfile.Parse(strings.NewReader(in))
	require.NoError(t, err)
	require.Len(t, entries, 3)
	for _, e := range entries {
		require.Empty(t, e.Problem, "line %d", e.Number)
	}
	require.Equal(t, 2, entries[0].Number)
	require.Equal(t, settlementfile.Line{
		Number: 2, PayoutID: "po_1", PayoutEffectiveAt: time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC),
		BalanceTransactionID: "txn_1", Created: time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC),
		Currency: "usd", GrossCents: 1200, FeeCents: 65, NetCents: 1135,
		Category: "charge", SourceID: "ch_1", Description: "Ride",
	}, entries[0].Line)
	require.Equal(t, int64(-1200), entries[1].Line.NetCents)
	require.Equal(t, 5, entries[2].Number, "a blank line still counts")
	require.Equal(t, int64(1455), entries[2].Line.NetCents)
}

func TestParseMalformedRowsNameTheirLine(t *testing.T) {
	t.Parallel()
	good := "po_1,2026-11-26 00:00:00,txn_1,2026-11-24 10:00:00,usd,12.00,0.65,11.35,charge,ch_1,\n"
	cases := []struct{ row, problem string }{
		{"po_1,2026-11-26 00:00:00,txn_2,2026-11-24 10:00:00,usd,12.00,0.65,11.00,charge,ch_2,\n", "is not net"},
		{"po_1,2026-11-26 00:00:00,txn_2,2026-11-24 10:00:00,usd,12.0,0.65,11.35,charge,ch_2,\n", "gross"},
		{"po_1,2026-11-26 00:00:00,txn_2,2026-11-24 10:00:00,USD,12.00,0.65,11.35,charge,ch_2,\n", "currency"},
		{"po_1,2026-11-26 00:00:00,txn_2,yesterday,usd,12.00,0.65,11.35,charge,ch_2,\n", "created_utc"},
		{"po_1,2026-11-26 00:00:00,txn_2,2026-11-24 10:00:00,usd,12.00,0.65,11.35,bonus,ch_2,\n", "reporting_category"},
		{"po_1,2026-11-26 00:00:00,txn_2,2026-11-24 10:00:00,usd,12.00,0.65,11.35,charge,,\n", "source_id"},
		{"po_1,2026-11-26 00:00:00,txn_2\n", "fields"},
		{"po_1,2026-11-26 00:00:00,txn_2,2026-11-24 10:00:00,jpy,15.00,0,15.00,charge,ch_2,\n", "0 decimals"},
	}
	for _, c := range cases {
		entries, err := settlementfile.Parse(strings.NewReader(header + good + c.row + good))
		require.NoError(t, err)
		require.Len(t, entries, 3)
		require.Empty(t, entries[0].Problem)
		require.Equal(t, 3, entries[1].Number)
		require.Contains(t, entries[1].Problem, c.problem, c.row)
		require.Equal(t, strings.TrimSuffix(c.row, "\n"), entries[1].Raw)
		require.Empty(t, entries[2].Problem)
	}
}

func TestParseRefusesABadHeader(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "automatic_payout_id,currency\n", strings.Replace(header, "net", "gross", 1)} {
		_, err := settlementfile.Parse(strings.NewReader(in))
		var he *settlementfile.HeaderError
		require.ErrorAs(t, err, &he, "%q", in)
	}
}

func TestParseBrokenQuoteEndsTheFile(t *testing.T) {
	t.Parallel()
	in := header + "po_1,\"2026-11-26,txn_1\n"
	entries, err := settlementfile.Parse(strings.NewReader(in))
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, 2, entries[0].Number)
	require.Contains(t, entries[0].Problem, "unreadable CSV")
}

func TestWriteThenParse(t *testing.T) {
	t.Parallel()
	lines := []settlementfile.Line{{
		Number: 2, PayoutID: "po_9", PayoutEffectiveAt: time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC),
		BalanceTransactionID: "txn_9", Created: time.Date(2026, 11, 25, 8, 30, 0, 0, time.UTC),
		Currency: "eur", GrossCents: -5, FeeCents: 0, NetCents: -5, Category: "payout", SourceID: "po_9",
		Description: "a, quoted \"text\"",
	}}
	var b bytes.Buffer
	require.NoError(t, settlementfile.Write(&b, lines))
	entries, err := settlementfile.Parse(&b)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Empty(t, entries[0].Problem)
	require.Equal(t, lines[0], entries[0].Line)
}

func TestAmounts(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]int64{"0.00": 0, "-0.05": -5, "12": 1200, "1234567.89": 123456789} {
		got, err := settlementfile.ParseAmount(s, "usd")
		require.NoError(t, err, s)
		require.Equal(t, want, got, s)
		if s != "12" {
			require.Equal(t, strings.TrimPrefix(s, "-0.05"), strings.TrimPrefix(settlementfile.FormatAmount(got, "usd"), "-0.05"))
		}
	}
	for _, s := range []string{"", "-", "1.2.3", "1e3", "+1.00", "1.000", ".50", "12345678901234567.00"} {
		_, err := settlementfile.ParseAmount(s, "usd")
		require.Error(t, err, s)
	}
}
