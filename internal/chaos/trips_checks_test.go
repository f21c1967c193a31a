package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The trips' invariants, at the database and at both fakes' ledgers.

// chaosTripRestore is what the trips' checks know of a restore run (nil
// in any other run): an answer a client saw from the backup's start until
// the backup served as the primary may have been lost with the commits,
// and is judged by what the restore promises (docs/trips.md, "After a
// database restore"), not by what the client was told; an answer seen
// before the backup began is kept (answers_before_backup_kept), one seen
// after the backup served was given by the restored database. The kill
// does not end the window: the time taken before it is sent, the primary
// commits until it lands, and a client reads an answer sent before it
// after it.
type chaosTripRestore struct {
	backupStart, restored time.Time
	// returned: the completions whose client came back with its key after
	// the restore, and the answer it got then.
	returned map[*chaosRecord]chaosAnswer
}

// mayBeLost reports whether the restore may have lost the commit behind a.
func (w *chaosTripRestore) mayBeLost(a chaosAnswer) bool {
	return w != nil && !a.At.Before(w.backupStart) && a.At.Before(w.restored)
}

// bookingMayBeLost reports whether t's booking may have been lost.
func (w *chaosTripRestore) bookingMayBeLost(t *chaosTrip) bool {
	return w != nil && t.booking != nil && len(t.booking.answers) > 0 && w.mayBeLost(t.booking.answers[0])
}

// tripRides returns the rides booked as trips.
func (s *chaosState) tripRides() []*chaosRideRow {
	var out []*chaosRideRow
	for _, r := range s.rides {
		if r.capture == "trip" {
			out = append(out, r)
		}
	}
	return out
}

// tripRidesByPayment returns the rides booked as trips by their payment at
// the processor (those that have one).
func (s *chaosState) tripRidesByPayment() map[string]*chaosRideRow {
	byPayment := map[string]*chaosRideRow{}
	for _, r := range s.tripRides() {
		if r.paymentID != nil {
			byPayment[*r.paymentID] = r
		}
	}
	return byPayment
}

// chaosHold is a hold at a processor's ledger: a Stripe PaymentIntent with
// capture_method manual, or an Adyen manual-capture payment.
type chaosHold struct {
	processor string
	id        string // the PaymentIntent, or the pspReference
	amount    int64
	captured  int64 // what was captured of it
	captures  int   // successful captures of it (Adyen's modifications; at Stripe, 1 once captured)
	released  bool  // cancelled: the hold released
	open      bool  // still held: neither captured nor released
}

// holds returns every hold at both fakes, by payment id.
func (s *chaosState) holds() map[string]*chaosHold {
	out := map[string]*chaosHold{}
	for _, pi := range s.ledger.PaymentIntents {
		if pi.CaptureMethod != "manual" {
			continue
		}
		h := &chaosHold{processor: procStripe, id: pi.ID, amount: pi.Amount, captured: pi.AmountReceived,
			released: pi.Status == "canceled", open: pi.Status == "requires_capture"}
		if pi.Status == "succeeded" {
			h.captures = 1
		}
		out[pi.ID] = h
	}
	if s.adyen != nil {
		captures := map[string]int{}
		for _, m := range s.adyen.Modifications {
			if m.Kind == "capture" && m.Success {
				captures[m.PaymentPSPReference]++
			}
		}
		for _, p := range s.adyen.Payments {
			if !p.ManualCapture {
				continue
			}
			out[p.PSPReference] = &chaosHold{processor: procAdyen, id: p.PSPReference, amount: p.AmountValue,
				captured: p.CapturedValue, captures: captures[p.PSPReference], released: p.ResultCode == "Cancelled",
				open: p.ResultCode == "Authorised" && p.CapturedValue == 0}
		}
	}
	return out
}

// extraPayment is a payment at a fake of a trip's fare above its hold, or
// of its balance.
type extraPayment struct {
	amount   int64
	refunded bool
}

// extraPayments returns the payments that took money under a trip's
// extra or balance key, at both fakes, by id.
func (s *chaosState) extraPayments() map[string]extraPayment {
	refunded := map[string]bool{}
	for _, r := range s.processorRefunds() {
		refunded[r.charge] = true
	}
	out := map[string]extraPayment{}
	for _, c := range s.ledger.Charges {
		if c.Status == "succeeded" && tripExtraKey(c.Metadata["ar_key"]) {
			out[c.ID] = extraPayment{amount: c.Amount, refunded: refunded[c.ID]}
		}
	}
	if s.adyen != nil {
		for _, p := range s.adyen.Payments {
			if p.ResultCode == "Authorised" && tripExtraKey(p.Metadata["ar_key"]) {
				out[p.PSPReference] = extraPayment{amount: p.AmountValue, refunded: refunded[p.PSPReference]}
			}
		}
	}
	return out
}

// checkTripsEndedAsTold: every trip ended as its clients were told, and
// none is left between two states: a completion answered 201, 200 or 202
// is a ride completed with that fare, a cancellation answered 201 or 200 a
// ride cancelled, a trip nobody ended a ride expired (or still authorized
// while its hold is not due); no ride capturing or cancelling once
// settled.
func checkTripsEndedAsTold(s *chaosState) chaosCheck {
	wrong, lostBookings, lostEnds := 0, 0, 0
	var first []string
	for _, t := range s.trips {
		r := s.rides[t.rideID]
		status := "missing"
		if r != nil {
			status = r.status
		}
		ok := true
		switch {
		case r == nil && s.restore.bookingMayBeLost(t):
			// Its booking was lost with the restore: the ride does not
			// exist (its hold: no_hold_left_open).
			lostBookings++
		case t.did == tripCompleted && t.answered && s.restore.mayBeLost(t.told):
			// Its completion may have been lost: completed with its fare
			// (kept, or sent again by its client coming back), or with
			// what was captured as its fare (recognised by the events
			// pass, the hold_release pass or a cancellation).
			lostEnds++
			want := min(t.fare, t.hold)
			ok = status == "completed" && r.fare != nil && (*r.fare == t.fare || (*r.fare == want && deref(r.captured) == want))
		case t.did == tripCancelled && t.answered && s.restore.mayBeLost(t.told):
			// Its cancellation may have been lost, the hold released at
			// its processor: cancelled, or expired once the release is
			// seen (the processor's event, or the hold_release pass).
			lostEnds++
			ok = status == "cancelled" || status == "expired"
		case t.did == tripCompleted && t.answered:
			ok = status == "completed" && r.fare != nil && *r.fare == t.fare
		case t.did == tripCancelled && t.answered:
			ok = status == "cancelled"
		case t.did == tripLeft:
			ok = status == "expired" || (status == "authorized" && !r.heldPastDue)
		case t.did == tripAbandoned:
			// Abandoned at Adyen's challenge: expired by the cancel's
			// TECHNICAL_CANCEL, never left waiting, nothing held.
			ok = status == "expired"
		default:
			// An end never answered definitively (the client gave up):
			// any end of the trip, but an end.
			ok = status != "missing" && status != "capturing" && status != "cancelling"
		}
		if !ok {
			wrong++
			if len(first) < 3 {
				first = append(first, fmt.Sprintf("ride %d %s, %s (fare %d, answered %d)", t.rideID, status, t.did, t.fare, t.status))
			}
		}
	}
	between := 0
	for _, r := range s.tripRides() {
		if r.status == "capturing" || r.status == "cancelling" {
			between++
		}
	}
	actual := fmt.Sprintf("%d of %d as told, %d capturing or cancelling", len(s.trips)-wrong, len(s.trips), between)
	name := "every trip ended as its clients were told (completed with its fare, cancelled, or expired when nobody ended it or its rider abandoned the bank's challenge); none left capturing or cancelling"
	if s.restore != nil {
		actual = fmt.Sprintf("%d of %d as told or as the restore promises (%d bookings lost, %d ends that may have been lost), %d capturing or cancelling",
			len(s.trips)-wrong, len(s.trips), lostBookings, lostEnds, between)
		name = "every trip ended as its clients were told, or, where the restore may have lost what they were told (an answer seen from the backup's start until the backup served), " +
			"as the restore promises: a lost booking's ride does not exist; a lost completion's ride is completed with its fare or with what was captured as its fare; " +
			"a lost cancellation's ride is cancelled or expired; none left capturing or cancelling"
	}
	if len(first) > 0 {
		actual += " (" + strings.Join(first, "; ") + ")"
	}
	return chaosCheck{name: name,
		expected: fmt.Sprintf("%d as told, 0", len(s.trips)), actual: actual, ok: wrong == 0 && between == 0}
}

// checkNoDoubleCapture: no hold captured twice, at either fake: at most
// one successful capture modification per Adyen payment, and no Stripe
// PaymentIntent received more than its hold; a hold is captured only for a
// ride completed (or whose ride the restore lost).
func checkNoDoubleCapture(s *chaosState) chaosCheck {
	byPayment := s.tripRidesByPayment()
	twice, over, stray, captured := 0, 0, 0, 0
	for id, h := range s.holds() {
		if h.captures > 1 {
			twice++
			s.t.Logf("hold %s at %s captured %d times", id, h.processor, h.captures)
		}
		if h.captured > h.amount {
			over++
		}
		if h.captured > 0 {
			captured++
			if r := byPayment[id]; r != nil && r.status != "completed" {
				stray++
				s.t.Logf("hold %s at %s captured %d, its ride %d is %s", id, h.processor, h.captured, r.id, r.status)
			}
		}
	}
	name := "no hold captured twice (Adyen: one capture per payment; Stripe: never more than the hold), and only for a completed ride"
	if s.restore != nil {
		name += " or one the restore lost (whose capture is an orphan charge, refunded: orphans_resolved); " +
			"a ride that came back authorized while its hold is captured must be completed after the settle"
	}
	return chaosCheck{name: name,
		expected: "0 twice, 0 over, 0 captured for a ride not completed",
		actual:   fmt.Sprintf("%d twice, %d over, %d captured for a ride not completed (%d holds captured)", twice, over, stray, captured),
		ok:       twice == 0 && over == 0 && stray == 0}
}

// checkNoHoldLeftOpen: every cancelled or expired trip's hold is released
// at its processor; every hold still open at a fake is the hold of a ride
// still authorized, and not past its expiry (plus a pass of hold_release);
// a hold whose ride does not exist (lost with a restore) is released too
// (the orphan pass's policy), never left open.
func checkNoHoldLeftOpen(s *chaosState) chaosCheck {
	holds := s.holds()
	notReleased, pastDue, openWrong, lostOpen, lostReleased, stillHeld := 0, 0, 0, 0, 0, 0
	byPayment := s.tripRidesByPayment()
	for _, r := range s.tripRides() {
		if r.heldPastDue {
			pastDue++
		}
		if (r.status == "cancelled" || r.status == "expired") && r.charge != nil && r.paymentID != nil {
			if h := holds[*r.paymentID]; h == nil || !h.released {
				notReleased++
				s.t.Logf("ride %d %s: its hold %s is not released (%+v)", r.id, r.status, *r.paymentID, h)
			}
		}
	}
	for id, h := range holds {
		r := byPayment[id]
		switch {
		case r == nil && h.open:
			lostOpen++
			s.t.Logf("hold %s at %s is open and no ride records it", id, h.processor)
		case r == nil && h.released:
			lostReleased++
		case h.open && r.status != "authorized":
			openWrong++
			s.t.Logf("hold %s at %s is open, its ride %d is %s", id, h.processor, r.id, r.status)
		case h.open:
			stillHeld++
		}
	}
	name := "no hold left open: cancelled and expired trips released at their processor; open holds only of rides authorized and not past due; holds of lost rides released"
	if s.restore != nil {
		name += " (the run waits, up to the orphan grace ORPHAN_REFUND_AFTER and the settle, until `keys reconcile` lists no orphan hold: " +
			"the orphan pass has released every hold older than the grace whose booking was lost; none may be open after it)"
	}
	return chaosCheck{name: name,
		expected: "0 not released, 0 past due, 0 open for an ended ride, 0 open for a lost ride",
		actual: fmt.Sprintf("%d not released, %d past due, %d open for an ended ride, %d open for a lost ride (%d released; %d held, not due)",
			notReleased, pastDue, openWrong, lostOpen, lostReleased, stillHeld),
		ok: notReleased == 0 && pastDue == 0 && openWrong == 0 && lostOpen == 0}
}

// checkFareCapturedOnce: every completed trip captured exactly min(fare,
// hold), as recorded on the ride and at its processor; a fare above the
// hold has exactly one payment of fare − hold (extra_status charged or
// paid), or a balance due recorded on the ride; a fare within the hold has
// none. Every extra payment at a fake is one a ride records (or was
// refunded, its ride lost).
func checkFareCapturedOnce(s *chaosState) chaosCheck {
	holds, extras := s.holds(), s.extraPayments()
	completed, wrongCapture, wrongExtra := 0, 0, 0
	recorded := map[string]bool{}
	for _, r := range s.tripRides() {
		if r.extraCharge != nil {
			recorded[*r.extraCharge] = true
		}
		if r.status != "completed" {
			continue
		}
		completed++
		want := min(deref(r.fare), r.amount)
		var h *chaosHold
		if r.paymentID != nil {
			h = holds[*r.paymentID]
		}
		if r.fare == nil || r.captured == nil || *r.captured != want || h == nil || h.captured != want {
			wrongCapture++
			s.t.Logf("ride %d: fare %v, hold %d, captured %v, at the processor %+v", r.id, r.fare, r.amount, r.captured, h)
		}
		extra, status := deref(r.fare)-r.amount, derefString(r.extraStatus)
		ok := true
		switch {
		case extra <= 0:
			ok = status == "none" && r.extraCharge == nil
		case status == "charged" || status == "paid":
			p, found := extras[derefString(r.extraCharge)]
			ok = found && p.amount == extra && deref(r.extra) == extra
		case status == "due":
			ok = deref(r.extra) == extra
		default:
			ok = false
		}
		if !ok {
			wrongExtra++
			s.t.Logf("ride %d: fare %v above hold %d: extra %v %s %v", r.id, r.fare, r.amount, r.extra, status, r.extraCharge)
		}
	}
	unrecorded := 0
	for id, p := range extras {
		if !recorded[id] && !p.refunded {
			unrecorded++
			s.t.Logf("extra payment %s (%d) recorded by no ride", id, p.amount)
		}
	}
	return chaosCheck{name: "every completed trip captured min(fare, hold) once, at its processor too; a fare above the hold one payment of the rest (or a balance due); no other such payment",
		expected: fmt.Sprintf("%d of %d captured right; 0 extras wrong; 0 unrecorded", completed, completed),
		actual:   fmt.Sprintf("%d of %d captured right; %d extras wrong; %d unrecorded", completed-wrongCapture, completed, wrongExtra, unrecorded),
		ok:       wrongCapture == 0 && wrongExtra == 0 && unrecorded == 0}
}

// tripsNote is the report's line on the trips.
func (s *chaosState) tripsNote() string {
	ended, by := map[string]int{}, map[string]int{}
	fares := map[string]int{}
	balances, paid := 0, 0
	for _, t := range s.trips {
		by[t.did]++
		if t.did == tripCancelled {
			by["cancelled by "+t.by]++
		}
		if t.did == tripCompleted {
			switch {
			case t.fare < t.hold:
				fares["below"]++
			case t.fare == t.hold:
				fares["at"]++
			default:
				fares["above"]++
			}
		}
		if t.balance {
			balances++
			if t.balanceStatus == http.StatusCreated || t.balanceStatus == http.StatusOK {
				paid++
			}
		}
	}
	extraCharged, due := 0, 0
	for _, r := range s.tripRides() {
		ended[r.status]++
		switch derefString(r.extraStatus) {
		case "charged", "paid":
			extraCharged++
		case "due":
			due++
		}
	}
	captures, captured := map[string]int{}, 0
	for _, h := range s.holds() {
		if h.captured > 0 {
			captured++
			captures[h.processor]++
		}
	}
	return fmt.Sprintf("trips: %d booked as trips by their clients (%d completed: %d below the hold, %d at it, %d above; %d cancelled: %d by the rider, %d by dispatch; %d left to expire; %d abandoned at the bank's challenge); "+
		"rides: %d completed, %d cancelled, %d expired, %d still authorized; captures %d (stripe %d, adyen %d); extra payments %d; balances due %d (%d left by a completion, %d paid)",
		len(s.trips), by[tripCompleted], fares["below"], fares["at"], fares["above"], by[tripCancelled], by["cancelled by rider"], by["cancelled by dispatch"], by[tripLeft], by[tripAbandoned],
		ended["completed"], ended["cancelled"], ended["expired"], ended["authorized"], captured, captures[procStripe], captures[procAdyen],
		extraCharged, due, balances, paid)
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func derefString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// checkReturnedTripsSameCapture: a completion whose client came back with
// its key after the restore, having been answered before the kill, gets
// the same capture: its ride completed, min(fare, hold) captured, and the
// answer a completion (201, 200, or 202 at Adyen) of that capture, or,
// when the ride was recognised first with what was captured as its fare
// (a fare above the hold, its rest lost), 409 naming that fare. A ride the
// restore lost is answered 404, or the client's own answer replayed from a
// process's memory (as a refund's: lostRefundAnswer).
func checkReturnedTripsSameCapture(s *chaosState) chaosCheck {
	if s.restore == nil {
		return chaosCheck{name: "no restore", ok: true}
	}
	tripOf := map[*chaosRecord]*chaosTrip{}
	for _, t := range s.trips {
		for _, e := range t.ends {
			tripOf[e] = t
		}
	}
	came, same, lost, recognised := 0, 0, 0, 0
	for rec, after := range s.restore.returned {
		t := tripOf[rec]
		if t == nil {
			continue
		}
		came++
		r := s.rides[t.rideID]
		before, _ := firstStored(rec) // its own answer (t.told may be the other key's)
		if r == nil {
			// 404, or its own answer replayed from a process's memory.
			if _, ok := lostRefundAnswer(before, after); ok && s.restore.bookingMayBeLost(t) {
				same++
				lost++
			} else {
				s.t.Logf("%s %s: its ride was lost; had %d %s, came back to %d (replayed %v) %s", rec.req.path, rec.key, before.Status, before.Body, after.Status, after.Replayed, after.Body)
			}
			continue
		}
		want := min(t.fare, t.hold)
		var ride chaosTripRide
		_ = json.Unmarshal(after.Body, &ride)
		ok := r.status == "completed" && deref(r.captured) == want && after.Definitive
		switch {
		case !ok:
		case after.Status == http.StatusCreated || after.Status == http.StatusOK || after.Status == http.StatusAccepted:
			ok = ride.FareCents != nil && *ride.FareCents == t.fare && (ride.CapturedCents == nil || *ride.CapturedCents == want)
		case after.Status == http.StatusConflict:
			ok = t.fare > t.hold && deref(r.fare) == want
			if ok {
				recognised++
			}
		default:
			ok = false
		}
		if ok {
			same++
		} else {
			s.t.Logf("%s %s: had %d %s, came back to %d %s; the ride is %s, fare %v, captured %v",
				rec.req.path, rec.key, before.Status, before.Body, after.Status, after.Body, r.status, r.fare, r.captured)
		}
	}
	return chaosCheck{name: "a trip's completion answered before the kill, its client coming back with its key after the restore, gets the same capture (its ride completed, min(fare, hold) captured once); a lost ride, 404 (or its own answer, replayed from a process's memory)",
		expected: fmt.Sprintf("%d of %d", came, came),
		actual:   fmt.Sprintf("%d of %d (%d to a lost ride, %d to a ride recognised first with what was captured as its fare: 409)", same, came, lost, recognised),
		ok:       same == came}
}
