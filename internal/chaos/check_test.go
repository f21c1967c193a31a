package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/receipts"
)

// chaosSettle waits, bounded by within, until the system has nothing left
// to do: every idempotency key finished (or dead-lettered for an operator),
// no ride waiting for its rider, and no receipt, customer or completion job
// pending, running or waiting to be retried. A job River's backoff put more than 5 s off is retried at
// once, as an operator does after an incident. It prints what it still
// waits for every few seconds.
func chaosSettle(ctx context.Context, sys *chaosSystem, within time.Duration) error {
	conn, err := pgx.Connect(ctx, sys.dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	start, shown := time.Now(), time.Now()
	return binrun.Poll(ctx, within, func() error {
		// The faults are over, as after an incident: a job that River's
		// backoff (attempt⁴ seconds) put further off than the settle can
		// wait is retried now, as an operator does from River UI. Whether
		// it then succeeds is still the system's to prove.
		if _, err := conn.Exec(ctx, `UPDATE river_job SET scheduled_at = now()
			WHERE state = 'retryable' AND scheduled_at > now() + interval '5 seconds'`); err != nil {
			return err
		}
		var unfinished, waiting, ending int
		var jobs []string
		err := conn.QueryRow(ctx, `
			SELECT
				(SELECT count(*) FROM idempotency_keys k
				 WHERE k.recovery_point <> 'finished'
				   AND NOT EXISTS (SELECT 1 FROM river_job j
				                   WHERE j.kind = 'key_complete' AND j.state = 'discarded'
				                     AND (j.args->>'key_id')::bigint = k.id)),
				-- a ride waiting for its rider past its deadline waits for
				-- the processor's word (Adyen's CANCELLATION, or the
				-- payment's AUTHORISATION)
				(SELECT count(*) FROM rides WHERE charge_status = 'requires_action'),
				-- a trip being completed or cancelled (at Adyen, a capture
				-- waits for its CAPTURE notification)
				(SELECT count(*) FROM rides WHERE charge_status IN ('capturing', 'cancelling')),
				(SELECT coalesce(array_agg(kind || ' ' || state || '×' || n ORDER BY kind, state), '{}')
				 FROM (SELECT kind, state::text, count(*) AS n FROM river_job
				       WHERE kind NOT IN ('key_completer', 'key_reaper', 'events_pass', 'orphan_pass', 'hold_release')
				         AND state IN ('available', 'pending', 'running', 'retryable', 'scheduled')
				       GROUP BY 1, 2) pending)`,
		).Scan(&unfinished, &waiting, &ending, &jobs)
		if err == nil && unfinished+waiting+ending+len(jobs) > 0 {
			err = fmt.Errorf("%d keys unfinished, %d rides waiting for their rider, %d trips capturing or cancelling; jobs to do: %s",
				unfinished, waiting, ending, strings.Join(jobs, ", "))
		}
		if err != nil && time.Since(shown) > 5*time.Second {
			shown = time.Now()
			fmt.Printf("settling, %s: %v\n", time.Since(start).Round(time.Second), err)
		}
		return err
	})
}

// chaosCheck is one invariant and its verdict.
type chaosCheck struct {
	// id names the check (its subtest); name states the invariant.
	id, name, expected, actual string
	ok                         bool
}

// chaosTable renders checks as a table.
func chaosTable(checks []chaosCheck) string {
	w := []int{len("check"), len("invariant"), len("expected"), len("actual")}
	for _, c := range checks {
		w[0], w[1], w[2], w[3] = max(w[0], len(c.id)), max(w[1], len(c.name)), max(w[2], len(c.expected)), max(w[3], len(c.actual))
	}
	var b strings.Builder
	row := func(id, a, e, g, ok string) {
		fmt.Fprintf(&b, "| %-*s | %-*s | %-*s | %-*s | %-4s |\n", w[0], id, w[1], a, w[2], e, w[3], g, ok)
	}
	row("check", "invariant", "expected", "actual", "ok")
	fmt.Fprintf(&b, "|%s|%s|%s|%s|------|\n", strings.Repeat("-", w[0]+2), strings.Repeat("-", w[1]+2),
		strings.Repeat("-", w[2]+2), strings.Repeat("-", w[3]+2))
	for _, c := range checks {
		ok := "yes"
		if !c.ok {
			ok = "NO"
		}
		row(c.id, c.name, c.expected, c.actual, ok)
	}
	return b.String()
}

// chaosKeyRow is an idempotency key as the checks read it.
type chaosKeyRow struct {
	id       int64
	flow     string
	point    string
	code     *int32
	body     []byte
	locked   bool
	expired  bool // locked for longer than the lease
	finished bool
}

// chaosUserKey identifies an idempotency key: keys are scoped per rider.
type chaosUserKey struct {
	user int64
	key  string
}

// chaosRideRow is a ride and its refund as the checks read them.
type chaosRideRow struct {
	id      int64
	user    int64
	status  string
	charge  *string
	keyID   *int64
	refund  string // refund status, "" without one
	refundI *string
	// processor is the processor the ride is routed to.
	processor string
	// The trip (trips_checks_test.go): capture (booking or trip), the
	// hold (amount), the fare and what was captured, the fare above the
	// hold and its payment, the processor's payment, and whether an
	// authorized ride's hold is kept past its expiry and a pass of the
	// release.
	capture     string
	amount      int64
	fare        *int64
	captured    *int64
	extra       *int64
	extraStatus *string
	extraCharge *string
	paymentID   *string
	heldPastDue bool
}

// chaosState is everything the invariants are checked against, read once
// the system has settled: the database, the fake Stripe's ledger, the mail
// sink, the operator CLI, and what the clients recorded.
type chaosState struct {
	t    *testing.T
	ctx  context.Context
	load *chaosLoad

	keys        map[chaosUserKey]*chaosKeyRow
	rides       map[int64]*chaosRideRow
	receipts    map[string]int    // recorded, by Message-ID
	customerOf  map[int64]*string // stored Stripe customer, by user
	completions map[int64]bool    // keys a completion job ran for, to its end
	ledger      *chaosLedger
	// adyen is the fake Adyen's ledger, nil when the run charges at
	// Stripe alone; circuits, what /metrics showed of the circuits.
	adyen    *fakeadyen.Ledger
	circuits *circuitWatch
	operator map[int64]bool // keys listed by `keys list -dead`
	sent     map[string]int // messages at the sink, by Message-ID

	records []*chaosRecord
	auth    []chaosAuthRide
	trips   []*chaosTrip
	// restore: what the trips' checks need of a restore run, nil in any
	// other run (trips_checks_test.go).
	restore       *chaosTripRestore
	malformed     []chaosMalformedResult
	riders        int
	riderFailures []string
}

// chaosReadState reads the database, the fake Stripe's ledger, the mail
// sink and the operator CLI, and takes the clients' records.
func chaosReadState(t *testing.T, ctx context.Context, sys *chaosSystem, load *chaosLoad) *chaosState {
	t.Helper()
	s := &chaosState{t: t, ctx: ctx, load: load,
		keys: map[chaosUserKey]*chaosKeyRow{}, rides: map[int64]*chaosRideRow{},
		receipts: map[string]int{}, customerOf: map[int64]*string{}, completions: map[int64]bool{}}
	conn, err := pgx.Connect(ctx, sys.dbURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())

	rows, err := conn.Query(ctx, `
		SELECT id, user_id, idempotency_key, flow, recovery_point, response_code, response_body,
		       locked_at IS NOT NULL, coalesce(locked_at < now() - $1::interval, false)
		FROM idempotency_keys`, chaosLease)
	require.NoError(t, err)
	for rows.Next() {
		var k chaosKeyRow
		var uk chaosUserKey
		require.NoError(t, rows.Scan(&k.id, &uk.user, &uk.key, &k.flow, &k.point, &k.code, &k.body, &k.locked, &k.expired))
		k.finished = k.point == "finished"
		s.keys[uk] = &k
	}
	require.NoError(t, rows.Err())

	rows, err = conn.Query(ctx, `
		SELECT r.id, r.user_id, r.charge_status, r.stripe_charge_id, r.idempotency_key_id,
		       coalesce(f.status, ''), f.stripe_refund_id, r.processor,
		       r.capture, r.amount_cents, r.fare_cents, r.captured_cents, r.extra_cents, r.extra_status, r.extra_charge_id, r.payment_id,
		       coalesce(r.charge_status = 'authorized' AND r.hold_expires_at < now() - $1::interval, false)
		FROM rides r LEFT JOIN refunds f ON f.ride_id = r.id`, chaosHoldReleaseLate)
	require.NoError(t, err)
	for rows.Next() {
		var r chaosRideRow
		require.NoError(t, rows.Scan(&r.id, &r.user, &r.status, &r.charge, &r.keyID, &r.refund, &r.refundI, &r.processor,
			&r.capture, &r.amount, &r.fare, &r.captured, &r.extra, &r.extraStatus, &r.extraCharge, &r.paymentID, &r.heldPastDue))
		s.rides[r.id] = &r
	}
	require.NoError(t, rows.Err())

	// The dispatch side's keys are the dispatch account's.
	var dispatchID int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM users WHERE role = 'dispatch'`).Scan(&dispatchID))
	load.dispatch().id = dispatchID

	rows, err = conn.Query(ctx, `SELECT message_id FROM receipts`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		s.receipts[id]++
	}
	require.NoError(t, rows.Err())

	rows, err = conn.Query(ctx, `SELECT id, stripe_customer_id FROM users WHERE role = 'rider'`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		var cus *string
		require.NoError(t, rows.Scan(&id, &cus))
		s.customerOf[id] = cus
	}
	require.NoError(t, rows.Err())

	rows, err = conn.Query(ctx, `SELECT DISTINCT (args->>'key_id')::bigint FROM river_job WHERE kind = 'key_complete' AND state = 'completed'`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		s.completions[id] = true
	}
	require.NoError(t, rows.Err())

	s.ledger, err = sys.stripeLedger(ctx)
	require.NoError(t, err)
	if sys.adyen != "" {
		s.adyen, err = sys.adyenLedger(ctx)
		require.NoError(t, err)
	}
	s.operator, err = sys.operatorKeys(ctx)
	require.NoError(t, err)
	s.sent = sys.sink.CountByMessageID()

	load.book.mu.Lock()
	s.records = slices.Clone(load.book.records)
	load.auth.mu.Lock()
	s.auth = slices.Clone(load.auth.rides)
	load.auth.mu.Unlock()
	load.trips.mu.Lock()
	s.trips = slices.Clone(load.trips.trips)
	load.trips.mu.Unlock()
	s.malformed = slices.Clone(load.book.malformed)
	s.riders, s.riderFailures = load.book.riders, slices.Clone(load.book.riderFailures)
	load.book.mu.Unlock()
	return s
}

// chaosInvariants are the checks of a chaos run, in the order of the report.
// Each is a function of the settled state; its id names its subtest and its
// row of the table.
var chaosInvariants = []struct {
	id    string
	check func(s *chaosState) chaosCheck
}{
	{"keys_finished", checkKeysFinished},
	{"answers_stored", checkAnswersStored},
	{"one_fresh_answer_per_key", checkOneFreshAnswerPerKey},
	{"abandoned_keys_finished", checkAbandonedKeysFinished},
	{"riders_created", checkRidersCreated},
	{"charges_match", checkChargesMatch},
	{"no_request_charged_twice", checkNoRequestChargedTwice},
	{"no_ride_pending", checkNoRidePending},
	{"auth_rides_decided", checkAuthRidesDecided},
	{"one_customer_per_rider", checkOneCustomerPerRider},
	{"refunds_match", checkRefundsMatch},
	{"one_refund_201_per_ride", checkOneRefund201PerRide},
	{"one_receipt_per_ride", checkOneReceiptPerRide},
	{"no_key_locked_past_lease", checkNoKeyLockedPastLease},
	{"malformed_got_4xx", checkMalformedGot4xx},
	// Trips (trips_checks_test.go).
	{"trips_ended_as_told", checkTripsEndedAsTold},
	{"no_double_capture", checkNoDoubleCapture},
	{"no_hold_left_open", checkNoHoldLeftOpen},
	{"fare_captured_once", checkFareCapturedOnce},
}

// chaosCheckAll runs every invariant against s.
func chaosCheckAll(s *chaosState) []chaosCheck {
	checks := make([]chaosCheck, 0, len(chaosInvariants))
	for _, inv := range chaosInvariants {
		c := inv.check(s)
		c.id = inv.id
		checks = append(checks, c)
	}
	if s.adyen != nil {
		checks = append(checks, processorChecks(s)...)
	}
	return checks
}

// checkKeysFinished: every key finished, or dead-lettered and listed for an
// operator.
func checkKeysFinished(s *chaosState) chaosCheck {
	finished, unfinished, listed := 0, 0, 0
	for _, k := range s.keys {
		switch {
		case k.finished:
			finished++
		case s.operator[k.id]:
			unfinished++
			listed++
		default:
			unfinished++
		}
	}
	return chaosCheck{name: "every key finished, or listed by `keys list -dead`",
		expected: fmt.Sprintf("%d finished or listed", len(s.keys)),
		actual:   fmt.Sprintf("%d finished, %d unfinished (%d listed)", finished, unfinished, listed),
		ok:       unfinished == listed}
}

// checkAnswersStored: every definitive answer a client got is the stored
// one, byte for byte (same-key bursts included).
func checkAnswersStored(s *chaosState) chaosCheck {
	answers, matching := 0, 0
	var mismatches []string
	for _, r := range s.records {
		k := s.keys[chaosUserKey{r.user.id, r.key}]
		for _, a := range r.answers {
			if !a.Definitive {
				continue
			}
			answers++
			if k != nil && k.finished && int(*k.code) == a.Status && bytes.Equal(k.body, a.Body) {
				matching++
			} else if len(mismatches) < 5 {
				mismatches = append(mismatches, fmt.Sprintf("%s: got %d %s", r.key, a.Status, a.Body))
			}
		}
	}
	for _, m := range mismatches {
		s.t.Logf("answer not stored as given: %s", m)
	}
	return chaosCheck{name: "every definitive answer = the stored answer, byte for byte",
		expected: fmt.Sprintf("%d of %d", answers, answers), actual: fmt.Sprintf("%d of %d", matching, answers),
		ok: matching == answers}
}

// checkOneFreshAnswerPerKey: the clients of one key (a same-key burst) may
// all get answers, but only one request drove the key to its end: the
// others are replays.
func checkOneFreshAnswerPerKey(s *chaosState) chaosCheck {
	drivenTwice := 0
	for _, r := range s.records {
		fresh := 0
		for _, a := range r.answers {
			if a.Definitive && !a.Replayed && storedAnswer(a) {
				fresh++
			}
		}
		if fresh > 1 {
			drivenTwice++
		}
	}
	return chaosCheck{name: "no key answered fresh twice (same-key bursts: one answer, the rest replays)",
		expected: "0 keys", actual: fmt.Sprintf("%d keys", drivenTwice), ok: drivenTwice == 0}
}

// abandonedKeys counts the keys clients gave up on, those finished, and
// those a completion job ran for.
func (s *chaosState) abandonedKeys() (abandoned, completed, byCompleter int) {
	for _, r := range s.records {
		k := s.keys[chaosUserKey{r.user.id, r.key}]
		if r.quit && k != nil {
			abandoned++
			if k.finished {
				completed++
			}
			if s.completions[k.id] {
				byCompleter++
			}
		}
	}
	return abandoned, completed, byCompleter
}

// checkAbandonedKeysFinished: keys clients gave up on were finished by the
// completer.
func checkAbandonedKeysFinished(s *chaosState) chaosCheck {
	abandoned, completed, byCompleter := s.abandonedKeys()
	return chaosCheck{name: "keys abandoned by their clients finished anyway",
		expected: fmt.Sprintf("%d of %d", abandoned, abandoned),
		actual:   fmt.Sprintf("%d of %d (%d through the completer)", completed, abandoned, byCompleter),
		ok:       completed == abandoned}
}

// checkRidersCreated: every rider created during the chaos got an API key.
func checkRidersCreated(s *chaosState) chaosCheck {
	for _, f := range s.riderFailures {
		s.t.Logf("rider not created: %s", f)
	}
	return chaosCheck{name: "riders created during the chaos got their API key",
		expected: fmt.Sprintf("%d of %d", s.riders+len(s.riderFailures), s.riders+len(s.riderFailures)),
		actual:   fmt.Sprintf("%d of %d", s.riders, s.riders+len(s.riderFailures)),
		ok:       len(s.riderFailures) == 0}
}

// rideCharges returns the charge ids stored on rides: each ride's charge
// (a trip's hold), and the payment of a trip's fare above its hold (or of
// its balance).
func (s *chaosState) rideCharges() map[string]bool {
	charges := map[string]bool{}
	for _, r := range s.rides {
		if r.charge != nil {
			charges[*r.charge] = true
		}
		if r.extraCharge != nil {
			charges[*r.extraCharge] = true
		}
	}
	return charges
}

// checkChargesMatch: charges at Stripe = rides with a charge id = keys
// finished with 201.
func checkChargesMatch(s *chaosState) chaosCheck {
	stripeCharges := map[string]bool{}
	for id := range s.processorCharges() {
		stripeCharges[id] = true
	}
	rideCharges := s.rideCharges()
	keyCharges := map[string]bool{}
	for _, k := range s.keys {
		if k.flow == "ride.create" && k.finished && *k.code == http.StatusAccepted {
			// A ride that waited for its rider: its charge, if it was
			// charged since, is on its ride.
			for _, r := range s.rides {
				if r.keyID != nil && *r.keyID == k.id && r.charge != nil {
					keyCharges[*r.charge] = true
				}
			}
		}
		if (k.flow == "ride.complete" || k.flow == "ride.balance") && k.finished &&
			(*k.code == http.StatusCreated || *k.code == http.StatusOK || *k.code == http.StatusAccepted) {
			// A trip's fare above its hold, charged by its completion, or
			// its balance, paid.
			var ride service.Ride
			if json.Unmarshal(k.body, &ride) == nil && ride.ExtraChargeID != nil {
				keyCharges[*ride.ExtraChargeID] = true
			}
		}
		if k.flow == "ride.create" && k.finished && *k.code == http.StatusCreated {
			var ride service.Ride
			if json.Unmarshal(k.body, &ride) == nil && ride.StripeChargeID != nil {
				keyCharges[*ride.StripeChargeID] = true
			} else {
				keyCharges["(no charge id in key "+fmt.Sprint(k.id)+")"] = true
			}
		}
	}
	return chaosCheck{name: "succeeded charges (and holds) at " + s.processorNames() + " = charges rides record = charges their keys answered (bookings 201, or 202 charged since; a trip's fare above its hold)",
		expected: "the same set", actual: fmt.Sprintf("%d = %d = %d", len(stripeCharges), len(rideCharges), len(keyCharges)),
		ok: sameSet(stripeCharges, rideCharges) && sameSet(rideCharges, keyCharges)}
}

// checkNoRequestChargedTwice: Stripe holds at most one succeeded charge per
// client request (by the charge's metadata ar_key: one processor key per
// client request).
func checkNoRequestChargedTwice(s *chaosState) chaosCheck {
	chargesPerKey := map[string]int{}
	for _, c := range s.ledger.Charges {
		if c.Status == "succeeded" {
			chargesPerKey[c.Metadata["ar_key"]]++
		}
	}
	twice := moreThanOnce(chargesPerKey)
	return chaosCheck{name: "no client request charged twice (Stripe charges by metadata ar_key)", expected: "0",
		actual: fmt.Sprint(twice), ok: twice == 0}
}

// checkNoRidePending: every ride ended charged, declined or expired: none
// left pending, none still waiting for its rider.
func checkNoRidePending(s *chaosState) chaosCheck {
	pending := 0
	for _, r := range s.rides {
		if r.status == "pending" || r.status == "requires_action" {
			pending++
		}
	}
	return chaosCheck{name: "every ride charged, declined or expired (none left pending or waiting)", expected: "0 pending",
		actual: fmt.Sprintf("%d pending of %d", pending, len(s.rides)), ok: pending == 0}
}

// checkOneCustomerPerRider: Stripe holds at most one customer per rider (by
// the customer's metadata ar_rider), and the one stored on each rider is
// one of Stripe's.
func checkOneCustomerPerRider(s *chaosState) chaosCheck {
	customersPerRider := map[string][]string{}
	for _, c := range s.ledger.Customers {
		customersPerRider[c.Metadata["ar_rider"]] = append(customersPerRider[c.Metadata["ar_rider"]], c.ID)
	}
	twoCustomers, unknownCustomer := 0, 0
	stripeCustomers := map[string]bool{}
	for _, ids := range customersPerRider {
		if len(ids) > 1 {
			twoCustomers++
		}
		stripeCustomers[ids[0]] = true
	}
	for _, cus := range s.customerOf {
		if cus != nil && !stripeCustomers[*cus] {
			unknownCustomer++
		}
	}
	return chaosCheck{name: "no rider with two Stripe customers; the stored one is Stripe's", expected: "0",
		actual: fmt.Sprintf("%d twice, %d differ", twoCustomers, unknownCustomer),
		ok:     twoCustomers == 0 && unknownCustomer == 0}
}

// rideRefunds returns the refund ids stored on refunded rides.
func (s *chaosState) rideRefunds() map[string]bool {
	refunds := map[string]bool{}
	for _, r := range s.rides {
		if r.refund == "refunded" && r.refundI != nil {
			refunds[*r.refundI] = true
		}
	}
	return refunds
}

// checkRefundsMatch: refunds at Stripe = refunded rides, at most one per
// ride.
func checkRefundsMatch(s *chaosState) chaosCheck {
	stripeRefunds := map[string]bool{}
	refundsPerCharge := map[string]int{}
	for id, r := range s.processorRefunds() {
		stripeRefunds[id] = true
		refundsPerCharge[r.charge]++
	}
	rideRefunds := s.rideRefunds()
	refundedTwice := moreThanOnce(refundsPerCharge)
	return chaosCheck{name: "refunds at " + s.processorNames() + " = refunded rides; none refunded twice", expected: "the same set, 0 twice",
		actual: fmt.Sprintf("%d = %d, %d twice", len(stripeRefunds), len(rideRefunds), refundedTwice),
		ok:     sameSet(stripeRefunds, rideRefunds) && refundedTwice == 0}
}

// checkOneRefund201PerRide: of the keys that asked to refund a ride, at most
// one was answered 201 (the others: 200, the same refund).
func checkOneRefund201PerRide(s *chaosState) chaosCheck {
	created := map[int64]int{} // refund keys answered 201, by ride
	for _, r := range s.records {
		k := s.keys[chaosUserKey{r.user.id, r.key}]
		if r.flow == "ride.refund" && k != nil && k.finished && *k.code == http.StatusCreated {
			created[r.rideID]++
		}
	}
	createdTwice := moreThanOnce(created)
	return chaosCheck{name: "at most one refund key answered 201 per ride", expected: "0 rides with more",
		actual: fmt.Sprint(createdTwice), ok: createdTwice == 0}
}

// checkOneReceiptPerRide: one receipt per charged ride and per refunded
// ride: exactly the expected Message-IDs reached the sink, and each is
// recorded once.
func checkOneReceiptPerRide(s *chaosState) chaosCheck {
	wantMail := map[string]bool{}
	for _, r := range s.rides {
		// A trip's receipt comes with its completion, none with its hold.
		if r.status == "charged" || r.status == "completed" {
			wantMail[receipts.MessageID(receipts.KindRide, r.id, service.DefaultMailFrom)] = true
		}
		if r.refund == "refunded" {
			wantMail[receipts.MessageID(receipts.KindRefund, r.id, service.DefaultMailFrom)] = true
		}
	}
	gotMail, copies := map[string]bool{}, 0
	for id, n := range s.sent {
		gotMail[id] = true
		copies += n
	}
	recorded := map[string]bool{}
	for id := range s.receipts {
		recorded[id] = true
	}
	return chaosCheck{name: "one receipt (Message-ID) per charged (or completed) and per refunded ride, each recorded once",
		expected: fmt.Sprintf("%d receipts", len(wantMail)),
		actual:   fmt.Sprintf("%d Message-IDs at the sink (%d copies), %d recorded", len(gotMail), copies, len(recorded)),
		ok:       sameSet(wantMail, gotMail) && sameSet(wantMail, recorded)}
}

// checkNoKeyLockedPastLease: no key is locked for longer than the lease.
func checkNoKeyLockedPastLease(s *chaosState) chaosCheck {
	lockedPast, lockedNow := 0, 0
	for _, k := range s.keys {
		if k.locked {
			lockedNow++
		}
		if k.expired {
			lockedPast++
		}
	}
	return chaosCheck{name: "no key locked past its lease", expected: "0",
		actual: fmt.Sprintf("%d (%d locked at all)", lockedPast, lockedNow), ok: lockedPast == 0}
}

// checkMalformedGot4xx: no 500 caused by input: every malformed request got
// its 4xx, during the chaos (after retrying transient failures) and once
// calm (sent again now, with no fault active).
func checkMalformedGot4xx(s *chaosState) chaosCheck {
	rightDuring := 0
	for _, m := range s.malformed {
		if m.answer.Definitive && m.answer.Status == m.want {
			rightDuring++
		} else {
			s.t.Logf("malformed %q during the chaos: want %d, got %d %s", m.name, m.want, m.answer.Status, m.answer.Body)
		}
	}
	calm, rightCalm := chaosCalmMalformed(s.t, s.ctx, s.load, s.records)
	return chaosCheck{name: "no 500 caused by input: each malformed request got its 4xx",
		expected: fmt.Sprintf("%d of %d during, %d of %d calm", len(s.malformed), len(s.malformed), calm, calm),
		actual:   fmt.Sprintf("%d of %d during, %d of %d calm", rightDuring, len(s.malformed), rightCalm, calm),
		ok:       rightDuring == len(s.malformed) && rightCalm == calm}
}

// notes describes what happened, for the report: the Stripe requests hit by
// a fault and the run's outcome.
func (s *chaosState) notes() []string {
	hits := map[string]int{}
	for _, r := range s.ledger.Requests {
		if r.Fault != "" {
			hits[fmt.Sprintf("%s %s %d", r.Op, r.Fault, r.Status)]++
		}
	}
	var parts []string
	for _, k := range sortedKeys(hits) {
		parts = append(parts, fmt.Sprintf("%s×%d", k, hits[k]))
	}
	abandoned, _, byCompleter := s.abandonedKeys()
	return []string{
		s.authNote(),
		s.tripsNote(),
		fmt.Sprintf("Stripe requests hit by a fault (op kind status×n; status 0: no answer): %s", strings.Join(parts, ", ")),
		fmt.Sprintf("outcome: %d keys, %d rides (%d charged), %d refunds, %d receipts, %d Stripe requests, "+
			"%d keys abandoned by their clients (%d finished through the completer)",
			len(s.keys), len(s.rides), len(s.rideCharges()), len(s.rideRefunds()), len(s.receipts), len(s.ledger.Requests), abandoned, byCompleter),
	}
}

// chaosCalmMalformed sends every malformed request once more, with no fault
// active, and counts those answered with their 4xx at the first attempt.
func chaosCalmMalformed(t *testing.T, ctx context.Context, load *chaosLoad, records []*chaosRecord) (total, right int) {
	t.Helper()
	u := load.users[len(load.users)-1]
	var finishedKey string
	for _, r := range records {
		if r.user == u && r.flow == "ride.create" && len(r.answers) > 0 && r.answers[0].Definitive {
			finishedKey = r.key
			break
		}
	}
	for _, c := range load.malformedCases(u) {
		if c.name == "same key, another body" {
			if finishedKey == "" {
				continue
			}
			c.req.key = finishedKey
		}
		for range 2 {
			total++
			status, body, _ := load.rider.do(ctx, c.req, chaosAttemptTimeout)
			if status == c.want {
				right++
			} else {
				t.Logf("malformed %q once calm: want %d, got %d %s", c.name, c.want, status, body)
			}
		}
	}
	return total, right
}

// storedAnswer reports whether an answer is one the service stores on the
// key: a ride (201) or its decline (402), a refund (201, 200) or its
// refusal (409 refund-rejected).
func storedAnswer(a chaosAnswer) bool {
	switch a.Status {
	case http.StatusCreated, http.StatusAccepted, http.StatusOK, http.StatusPaymentRequired:
		return true
	case http.StatusConflict:
		return problemType(a.Body) == service.ProblemRefundRejected
	}
	return false
}

// moreThanOnce counts the entries of counts above 1.
func moreThanOnce[K comparable](counts map[K]int) int {
	n := 0
	for _, c := range counts {
		if c > 1 {
			n++
		}
	}
	return n
}

// sameSet reports whether a and b hold the same keys.
func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
