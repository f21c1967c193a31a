package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
	"github.com/atomicrides/atomicrides/service"
)

// Trips in the chaos: a third instance of the main run, serve-t, books with
// CAPTURE=trip (the others with the default, CAPTURE=booking, so that every
// earlier check keeps its booking-mode rides); a trip client books there,
// and the dispatch side (DISPATCH_TOKEN) or the rider ends the trip through
// any instance, under the same faults: the trip is completed with a fare
// below, at or above its hold, cancelled by its rider or by the dispatch
// side, or never ended, its hold released by the hold_release job after
// chaosHoldExpiry.

const (
	// chaosDispatchToken is DISPATCH_TOKEN.
	chaosDispatchToken = "chaos-dispatch-token-0123456789abcdef0123456789"
	// chaosHoldExpiry is HOLD_EXPIRY: short, so that the holds of trips
	// nobody ends are released within the run.
	chaosHoldExpiry = 20 * time.Second
	// chaosHoldReleaseLate is how long past its expiry a hold may still be
	// kept: the hold_release job runs every minute, and a pass may fail
	// under the faults (the next one takes its rides).
	chaosHoldReleaseLate = 150 * time.Second
	// chaosTripScenario names the trip clients in the report.
	chaosTripScenario = "trip: held, then completed, cancelled or left to expire"
)

// Which instances take a request (chaosRequest.via).
const (
	viaTrip = "trip" // the instances that book trips
	viaAny  = "any"  // every instance
)

// What a trip client did with its trip.
const (
	tripCompleted = "completed"
	tripCancelled = "cancelled"
	tripLeft      = "left" // never ended: its hold expires
	// tripAbandoned: the rider's bank asked for authentication (at
	// Adyen), and the rider walked away from the challenge: the ride
	// expires at its deadline, holding nothing.
	tripAbandoned = "abandoned"
)

// chaosTrip is one trip and what its clients did and were told.
type chaosTrip struct {
	rideID    int64
	processor string
	hold      int64
	did       string // tripCompleted, tripCancelled, tripLeft, tripAbandoned
	fare      int64  // the fare it was completed with
	by        string // who cancelled: rider or dispatch
	// answered: the end was answered definitively (complete: 201, 200 or
	// 202; cancel: 201 or 200); status is that answer.
	answered bool
	status   int
	// balance: the completion left a balance due, and the rider's payment
	// of it was answered status (0: not asked).
	balance       bool
	balanceStatus int
	// booking is the booking's record; told, the answer that ended it
	// (answered); ends, the records of its completions or cancellation.
	// A restore run judges by them what the restore may have lost.
	booking *chaosRecord
	told    chaosAnswer
	ends    []*chaosRecord
}

// chaosTripBook collects the trips.
type chaosTripBook struct {
	mu    sync.Mutex
	trips []*chaosTrip
}

func (b *chaosTripBook) add(t *chaosTrip) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.trips = append(b.trips, t)
}

// tripExtraKey reports whether a processor key (a charge's metadata
// ar_key) is the payment of a trip's fare above its hold, or of its
// balance (service/processor_keys.go).
func tripExtraKey(key string) bool {
	return strings.HasPrefix(key, "ar-ex-") || strings.HasPrefix(key, "ar-bl-")
}

// chaosTripRide is what a trip client reads of a ride answered.
type chaosTripRide struct {
	ID            int64   `json:"id"`
	AmountCents   int64   `json:"amount_cents"`
	Currency      string  `json:"currency"`
	ChargeStatus  string  `json:"charge_status"`
	Processor     string  `json:"processor"`
	Capture       string  `json:"capture"`
	ExtraStatus   *string `json:"extra_status"`
	BalanceDue    int64   `json:"balance_due_cents"`
	ExtraChargeID *string `json:"extra_charge_id"`
	FareCents     *int64  `json:"fare_cents"`
	CapturedCents *int64  `json:"amount_captured_cents"`
}

// trip: a new rider (its own, so that a balance it may owe refuses no
// other client's booking; in the restore run, one of the riders created
// for trips before the backup, so that no trip's rider is lost with the
// commits) books a trip; the hold placed, the trip is
// completed by the dispatch side (a fare below, at or above the hold;
// sometimes under two keys at once), cancelled by its rider or by the
// dispatch side, or never ended. Every request is retried with its key
// until a definitive answer, like a booking. A completion that leaves a
// balance due is followed by the rider paying it.
func (l *chaosLoad) trip(ctx context.Context, like *chaosUser) {
	var u *chaosUser
	if l.tripRiders != nil {
		select {
		case u = <-l.tripRiders:
		default: // every rider made for trips has had its trip
			return
		}
	} else {
		source := like.source
		if source == "tok_chargeCustomerFail" {
			source = "tok_visa"
		}
		if strings.HasPrefix(source, fakeadyen.EncryptedCardPrefix) && rand.IntN(4) == 0 {
			// A card only Adyen takes, whose bank asks for
			// authentication: the rider abandons the challenge.
			source = fakeadyen.TokenEncryptedAuthenticationRequired
		}
		if u = l.createRiderWith(ctx, source); u == nil {
			return
		}
	}
	rec := &chaosRecord{user: u, key: l.newKey(), flow: "ride.create"}
	rec.req = l.rideRequest(u, rec.key, chaosRideBody())
	rec.req.via = viaTrip
	ans := l.rider.retry(ctx, rec.req)
	rec.answers = append(rec.answers, ans)
	l.book.add(rec)
	var ride chaosTripRide
	if ans.Definitive && ans.Status == http.StatusAccepted && json.Unmarshal(ans.Body, &ride) == nil &&
		ride.ChargeStatus == string(service.RideChargeRequiresAction) && u.source == fakeadyen.TokenEncryptedAuthenticationRequired {
		// The rider never answers the bank's page: at the deadline the
		// service cancels the payment, and Adyen's TECHNICAL_CANCEL
		// expires the ride.
		l.trips.add(&chaosTrip{rideID: ride.ID, processor: ride.Processor, hold: ride.AmountCents, did: tripAbandoned, booking: rec})
		return
	}
	if !ans.Definitive || ans.Status != http.StatusCreated || json.Unmarshal(ans.Body, &ride) != nil ||
		ride.ChargeStatus != string(service.RideChargeAuthorized) {
		return
	}
	t := &chaosTrip{rideID: ride.ID, processor: ride.Processor, hold: ride.AmountCents, did: tripLeft, booking: rec}
	defer l.trips.add(t)
	// The trip itself.
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Duration(rand.IntN(1500)) * time.Millisecond):
	}
	switch n := rand.IntN(100); {
	case n < 55:
		t.did = tripCompleted
		switch m := rand.IntN(3); m {
		case 0: // below the hold
			t.fare = max(1, ride.AmountCents/2+rand.Int64N(ride.AmountCents/2+1)-1)
		case 1: // the hold
			t.fare = ride.AmountCents
		default: // above: the difference is a payment of its own
			t.fare = ride.AmountCents + 1 + rand.Int64N(ride.AmountCents)
		}
		body, _ := json.Marshal(map[string]any{"fare_cents": t.fare, "currency": ride.Currency})
		keys := 1
		if rand.IntN(5) == 0 {
			keys = 2 // the dispatch side sends it twice, under two keys
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range keys {
			crec := &chaosRecord{user: l.dispatch(), key: l.newKey(), flow: "ride.complete"}
			crec.req = chaosRequest{method: http.MethodPost, path: fmt.Sprintf("/rides/%d/complete", ride.ID),
				token: chaosDispatchToken, key: crec.key, body: body, via: viaAny}
			wg.Go(func() {
				a := l.rider.retry(ctx, crec.req)
				crec.answers = append(crec.answers, a)
				l.book.add(crec)
				mu.Lock()
				defer mu.Unlock()
				t.ends = append(t.ends, crec)
				if a.Definitive && (a.Status == http.StatusCreated || a.Status == http.StatusOK || a.Status == http.StatusAccepted) {
					t.answered, t.status, t.told = true, a.Status, a
					var done chaosTripRide
					if json.Unmarshal(a.Body, &done) == nil && done.ExtraStatus != nil && *done.ExtraStatus == service.ExtraDue {
						t.balance = true
					}
				}
			})
		}
		wg.Wait()
		if t.balance {
			brec := &chaosRecord{user: u, key: l.newKey(), flow: "ride.balance"}
			brec.req = chaosRequest{method: http.MethodPost, path: fmt.Sprintf("/rides/%d/balance", ride.ID), token: u.token, key: brec.key, via: viaAny}
			a := l.rider.retry(ctx, brec.req)
			brec.answers = append(brec.answers, a)
			l.book.add(brec)
			if a.Definitive {
				t.balanceStatus = a.Status
			}
		}
	case n < 80:
		t.did, t.by = tripCancelled, "rider"
		crec := &chaosRecord{user: u, key: l.newKey(), flow: "ride.cancel"}
		crec.req = chaosRequest{method: http.MethodPost, path: fmt.Sprintf("/rides/%d/cancel", ride.ID), token: u.token, key: crec.key, via: viaAny}
		if rand.IntN(2) == 0 {
			t.by = "dispatch"
			crec.user, crec.req.token = l.dispatch(), chaosDispatchToken
		}
		a := l.rider.retry(ctx, crec.req)
		crec.answers = append(crec.answers, a)
		l.book.add(crec)
		t.ends = append(t.ends, crec)
		// 202: the processor took the cancel on (Adyen), and its
		// notification ends the ride cancelled.
		if a.Definitive && (a.Status == http.StatusCreated || a.Status == http.StatusOK || a.Status == http.StatusAccepted) {
			t.answered, t.status, t.told = true, a.Status, a
		}
	}
}

// dispatch is the dispatch side as the records know a key's owner: its
// keys are scoped to the dispatch account, whose id chaosReadState reads
// from the database.
func (l *chaosLoad) dispatch() *chaosUser {
	l.dispatchOnce.Do(func() { l.dispatchUser = &chaosUser{email: "dispatch", token: chaosDispatchToken} })
	return l.dispatchUser
}

// makeTripRiders creates n riders for the trip clients of a restore run,
// before its backup, so that none is lost with the commits: a rider lost
// has lost its API key too, which is not what the run is about.
func (l *chaosLoad) makeTripRiders(ctx context.Context, n int) {
	riders := make(chan *chaosUser, n)
	// The riders' cards, as the run's riders have them: Stripe's, and
	// Adyen's where the run has Adyen.
	var sources []string
	for _, u := range l.users {
		if u.source != "tok_chargeCustomerFail" {
			sources = append(sources, u.source)
		}
	}
	if len(sources) == 0 {
		sources = []string{"tok_visa"}
	}
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 8 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n) && ctx.Err() == nil; i = next.Add(1) {
				if u := l.createRiderWith(ctx, sources[int(i)%len(sources)]); u != nil {
					riders <- u
				}
			}
		})
	}
	wg.Wait()
	l.tripRiders = riders
}
