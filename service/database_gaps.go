package service

import (
	"context"
	"time"

	"github.com/atomicrides/atomicrides/dbgen"
)

// A restore, or a standby promoted while behind, brings back a database
// that lacks the newest commits. A booking whose key row was among them
// was sent to its processor, and its client's retry writes a new row: by
// that row alone the key looks first sent now, so past the processor's
// key window (Stripe's 24 hours) the key would be sent again to a
// processor that has forgotten it, and charge twice.
//
// The database keeps its own heartbeat (database_heartbeat), which every
// serving process moves to now every HeartbeatInterval. A database that
// lost commits holds an older beat: the first beat after the loss finds it
// stale and records the interval since it as a gap (database_gaps), and
// until then the stale beat itself marks it. Every commit the database
// lost was made after that beat, so any request it lost was first sent no
// earlier: a phase that decides a processor call reads the oldest open gap
// (database_lost_from()) with what it reads anyway, and judges the key's
// window from whichever is earlier, the key's own record or the gap. Past
// the window the payment is looked up by its tags before the key is sent
// again, as for any key that old.
//
// A gap stays open until the orphan pass has seen every charge made in it:
// either one found no charge in it that no ride records, or the orphan
// grace has passed since it was found (every charge lost in it is then
// recorded by the orphan policy, which answers the client's retry). A
// normal booking pays nothing for this: no gap is open, and reading that
// is part of a statement the phase runs anyway.

// HeartbeatInterval is how often a serving process moves the database's
// heartbeat. The beat is stale, and the interval since it a gap, after
// database_heartbeat.stale_after (3 s): a loss of commits that the service
// does not see for longer than that is noticed.
const HeartbeatInterval = time.Second

// gapSkew widens a gap by the processors' clocks against the database's
// when the orphan pass looks for charges made in it.
const gapSkew = 5 * time.Minute

// Heartbeat moves the database's heartbeat to now and reports the start of
// the gap it found (a beat older than stale_after: commits made since may
// be lost), nil when there is none.
func (s *Service) Heartbeat(ctx context.Context) (*time.Time, error) {
	row, err := s.queries.DatabaseHeartbeat(ctx, s.pool)
	if err != nil {
		return nil, Internal(err)
	}
	s.metrics.gapsOpen.Set(float64(row.OpenGaps))
	if !row.Found {
		return nil, nil
	}
	s.metrics.gapsFound.Inc()
	s.logger.WarnContext(ctx, "database: its newest commits may be lost (a restore, a failover, or no process beat for a while); "+
		"requests first sent since lost_from are looked up at their processor once past its key window, until the orphan pass covers the gap",
		"lost_from", row.LostFrom.UTC(), "found_at", row.BeatAt.UTC())
	return &row.LostFrom, nil
}

// RunHeartbeat beats every HeartbeatInterval until ctx ends (a process
// beats once with Heartbeat before it serves). A beat that
// fails (the database is away) is retried at the next tick; the gap it
// leaves is what the next successful beat looks for.
func (s *Service) RunHeartbeat(ctx context.Context) {
	t := time.NewTicker(HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.Heartbeat(ctx); err != nil && ctx.Err() == nil {
			s.logger.DebugContext(ctx, "database heartbeat", "err", err)
		}
	}
}

// databaseGapsResolve closes the gaps the orphan pass rep, run at now with
// the grace period grace, has covered: those found more than grace ago
// (each charge made in them is past the grace and recorded), and those
// found before its listing began in which no charge that no ride records
// was made, when every processor's charges were listed or notified.
func (s *Service) databaseGapsResolve(ctx context.Context, rep *ReconcileReport, now time.Time, grace time.Duration) error {
	if _, err := s.queries.DatabaseGapsResolve(ctx, s.pool, now.Add(-grace)); err != nil {
		return Internal(err)
	}
	if len(rep.Unlisted) == 0 {
		if _, err := s.queries.DatabaseGapsResolveEmpty(ctx, s.pool, dbgen.DatabaseGapsResolveEmptyParams{
			CoveredUntil: rep.at, SkewSeconds: gapSkew.Seconds(), ListedSince: rep.Since, Unrecorded: rep.unrecorded,
		}); err != nil {
			return Internal(err)
		}
	}
	// The open gaps' gauge follows at the next beat.
	return nil
}

// gapLostFrom is the start of the open gap a query read with the phase
// (gap_open, gap_lost_from), nil when none is open.
func gapLostFrom(open bool, lostFrom time.Time) *time.Time {
	if !open {
		return nil
	}
	return &lostFrom
}

// lostFrom reads the start of the oldest open gap, nil when none is open,
// for a call whose phase did not read it.
func (s *Service) lostFrom(ctx context.Context) (*time.Time, error) {
	row, err := s.queries.DatabaseLostFrom(ctx, s.pool)
	if err != nil {
		return nil, Internal(err)
	}
	return gapLostFrom(row.GapOpen, row.LostFrom), nil
}

// keyWindowPassed reports whether, at now, the processor name may have
// forgotten a key first sent at since by its own record, or at lostFrom
// when the database may have lost an earlier record of it (nil: no gap
// is open). Each look-up it calls for is counted by why.
func (s *Service) keyWindowPassed(name string, now, since time.Time, lostFrom *time.Time) bool {
	if s.pastProcessorWindow(name, now, since) {
		s.metrics.keyLookups.WithLabelValues(name, "key_age").Inc()
		return true
	}
	if lostFrom != nil && lostFrom.Before(since) && s.pastProcessorWindow(name, now, *lostFrom) {
		s.metrics.keyLookups.WithLabelValues(name, "database_gap").Inc()
		return true
	}
	return false
}
