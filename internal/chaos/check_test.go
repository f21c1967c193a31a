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
	"github.com/atomicrides/atomicrides/service"
)

// chaosSettle waits, bounded by within, until the system has nothing left
// to do: every idempotency key finished (or dead-lettered for an operator)
// and no receipt, customer or completion job pending, running or waiting to
// be retried. It prints what it still waits for every few seconds.
func chaosSettle(ctx context.Context, sys *chaosSystem, within time.Duration) error {
	conn, err := pgx.Connect(ctx, sys.dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	start, shown := time.Now(), time.Now()
	return binrun.Poll(ctx, within, func() error {
		var unfinished int
		var jobs []string
		err := conn.QueryRow(ctx, `
			SELECT
				(SELECT count(*) FROM idempotency_keys k
				 WHERE k.recovery_point <> 'finished'
				   AND NOT EXISTS (SELECT 1 FROM river_job j
				                   WHERE j.kind = 'key_complete' AND j.state = 'discarded'
				                     AND (j.args->>'key_id')::bigint = k.id)),
				(SELECT coalesce(array_agg(kind || ' ' || state || '×' || n ORDER BY kind, state), '{}')
				 FROM (SELECT kind, state::text, count(*) AS n FROM river_job
				       WHERE kind NOT IN ('key_completer', 'key_reaper')
				         AND state IN ('available', 'pending', 'running', 'retryable', 'scheduled')
				       GROUP BY 1, 2) pending)`,
		).Scan(&unfinished, &jobs)
		if err == nil && unfinished+len(jobs) > 0 {
			err = fmt.Errorf("%d keys unfinished; jobs to do: %s", unfinished, strings.Join(jobs, ", "))
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
	name, expected, actual string
	ok                     bool
}

// chaosTable renders checks as a table.
func chaosTable(checks []chaosCheck) string {
	w := []int{len("invariant"), len("expected"), len("actual")}
	for _, c := range checks {
		w[0], w[1], w[2] = max(w[0], len(c.name)), max(w[1], len(c.expected)), max(w[2], len(c.actual))
	}
	var b strings.Builder
	row := func(a, e, g, ok string) {
		fmt.Fprintf(&b, "| %-*s | %-*s | %-*s | %-4s |\n", w[0], a, w[1], e, w[2], g, ok)
	}
	row("invariant", "expected", "actual", "ok")
	fmt.Fprintf(&b, "|%s|%s|%s|------|\n", strings.Repeat("-", w[0]+2), strings.Repeat("-", w[1]+2), strings.Repeat("-", w[2]+2))
	for _, c := range checks {
		ok := "yes"
		if !c.ok {
			ok = "NO"
		}
		row(c.name, c.expected, c.actual, ok)
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

// chaosInvariants reads the database, the fake Stripe's ledger and the mail
// sink once the system has settled, and checks every invariant. It also
// returns notes on what happened, for the report.
func chaosInvariants(t *testing.T, ctx context.Context, sys *chaosSystem, load *chaosLoad) (checks []chaosCheck, notes []string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, sys.dbURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())

	// Keys, by (user, key).
	type userKey struct {
		user int64
		key  string
	}
	keys := map[userKey]*chaosKeyRow{}
	rows, err := conn.Query(ctx, `
		SELECT id, user_id, idempotency_key, flow, recovery_point, response_code, response_body,
		       locked_at IS NOT NULL, coalesce(locked_at < now() - $1::interval, false)
		FROM idempotency_keys`, chaosLease)
	require.NoError(t, err)
	for rows.Next() {
		var k chaosKeyRow
		var uk userKey
		require.NoError(t, rows.Scan(&k.id, &uk.user, &uk.key, &k.flow, &k.point, &k.code, &k.body, &k.locked, &k.expired))
		k.finished = k.point == "finished"
		keys[uk] = &k
	}
	require.NoError(t, rows.Err())

	// Rides and refunds.
	type rideRow struct {
		id      int64
		user    int64
		status  string
		charge  *string
		keyID   *int64
		refund  string // refund status, "" without one
		refundI *string
	}
	rides := map[int64]*rideRow{}
	rows, err = conn.Query(ctx, `
		SELECT r.id, r.user_id, r.charge_status, r.stripe_charge_id, r.idempotency_key_id,
		       coalesce(f.status, ''), f.stripe_refund_id
		FROM rides r LEFT JOIN refunds f ON f.ride_id = r.id`)
	require.NoError(t, err)
	for rows.Next() {
		var r rideRow
		require.NoError(t, rows.Scan(&r.id, &r.user, &r.status, &r.charge, &r.keyID, &r.refund, &r.refundI))
		rides[r.id] = &r
	}
	require.NoError(t, rows.Err())

	receipts := map[string]int{} // by Message-ID
	rows, err = conn.Query(ctx, `SELECT message_id FROM receipts`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		receipts[id]++
	}
	require.NoError(t, rows.Err())

	customerOf := map[int64]*string{}
	rows, err = conn.Query(ctx, `SELECT id, stripe_customer_id FROM users`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		var cus *string
		require.NoError(t, rows.Scan(&id, &cus))
		customerOf[id] = cus
	}
	require.NoError(t, rows.Err())

	completions := map[int64]bool{} // keys a completion job ran for, to its end
	rows, err = conn.Query(ctx, `SELECT DISTINCT (args->>'key_id')::bigint FROM river_job WHERE kind = 'key_complete' AND state = 'completed'`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		completions[id] = true
	}
	require.NoError(t, rows.Err())

	ledger, err := sys.stripeLedger(ctx)
	require.NoError(t, err)
	operator, err := sys.operatorKeys(ctx)
	require.NoError(t, err)
	sent := sys.sink.CountByMessageID()

	check := func(name, expected, actual string, ok bool) {
		checks = append(checks, chaosCheck{name: name, expected: expected, actual: actual, ok: ok})
	}

	// 1. Every key finished, or dead-lettered and listed for an operator.
	finished, unfinished, listed := 0, 0, 0
	for _, k := range keys {
		switch {
		case k.finished:
			finished++
		case operator[k.id]:
			unfinished++
			listed++
		default:
			unfinished++
		}
	}
	check("every key finished, or listed by `keys list -dead`",
		fmt.Sprintf("%d finished or listed", len(keys)),
		fmt.Sprintf("%d finished, %d unfinished (%d listed)", finished, unfinished, listed),
		unfinished == listed)

	// 2. Every definitive answer a client got is the stored one, byte for
	// byte (same-key bursts included); keys clients gave up on were
	// finished by the completer.
	load.book.mu.Lock()
	records := slices.Clone(load.book.records)
	malformed := slices.Clone(load.book.malformed)
	load.book.mu.Unlock()
	answers, matching, abandoned, completed, byCompleter := 0, 0, 0, 0, 0
	var mismatches []string
	for _, r := range records {
		k := keys[userKey{r.user.id, r.key}]
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
		if r.quit && k != nil {
			abandoned++
			if k.finished {
				completed++
			}
			if completions[k.id] {
				byCompleter++
			}
		}
	}
	check("every definitive answer = the stored answer, byte for byte",
		fmt.Sprintf("%d of %d", answers, answers), fmt.Sprintf("%d of %d", matching, answers), matching == answers)
	// The clients of one key (a same-key burst) may all get answers, but
	// only one request drove the key to its end: the others are replays.
	drivenTwice := 0
	for _, r := range records {
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
	check("no key answered fresh twice (same-key bursts: one answer, the rest replays)",
		"0 keys", fmt.Sprintf("%d keys", drivenTwice), drivenTwice == 0)
	for _, m := range mismatches {
		t.Logf("answer not stored as given: %s", m)
	}
	check("keys abandoned by their clients finished anyway",
		fmt.Sprintf("%d of %d", abandoned, abandoned),
		fmt.Sprintf("%d of %d (%d through the completer)", completed, abandoned, byCompleter), completed == abandoned)
	load.book.mu.Lock()
	riders, riderFailures := load.book.riders, slices.Clone(load.book.riderFailures)
	load.book.mu.Unlock()
	for _, f := range riderFailures {
		t.Logf("rider not created: %s", f)
	}
	check("riders created during the chaos got their API key",
		fmt.Sprintf("%d of %d", riders+len(riderFailures), riders+len(riderFailures)),
		fmt.Sprintf("%d of %d", riders, riders+len(riderFailures)), len(riderFailures) == 0)

	// 3. Charges at Stripe = rides with a charge id = keys finished with 201.
	stripeCharges := map[string]bool{}
	chargesPerRide := map[string]int{}
	for _, c := range ledger.Charges {
		if c.Status == "succeeded" {
			stripeCharges[c.ID] = true
			chargesPerRide[c.Metadata["ride_id"]]++
		}
	}
	rideCharges := map[string]bool{}
	pending := 0
	for _, r := range rides {
		if r.charge != nil {
			rideCharges[*r.charge] = true
		}
		if r.status == "pending" {
			pending++
		}
	}
	keyCharges := map[string]bool{}
	for _, k := range keys {
		if k.flow == "ride.create" && k.finished && *k.code == http.StatusCreated {
			var ride service.Ride
			if json.Unmarshal(k.body, &ride) == nil && ride.StripeChargeID != nil {
				keyCharges[*ride.StripeChargeID] = true
			} else {
				keyCharges["(no charge id in key "+fmt.Sprint(k.id)+")"] = true
			}
		}
	}
	check("succeeded charges at Stripe = rides with a charge id = ride keys finished 201",
		"the same set", fmt.Sprintf("%d = %d = %d", len(stripeCharges), len(rideCharges), len(keyCharges)),
		sameSet(stripeCharges, rideCharges) && sameSet(rideCharges, keyCharges))
	twice := 0
	for _, n := range chargesPerRide {
		if n > 1 {
			twice++
		}
	}
	check("no ride charged twice (Stripe charges by metadata ride_id)", "0", fmt.Sprint(twice), twice == 0)
	check("every ride charged or declined (none left pending)", "0 pending", fmt.Sprintf("%d pending of %d", pending, len(rides)), pending == 0)

	customersPerUser := map[string][]string{}
	for _, c := range ledger.Customers {
		customersPerUser[c.Metadata["user_id"]] = append(customersPerUser[c.Metadata["user_id"]], c.ID)
	}
	twoCustomers, unknownCustomer := 0, 0
	for uid, ids := range customersPerUser {
		if len(ids) > 1 {
			twoCustomers++
		}
		var id int64
		_, _ = fmt.Sscan(uid, &id)
		if cus := customerOf[id]; cus != nil && *cus != ids[0] {
			unknownCustomer++
		}
	}
	check("no rider with two Stripe customers; the stored one is Stripe's", "0",
		fmt.Sprintf("%d twice, %d differ", twoCustomers, unknownCustomer), twoCustomers == 0 && unknownCustomer == 0)

	// 4. Refunds at Stripe = refunded rides, at most one per ride.
	stripeRefunds := map[string]bool{}
	refundsPerCharge := map[string]int{}
	for _, r := range ledger.Refunds {
		stripeRefunds[r.ID] = true
		refundsPerCharge[r.Charge]++
	}
	rideRefunds := map[string]bool{}
	for _, r := range rides {
		if r.refund == "refunded" && r.refundI != nil {
			rideRefunds[*r.refundI] = true
		}
	}
	refundedTwice := 0
	for _, n := range refundsPerCharge {
		if n > 1 {
			refundedTwice++
		}
	}
	check("refunds at Stripe = refunded rides; none refunded twice", "the same set, 0 twice",
		fmt.Sprintf("%d = %d, %d twice", len(stripeRefunds), len(rideRefunds), refundedTwice),
		sameSet(stripeRefunds, rideRefunds) && refundedTwice == 0)
	created := map[int64]int{} // refund keys answered 201, by ride
	for _, r := range records {
		k := keys[userKey{r.user.id, r.key}]
		if r.flow == "ride.refund" && k != nil && k.finished && *k.code == http.StatusCreated {
			created[r.rideID]++
		}
	}
	createdTwice := 0
	for _, n := range created {
		if n > 1 {
			createdTwice++
		}
	}
	check("at most one refund key answered 201 per ride", "0 rides with more", fmt.Sprint(createdTwice), createdTwice == 0)

	// 5. One receipt per charged ride and per refunded ride: exactly the
	// expected Message-IDs reached the sink, and each is recorded once.
	wantMail := map[string]bool{}
	for _, r := range rides {
		if r.status == "charged" {
			wantMail[service.ReceiptMessageID(service.ReceiptRide, r.id, service.DefaultMailFrom)] = true
		}
		if r.refund == "refunded" {
			wantMail[service.ReceiptMessageID(service.ReceiptRefund, r.id, service.DefaultMailFrom)] = true
		}
	}
	gotMail, copies := map[string]bool{}, 0
	for id, n := range sent {
		gotMail[id] = true
		copies += n
	}
	recorded := map[string]bool{}
	for id := range receipts {
		recorded[id] = true
	}
	check("one receipt (Message-ID) per charged and per refunded ride, each recorded once",
		fmt.Sprintf("%d receipts", len(wantMail)),
		fmt.Sprintf("%d Message-IDs at the sink (%d copies), %d recorded", len(gotMail), copies, len(recorded)),
		sameSet(wantMail, gotMail) && sameSet(wantMail, recorded))

	// 6. No key locked past its lease.
	lockedPast, lockedNow := 0, 0
	for _, k := range keys {
		if k.locked {
			lockedNow++
		}
		if k.expired {
			lockedPast++
		}
	}
	check("no key locked past its lease", "0", fmt.Sprintf("%d (%d locked at all)", lockedPast, lockedNow), lockedPast == 0)

	// 7. No 500 caused by input: every malformed request got its 4xx, during
	// the chaos (after retrying transient failures) and once calm.
	rightDuring := 0
	for _, m := range malformed {
		if m.answer.Definitive && m.answer.Status == m.want {
			rightDuring++
		} else {
			t.Logf("malformed %q during the chaos: want %d, got %d %s", m.name, m.want, m.answer.Status, m.answer.Body)
		}
	}
	calm, rightCalm := chaosCalmMalformed(t, ctx, load, records)
	check("no 500 caused by input: each malformed request got its 4xx",
		fmt.Sprintf("%d of %d during, %d of %d calm", len(malformed), len(malformed), calm, calm),
		fmt.Sprintf("%d of %d during, %d of %d calm", rightDuring, len(malformed), rightCalm, calm),
		rightDuring == len(malformed) && rightCalm == calm)

	// What Stripe saw, for the report.
	hits := map[string]int{}
	for _, r := range ledger.Requests {
		if r.Fault != "" {
			hits[fmt.Sprintf("%s %s %d", r.Op, r.Fault, r.Status)]++
		}
	}
	var parts []string
	for _, k := range sortedKeys(hits) {
		parts = append(parts, fmt.Sprintf("%s×%d", k, hits[k]))
	}
	notes = append(notes,
		fmt.Sprintf("Stripe requests hit by a fault (op kind status×n; status 0: no answer): %s", strings.Join(parts, ", ")),
		fmt.Sprintf("outcome: %d keys, %d rides (%d charged), %d refunds, %d receipts, %d Stripe requests, "+
			"%d keys abandoned by their clients (%d finished through the completer)",
			len(keys), len(rides), len(rideCharges), len(rideRefunds), len(recorded), len(ledger.Requests), abandoned, byCompleter))
	return checks, notes
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
	case http.StatusCreated, http.StatusOK, http.StatusPaymentRequired:
		return true
	case http.StatusConflict:
		return problemType(a.Body) == service.ProblemRefundRejected
	}
	return false
}

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
