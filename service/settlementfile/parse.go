package settlementfile

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
)

// MaxLineBytes bounds one row; a longer row is refused as malformed.
const MaxLineBytes = 4096

// HeaderError is a file whose header lacks a required column or cannot be
// read: no row of it can be understood.
type HeaderError struct {
	// Reason says what is wrong with the header.
	Reason string
}

func (e *HeaderError) Error() string { return "settlement file header: " + e.Reason }

var (
	currencyRe = regexp.MustCompile(`^[a-z]{3}$`)
	idRe       = regexp.MustCompile(`^[A-Za-z0-9_]{1,255}$`)
)

// Parse reads a whole settlement file. It returns one Entry per data row,
// in file order, each a Line or a Problem with the row's line number. It
// returns a *HeaderError when the header is missing or lacks a required
// column, and an error when r fails.
func Parse(r io.Reader) ([]Entry, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = false
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, &HeaderError{Reason: "the file is empty"}
	}
	if err != nil {
		return nil, &HeaderError{Reason: err.Error()}
	}
	index := make(map[string]int, len(header))
	for i, name := range header {
		name = strings.TrimSpace(strings.TrimPrefix(name, "\ufeff"))
		if _, dup := index[name]; dup {
			return nil, &HeaderError{Reason: fmt.Sprintf("column %q appears twice", name)}
		}
		index[name] = i
	}
	for _, c := range Columns {
		if _, ok := index[c]; !ok && !optionalColumns[c] {
			return nil, &HeaderError{Reason: fmt.Sprintf("required column %q is missing", c)}
		}
	}
	var entries []Entry
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return entries, nil
		}
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			// The csv reader cannot resynchronise after a broken quote;
			// the rest of the file is one malformed entry.
			entries = append(entries, Entry{Number: pe.StartLine, Problem: "unreadable CSV: " + pe.Err.Error()})
			return entries, nil
		}
		if err != nil {
			return nil, err
		}
		line, _ := cr.FieldPos(0)
		e := Entry{Number: line, Raw: joinCSV(rec)}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue // a blank line
		}
		e.Line, e.Problem = parseRow(rec, index)
		e.Line.Number = line
		if len(e.Raw) > MaxLineBytes {
			e.Problem, e.Raw = fmt.Sprintf("row longer than %d bytes", MaxLineBytes), e.Raw[:MaxLineBytes]
		}
		entries = append(entries, e)
	}
}

// parseRow turns one record into a Line, or says what is wrong with it.
func parseRow(rec []string, index map[string]int) (Line, string) {
	field := func(name string) string {
		i, ok := index[name]
		if !ok || i >= len(rec) {
			return ""
		}
		return strings.TrimSpace(rec[i])
	}
	if len(rec) != len(index) {
		return Line{}, fmt.Sprintf("%d fields, the header has %d", len(rec), len(index))
	}
	var l Line
	l.Category = field("reporting_category")
	if !categories[l.Category] {
		return Line{}, fmt.Sprintf("reporting_category %q is not one of charge, refund, fee, dispute, payout", l.Category)
	}
	l.SourceID = field("source_id")
	if !idRe.MatchString(l.SourceID) {
		return Line{}, fmt.Sprintf("source_id %q is not a processor reference", l.SourceID)
	}
	l.PayoutID = field("automatic_payout_id")
	if !idRe.MatchString(l.PayoutID) {
		return Line{}, fmt.Sprintf("automatic_payout_id %q is not a payout id", l.PayoutID)
	}
	l.BalanceTransactionID = field("balance_transaction_id")
	if !idRe.MatchString(l.BalanceTransactionID) {
		return Line{}, fmt.Sprintf("balance_transaction_id %q is not a balance transaction id", l.BalanceTransactionID)
	}
	var err error
	if l.PayoutEffectiveAt, err = time.Parse(TimeLayout, field("automatic_payout_effective_at")); err != nil {
		return Line{}, fmt.Sprintf("automatic_payout_effective_at %q is not a time like %s", field("automatic_payout_effective_at"), TimeLayout)
	}
	if l.Created, err = time.Parse(TimeLayout, field("created_utc")); err != nil {
		return Line{}, fmt.Sprintf("created_utc %q is not a time like %s", field("created_utc"), TimeLayout)
	}
	l.Currency = field("currency")
	if !currencyRe.MatchString(l.Currency) {
		return Line{}, fmt.Sprintf("currency %q is not a lowercase ISO 4217 code", l.Currency)
	}
	for _, a := range []struct {
		name string
		to   *int64
	}{{"gross", &l.GrossCents}, {"fee", &l.FeeCents}, {"net", &l.NetCents}} {
		v, err := ParseAmount(field(a.name), l.Currency)
		if err != nil {
			return Line{}, fmt.Sprintf("%s: %v", a.name, err)
		}
		*a.to = v
	}
	if l.GrossCents-l.FeeCents != l.NetCents {
		return Line{}, fmt.Sprintf("gross %s minus fee %s is not net %s", field("gross"), field("fee"), field("net"))
	}
	l.Description = field("description")
	return l, ""
}

// joinCSV writes a record back as one CSV row, without its newline.
func joinCSV(rec []string) string {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write(rec) // a bytes.Buffer does not fail
	w.Flush()
	return strings.TrimRight(b.String(), "\r\n")
}
