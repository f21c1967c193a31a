package service

import (
	"context"
	"time"
)

// The events pass: the deployment reads the processor's events again
// through the inbox by itself, so that what a restore or a failover lost
// (the inbox rows and the effects of the lost commits) comes back without
// an operator. It is InboxReplay from the newest event the inbox holds,
// less EventsPassMargin:
//
//   - in normal operation the newest event is a moment old, so a pass lists
//     the last EventsPassMargin of events, every one a duplicate that
//     writes nothing: cheap and idempotent;
//   - after the database went back in time, the newest event it holds is
//     from before the loss, so the pass lists everything since then and
//     records (and applies once) each event the lost commits held. That it
//     recorded any is how the deployment notices: a WARN line and
//     atomicrides_events_pass_recorded_total.
//
// The margin covers events that arrive out of order (an older event
// delivered after a newer one, and lost with it). The pass never lists
// events older than the deployment (its database's creation) nor older
// than the processor keeps them (EventsRetention).

// EventsPassMargin is how far before the newest recorded event an events
// pass lists the processor's events.
const EventsPassMargin = time.Hour

// EventsRetention is how long the processor keeps its events (Stripe: 30
// days): an events pass never lists further back.
const EventsRetention = 30 * 24 * time.Hour

// EventsPass reads the processor's events since the newest event the
// inbox holds (less EventsPassMargin) through the inbox: events the inbox
// lacks are recorded and applied once, the others write nothing. It returns
// nil, doing nothing, when webhooks from the processor are not configured.
func (s *Service) EventsPass(ctx context.Context) (*ReplayReport, error) {
	source := InboxSourceStripe
	if !s.InboxEnabled(source) {
		return nil, nil
	}
	if _, ok := s.rawPayments.(EventLister); !ok {
		return nil, nil
	}
	now, err := s.queries.ClockNow(ctx, s.pool)
	if err != nil {
		return nil, Internal(err)
	}
	created, err := s.queries.DeploymentCreatedAt(ctx, s.pool)
	if err != nil {
		return nil, Internal(err)
	}
	newest, err := s.queries.InboxEventNewest(ctx, s.pool, source)
	if err != nil {
		return nil, Internal(err)
	}
	since := now.Add(-EventsRetention)
	for _, t := range []time.Time{created, newest} {
		if t.Add(-EventsPassMargin).After(since) {
			since = t.Add(-EventsPassMargin)
		}
	}
	rep, err := s.InboxReplay(ctx, source, since)
	if err != nil {
		return nil, err
	}
	s.metrics.eventsPassRecorded.WithLabelValues(source).Add(float64(rep.Recorded))
	if rep.Recorded > 0 {
		s.logger.WarnContext(ctx, "events pass: the processor listed events the inbox lacked (a restore or a failover lost commits, or their delivery is late); each is recorded and applied once",
			"source", source, "since", rep.Since, "listed", rep.Listed, "recorded", rep.Recorded)
	}
	return rep, nil
}
