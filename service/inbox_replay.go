package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/atomicrides/atomicrides/dbgen"
)

// EventLister is a processor adapter that lists the events it made, as its
// webhooks would deliver them (Stripe keeps 30 days).
type EventLister interface {
	EventListSince(ctx context.Context, since time.Time) ([]json.RawMessage, error)
}

// ReplayReport is what a replay of the processor's events did.
type ReplayReport struct {
	Source string    `json:"source"`
	Since  time.Time `json:"since"`
	// Listed counts the events the processor listed; Recorded those new to
	// the inbox (each queued to be applied), Duplicates those it had.
	Listed     int `json:"listed"`
	Recorded   int `json:"recorded"`
	Duplicates int `json:"duplicates"`
}

// InboxReplay reads the processor's events since since and passes each
// through the inbox as if delivered again: an event the inbox has is a
// duplicate and writes nothing; one it lacks (lost with a restore, or
// never delivered) is recorded with its job and applied once. This is how
// a deployment restored from a backup, or a standby promoted while behind,
// learns what the processor did in the commits it lost.
func (s *Service) InboxReplay(ctx context.Context, source string, since time.Time) (*ReplayReport, error) {
	src := s.inbound[source]
	if src == nil {
		return nil, &Error{Code: CodeNotFound, Message: "webhooks from " + source + " are not configured"}
	}
	lister, ok := s.rawPayments.(EventLister)
	if source != InboxSourceStripe || !ok {
		return nil, Internal(errors.New("the payment processor of " + source + " lists no events"))
	}
	events, err := lister.EventListSince(ctx, since)
	if err != nil {
		return nil, err
	}
	rep := &ReplayReport{Source: source, Since: since.UTC(), Listed: len(events)}
	parsed := make([]*InboundEvent, len(events))
	ids := make([]string, len(events))
	for i, raw := range events {
		ev, err := src.Parse(raw)
		if err != nil {
			return rep, Internal(fmt.Errorf("event listed by the processor: %w", err))
		}
		parsed[i], ids[i] = ev, ev.ID
	}
	// The events the inbox has are duplicates: one query finds them, so
	// that a pass over events mostly known costs no transaction per event.
	known, err := s.recordedSet(ctx, ids, func(ctx context.Context, db dbgen.DBTX, ids []string) ([]string, error) {
		return s.queries.InboxEventListKnown(ctx, db, source, ids)
	})
	if err != nil {
		return rep, err
	}
	for i, raw := range events {
		ev := parsed[i]
		if known[ev.ID] {
			rep.Duplicates++
			continue
		}
		dup, err := s.inboxRecord(ctx, source, []InboundMessage{{Event: ev, Payload: raw}})
		if err != nil {
			return rep, err
		}
		if dup {
			rep.Duplicates++
		} else {
			rep.Recorded++
		}
	}
	s.logger.InfoContext(ctx, "inbox replay", "source", source, "since", rep.Since, "listed", rep.Listed,
		"recorded", rep.Recorded, "duplicates", rep.Duplicates)
	return rep, nil
}
