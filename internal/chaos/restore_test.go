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
// created before it book, refund and send bursts; some give up after one
// failure. Riders are not created during it: a rider lost with the commits
// has lost its API key too, which is not what the run is about.
var restoreScenarios = []chaosScenario{
	{"booking", 45, (*chaosLoad).booking},
	{"booking + refund", 15, (*chaosLoad).bookingRefund},
	{"same-key burst", 15, (*chaosLoad).sameKeyBurst},
	{"same-body burst, different keys", 10, (*chaosLoad).sameBodyBurst},
	{"client gone after one failure", 15, (*chaosLoad).quitAfterFailure},
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
	})
}

// chaosReturned is a client that came back, after the restore, with a key
// it had a definitive answer for before the primary died.
type chaosReturned struct {
	rec    *chaosRecord
	before chaosAnswer // the answer it had
	after  chaosAnswer // the answer it got on coming back
}

// returningClients sends again, with its key, every other booking whose
// stored answer a client saw before killed; the other clients never come
// back. Refunds do not come back: a refund names its ride by the id our
// database gave it, which a restore hands out again, so a refund retried
// after its ride was lost is answered about whichever ride now has that id
// (see README, "Running beyond one machine"); its lost refund is an orphan
// that `keys reconcile` lists.
func returningClients(ctx context.Context, load *chaosLoad, killed time.Time) []chaosReturned {
	load.book.mu.Lock()
	records := append([]*chaosRecord(nil), load.book.records...)
	load.book.mu.Unlock()
	var out []chaosReturned
	n := 0
	for _, r := range records {
		a, ok := firstStored(r)
		if !ok || !a.At.Before(killed) || r.flow != "ride.create" || r.req.path == "" {
			continue
		}
		if n++; n%2 == 0 {
			continue
		}
		out = append(out, chaosReturned{rec: r, before: a, after: load.rider.retry(ctx, r.req)})
	}
	return out
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
	for _, c := range s.ledger.Charges {
		if c.Status != "succeeded" {
			continue
		}
		stripeCharges[c.ID] = true
		if c.Metadata["ar_key"] == "" {
			untagged++
			continue
		}
		perKey[c.Metadata["ar_key"]]++
	}
	twice := moreThanOnce(perKey)
	add("no_key_charged_twice", chaosCheck{name: "no client key charged twice (Stripe charges by metadata ar_key)",
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

	// Clients that came back got what they had: the same outcome, a
	// booking its very charge.
	same, cameBackLost := 0, 0
	for _, rt := range returned {
		if !bytes.Equal(rt.after.Body, rt.before.Body) {
			cameBackLost++
		}
		if rt.after.Definitive && rt.after.Status == rt.before.Status && chargeOf(rt.after) == chargeOf(rt.before) {
			same++
		} else {
			s.t.Logf("%s %s: had %d %s, came back to %d %s", rt.rec.req.path, rt.rec.key,
				rt.before.Status, rt.before.Body, rt.after.Status, rt.after.Body)
		}
	}
	add("returned_same_outcome", chaosCheck{name: "a client coming back with its key gets its outcome again (a booking: the same charge)",
		expected: fmt.Sprintf("%d of %d", len(returned), len(returned)),
		actual:   fmt.Sprintf("%d of %d (%d of them redone after the loss)", same, len(returned), cameBackLost),
		ok:       same == len(returned)})

	// Orphans: what Stripe has and no ride records is exactly what
	// `keys reconcile` lists, and it exits non-zero when it lists any.
	wantCharges := map[string]bool{}
	rideCharges := s.rideCharges()
	for id := range stripeCharges {
		if !rideCharges[id] {
			wantCharges[id] = true
		}
	}
	wantRefunds := map[string]bool{}
	rideRefunds := s.rideRefunds()
	refundsPerCharge := map[string]int{}
	for _, r := range s.ledger.Refunds {
		refundsPerCharge[r.Charge]++
		if !rideRefunds[r.ID] {
			wantRefunds[r.ID] = true
		}
	}
	if recErr != nil {
		s.t.Logf("keys reconcile: %v", recErr)
		rec = &chaosReconcile{exit: -1}
	}
	gotCharges, gotRefunds := map[string]bool{}, map[string]bool{}
	for _, o := range rec.OrphanCharges {
		gotCharges[o.ID] = true
	}
	for _, o := range rec.OrphanRefunds {
		gotRefunds[o.ID] = true
	}
	wantExit := 0
	if len(wantCharges)+len(wantRefunds) > 0 {
		wantExit = 1
	}
	add("orphans_listed", chaosCheck{name: "`keys reconcile` lists exactly the charges and refunds at Stripe no ride records; exit 1 when any",
		expected: fmt.Sprintf("%d charges, %d refunds, 0 missing, exit %d", len(wantCharges), len(wantRefunds), wantExit),
		actual:   fmt.Sprintf("%d charges, %d refunds, %d missing, exit %d", len(gotCharges), len(gotRefunds), len(rec.MissingCharges), rec.exit),
		ok: sameSet(wantCharges, gotCharges) && sameSet(wantRefunds, gotRefunds) && len(rec.MissingCharges) == 0 &&
			rec.exit == wantExit})

	refundedTwice := moreThanOnce(refundsPerCharge)
	add("no_ride_refunded_twice", chaosCheck{name: "no charge refunded twice at Stripe", expected: "0",
		actual: fmt.Sprint(refundedTwice), ok: refundedTwice == 0})

	notes := []string{fmt.Sprintf("lost: about %d write transactions (transaction ids the primary assigned between the backup's end and its death); "+
		"%d of the %d stored answers clients saw from the backup's start to the kill; %d booking clients came back with their keys (%d of them to a lost booking, redone), "+
		"the others never did: %d charges and %d refunds at Stripe recorded by no ride, listed by `keys reconcile`",
		fig.xidKill-fig.xidBackup, lost, window, len(returned), cameBackLost, len(gotCharges), len(gotRefunds))}
	return checks, notes
}
