package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// chaosActionDeadline is ACTION_DEADLINE in every chaos run: short, so that
// a ride whose rider abandons the bank's page expires within the run.
const chaosActionDeadline = "20s"

// Cards whose bank asks for authentication: the rider completes the
// challenge and is charged, or the bank declines after it.
const (
	chaosAuthCard         = "tok_authenticationRequired"
	chaosAuthDeclinedCard = "tok_authenticationRequiredChargeDeclinedInsufficientFunds"
)

// What a rider whose bank asked for authentication did.
const (
	chaosAuthCompleted = "completed"
	chaosAuthFailed    = "failed"
	chaosAuthAbandoned = "abandoned"
)

// chaosAuthRide is one ride that waited for its rider, and what the rider
// did: the status it must end in follows.
type chaosAuthRide struct {
	rideID int64
	card   string
	// did is what the rider did at the bank's page: completed or failed
	// when the page took it, abandoned when the rider never went (or the
	// page refused: the payment was cancelled first).
	did string
	// returned: the rider came back to the service's return page (else the
	// ride moves by the processor's event, or at its deadline).
	returned bool
}

// want is the charge status the ride must end in.
func (a chaosAuthRide) want() string {
	switch {
	case a.did == chaosAuthAbandoned:
		return "expired"
	case a.did == chaosAuthFailed || a.card == chaosAuthDeclinedCard:
		return "declined"
	}
	return "charged"
}

// chaosAuthBook collects the rides that waited for their rider.
type chaosAuthBook struct {
	mu    sync.Mutex
	rides []chaosAuthRide
}

func (b *chaosAuthBook) add(r chaosAuthRide) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rides = append(b.rides, r)
}

// authenticatedBooking: a new rider whose bank asks for authentication
// books a ride; answered 202, the rider completes the bank's challenge,
// fails it, or abandons it, and comes back to the service's return page,
// or not (the ride then moves by the processor's event or at its
// deadline).
func (l *chaosLoad) authenticatedBooking(ctx context.Context, _ *chaosUser) {
	card := chaosAuthCard
	if rand.IntN(5) == 0 {
		card = chaosAuthDeclinedCard
	}
	u := l.createRiderWith(ctx, card)
	if u == nil {
		return
	}
	rec := &chaosRecord{user: u, key: l.newKey(), flow: "ride.create"}
	rec.req = l.rideRequest(u, rec.key, chaosRideBody())
	ans := l.rider.retry(ctx, rec.req)
	rec.answers = append(rec.answers, ans)
	l.book.add(rec)
	if !ans.Definitive || ans.Status != http.StatusAccepted {
		return
	}
	var ride struct {
		ID         int64 `json:"id"`
		NextAction *struct {
			RedirectURL string `json:"redirect_url"`
		} `json:"next_action"`
	}
	if json.Unmarshal(ans.Body, &ride) != nil || ride.NextAction == nil {
		return
	}
	a := chaosAuthRide{rideID: ride.ID, card: card, did: chaosAuthAbandoned}
	switch n := rand.IntN(100); {
	case n < 45:
		a.did = chaosAuthCompleted
	case n < 70:
		a.did = chaosAuthFailed
	}
	if a.did != chaosAuthAbandoned {
		back, ok := chaosChallenge(ctx, ride.NextAction.RedirectURL, a.did == chaosAuthCompleted)
		switch {
		case !ok:
			// The page refused (the payment was cancelled first) or did
			// not answer: as far as the processor knows, abandoned.
			a.did = chaosAuthAbandoned
		case rand.IntN(10) < 7:
			a.returned = chaosReturn(ctx, back)
		}
	}
	l.auth.add(a)
}

// chaosBrowser is a rider's browser: it does not follow redirects, so that
// the harness sees where the bank sends the rider.
var chaosBrowser = &http.Client{
	Timeout:       chaosAttemptTimeout,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// chaosChallenge answers the bank's challenge page at pageURL (the fakes'
// page: a form posting action=complete or action=fail to itself) and
// returns where the bank sends the rider back to; false when the page took
// no answer (the payment was no longer waiting, or no answer came).
func chaosChallenge(ctx context.Context, pageURL string, complete bool) (string, bool) {
	action := "fail"
	if complete {
		action = "complete"
	}
	for range 5 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, pageURL, strings.NewReader(url.Values{"action": {action}}.Encode()))
		if err != nil {
			return "", false
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := chaosBrowser.Do(req)
		if err != nil {
			continue // the fake's process is up again in a moment
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusSeeOther {
			return resp.Header.Get("Location"), true
		}
		return "", false
	}
	return "", false
}

// chaosReturn is the rider's browser coming back to the service's return
// page; true when the service answered it (the ride shown).
func chaosReturn(ctx context.Context, back string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, back, nil)
	if err != nil {
		return false
	}
	resp, err := chaosBrowser.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusSeeOther
}

// checkAuthRidesDecided: every ride that waited for its rider ended as its
// rider decided — charged when they completed the challenge (declined for
// the card the bank then declines), declined when they failed it, expired
// when they abandoned it — by its deadline, never left waiting.
func checkAuthRidesDecided(s *chaosState) chaosCheck {
	wrong, waiting := 0, 0
	var first []string
	for _, a := range s.auth {
		r := s.rides[a.rideID]
		status := "missing"
		if r != nil {
			status = r.status
		}
		if status == "requires_action" {
			waiting++
		}
		if status != a.want() {
			wrong++
			if len(first) < 3 {
				first = append(first, fmt.Sprintf("ride %d %s, want %s", a.rideID, status, a.want()))
			}
		}
	}
	actual := fmt.Sprintf("%d of %d as decided, %d still waiting", len(s.auth)-wrong, len(s.auth), waiting)
	if len(first) > 0 {
		actual += " (" + strings.Join(first, "; ") + ")"
	}
	return chaosCheck{name: "every ride that waited for its rider charged, declined or expired as its rider decided",
		expected: fmt.Sprintf("%d as decided", len(s.auth)), actual: actual, ok: wrong == 0}
}

// authNote is the report's line on the rides that waited for their rider.
func (s *chaosState) authNote() string {
	did, ended := map[string]int{}, map[string]int{}
	returned := 0
	for _, a := range s.auth {
		did[a.did]++
		if r := s.rides[a.rideID]; r != nil {
			ended[r.status]++
		}
		if a.returned {
			returned++
		}
	}
	return fmt.Sprintf("authentication: %d rides waited for their rider (%d completed, %d failed, %d abandoned; %d came back to the return page): %d charged, %d declined, %d expired",
		len(s.auth), did[chaosAuthCompleted], did[chaosAuthFailed], did[chaosAuthAbandoned], returned,
		ended["charged"], ended["declined"], ended["expired"])
}
