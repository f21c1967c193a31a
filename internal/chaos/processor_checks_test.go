package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// procCharge is a charge that took money at a processor, as its ledger
// holds it.
type procCharge struct {
	processor string
	key       string // metadata ar_key: the booking's charge key
}

// procRefund is a refund at a processor.
type procRefund struct {
	processor string
	charge    string
}

// processorCharges returns every charge that took money, at every
// processor of the run, by id: Stripe's succeeded charges and Adyen's
// authorised payments.
func (s *chaosState) processorCharges() map[string]procCharge {
	out := map[string]procCharge{}
	for _, c := range s.ledger.Charges {
		if c.Status == "succeeded" {
			out[c.ID] = procCharge{processor: procStripe, key: c.Metadata["ar_key"]}
		}
	}
	if s.adyen != nil {
		for _, p := range s.adyen.Payments {
			// A trip's hold took the money too until it was released
			// (Cancelled): its ride records it.
			if p.ResultCode == "Authorised" || (p.ResultCode == "Cancelled" && p.ManualCapture && p.ChallengeID == "") {
				out[p.PSPReference] = procCharge{processor: procAdyen, key: p.Metadata["ar_key"]}
			}
		}
	}
	return out
}

// processorRefunds returns every refund at every processor of the run, by
// id.
func (s *chaosState) processorRefunds() map[string]procRefund {
	out := map[string]procRefund{}
	for _, r := range s.ledger.Refunds {
		out[r.ID] = procRefund{processor: procStripe, charge: r.Charge}
	}
	if s.adyen != nil {
		for _, r := range s.adyen.Refunds {
			out[r.PSPReference] = procRefund{processor: procAdyen, charge: r.PaymentPSPReference}
		}
	}
	return out
}

// processorNames names the processors of the run, for the checks' text.
func (s *chaosState) processorNames() string {
	if s.adyen != nil {
		return "Stripe and Adyen"
	}
	return "Stripe"
}

// chaosBookings groups the charges of the run by booking (their charge
// key, metadata ar_key, which is the same at every processor): how many
// charges each booking has, net of the charges no ride records that were
// refunded in full, and which bookings were charged at both processors.
type chaosBookings struct {
	charges map[string][]string // charge ids by charge key
	net     map[string]int      // charges less refunded unrecorded ones
	both    map[string]bool     // charged at both processors (gross)
}

func (s *chaosState) bookings() chaosBookings {
	b := chaosBookings{charges: map[string][]string{}, net: map[string]int{}, both: map[string]bool{}}
	recorded := s.rideCharges()
	refunded := map[string]bool{}
	for _, r := range s.processorRefunds() {
		refunded[r.charge] = true // refunds are always of the whole amount
	}
	at := map[string]map[string]bool{}
	for id, c := range s.processorCharges() {
		b.charges[c.key] = append(b.charges[c.key], id)
		if recorded[id] || !refunded[id] {
			b.net[c.key]++
		}
		if at[c.key] == nil {
			at[c.key] = map[string]bool{}
		}
		at[c.key][c.processor] = true
		if len(at[c.key]) > 1 {
			b.both[c.key] = true
		}
	}
	return b
}

// processorChecks are the invariants of a run with two processors.
func processorChecks(s *chaosState) []chaosCheck {
	return []chaosCheck{
		checkOneNetChargePerBooking(s),
		checkNoBookingLost(s),
		checkRidesAtTheirProcessor(s),
		checkRefundsAtChargingProcessor(s),
		checkCircuitsCycled(s),
	}
}

// checkOneNetChargePerBooking: per booking (charge key), at most one net
// charge across both processors: the charges at Stripe and at Adyen, less
// those no ride records that were refunded in full.
func checkOneNetChargePerBooking(s *chaosState) chaosCheck {
	b := s.bookings()
	twice := moreThanOnce(b.net)
	for key, n := range b.net {
		if n > 1 {
			s.t.Logf("booking %s charged %d times: %v", key, n, b.charges[key])
		}
	}
	return chaosCheck{id: "one_net_charge_per_booking",
		name:     "per booking (charge key), at most one net charge at Stripe and Adyen together (less refunded charges no ride records)",
		expected: "0 bookings charged twice", actual: fmt.Sprintf("%d bookings charged twice (%d charged at both processors, gross)", twice, len(b.both)),
		ok: twice == 0}
}

// checkNoBookingLost: every booking a client was answered 201 names a ride
// the database holds, charged with the same charge at the same processor.
func checkNoBookingLost(s *chaosState) chaosCheck {
	told, kept := 0, 0
	for _, r := range s.records {
		if r.flow != "ride.create" {
			continue
		}
		a, ok := firstStored(r)
		if !ok || a.Status != http.StatusCreated {
			continue
		}
		told++
		var ride struct {
			ID        int64   `json:"id"`
			Charge    *string `json:"stripe_charge_id"`
			Processor string  `json:"processor"`
		}
		_ = json.Unmarshal(a.Body, &ride)
		row := s.rides[ride.ID]
		if row != nil && ride.Charge != nil && row.charge != nil && *row.charge == *ride.Charge && row.processor == ride.Processor {
			kept++
		} else {
			s.t.Logf("booking %s answered %s: not in the database as told", r.key, a.Body)
		}
	}
	return chaosCheck{id: "no_booking_lost", name: "every booking answered 201 is a ride in the database, with the charge and processor the client was told",
		expected: fmt.Sprintf("%d of %d", told, told), actual: fmt.Sprintf("%d of %d", kept, told), ok: kept == told}
}

// checkRidesAtTheirProcessor: every charged ride's charge is a charge that
// took money at the processor the ride names, for the ride's booking.
func checkRidesAtTheirProcessor(s *chaosState) chaosCheck {
	charges := s.processorCharges()
	charged, right, by := 0, 0, map[string]int{}
	for _, r := range s.rides {
		if r.charge == nil {
			continue
		}
		charged++
		by[r.processor]++
		if c, ok := charges[*r.charge]; ok && c.processor == r.processor {
			right++
		} else {
			s.t.Logf("ride %d: charge %s at %s is not in that processor's ledger (%+v)", r.id, *r.charge, r.processor, c)
		}
	}
	return chaosCheck{id: "rides_at_their_processor", name: "every charged ride's charge is in the ledger of the processor the ride names",
		expected: fmt.Sprintf("%d of %d", charged, charged),
		actual:   fmt.Sprintf("%d of %d (stripe %d, adyen %d)", right, charged, by[procStripe], by[procAdyen]), ok: right == charged}
}

// checkRefundsAtChargingProcessor: every refunded ride's refund is at the
// processor that charged the ride, of the ride's charge; and every refund
// at a processor is of a charge made there.
func checkRefundsAtChargingProcessor(s *chaosState) chaosCheck {
	charges, refunds := s.processorCharges(), s.processorRefunds()
	refunded, right := 0, 0
	for _, r := range s.rides {
		if r.refund != "refunded" || r.refundI == nil {
			continue
		}
		refunded++
		if f, ok := refunds[*r.refundI]; ok && f.processor == r.processor && r.charge != nil && f.charge == *r.charge {
			right++
		} else {
			s.t.Logf("ride %d at %s (charge %v): refund %s is %+v", r.id, r.processor, r.charge, *r.refundI, f)
		}
	}
	elsewhere := 0
	for id, f := range refunds {
		if c, ok := charges[f.charge]; !ok || c.processor != f.processor {
			elsewhere++
			s.t.Logf("refund %s at %s of charge %s, not a charge of that processor", id, f.processor, f.charge)
		}
	}
	return chaosCheck{id: "refund_at_charging_processor", name: "every refund went to the processor that charged the ride, for its charge",
		expected: fmt.Sprintf("%d of %d rides; 0 refunds of another processor's charge", refunded, refunded),
		actual:   fmt.Sprintf("%d of %d rides; %d refunds of another processor's charge", right, refunded, elsewhere),
		ok:       right == refunded && elsewhere == 0}
}

// checkCircuitsCycled: the outages did what they are for: each
// processor's circuit opened, went half-open with real traffic and closed
// again (from the instances' /metrics).
func checkCircuitsCycled(s *chaosState) chaosCheck {
	var parts []string
	ok := true
	for _, p := range chaosProcessors {
		o, h, c := s.circuits.changes(p, "open"), s.circuits.changes(p, "half-open"), s.circuits.changes(p, "closed")
		parts = append(parts, fmt.Sprintf("%s %d/%d/%d", p, o, h, c))
		ok = ok && o > 0 && h > 0 && c > 0
	}
	return chaosCheck{id: "circuits_cycled", name: "each processor's circuit opened, went half-open and closed (open/half-open/closed, /metrics)",
		expected: "each ≥ 1", actual: strings.Join(parts, ", "), ok: ok}
}

// checkAllAnswersReplayed sends every request once more whose stored
// answer a client saw, and expects that answer again, byte for byte, as a
// replay.
func checkAllAnswersReplayed(s *chaosState) chaosCheck {
	total, same := 0, 0
	for _, r := range s.records {
		seen, ok := firstStored(r)
		if !ok || r.req.path == "" {
			continue
		}
		total++
		ans := s.load.rider.retry(s.ctx, r.req)
		if ans.Definitive && ans.Replayed && ans.Status == seen.Status && bytes.Equal(ans.Body, seen.Body) {
			same++
		} else {
			s.t.Logf("%s %s: saw %d %s, replayed %d %s", r.req.path, r.key, seen.Status, seen.Body, ans.Status, ans.Body)
		}
	}
	return chaosCheck{id: "answers_replayed", name: "every stored answer a client saw is replayed identically, byte for byte",
		expected: fmt.Sprintf("%d of %d", total, total), actual: fmt.Sprintf("%d of %d", same, total), ok: same == total && total > 0}
}

// processorReport is the report's lines on each processor: what it
// charged and refunded, the outages it had, the requests the outage (or
// a fault) answered 503, and its circuit's changes from /metrics.
func processorReport(s *chaosState, flog *chaosFaultLog) []string {
	if s.adyen == nil {
		return nil
	}
	charges, refunds := map[string]int{}, map[string]int{}
	for _, c := range s.processorCharges() {
		charges[c.processor]++
	}
	for _, r := range s.processorRefunds() {
		refunds[r.processor]++
	}
	unavailable := map[string]int{}
	outageHits := map[string]int{}
	for _, r := range s.ledger.Requests {
		if r.Status == http.StatusServiceUnavailable {
			unavailable[procStripe]++
		}
		if r.Outage {
			outageHits[procStripe]++
		}
	}
	for _, r := range s.adyen.Requests {
		if r.Status == http.StatusServiceUnavailable {
			unavailable[procAdyen]++
		}
		if r.Outage {
			outageHits[procAdyen]++
		}
	}
	requests := map[string]int{procStripe: len(s.ledger.Requests), procAdyen: len(s.adyen.Requests)}
	lines := []string{"processors (PROCESSORS=" + strings.Join(chaosProcessors, ",") + ", circuits open for " + chaosCircuitOpenFor.String() + "):"}
	flog.mu.Lock()
	var steps []string
	for _, name := range sortedKeys(flog.outageSteps) {
		steps = append(steps, fmt.Sprintf("%s ×%d", name, flog.outageSteps[name]))
	}
	lines = append(lines, "  outage schedule played: "+strings.Join(steps, ", "))
	for _, p := range chaosProcessors {
		lines = append(lines, fmt.Sprintf("  %-6s %5d charges, %4d refunds, %5d requests; %3d outages (%s down in all), %4d requests answered 503 (%d by the outage); "+
			"circuit (/metrics): opened %d, half-open %d, closed %d",
			p, charges[p], refunds[p], requests[p], flog.outages[p], flog.outageDown[p].Round(time.Second), unavailable[p], outageHits[p],
			s.circuits.changes(p, "open"), s.circuits.changes(p, "half-open"), s.circuits.changes(p, "closed")))
	}
	flog.mu.Unlock()
	b := s.bookings()
	lines = append(lines, fmt.Sprintf("  bookings charged at both processors: %d", len(b.both)))
	return lines
}

// chaosDoubles are the bookings charged at both processors: case 3 of
// docs/processors.md, a booking whose routing commit was lost, redone at
// the other processor while the first one's circuit was open. Each is
// resolved when the charge no ride records is refunded in full: the
// orphan policy refunds it at once, once `keys reconcile` finds it.
type chaosDoubles struct {
	bookings   int
	unrecorded map[string]bool // charge ids of those bookings no ride records
	redo       map[string]bool // charge ids of those bookings a ride records
	listed     map[string]bool // unrecorded ids `keys reconcile` lists as double charges
	refunded   map[string]bool // unrecorded ids refunded
	open       []string        // unrecorded ids not refunded
	// lostAtAdyen counts the payments at Adyen no ride records, of
	// bookings charged nowhere else: lost with the commits and never
	// asked for again. Adyen offers no listing: `keys reconcile` cannot
	// see them.
	lostAtAdyen int
	// lostAtAdyenRefunded counts those the orphan policy refunded: Adyen's
	// notifications, resent after the restore, told the service of them.
	lostAtAdyenRefunded int
}

// doubleCharges finds the bookings charged at both processors, and what
// rec (nil: not asked) says of them.
func (s *chaosState) doubleCharges(rec *chaosReconcile) chaosDoubles {
	d := chaosDoubles{unrecorded: map[string]bool{}, redo: map[string]bool{}, listed: map[string]bool{}, refunded: map[string]bool{}}
	b := s.bookings()
	recorded := s.rideCharges()
	refunded := map[string]bool{}
	for _, r := range s.processorRefunds() {
		refunded[r.charge] = true
	}
	// A trip's hold that no ride records took no money once released:
	// the orphan pass releases it, never refunds it (docs/trips.md). Its
	// being released is its resolution here; no_hold_left_open checks
	// that none is left open.
	for id, h := range s.holds() {
		if h.released && h.captured == 0 {
			refunded[id] = true
		}
	}
	listed := map[string]bool{}
	if rec != nil {
		for _, dc := range rec.DoubleCharges {
			listed[dc.OtherChargeID] = true
		}
	}
	charges := s.processorCharges()
	for key, ids := range b.charges {
		if !b.both[key] {
			if len(ids) == 1 && charges[ids[0]].processor == procAdyen && !recorded[ids[0]] {
				d.lostAtAdyen++
				if refunded[ids[0]] {
					d.lostAtAdyenRefunded++
				} else if s.t != nil && s.adyen != nil {
					for _, p := range s.adyen.Payments {
						if p.PSPReference == ids[0] {
							s.t.Logf("payment %s at Adyen (key %s) recorded by no ride, not refunded: %s, manual capture %v, captured %d of %d",
								p.PSPReference, key, p.ResultCode, p.ManualCapture, p.CapturedValue, p.AmountValue)
						}
					}
				}
			}
			continue
		}
		d.bookings++
		for _, id := range ids {
			switch {
			case recorded[id]:
				d.redo[id] = true
			default:
				d.unrecorded[id] = true
				if listed[id] {
					d.listed[id] = true
				}
				if refunded[id] {
					d.refunded[id] = true
				}
				if !refunded[id] {
					d.open = append(d.open, id)
				}
			}
		}
	}
	return d
}

// resolvedRedo reports whether chargeID is the recorded charge of a
// booking charged at both processors whose other charges are resolved.
func (d chaosDoubles) resolvedRedo(chargeID string) bool {
	return chargeID != "" && d.redo[chargeID] && len(d.open) == 0
}

// check is the invariant: every booking charged at both processors is
// resolved. The service detects the case (`keys reconcile`, kind
// double_charge) and its orphan pass refunds the charge no ride records.
func (d chaosDoubles) check() chaosCheck {
	return chaosCheck{name: "every booking charged at both processors: its unrecorded charge refunded by the orphan policy",
		expected: fmt.Sprintf("%d of %d resolved", d.bookings, d.bookings),
		actual: fmt.Sprintf("%d of %d resolved (%d listed, %d refunded)", d.bookings-len(d.open), d.bookings,
			len(d.listed), len(d.refunded)),
		ok: len(d.open) == 0}
}

// adyenOrphansCheck is the invariant: every payment at Adyen of a booking
// lost with the commits, never asked for again, is refunded by the orphan
// policy (once: no_ride_refunded_twice), or, a trip's hold, released.
func (d chaosDoubles) adyenOrphansCheck() chaosCheck {
	return chaosCheck{id: "adyen_orphans_refunded", name: "every payment at Adyen that no ride records, of a booking charged nowhere else, is refunded by the orphan policy (a trip's hold: released)",
		expected: fmt.Sprintf("%d of %d refunded", d.lostAtAdyen, d.lostAtAdyen),
		actual:   fmt.Sprintf("%d of %d refunded", d.lostAtAdyenRefunded, d.lostAtAdyen),
		ok:       d.lostAtAdyenRefunded == d.lostAtAdyen}
}

// note is the report's line on the bookings charged at both processors.
func (d chaosDoubles) note(s *chaosState) string {
	return fmt.Sprintf("double charges (a lost booking redone at the other processor): %d bookings charged at both processors, "+
		"%d listed by `keys reconcile` as double_charge, %d refunded; %d payments at Adyen recorded by no ride and charged nowhere else "+
		"(lost, never asked for again: seen through Adyen's notifications, resent after the restore), %d of them refunded by the orphan policy",
		d.bookings, len(d.listed), len(d.refunded), d.lostAtAdyen, d.lostAtAdyenRefunded)
}
