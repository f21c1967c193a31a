package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/atomicrides/atomicrides/internal/binrun"
)

// restoreScenarios are the clients of a run that loses commits: riders
// created before it book, refund (one key, or several at once) and send
// bursts; some give up after one failure; trip clients book whole trips.
// Riders are not created during it (the trip clients' own are created
// before the backup: makeTripRiders): a rider lost with the commits has
// lost its API key too, which is not what the run is about.
var restoreScenarios = []chaosScenario{
	{"booking", 45, (*chaosLoad).booking},
	{"booking + refund", 15, (*chaosLoad).bookingRefund},
	{"same-key burst", 15, (*chaosLoad).sameKeyBurst},
	{"same-body burst, different keys", 10, (*chaosLoad).sameBodyBurst},
	{"refund burst, different keys", 5, (*chaosLoad).refundBurst},
	{"client gone after one failure", 15, (*chaosLoad).quitAfterFailure},
	// Trips (trips_test.go), booked at serve-t: a restore may lose a
	// hold's booking, or a completion or cancellation.
	{chaosTripScenario, 8, (*chaosLoad).trip},
}

// TestChaosRestoreShort is a failover that loses commits, in short: the
// primary dies and a base backup taken a few seconds earlier takes its
// place. Part of `go tool task test`.
func TestChaosRestoreShort(t *testing.T) {
	runFailover(t, failoverPlan{
		name: "short: restore of a backup taken mid-run (commits lost)", logs: "restore", db: chaosDBRestore,
		users: 5, clients: 8, scenarios: restoreScenarios,
		before: 8 * time.Second, lead: 4 * time.Second, after: 5 * time.Second,
		settle: 60 * time.Second, bound: 3 * time.Minute,
		processors: true, stripeDown: 6 * time.Second,
	})
}

// TestChaosRestore is the failover that loses commits with more load: `go
// tool task chaos` runs it.
func TestChaosRestore(t *testing.T) {
	if !*chaosFullFlag {
		t.Skip("the full restore run needs -chaos.full (go tool task chaos); TestChaosRestoreShort is its short form")
	}
	runFailover(t, failoverPlan{
		name: "full: restore of a backup taken mid-run (commits lost)", logs: "restore", db: chaosDBRestore,
		users: 10, clients: 12, scenarios: restoreScenarios,
		before: 30 * time.Second, lead: 10 * time.Second, after: 20 * time.Second,
		settle: 80 * time.Second, bound: 5 * time.Minute,
		processors: true, stripeDown: 10 * time.Second,
	})
}

// chaosReturned is a client that came back, after the restore, with a key
// it had a definitive answer for before the primary died.
type chaosReturned struct {
	rec    *chaosRecord
	before chaosAnswer // the answer it had
	after  chaosAnswer // the answer it got on coming back
}

// returningClients sends again, with its key, every other booking, every
// refund and every other trip completion whose stored answer a client saw
// before killed; the other booking and completion clients never come back
// (a completion lost with the commits is then recognised by the service:
// docs/trips.md). A refund names its ride by the id the database
// gave it: a refund retried after its ride was lost names a ride that no
// longer exists, since ride ids are never handed out again, and must be
// answered not found (its Stripe refund stays an orphan that `keys
// reconcile` lists); one whose ride survived gets its refund again.
func returningClients(ctx context.Context, load *chaosLoad, killed time.Time) []chaosReturned {
	load.book.mu.Lock()
	records := append([]*chaosRecord(nil), load.book.records...)
	load.book.mu.Unlock()
	var out []chaosReturned
	n, completions := 0, 0
	for _, r := range records {
		a, ok := firstStored(r)
		if !ok || !a.At.Before(killed) || r.req.path == "" {
			continue
		}
		switch r.flow {
		case "ride.create":
			if n++; n%2 == 0 {
				continue
			}
		case "ride.complete":
			if completions++; completions%2 == 0 {
				continue
			}
		case "ride.refund":
		default:
			continue
		}
		out = append(out, chaosReturned{rec: r, before: a, after: load.rider.retry(ctx, r.req)})
	}
	return out
}

// bookAndRefund books a ride for u and refunds it, each retried until a
// definitive answer, and records both. A restore run does this once after
// the backup has ended, so that at least one refunded ride is surely lost
// and its refund's client comes back to a ride that is gone. It returns the
// refund's record, nil when the ride was not charged.
func (l *chaosLoad) bookAndRefund(ctx context.Context, u *chaosUser) *chaosRecord {
	l.book.ran("booking + refund, lost with the restore")
	rideID := l.bookOnce(ctx, u)
	if rideID == 0 {
		return nil
	}
	rec := &chaosRecord{user: u, key: l.newKey(), flow: "ride.refund", rideID: rideID}
	rec.req = l.refundRequest(u, rec.key, rideID)
	ans := l.rider.retry(ctx, rec.req)
	rec.answers = append(rec.answers, ans)
	l.settle(rec, ans, chaosMaxAttempts)
	return rec
}

// retryAtEach sends req to every instance in turn, each retried until a
// definitive answer, and returns their answers in the order of bases.
func (l *chaosLoad) retryAtEach(ctx context.Context, bases []string, req chaosRequest) []chaosAnswer {
	var out []chaosAnswer
	for _, base := range bases {
		one := &chaosRider{bases: []string{base}, http: l.rider.http, stats: l.rider.stats}
		out = append(out, one.retry(ctx, req))
	}
	return out
}

// lostRefundAnswer reports whether after is a right answer to a refund
// retried once its ride was lost, the refund having been answered before:
// 404, or the very answer the client had, replayed by a process that
// answered the request within its replay cache's lifetime (the client's
// own refund, never another ride's).
func lostRefundAnswer(before, after chaosAnswer) (notFound, ok bool) {
	if !after.Definitive {
		return false, false
	}
	if after.Status == http.StatusNotFound {
		return true, true
	}
	return false, after.Replayed && after.Status == before.Status && bytes.Equal(after.Body, before.Body)
}

// firstStored returns the first answer of r that the service stores.
func firstStored(r *chaosRecord) (chaosAnswer, bool) {
	for _, a := range r.answers {
		if a.Definitive && storedAnswer(a) {
			return a, true
		}
	}
	return chaosAnswer{}, false
}

// chaosReconcile is what `keys reconcile -json` printed, and its exit code.
type chaosReconcile struct {
	exit          int
	OrphanCharges []struct {
		ID string `json:"id"`
	} `json:"orphan_charges"`
	OrphanRefunds []struct {
		ID string `json:"id"`
	} `json:"orphan_refunds"`
	MissingCharges []struct {
		RideID int64 `json:"ride_id"`
	} `json:"missing_charges"`
	// OrphanHolds are the holds no ride records (their booking lost):
	// listed until the orphan pass releases them.
	OrphanHolds []struct {
		ID string `json:"id"`
	} `json:"orphan_holds"`
	// DoubleCharges are the rides charged at two processors.
	DoubleCharges []struct {
		RideID         int64  `json:"ride_id"`
		OtherProcessor string `json:"other_processor"`
		OtherChargeID  string `json:"other_charge_id"`
	} `json:"double_charges"`
}

// reconcile runs the operator CLI's `keys reconcile -since 1h -json`.
func (sys *chaosSystem) reconcile(ctx context.Context) (*chaosReconcile, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := binrun.Cmd{Bin: sys.bin, Args: []string{"keys", "reconcile", "-since", "1h", "-json"},
		Env: sys.env(), Dir: sys.workDir}.Run(ctx)
	if err != nil {
		return nil, fmt.Errorf("keys reconcile: %w\n%s", err, res.Stderr)
	}
	out := &chaosReconcile{exit: res.ExitCode}
	if err := json.Unmarshal([]byte(res.Stdout), out); err != nil {
		return nil, fmt.Errorf("keys reconcile (exit %d): %w\n%s\n%s", res.ExitCode, err, res.Stdout, res.Stderr)
	}
	return out, nil
}

// chargeOf returns the charge id of a 201 answer to a booking, else "".
func chargeOf(a chaosAnswer) string {
	if !a.Definitive || a.Status != http.StatusCreated {
		return ""
	}
	var ride struct {
		Charge *string `json:"stripe_charge_id"`
	}
	if json.Unmarshal(a.Body, &ride) != nil || ride.Charge == nil {
		return ""
	}
	return *ride.Charge
}

// restoreChecks are the invariants of a run that lost commits, and the
// figures of what was lost.
// recErr is why `keys reconcile` gave no report, if it gave none.
func restoreChecks(s *chaosState, rec *chaosReconcile, recErr error, returned []chaosReturned, fig *failoverFigures) ([]chaosCheck, []string) {
	var checks []chaosCheck
	add := func(id string, c chaosCheck) {
		c.id = id
		checks = append(checks, c)
	}
	add("keys_finished", checkKeysFinished(s))

	// Every answer a client saw before the backup began is kept; of those
	// seen between then and the kill, count what was lost.
	kept, beforeBackup, window, lost := 0, 0, 0, 0
	for _, r := range s.records {
		a, ok := firstStored(r)
		if !ok || !a.At.Before(fig.killed) {
			continue
		}
		k := s.keys[chaosUserKey{r.user.id, r.key}]
		same := k != nil && k.finished && int(*k.code) == a.Status && bytes.Equal(k.body, a.Body)
		if a.At.Before(fig.backupStart) {
			beforeBackup++
			if same {
				kept++
			}
		} else {
			window++
			if !same {
				lost++
			}
		}
	}
	add("answers_before_backup_kept", chaosCheck{name: "every answer a client saw before the backup began is still stored, byte for byte",
		expected: fmt.Sprintf("%d of %d", beforeBackup, beforeBackup), actual: fmt.Sprintf("%d of %d", kept, beforeBackup),
		ok: kept == beforeBackup})

	// No client key charged twice: at Stripe, by the processor key each
	// charge carries (metadata ar_key).
	perKey, untagged := map[string]int{}, 0
	stripeCharges := map[string]bool{}
	for id, c := range s.processorCharges() {
		if c.processor == procStripe {
			stripeCharges[id] = true
		}
		if c.key == "" {
			untagged++
			continue
		}
		perKey[c.processor+" "+c.key]++
	}
	twice := moreThanOnce(perKey)
	add("no_key_charged_twice", chaosCheck{name: "no client key charged twice at one processor (" + s.processorNames() + " charges by metadata ar_key)",
		expected: "0 keys, 0 charges without a key", actual: fmt.Sprintf("%d keys, %d charges without a key", twice, untagged),
		ok: twice == 0 && untagged == 0})

	// No key answered with another key's charge, before, after or on
	// coming back.
	keysOf := map[string]map[chaosUserKey]bool{}
	note := func(r *chaosRecord, a chaosAnswer) {
		if ch := chargeOf(a); ch != "" {
			if keysOf[ch] == nil {
				keysOf[ch] = map[chaosUserKey]bool{}
			}
			keysOf[ch][chaosUserKey{r.user.id, r.key}] = true
		}
	}
	for _, r := range s.records {
		if r.flow == "ride.create" {
			for _, a := range r.answers {
				note(r, a)
			}
		}
	}
	for _, rt := range returned {
		if rt.rec.flow == "ride.create" {
			note(rt.rec, rt.after)
		}
	}
	shared := 0
	for _, keys := range keysOf {
		if len(keys) > 1 {
			shared++
		}
	}
	add("no_key_answered_another_charge", chaosCheck{name: "no key answered with another key's charge",
		expected: "0 charges", actual: fmt.Sprintf("%d charges answered to more than one key (of %d)", shared, len(keysOf)),
		ok: shared == 0})

	// Bookings charged at both processors (case 3 of docs/processors.md:
	// redone at another processor after a lost commit): each must be
	// resolved, its charge no ride records listed by `keys reconcile` as
	// a double charge, or refunded.
	if recErr != nil {
		s.t.Logf("keys reconcile: %v", recErr)
		rec = &chaosReconcile{exit: -1}
	}
	doubles := s.doubleCharges(rec)
	if s.adyen != nil {
		add("double_charges_resolved", doubles.check())
		add("adyen_orphans_refunded", doubles.adyenOrphansCheck())
	}

	// Booking clients that came back got what they had: the same outcome,
	// a booking its very charge; or, with two processors, a booking lost
	// with the commits and redone at the other processor, its first
	// charge resolved (above).
	same, cameBackLost, bookings, redoneElsewhere := 0, 0, 0, 0
	for _, rt := range returned {
		if rt.rec.flow != "ride.create" {
			continue
		}
		bookings++
		if !bytes.Equal(rt.after.Body, rt.before.Body) {
			cameBackLost++
		}
		if rt.after.Definitive && rt.after.Status == rt.before.Status && chargeOf(rt.after) == chargeOf(rt.before) {
			same++
		} else if doubles.resolvedRedo(chargeOf(rt.after)) {
			same++
			redoneElsewhere++
		} else {
			s.t.Logf("%s %s: had %d %s, came back to %d %s", rt.rec.req.path, rt.rec.key,
				rt.before.Status, rt.before.Body, rt.after.Status, rt.after.Body)
		}
	}
	add("returned_same_outcome", chaosCheck{name: "a booking client coming back with its key gets its outcome again (the same charge)",
		expected: fmt.Sprintf("%d of %d", bookings, bookings),
		actual:   fmt.Sprintf("%d of %d (%d of them redone after the loss, %d at the other processor)", same, bookings, cameBackLost, redoneElsewhere),
		ok:       same == bookings})

	// Trips (trips_checks_test.go), judged where the restore may have
	// lost what their clients were told by what it promises.
	s.restore = &chaosTripRestore{backupStart: fig.backupStart, restored: fig.promoted, returned: map[*chaosRecord]chaosAnswer{}}
	for _, rt := range returned {
		if rt.rec.flow == "ride.complete" {
			s.restore.returned[rt.rec] = rt.after
		}
	}
	add("trips_ended_as_told", checkTripsEndedAsTold(s))
	add("no_double_capture", checkNoDoubleCapture(s))
	add("no_hold_left_open", checkNoHoldLeftOpen(s))
	add("fare_captured_once", checkFareCapturedOnce(s))
	add("returned_trip_same_capture", checkReturnedTripsSameCapture(s))

	refundChecks, refundNotes := returnedRefundChecks(s, returned, fig)
	for _, c := range refundChecks {
		add(c.id, c)
	}

	// Orphans: what a processor has and no ride records is resolved by
	// the orphan policy, whose grace ends within the run
	// (webhooks_test.go), and `keys reconcile` lists nothing. A double
	// charge's unrecorded charge is refunded by the same policy at once.
	refundsPerCharge := map[string]int{}
	for _, r := range s.processorRefunds() {
		refundsPerCharge[r.charge]++
	}
	if recErr != nil {
		s.t.Logf("keys reconcile: %v", recErr)
		rec = nil
	}
	orphanNote := "orphans: the webhook state could not be read"
	if fig.hooks != nil {
		var c chaosCheck
		c, orphanNote = checkOrphansResolved(s, fig.hooks, rec)
		add(c.id, c)
	}

	refundedTwice := moreThanOnce(refundsPerCharge)
	add("no_ride_refunded_twice", chaosCheck{name: "no charge refunded twice at " + s.processorNames(), expected: "0",
		actual: fmt.Sprint(refundedTwice), ok: refundedTwice == 0})
	if s.adyen != nil {
		for _, c := range []chaosCheck{checkRidesAtTheirProcessor(s), checkRefundsAtChargingProcessor(s)} {
			add(c.id, c)
		}
	}

	notes := []string{fmt.Sprintf("lost: about %d write transactions (transaction ids the primary assigned between the backup's end and its death); "+
		"%d of the %d stored answers clients saw from the backup's start to the kill; %d booking clients came back with their keys (%d of them to a lost booking, redone), "+
		"the others never did; %s", fig.xidKill-fig.xidBackup, lost, window, bookings, cameBackLost, refundNotes), orphanNote}
	if s.adyen != nil {
		notes = append(notes, doubles.note(s))
	}
	return checks, notes
}

// refundOf returns the ride and the Stripe refund of an answer that is a
// refund (200 or 201); ok is false for any other answer.
func refundOf(a chaosAnswer) (rideID int64, refund string, ok bool) {
	if !a.Definitive || (a.Status != http.StatusCreated && a.Status != http.StatusOK) {
		return 0, "", false
	}
	var r struct {
		RideID int64  `json:"ride_id"`
		Refund string `json:"stripe_refund_id"`
	}
	if json.Unmarshal(a.Body, &r) != nil || r.Refund == "" {
		return 0, "", false
	}
	return r.RideID, r.Refund, true
}

// returnedRefundChecks are the invariants of ride ids across a restore:
// an id names one ride, whatever a client was told before or after the
// loss; every refund answered and every refund at Stripe is of the ride a
// client named; a refund client that comes back to a lost ride is answered
// not found, one whose ride survived gets the same refund. The note says
// how the refund clients came back.
func returnedRefundChecks(s *chaosState, returned []chaosReturned, fig *failoverFigures) ([]chaosCheck, string) {
	var checks []chaosCheck

	// Every ride id a client was told names one booking (one client key):
	// the answers of bookings, before the loss, after it, and on coming
	// back.
	bookingsOf := map[int64]map[chaosUserKey]bool{}
	chargeOfRide := map[int64]string{}
	noteRide := func(r *chaosRecord, a chaosAnswer) {
		id := chargedRide(a)
		if id == 0 {
			return
		}
		if bookingsOf[id] == nil {
			bookingsOf[id] = map[chaosUserKey]bool{}
		}
		bookingsOf[id][chaosUserKey{r.user.id, r.key}] = true
		chargeOfRide[id] = chargeOf(a)
	}
	for _, r := range s.records {
		if r.flow == "ride.create" {
			for _, a := range r.answers {
				noteRide(r, a)
			}
		}
	}
	for _, rt := range returned {
		if rt.rec.flow == "ride.create" {
			noteRide(rt.rec, rt.after)
		}
	}
	reissued := 0
	for _, keys := range bookingsOf {
		if len(keys) > 1 {
			reissued++
		}
	}
	checks = append(checks, chaosCheck{id: "ride_ids_never_reissued", name: "every ride id a client was told, before or after the loss, names one booking",
		expected: "0 ids", actual: fmt.Sprintf("%d ids named more than one booking (of %d)", reissued, len(bookingsOf)),
		ok: reissued == 0})

	// Every refund a client was answered is of the ride it named, and
	// every refund at Stripe is of the charge of a ride a client asked to
	// refund.
	chargeOfRefund := map[string]string{}
	refunds := s.processorRefunds()
	for id, r := range refunds {
		chargeOfRefund[id] = r.charge
	}
	doubles := s.doubleCharges(nil)
	asked := map[string]bool{}
	wrong, answered := 0, 0
	noteRefund := func(r *chaosRecord, a chaosAnswer) {
		rideID, refund, ok := refundOf(a)
		if !ok {
			return
		}
		answered++
		if rideID != r.rideID || chargeOfRefund[refund] == "" || chargeOfRefund[refund] != chargeOfRide[r.rideID] {
			wrong++
			s.t.Logf("%s %s: answered %d %s; the ride's charge is %q, the refund's %q",
				r.req.path, r.key, a.Status, a.Body, chargeOfRide[r.rideID], chargeOfRefund[refund])
		}
	}
	for _, r := range s.records {
		if r.flow != "ride.refund" {
			continue
		}
		if ch := chargeOfRide[r.rideID]; ch != "" {
			asked[ch] = true
		}
		for _, a := range r.answers {
			noteRefund(r, a)
		}
	}
	for _, rt := range returned {
		if rt.rec.flow == "ride.refund" {
			noteRefund(rt.rec, rt.after)
		}
	}
	// The refund of a double charge's unrecorded charge resolves the
	// double; no client asked for it.
	unasked := 0
	for id, r := range refunds {
		// The orphan policy refunds the charges of lost bookings whose
		// clients never came back, and a double charge's unrecorded
		// charge: no client asked for those.
		if !asked[r.charge] && !doubles.unrecorded[r.charge] && !fig.hooks.policyRefund(r.charge, id) {
			unasked++
		}
	}
	checks = append(checks, chaosCheck{id: "refunds_of_the_ride_named", name: "every refund answered, and every refund at " + s.processorNames() + ", is of a ride a client asked to refund",
		expected: fmt.Sprintf("%d answers, 0 of another ride; 0 refunds of a ride not asked for", answered),
		actual:   fmt.Sprintf("%d answers, %d of another ride; %d refunds of a ride not asked for", answered, wrong, unasked),
		ok:       wrong == 0 && unasked == 0})

	// Refund clients that came back: to a lost ride, not found (or their
	// own answer, replayed from a process's memory); to a ride that
	// survived, the same refund.
	lostRetried, lostRight, lostNotFound, keptRetried, keptSame := 0, 0, 0, 0, 0
	for _, rt := range returned {
		if rt.rec.flow != "ride.refund" {
			continue
		}
		if s.rides[rt.rec.rideID] == nil {
			lostRetried++
			notFound, ok := lostRefundAnswer(rt.before, rt.after)
			if ok {
				lostRight++
			} else {
				s.t.Logf("%s %s: its ride was lost; came back to %d %s", rt.rec.req.path, rt.rec.key, rt.after.Status, rt.after.Body)
			}
			if notFound {
				lostNotFound++
			}
			continue
		}
		keptRetried++
		_, was, _ := refundOf(rt.before)
		if _, now, ok := refundOf(rt.after); ok && now == was {
			keptSame++
		} else {
			s.t.Logf("%s %s: had %d %s, came back to %d %s", rt.rec.req.path, rt.rec.key,
				rt.before.Status, rt.before.Body, rt.after.Status, rt.after.Body)
		}
	}
	// The refund made after the backup, retried at each instance: its ride
	// is surely lost; an instance that did not answer it remembers nothing
	// of it and must answer 404.
	canaryRight, canaryNotFound := 0, 0
	canaryLost := fig.lostRefund != nil && s.rides[fig.lostRefund.rideID] == nil
	if fig.lostRefund != nil {
		before, _ := firstStored(fig.lostRefund)
		for _, a := range fig.lostRefundAt {
			notFound, ok := lostRefundAnswer(before, a)
			if ok {
				canaryRight++
			} else {
				s.t.Logf("%s %s: its ride was lost; came back to %d %s", fig.lostRefund.req.path, fig.lostRefund.key, a.Status, a.Body)
			}
			if notFound {
				canaryNotFound++
			}
		}
	}
	checks = append(checks, chaosCheck{id: "lost_ride_refund_not_found",
		name:     "a refund retried after its ride was lost is answered 404, or its own answer replayed from a process's memory; the one made after the backup, at each instance: 404 at least once",
		expected: fmt.Sprintf("%d of %d; after the backup: lost, %d of %d, ≥ 1 × 404", lostRetried, lostRetried, len(fig.lostRefundAt), len(fig.lostRefundAt)),
		actual: fmt.Sprintf("%d of %d (%d × 404); after the backup: lost %v, %d of %d, %d × 404",
			lostRight, lostRetried, lostNotFound, canaryLost, canaryRight, len(fig.lostRefundAt), canaryNotFound),
		ok: lostRight == lostRetried && canaryLost && len(fig.lostRefundAt) > 0 && canaryRight == len(fig.lostRefundAt) && canaryNotFound > 0})
	checks = append(checks, chaosCheck{id: "kept_ride_refund_same", name: "a refund retried whose ride survived gets the same Stripe refund",
		expected: fmt.Sprintf("%d of %d", keptRetried, keptRetried), actual: fmt.Sprintf("%d of %d", keptSame, keptRetried),
		ok: keptSame == keptRetried})

	return checks, fmt.Sprintf("%d refund clients came back (%d to a lost ride: %d not found, %d their own answer replayed from a process's memory; %d to a ride that survived: the same refund)",
		lostRetried+keptRetried, lostRetried, lostNotFound, lostRight-lostNotFound, keptSame)
}
