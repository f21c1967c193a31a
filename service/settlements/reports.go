package settlements

import (
	"context"
	"time"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/service"
)

// Discrepancy is one finding of the settlement check, for an
// operator (docs/settlements.md says what to do with each kind).
type Discrepancy struct {
	// Kind is one of DiscrepancyKinds.
	Kind string `json:"kind"`
	// Type and ProcessorReference name the line or our object: a charge
	// (ch_…) or refund (re_…).
	Type               string `json:"type"`
	ProcessorReference string `json:"processor_reference"`
	// RideID is the ride concerned, when one of ours is.
	RideID *int64 `json:"ride_id,omitempty"`
	// File, FileVersion and Line locate the bank's line, when there is one.
	File        string `json:"file,omitempty"`
	FileVersion int    `json:"file_version,omitempty"`
	Line        int    `json:"line,omitempty"`
	GrossCents  int64  `json:"gross_cents"`
	Currency    string `json:"currency"`
	// Detail says what differs, for a mismatch.
	Detail string `json:"detail,omitempty"`
	// Created is when the line was applied, or our object was made.
	Created time.Time `json:"created"`
}

// Report is the state of the settlements: recent files and every
// discrepancy (each list bounded by maxRows).
type Report struct {
	Files         []FileSummary `json:"files"`
	Discrepancies []Discrepancy `json:"discrepancies"`
	// Flagged counts the files flagged for an operator.
	Flagged int `json:"flagged"`
	// MaxAge is how old an unsettled charge or refund must be to be
	// reported.
	MaxAge time.Duration `json:"max_age_ns"`
}

// Clean reports whether nothing needs an operator.
func (r *Report) Clean() bool { return len(r.Discrepancies) == 0 && r.Flagged == 0 }

// FileSummary is one recorded settlement file version.
type FileSummary struct {
	ID          int64      `json:"id"`
	Received    time.Time  `json:"received"`
	Name        string     `json:"name"`
	Version     int        `json:"version"`
	SizeBytes   int64      `json:"size_bytes"`
	Status      string     `json:"status"`
	Problem     string     `json:"problem,omitempty"`
	Cursor      int        `json:"cursor"`
	Applied     int        `json:"applied"`
	Duplicate   int        `json:"duplicate"`
	Quarantined int        `json:"quarantined"`
	Flagged     bool       `json:"flagged"`
	FlagReason  string     `json:"flag_reason,omitempty"`
	Finished    *time.Time `json:"finished,omitempty"`
}

// Check lists the recent files and the discrepancies, and sets
// the settlement gauges (atomicrides_settlement_discrepancies,
// atomicrides_settlement_flagged_files).
func (s *Service) Check(ctx context.Context, maxRows int) (*Report, error) {
	rep := &Report{Files: []FileSummary{}, Discrepancies: []Discrepancy{}, MaxAge: s.maxAge}
	files, err := s.queries.SettlementFileList(ctx, s.pool, int32(maxRows))
	if err != nil {
		return nil, service.Internal(err)
	}
	for _, f := range files {
		rep.Files = append(rep.Files, FileSummary{
			ID: f.ID, Received: f.CreatedAt, Name: f.Name, Version: int(f.Version), SizeBytes: f.SizeBytes,
			Status: f.Status, Problem: orEmpty(f.Problem), Cursor: int(f.CursorLine), Applied: int(f.LinesApplied),
			Duplicate: int(f.LinesDuplicate), Quarantined: int(f.LinesQuarantined), Flagged: f.Flagged,
			FlagReason: orEmpty(f.FlagReason), Finished: f.FinishedAt,
		})
	}
	counts, err := s.queries.SettlementFileCountByStatus(ctx, s.pool)
	if err != nil {
		return nil, service.Internal(err)
	}
	for _, c := range counts {
		if c.Flagged {
			rep.Flagged += int(c.N)
		}
	}
	lines, err := s.queries.SettlementLineListDiscrepancies(ctx, s.pool, int32(maxRows))
	if err != nil {
		return nil, service.Internal(err)
	}
	byKind := map[string]int{}
	for _, l := range lines {
		kind := "unknown_reference"
		if l.Match == "mismatch" {
			kind = "mismatch"
		}
		byKind[kind]++
		rep.Discrepancies = append(rep.Discrepancies, Discrepancy{
			Kind: kind, Type: l.Type, ProcessorReference: l.ProcessorReference, RideID: l.RideID,
			File: l.FileName, FileVersion: int(l.FileVersion), Line: int(l.LineNumber),
			GrossCents: l.GrossCents, Currency: l.Currency, Detail: orEmpty(l.Mismatch), Created: l.CreatedAt,
		})
	}
	missing, err := s.queries.SettlementMissingList(ctx, s.pool, int32(maxRows), s.maxAge.Seconds())
	if err != nil {
		return nil, service.Internal(err)
	}
	for _, m := range missing {
		byKind["not_settled"]++
		gross := m.AmountCents
		if m.Type == "refund" {
			gross = -gross
		}
		rep.Discrepancies = append(rep.Discrepancies, Discrepancy{
			Kind: "not_settled", Type: m.Type, ProcessorReference: m.ProcessorReference, RideID: &m.RideID,
			GrossCents: gross, Currency: m.Currency, Created: m.CreatedAt,
		})
	}
	for _, k := range DiscrepancyKinds {
		s.metrics.discrepancies.WithLabelValues(k).Set(float64(byKind[k]))
	}
	s.metrics.flagged.Set(float64(rep.Flagged))
	return rep, nil
}

// Fetched marks a completed fetch of the bank's inbox
// (atomicrides_settlement_last_fetch_timestamp_seconds).
func (s *Service) Fetched(at time.Time) {
	s.metrics.lastFetch.Set(float64(at.Unix()))
}

// Line is one applied line of a settlement file.
type Line struct {
	Line               int       `json:"line"`
	Type               string    `json:"type"`
	ProcessorReference string    `json:"processor_reference"`
	GrossCents         int64     `json:"gross_cents"`
	FeeCents           int64     `json:"fee_cents"`
	NetCents           int64     `json:"net_cents"`
	Currency           string    `json:"currency"`
	PayoutID           string    `json:"payout_id"`
	PayoutEffectiveAt  time.Time `json:"payout_effective_at"`
	Match              string    `json:"match"`
	Mismatch           string    `json:"mismatch,omitempty"`
	RideID             *int64    `json:"ride_id,omitempty"`
}

// Quarantined is a line of a settlement file that was not
// applied, with the reason.
type Quarantined struct {
	Line   int    `json:"line"`
	Reason string `json:"reason"`
	Raw    string `json:"raw"`
}

// FileDetail is one file version with its lines.
type FileDetail struct {
	FileSummary
	Lines            []Line        `json:"lines"`
	QuarantinedLines []Quarantined `json:"quarantined_lines"`
}

// FileShow returns a recorded file with the lines it applied and
// those it quarantined.
func (s *Service) FileShow(ctx context.Context, fileID int64) (*FileDetail, error) {
	f, err := s.queries.SettlementFileGet(ctx, s.pool, fileID)
	if service.IsNoRows(err) {
		return nil, &service.Error{Code: service.CodeNotFound, Field: "id", Message: "no such settlement file"}
	}
	if err != nil {
		return nil, service.Internal(err)
	}
	d := &FileDetail{
		FileSummary: FileSummary{
			ID: f.ID, Received: f.CreatedAt, Name: f.Name, Version: int(f.Version), SizeBytes: int64(len(f.Content)),
			Status: f.Status, Problem: orEmpty(f.Problem), Cursor: int(f.CursorLine), Applied: int(f.LinesApplied),
			Duplicate: int(f.LinesDuplicate), Quarantined: int(f.LinesQuarantined), Flagged: f.Flagged,
			FlagReason: orEmpty(f.FlagReason), Finished: f.FinishedAt,
		},
		Lines: []Line{}, QuarantinedLines: []Quarantined{},
	}
	lines, err := s.queries.SettlementLineListByFile(ctx, s.pool, fileID)
	if err != nil {
		return nil, service.Internal(err)
	}
	for _, l := range lines {
		d.Lines = append(d.Lines, settlementLineOf(l))
	}
	q, err := s.queries.SettlementQuarantineListByFile(ctx, s.pool, fileID)
	if err != nil {
		return nil, service.Internal(err)
	}
	for _, l := range q {
		d.QuarantinedLines = append(d.QuarantinedLines, Quarantined{Line: int(l.LineNumber), Reason: l.Reason, Raw: l.Raw})
	}
	return d, nil
}

// Totals are the sums of every applied line.
type Totals struct {
	Lines                          int
	GrossCents, FeeCents, NetCents int64
}

// Totals sums every applied line.
func (s *Service) Totals(ctx context.Context) (Totals, error) {
	t, err := s.queries.SettlementLineTotals(ctx, s.pool)
	if err != nil {
		return Totals{}, service.Internal(err)
	}
	return Totals{Lines: int(t.Lines), GrossCents: t.GrossCents, FeeCents: t.FeeCents, NetCents: t.NetCents}, nil
}

func settlementLineOf(l *dbgen.SettlementLine) Line {
	return Line{
		Line: int(l.LineNumber), Type: l.Type, ProcessorReference: l.ProcessorReference,
		GrossCents: l.GrossCents, FeeCents: l.FeeCents, NetCents: l.NetCents, Currency: l.Currency,
		PayoutID: l.PayoutID, PayoutEffectiveAt: l.PayoutEffectiveAt, Match: l.Match,
		Mismatch: orEmpty(l.Mismatch), RideID: l.RideID,
	}
}

// orEmpty is *p, "" for nil.
func orEmpty(p *string) string {
	if p != nil {
		return *p
	}
	return ""
}
