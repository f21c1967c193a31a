// Package settlementfile reads the acquirer's settlement files: CSV files
// laid out as Stripe's itemized payout reconciliation report
// (payout_reconciliation.itemized), one row per balance transaction that a
// payout settles (charges, refunds, fees, dispute debits) and one for the
// payout itself.
//
// Parse never fails on a bad row: it returns every row in file order, each
// either a Line or the reason it was refused, with its line number in the
// file (the header is line 1). Only a file without the required header
// columns is refused as a whole. The package holds no state and does no
// I/O beyond the reader it is given.
package settlementfile
