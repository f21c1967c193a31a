package settlementfile

import (
	"encoding/csv"
	"io"
)

// Write writes lines as a settlement file: the header of Columns, then one
// row per line. It is how the fake bank writes its files; Parse reads them
// back unchanged.
func Write(w io.Writer, lines []Line) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(Columns); err != nil {
		return err
	}
	for _, l := range lines {
		rec := []string{
			l.PayoutID,
			l.PayoutEffectiveAt.UTC().Format(TimeLayout),
			l.BalanceTransactionID,
			l.Created.UTC().Format(TimeLayout),
			l.Currency,
			FormatAmount(l.GrossCents, l.Currency),
			FormatAmount(l.FeeCents, l.Currency),
			FormatAmount(l.NetCents, l.Currency),
			l.Category,
			l.SourceID,
			l.Description,
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
