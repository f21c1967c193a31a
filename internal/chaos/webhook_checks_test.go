package chaos

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// chaosHookState is what the webhook checks read once the system settled:
// the fake's events and deliveries, the inbox, the rides' refund and
// dispute states, the orphan policy's rows.
type chaosHookState struct {
	events *chaosEvents
	// inbox: applied outcome by event id ("" while unapplied).
	inbox   map[string]string
	applied int
	// rides by the charge they record.
	rides map[string]chaosHookRide
	// effectsTwice counts effects of events recorded more than once: a
	// refund recorded from the processor twice, a dispute status twice.
	effectsTwice int
	// orphans: the orphan policy's rows, by charge.
	orphans map[string]chaosOrphanRow
	// recordedOnRides counts refunds recorded on rides from the processor
	// (an event, or the orphan pass).
	recordedOnRides int
}

type chaosHookRide struct {
	id       int64
	dispute  string
	refund   string // the refund's status, "" without one
	refundID string
}

type chaosOrphanRow struct {
	status, refundID string
	refundedBefore   bool
}

// readHookState reads the webhook side of sys.
func readHookState(ctx context.Context, sys *chaosSystem) (*chaosHookState, error) {
	ev, err := sys.stripeEvents(ctx)
	if err != nil {
		return nil, err
	}
	h := &chaosHookState{events: ev, inbox: map[string]string{}, rides: map[string]chaosHookRide{}, orphans: map[string]chaosOrphanRow{}}
	err = withConn(ctx, sys.dbURL, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `SELECT event_id, coalesce(outcome, '') FROM inbox_events WHERE source = 'stripe'`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id, outcome string
			if err := rows.Scan(&id, &outcome); err != nil {
				return err
			}
			h.inbox[id] = outcome
			if outcome != "" {
				h.applied++
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = conn.Query(ctx, `
			SELECT r.id, r.stripe_charge_id, r.dispute_status, coalesce(f.status, ''), coalesce(f.stripe_refund_id, '')
			FROM rides r LEFT JOIN refunds f ON f.ride_id = r.id WHERE r.stripe_charge_id IS NOT NULL`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var r chaosHookRide
			var charge string
			if err := rows.Scan(&r.id, &charge, &r.dispute, &r.refund, &r.refundID); err != nil {
				return err
			}
			h.rides[charge] = r
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = conn.Query(ctx, `SELECT stripe_charge_id, status, coalesce(stripe_refund_id, ''), refunded_before FROM orphan_refunds`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var charge string
			var o chaosOrphanRow
			if err := rows.Scan(&charge, &o.status, &o.refundID, &o.refundedBefore); err != nil {
				return err
			}
			h.orphans[charge] = o
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return conn.QueryRow(ctx, `
			SELECT
				(SELECT count(*) FROM (SELECT 1 FROM audit_records
				  WHERE action = 'refund.recorded_from_processor' OR action LIKE 'ride.dispute\_%'
				  GROUP BY resource_type, resource_id, action HAVING count(*) > 1) twice),
				(SELECT count(*) FROM audit_records WHERE action = 'refund.recorded_from_processor')`,
		).Scan(&h.effectsTwice, &h.recordedOnRides)
	})
	return h, err
}

// checkEventsAppliedOnce: every event the fake made is in the inbox, once
// (its natural id is the key), and applied, with its effects recorded once;
// the inbox holds no event the fake did not make.
func checkEventsAppliedOnce(h *chaosHookState) chaosCheck {
	missing, unapplied := 0, 0
	made := map[string]bool{}
	for _, e := range h.events.Events {
		made[e.ID] = true
		outcome, ok := h.inbox[e.ID]
		switch {
		case !ok:
			missing++
		case outcome == "":
			unapplied++
		}
	}
	foreign := 0
	for id := range h.inbox {
		if !made[id] {
			foreign++
		}
	}
	delivered, ok2xx, dupes := len(h.events.Deliveries), 0, 0
	per := map[string]int{}
	for _, d := range h.events.Deliveries {
		if d.Status >= 200 && d.Status < 300 {
			ok2xx++
			if per[d.EventID]++; per[d.EventID] == 2 {
				dupes++
			}
		}
	}
	return chaosCheck{id: "events_applied_once",
		name:     "every event at Stripe is in the inbox once and applied, its effects recorded once; nothing else is",
		expected: fmt.Sprintf("%d events: 0 missing, 0 unapplied, 0 unknown, 0 effects twice", len(h.events.Events)),
		actual: fmt.Sprintf("%d events: %d missing, %d unapplied, %d unknown, %d effects twice (%d deliveries, %d answered 2xx, %d events accepted more than once)",
			len(h.events.Events), missing, unapplied, foreign, h.effectsTwice, delivered, ok2xx, dupes),
		ok: missing == 0 && unapplied == 0 && foreign == 0 && h.effectsTwice == 0 && len(h.events.Events) > 0}
}

// disputeStatus is the ride's dispute_status a dispute at the fake should
// leave.
func disputeStatus(fake string) string {
	switch fake {
	case "won", "lost":
		return fake
	case "":
		return "none"
	}
	return "disputed"
}

// checkRidesMatchLedger: every ride's refund and dispute are what the fake
// of its processor holds for its charge: refunded with the charge's
// accepted refund exactly when the fake has one, and the dispute's status
// (disputes are opened at the fake Stripe only).
func checkRidesMatchLedger(h *chaosHookState, s *chaosState) chaosCheck {
	l := s.ledger
	refundOf := map[string]string{}
	for _, r := range l.Refunds {
		if r.Status == "succeeded" || r.Status == "pending" {
			refundOf[r.Charge] = r.ID
		}
	}
	if s.adyen != nil {
		// Adyen has no refund status: a refund it holds is accepted.
		for _, r := range s.adyen.Refunds {
			refundOf[r.PaymentPSPReference] = r.PSPReference
		}
	}
	disputeOf := map[string]string{}
	for _, d := range l.Disputes {
		disputeOf[d.Charge] = d.Status
	}
	refundsDiffer, disputesDiffer, refunded, disputed := 0, 0, 0, 0
	for charge, r := range h.rides {
		want := refundOf[charge]
		if want != "" {
			refunded++
		}
		if (want == "") != (r.refund != "refunded") || (want != "" && r.refundID != want) {
			refundsDiffer++
			s.t.Logf("ride %d (charge %s): refund %q %q, the processor holds %q", r.id, charge, r.refund, r.refundID, want)
		}
		if disputeOf[charge] != "" {
			disputed++
		}
		if r.dispute != disputeStatus(disputeOf[charge]) {
			disputesDiffer++
		}
	}
	return chaosCheck{id: "rides_match_ledger",
		name:     "every ride's refund and dispute state equals its processor's for its charge",
		expected: fmt.Sprintf("%d rides: 0 refunds differ, 0 disputes differ", len(h.rides)),
		actual: fmt.Sprintf("%d rides (%d refunded, %d disputed at their processor): %d refunds differ, %d disputes differ",
			len(h.rides), refunded, disputed, refundsDiffer, disputesDiffer),
		ok: refundsDiffer == 0 && disputesDiffer == 0}
}

// webhookChecks are the checks of the webhook side.
func webhookChecks(ctx context.Context, s *chaosState, sys *chaosSystem) ([]chaosCheck, *chaosHookState) {
	h, err := readHookState(ctx, sys)
	if err != nil {
		s.t.Logf("webhook state: %v", err)
		return []chaosCheck{{id: "events_applied_once", name: "the webhook state could be read", expected: "read", actual: err.Error()}}, nil
	}
	return []chaosCheck{checkEventsAppliedOnce(h), checkRidesMatchLedger(h, s)}, h
}

// checkOrphansResolved: after a restore, the orphan policy has resolved
// every charge and refund at Stripe that no ride records: each orphan
// charge is refunded exactly once at Stripe and recorded (by the policy, or
// as refunded already), each orphan refund is recorded on its ride or on
// its orphan charge, and `keys reconcile` lists nothing (exit 0). The note
// gives the counts.
func checkOrphansResolved(s *chaosState, h *chaosHookState, rec *chaosReconcile) (chaosCheck, string) {
	refundsOf := map[string][]string{}
	for _, r := range s.ledger.Refunds {
		refundsOf[r.Charge] = append(refundsOf[r.Charge], r.ID)
	}
	rideCharges, rideRefunds := s.rideCharges(), s.rideRefunds()
	orphanRefundIDs := map[string]bool{}
	for _, o := range h.orphans {
		if o.refundID != "" {
			orphanRefundIDs[o.refundID] = true
		}
	}
	charges, byPolicy, before, unresolved := 0, 0, 0, 0
	for _, c := range s.ledger.Charges {
		if c.Status != "succeeded" || rideCharges[c.ID] || c.Uncaptured {
			// An uncaptured charge is a trip's hold: it took no money, and
			// a lost booking's is released, not refunded (no_hold_left_open).
			continue
		}
		charges++
		o, ok := h.orphans[c.ID]
		if !ok || o.status != "refunded" || len(refundsOf[c.ID]) != 1 || refundsOf[c.ID][0] != o.refundID {
			unresolved++
			s.t.Logf("orphan charge %s: row %+v (recorded %v), refunds at Stripe %v", c.ID, o, ok, refundsOf[c.ID])
			continue
		}
		if o.refundedBefore {
			before++
		} else {
			byPolicy++
		}
	}
	refunds, refundsUnresolved, policyRefunds := 0, 0, 0
	for _, r := range s.ledger.Refunds {
		if rideRefunds[r.ID] {
			continue
		}
		if h.policyRefund(r.Charge, r.ID) {
			policyRefunds++
			continue
		}
		refunds++
		if !orphanRefundIDs[r.ID] {
			refundsUnresolved++
			s.t.Logf("refund %s of charge %s: recorded by no ride and no orphan", r.ID, r.Charge)
		}
	}
	if rec == nil {
		rec = &chaosReconcile{exit: -1}
	}
	listed := len(rec.OrphanCharges) + len(rec.OrphanRefunds) + len(rec.MissingCharges) + len(rec.OrphanHolds)
	c := chaosCheck{id: "orphans_resolved",
		name:     "every charge and refund at Stripe that no ride records is resolved by the orphan policy, each orphan charge refunded once (a lost booking's hold is released instead: no_hold_left_open); `keys reconcile` lists nothing, orphan holds included",
		expected: fmt.Sprintf("%d orphan charges, each refunded once; %d other refunds recorded; reconcile: 0 listed, exit 0", charges, refunds),
		actual: fmt.Sprintf("%d unresolved (%d refunded by the policy, %d refunded already); %d refunds unrecorded; reconcile: %d listed, exit %d",
			unresolved, byPolicy, before, refundsUnresolved, listed, rec.exit),
		ok: unresolved == 0 && refundsUnresolved == 0 && listed == 0 && rec.exit == 0}
	note := fmt.Sprintf("orphans: %d charges at Stripe recorded by no ride (%d refunded by the policy, %d refunded already, nothing sent), %d refunds of lost rides recorded with their orphan charge, %d policy refunds; %d refunds recorded on rides from Stripe (events and the orphan pass); `keys reconcile` lists %d",
		charges, byPolicy, before, refunds, policyRefunds, h.recordedOnRides, listed)
	return c, note
}

// policyRefund reports whether refund (of charge) is the orphan policy's
// own refund of an orphan charge, which no client asked for.
func (h *chaosHookState) policyRefund(charge, refund string) bool {
	if h == nil {
		return false
	}
	o, ok := h.orphans[charge]
	return ok && !o.refundedBefore && o.refundID == refund
}
