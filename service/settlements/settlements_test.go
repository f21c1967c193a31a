package settlements_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakebank"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/settlementfile"
	"github.com/atomicrides/atomicrides/service/settlements"
)

// settledWorld is a world with two riders' rides charged at the fake
// Stripe, one of them refunded, and the bank's statement of it all.
type settledWorld struct {
	*testkit.Env
	uid   int64 // the rider of every ride
	rides []service.Ride
	lines []settlementfile.Line
}

func setupSettled(t *testing.T, rides int) *settledWorld {
	t.Helper()
	b := testkit.New(t)
	w := &settledWorld{Env: b}
	uid := b.Rider(t, "settle@example.com", "tok_visa").ID
	w.uid = uid
	for range rides {
		w.rides = append(w.rides, b.Ride(t, uid))
	}
	_, err := b.Service.RideRefundCreate(b.Ctx, uid, testkit.NewKey(), w.rides[0].ID, nil)
	require.NoError(t, err)
	w.lines = fakebank.Statement(b.Stripe.Charges(), b.Stripe.Refunds(), "po_test1", time.Now())
	require.Len(t, w.lines, rides+2, "a line per charge, the refund and the payout")
	return w
}

func (w *settledWorld) totals(t *testing.T) settlements.Totals {
	t.Helper()
	tot, err := w.Settlements.Totals(w.Ctx)
	require.NoError(t, err)
	return tot
}

func sumOf(lines []settlementfile.Line) settlements.Totals {
	var s settlements.Totals
	for _, l := range lines {
		s.Lines++
		s.GrossCents += l.GrossCents
		s.FeeCents += l.FeeCents
		s.NetCents += l.NetCents
	}
	return s
}

func (w *settledWorld) applyJobs(t *testing.T) int {
	return w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'settlement_apply'`)
}

func TestSettlementFileAppliedOnce(t *testing.T) {
	t.Parallel()
	w := setupSettled(t, 2)
	content := fakebank.Render(w.lines)

	rec, err := w.Settlements.Receive(w.Ctx, "settlement_1.csv", content)
	require.NoError(t, err)
	require.Equal(t, 1, rec.Version)
	require.False(t, rec.Duplicate)
	require.False(t, rec.Flagged)
	require.Equal(t, 1, w.applyJobs(t), "the apply job is queued with the record")

	res, err := w.Settlements.Apply(w.Ctx, rec.FileID)
	require.NoError(t, err)
	require.Equal(t, settlements.Applied{FileID: rec.FileID, Status: "applied", Applied: 4}, res)
	require.Equal(t, sumOf(w.lines), w.totals(t))

	detail, err := w.Settlements.FileShow(w.Ctx, rec.FileID)
	require.NoError(t, err)
	require.Len(t, detail.Lines, 4)
	for i, l := range detail.Lines[:3] {
		require.Equal(t, "matched", l.Match, "line %d", l.Line)
		require.NotNil(t, l.RideID)
		if i < 2 {
			require.Equal(t, w.rides[i].ID, *l.RideID, "a charge's settlement names its ride")
			require.Equal(t, fakebank.Fee(w.rides[i].AmountCents), l.FeeCents)
		} else {
			require.Equal(t, w.rides[0].ID, *l.RideID, "a refund's settlement names the refunded ride")
		}
	}
	require.Equal(t, "none", detail.Lines[3].Match, "the payout line")

	// Applying again, and receiving the same file again, change nothing.
	res, err = w.Settlements.Apply(w.Ctx, rec.FileID)
	require.NoError(t, err)
	require.Equal(t, 4, res.Applied)
	again, err := w.Settlements.Receive(w.Ctx, "settlement_1.csv", content)
	require.NoError(t, err)
	require.Equal(t, settlements.Receipt{FileID: rec.FileID, Version: 1, Duplicate: true}, again)
	require.Equal(t, 1, w.applyJobs(t))
	require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM settlement_files`))
	require.Equal(t, sumOf(w.lines), w.totals(t))

	rep, err := w.Settlements.Check(w.Ctx, 100)
	require.NoError(t, err)
	require.True(t, rep.Clean(), "%+v", rep.Discrepancies)
}

func TestSettlementCorrectedReuploadIsFlaggedAndAppliesOnlyNewLines(t *testing.T) {
	t.Parallel()
	w := setupSettled(t, 3)
	first := append([]settlementfile.Line{}, w.lines[:2]...) // two charges
	rec1, err := w.Settlements.Receive(w.Ctx, "settlement_2.csv", fakebank.Render(first))
	require.NoError(t, err)
	_, err = w.Settlements.Apply(w.Ctx, rec1.FileID)
	require.NoError(t, err)

	// The correction repeats the first charge, changes the second's fee and
	// adds the rest.
	corrected := append([]settlementfile.Line{}, w.lines...)
	corrected[1].FeeCents++
	corrected[1].NetCents--
	rec2, err := w.Settlements.Receive(w.Ctx, "settlement_2.csv", fakebank.Render(corrected))
	require.NoError(t, err)
	require.Equal(t, 2, rec2.Version)
	require.True(t, rec2.Flagged)
	res, err := w.Settlements.Apply(w.Ctx, rec2.FileID)
	require.NoError(t, err)
	require.Equal(t, settlements.Applied{FileID: rec2.FileID, Status: "applied", Applied: 3, Duplicate: 1, Quarantined: 1}, res)

	want := sumOf(append(append([]settlementfile.Line{}, w.lines[:2]...), w.lines[2:]...))
	require.Equal(t, want, w.totals(t), "the first file's amounts stand; the new lines are added once")

	detail, err := w.Settlements.FileShow(w.Ctx, rec2.FileID)
	require.NoError(t, err)
	require.Len(t, detail.QuarantinedLines, 1)
	require.Equal(t, 3, detail.QuarantinedLines[0].Line)
	require.Contains(t, detail.QuarantinedLines[0].Reason, "settlement_2.csv version 1 line 3")

	rep, err := w.Settlements.Check(w.Ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Flagged)
	require.Contains(t, rep.Files[0].FlagReason, "version 2 of settlement_2.csv")
}

func TestSettlementResumesAfterAStopBetweenBatches(t *testing.T) {
	t.Parallel()
	w := setupSettled(t, 5) // 7 lines
	svc, err := settlements.New(settlements.Config{Engine: w.Service.Engine(), Jobs: w.Service.Jobs(), BatchLines: 2})
	require.NoError(t, err)
	rec, err := svc.Receive(w.Ctx, "settlement_3.csv", fakebank.Render(w.lines))
	require.NoError(t, err)

	// The first run dies after its second batch: its context ends there,
	// as a killed process's work does.
	ctx, cancel := context.WithCancel(w.Ctx)
	var cursors []int
	settlements.SetAfterBatch(svc, func(_ int64, cursor int) {
		cursors = append(cursors, cursor)
		if len(cursors) == 2 {
			cancel()
		}
	})
	_, err = svc.Apply(ctx, rec.FileID)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []int{3, 5}, cursors, "two batches of two lines after the header")
	require.Equal(t, 4, w.totals(t).Lines, "the committed batches, nothing more")

	res, err := svc.Apply(w.Ctx, rec.FileID)
	require.NoError(t, err)
	require.Equal(t, settlements.Applied{FileID: rec.FileID, Status: "applied", Applied: 7}, res)
	require.Equal(t, []int{3, 5, 7}, cursors, "the restart begins after the last committed batch")
	require.Equal(t, sumOf(w.lines), w.totals(t), "totals equal one clean pass")
}

func TestSettlementMalformedLineIsQuarantinedAndTheRestApplied(t *testing.T) {
	t.Parallel()
	w := setupSettled(t, 2)
	rows := strings.Split(strings.TrimSuffix(string(fakebank.Render(w.lines)), "\n"), "\n")
	bad := strings.Replace(rows[2], ",usd,", ",US dollars,", 1)
	rows = append(rows[:2], append([]string{bad}, rows[2:]...)...) // line 3 is bad
	rec, err := w.Settlements.Receive(w.Ctx, "settlement_4.csv", []byte(strings.Join(rows, "\n")+"\n"))
	require.NoError(t, err)
	res, err := w.Settlements.Apply(w.Ctx, rec.FileID)
	require.NoError(t, err)
	require.Equal(t, settlements.Applied{FileID: rec.FileID, Status: "applied", Applied: 4, Quarantined: 1}, res)
	require.Equal(t, sumOf(w.lines), w.totals(t))
	detail, err := w.Settlements.FileShow(w.Ctx, rec.FileID)
	require.NoError(t, err)
	require.Equal(t, []settlements.Quarantined{{Line: 3, Reason: `currency "US dollars" is not a lowercase ISO 4217 code`, Raw: bad}}, detail.QuarantinedLines)
}

func TestSettlementUnreadableFileIsRejectedAndFlagged(t *testing.T) {
	t.Parallel()
	b := testkit.New(t)
	rec, err := b.Settlements.Receive(b.Ctx, "settlement_5.csv", []byte("date,amount\n2026-11-25,12.00\n"))
	require.NoError(t, err)
	res, err := b.Settlements.Apply(b.Ctx, rec.FileID)
	require.NoError(t, err)
	require.Equal(t, "rejected", res.Status)
	rep, err := b.Settlements.Check(b.Ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Flagged)
	require.Contains(t, rep.Files[0].Problem, `required column "automatic_payout_id" is missing`)
}

func TestSettlementDiscrepancies(t *testing.T) {
	t.Parallel()
	w := setupSettled(t, 3)
	lines := append([]settlementfile.Line{}, w.lines[1:2]...) // the second ride's charge only
	wrong := w.lines[2]                                       // the third ride's charge, for another amount
	wrong.GrossCents += 100
	wrong.NetCents += 100
	unknown := w.lines[1]
	unknown.SourceID, unknown.BalanceTransactionID = "ch_notours", "txn_notours"
	lines = append(lines, wrong, unknown)
	rec, err := w.Settlements.Receive(w.Ctx, "settlement_6.csv", fakebank.Render(lines))
	require.NoError(t, err)
	_, err = w.Settlements.Apply(w.Ctx, rec.FileID)
	require.NoError(t, err)

	// Nothing is overdue yet: the first ride's charge and refund are young.
	rep, err := w.Settlements.Check(w.Ctx, 100)
	require.NoError(t, err)
	kinds := map[string][]settlements.Discrepancy{}
	for _, d := range rep.Discrepancies {
		kinds[d.Kind] = append(kinds[d.Kind], d)
	}
	require.Len(t, kinds["unknown_reference"], 1)
	require.Equal(t, "ch_notours", kinds["unknown_reference"][0].ProcessorReference)
	require.Len(t, kinds["mismatch"], 1)
	require.Equal(t, w.rides[2].ID, *kinds["mismatch"][0].RideID)
	require.Contains(t, kinds["mismatch"][0].Detail, "gross")
	require.Empty(t, kinds["not_settled"])

	// Past the maximum age, the first ride's charge and its refund are
	// reported as not settled; the settled ones are not.
	w.Age(t, settlements.DefaultMaxAge+time.Hour)
	rep, err = w.Settlements.Check(w.Ctx, 100)
	require.NoError(t, err)
	var missing []string
	for _, d := range rep.Discrepancies {
		if d.Kind == "not_settled" {
			require.Equal(t, w.rides[0].ID, *d.RideID)
			missing = append(missing, d.Type)
		}
	}
	require.ElementsMatch(t, []string{"charge", "refund"}, missing)
}
