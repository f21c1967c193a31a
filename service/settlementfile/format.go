package settlementfile

import "time"

// Columns are the header names of the report that Parse requires, in the
// order Write puts them. They are the column names of Stripe's itemized
// payout reconciliation report; other columns of that report may be present
// and are ignored.
var Columns = []string{
	"automatic_payout_id",
	"automatic_payout_effective_at",
	"balance_transaction_id",
	"created_utc",
	"currency",
	"gross",
	"fee",
	"net",
	"reporting_category",
	"source_id",
	"description",
}

// optionalColumns may be absent from the header.
var optionalColumns = map[string]bool{"description": true}

// Reporting categories that a settlement line may carry (the report's
// reporting_category).
const (
	CategoryCharge  = "charge"
	CategoryRefund  = "refund"
	CategoryFee     = "fee"
	CategoryDispute = "dispute"
	CategoryPayout  = "payout"
)

// categories is the set of accepted reporting categories.
var categories = map[string]bool{
	CategoryCharge: true, CategoryRefund: true, CategoryFee: true,
	CategoryDispute: true, CategoryPayout: true,
}

// TimeLayout is how the report writes its UTC timestamps.
const TimeLayout = "2006-01-02 15:04:05"

// Line is one well-formed row of a settlement file. Amounts are in the
// currency's minor unit (cents); Gross - Fee = Net always holds.
type Line struct {
	// Number is the row's line number in the file; the header is line 1.
	Number int
	// PayoutID is the payout that settles the line (automatic_payout_id).
	PayoutID string
	// PayoutEffectiveAt is when the payout is expected in the bank account.
	PayoutEffectiveAt time.Time
	// BalanceTransactionID is the processor's balance transaction.
	BalanceTransactionID string
	// Created is when the balance transaction was created (created_utc).
	Created time.Time
	// Currency is the lowercase ISO 4217 code.
	Currency string
	// GrossCents, FeeCents and NetCents are the line's amounts in minor
	// units: negative gross for refunds, disputes and payouts.
	GrossCents, FeeCents, NetCents int64
	// Category is the reporting category (Category…).
	Category string
	// SourceID is the processor reference of the object the line settles:
	// a charge (ch_…), a refund (re_…), a dispute (dp_…), a payout (po_…).
	// With Category it identifies the line across files.
	SourceID string
	// Description is free text from the processor.
	Description string
}

// Entry is one row of a file, in file order: a Line, or the reason the row
// was refused.
type Entry struct {
	// Number is the row's line number in the file.
	Number int
	// Line is the parsed row; meaningful only when Problem is empty.
	Line Line
	// Problem says why the row is malformed; empty for a good row.
	Problem string
	// Raw is the row as read, its fields joined again as CSV, for the
	// quarantine.
	Raw string
}
