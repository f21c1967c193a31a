package settlements

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/internal/failpoint"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/settlementfile"
)

// MaxFileBytes bounds a settlement file the service records.
const MaxFileBytes = 64 << 20

// Receipt is what recording a received settlement file did.
type Receipt struct {
	// FileID is the recorded file version's id.
	FileID int64
	// Version is the file's version under its name: 1 for a new name.
	Version int
	// Duplicate says that the same name and content were recorded before:
	// nothing was written.
	Duplicate bool
	// Flagged says that the file is a new version of a name seen before,
	// listed for an operator.
	Flagged bool
}

// Receive records a settlement file under its name and
// SHA-256 and queues the job that applies it, in one transaction; the
// caller acknowledges the file (archives it) only after it returns. A file
// recorded before (same name and content) writes nothing. The same name
// with other content is recorded as the next version, flagged for an
// operator; applying it adds only the lines no other file applied.
func (s *Service) Receive(ctx context.Context, name string, content []byte) (Receipt, error) {
	if name == "" || len(name) > 255 {
		return Receipt{}, service.Invalid("name", "must be 1 to 255 bytes")
	}
	if len(content) > MaxFileBytes {
		return Receipt{}, service.Invalid("content", "is over %d bytes", MaxFileBytes)
	}
	sum := sha256.Sum256(content)
	var rec Receipt
	err := s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		rec = Receipt{}
		seen, err := s.queries.SettlementFileGetByNameSHA(ctx, tx, name, sum[:])
		if err == nil {
			rec = Receipt{FileID: seen.ID, Version: int(seen.Version), Duplicate: true}
			return nil
		}
		if !service.IsNoRows(err) {
			return err
		}
		row, err := s.queries.SettlementFileCreate(ctx, tx, dbgen.SettlementFileCreateParams{
			Name: name, Sha256: sum[:], Content: content,
		})
		if err != nil {
			return err
		}
		rec = Receipt{FileID: row.ID, Version: int(row.Version), Flagged: row.Flagged}
		_, err = s.jobs.InsertTx(ctx, tx, ApplyArgs{FileID: row.ID}, nil)
		return err
	})
	if service.IsUniqueViolation(err) {
		// Another process recorded this name at the same moment: what it
		// recorded decides, read again.
		return s.Receive(ctx, name, content)
	}
	if err != nil {
		return Receipt{}, service.Internal(err)
	}
	s.metrics.received(rec)
	return rec, nil
}

// Applied is what applying a settlement file did, over all its
// runs.
type Applied struct {
	FileID int64
	// Status is pending (more to apply), applied or rejected.
	Status string
	// Applied, Duplicate and Quarantined count the file's lines: applied
	// anew, already applied from another file, and refused.
	Applied, Duplicate, Quarantined int
}

// Apply applies a recorded settlement file from its cursor to
// its end, in batches of Config.BatchLines lines. Each batch is
// one transaction that applies its lines and moves the file's cursor past
// them, so a run that dies resumes after the last committed batch and no
// line is applied twice. A malformed line is quarantined with its line
// number and reason; a line whose reference and type another line already
// carries is counted as a duplicate (or quarantined, when its amounts
// differ). A file whose header cannot be read is rejected and flagged.
func (s *Service) Apply(ctx context.Context, fileID int64) (Applied, error) {
	f, err := s.queries.SettlementFileGet(ctx, s.pool, fileID)
	if service.IsNoRows(err) {
		return Applied{}, &service.Error{Code: service.CodeNotFound, Message: fmt.Sprintf("settlement file %d does not exist", fileID)}
	}
	if err != nil {
		return Applied{}, service.Internal(err)
	}
	if f.Status != "pending" {
		return appliedOf(f), nil
	}
	entries, perr := settlementfile.Parse(bytes.NewReader(f.Content))
	var he *settlementfile.HeaderError
	if errors.As(perr, &he) {
		if _, err := s.queries.SettlementFileReject(ctx, s.pool, he.Error(), fileID); err != nil {
			return Applied{}, service.Internal(err)
		}
		s.metrics.rejected()
		return s.settlementApplied(ctx, fileID)
	}
	if perr != nil {
		return Applied{}, service.Internal(perr)
	}
	batch := batchName(f.Name, int(f.Version))
	for {
		if err := ctx.Err(); err != nil {
			return Applied{}, err
		}
		var b settlementBatchResult
		err := s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			var err error
			b, err = s.settlementBatch(ctx, tx, fileID, batch, entries)
			return err
		})
		if err != nil {
			return Applied{}, service.Internal(err)
		}
		s.metrics.batch(b)
		if b.done {
			return s.settlementApplied(ctx, fileID)
		}
		if failpoint.Enabled {
			failpoint.Hit("settlement.apply:after_batch")
		}
		if s.afterBatch != nil {
			s.afterBatch(fileID, b.cursor)
		}
	}
}

// settlementBatchResult is what one batch of a settlement file did.
type settlementBatchResult struct {
	// done says the file is finished; cursor is its new cursor.
	done   bool
	cursor int
	// byMatch counts the lines applied by match; duplicate and quarantined
	// the others.
	byMatch                map[string]int
	duplicate, quarantined int
}

// settlementBatch applies, under the file's row lock, the next batch of
// entries after the file's cursor and advances the cursor past them,
// finishing the file when none remain.
func (s *Service) settlementBatch(ctx context.Context, tx pgx.Tx, fileID int64, batch string, entries []settlementfile.Entry) (settlementBatchResult, error) {
	f, err := s.queries.SettlementFileLock(ctx, tx, fileID)
	if err != nil {
		return settlementBatchResult{}, err
	}
	if f.Status != "pending" {
		return settlementBatchResult{done: true, cursor: int(f.CursorLine)}, nil
	}
	from := int(f.CursorLine)
	var todo []settlementfile.Entry
	for _, e := range entries {
		if e.Number > from {
			todo = append(todo, e)
			if len(todo) == s.batchLines {
				break
			}
		}
	}
	to := from
	var applied, duplicate, quarantined int32
	counts := map[string]int{}
	for _, e := range todo {
		to = e.Number
		if e.Problem != "" {
			if err := s.settlementQuarantine(ctx, tx, fileID, e.Number, e.Problem, e.Raw); err != nil {
				return settlementBatchResult{}, err
			}
			quarantined++
			continue
		}
		outcome, err := s.settlementLineApply(ctx, tx, fileID, batch, e)
		if err != nil {
			return settlementBatchResult{}, err
		}
		switch outcome {
		case "duplicate":
			duplicate++
		case "conflict":
			quarantined++
		default:
			applied++
			counts[outcome]++
		}
	}
	n, err := s.queries.SettlementFileAdvance(ctx, tx, dbgen.SettlementFileAdvanceParams{
		ID: fileID, FromLine: int32(from), ToLine: int32(to),
		Applied: applied, Duplicate: duplicate, Quarantined: quarantined,
	})
	if err != nil {
		return settlementBatchResult{}, err
	}
	if n != 1 {
		return settlementBatchResult{}, fmt.Errorf("settlement file %d: cursor moved under its lock", fileID)
	}
	done := len(todo) < s.batchLines || todo[len(todo)-1].Number == entries[len(entries)-1].Number
	if done {
		if _, err := s.queries.SettlementFileFinish(ctx, tx, fileID); err != nil {
			return settlementBatchResult{}, err
		}
	}
	return settlementBatchResult{
		done: done, cursor: to, byMatch: counts, duplicate: int(duplicate), quarantined: int(quarantined),
	}, nil
}

// settlementLineApply records one well-formed line, matched against our
// charges and refunds, unless its reference and type were applied before.
// It returns the line's match (matched, unknown, mismatch, none), or
// duplicate when an identical line was applied before, or conflict when one
// with other amounts was (the line is then quarantined).
func (s *Service) settlementLineApply(ctx context.Context, tx pgx.Tx, fileID int64, batch string, e settlementfile.Entry) (string, error) {
	l := e.Line
	m, err := s.settlementMatch(ctx, tx, l)
	if err != nil {
		return "", err
	}
	_, err = s.queries.SettlementLineInsert(ctx, tx, dbgen.SettlementLineInsertParams{
		FileID: fileID, LineNumber: int32(e.Number), ProcessorReference: l.SourceID, Type: l.Category,
		BalanceTransactionID: l.BalanceTransactionID, TransactionCreatedAt: l.Created,
		GrossCents: l.GrossCents, FeeCents: l.FeeCents, NetCents: l.NetCents, Currency: l.Currency,
		Batch: batch, PayoutID: l.PayoutID, PayoutEffectiveAt: l.PayoutEffectiveAt,
		Match: m.match, Mismatch: m.mismatch, RideID: m.rideID, RefundID: m.refundID,
	})
	if err == nil {
		return m.match, nil
	}
	if !service.IsNoRows(err) {
		return "", err
	}
	prev, err := s.queries.SettlementLineGetByReference(ctx, tx, l.SourceID, l.Category)
	if err != nil {
		return "", err
	}
	if prev.GrossCents == l.GrossCents && prev.FeeCents == l.FeeCents && prev.NetCents == l.NetCents &&
		prev.Currency == l.Currency && prev.PayoutID == l.PayoutID {
		return "duplicate", nil
	}
	reason := fmt.Sprintf("differs from the %s line applied from %s version %d line %d (gross %d, fee %d, net %d %s, payout %s); not applied",
		l.Category, prev.FileName, prev.FileVersion, prev.LineNumber, prev.GrossCents, prev.FeeCents, prev.NetCents, prev.Currency, prev.PayoutID)
	return "conflict", s.settlementQuarantine(ctx, tx, fileID, e.Number, reason, e.Raw)
}

func (s *Service) settlementQuarantine(ctx context.Context, tx pgx.Tx, fileID int64, line int, reason, raw string) error {
	if len(reason) > 1000 {
		reason = reason[:1000]
	}
	_, err := s.queries.SettlementQuarantineInsert(ctx, tx, dbgen.SettlementQuarantineInsertParams{
		FileID: fileID, LineNumber: int32(line), Reason: reason, Raw: raw,
	})
	return err
}

// settlementMatchResult is how a line relates to our records.
type settlementMatchResult struct {
	match            string
	mismatch         *string
	rideID, refundID *int64
}

// settlementMatch finds the ride a charge line settles, or the refund a
// refund line settles, and compares amount and currency: a charge's gross
// is the ride's amount, a refund's is minus the refund's.
func (s *Service) settlementMatch(ctx context.Context, tx pgx.Tx, l settlementfile.Line) (settlementMatchResult, error) {
	var r settlementMatchResult
	var amount int64
	var currency string
	switch l.Category {
	case settlementfile.CategoryCharge:
		ride, err := s.queries.SettlementRideByCharge(ctx, tx, l.SourceID)
		if service.IsNoRows(err) {
			return settlementMatchResult{match: "unknown"}, nil
		}
		if err != nil {
			return r, err
		}
		r.rideID, amount, currency = &ride.RideID, ride.AmountCents, ride.Currency
	case settlementfile.CategoryRefund:
		ref, err := s.queries.SettlementRefundByProcessorID(ctx, tx, l.SourceID)
		if service.IsNoRows(err) {
			return settlementMatchResult{match: "unknown"}, nil
		}
		if err != nil {
			return r, err
		}
		r.rideID, r.refundID, amount, currency = &ref.RideID, &ref.RefundID, -ref.AmountCents, ref.Currency
	default:
		return settlementMatchResult{match: "none"}, nil
	}
	r.match = "matched"
	var why string
	switch {
	case currency != l.Currency:
		why = fmt.Sprintf("currency %s, ours is %s", l.Currency, currency)
	case amount != l.GrossCents:
		why = fmt.Sprintf("gross %d, ours is %d", l.GrossCents, amount)
	}
	if why != "" {
		r.match, r.mismatch = "mismatch", &why
	}
	return r, nil
}

// batchName is the settlement batch of a file's lines: the file's name and
// version.
func batchName(name string, version int) string {
	b := fmt.Sprintf("%s#%d", name, version)
	if len(b) > 255 {
		b = b[len(b)-255:]
	}
	return b
}

func (s *Service) settlementApplied(ctx context.Context, fileID int64) (Applied, error) {
	f, err := s.queries.SettlementFileGet(ctx, s.pool, fileID)
	if err != nil {
		return Applied{}, service.Internal(err)
	}
	return appliedOf(f), nil
}

func appliedOf(f *dbgen.SettlementFile) Applied {
	return Applied{
		FileID: f.ID, Status: f.Status, Applied: int(f.LinesApplied),
		Duplicate: int(f.LinesDuplicate), Quarantined: int(f.LinesQuarantined),
	}
}
