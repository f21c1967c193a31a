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
	// unsure: the answer to the bank's page was sent but none came back,
	// so whether the page took it is not known: the ride may end as
	// decided or expire.
	unsure bool
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
		back, ok, sent := chaosChallenge(ctx, ride.NextAction.RedirectURL, a.did == chaosAuthCompleted)
		switch {
		case !ok && sent:
			a.unsure = true
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
// returns where the bank sends the rider back to; ok is false when the page
// did not take the answer (the payment was no longer waiting), and sent
// too when no answer came back (the page may have taken it).
func chaosChallenge(ctx context.Context, pageURL string, complete bool) (back string, ok, sent bool) {
	action := "fail"
	if complete {
		action = "complete"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, pageURL, strings.NewReader(url.Values{"action": {action}}.Encode()))
	if err != nil {
		return "", false, false
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := chaosBrowser.Do(req)
	if err != nil {
		return "", false, true
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusSeeOther {
		return resp.Header.Get("Location"), true, true
	}
	return "", false, true
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
		if status != a.want() && !(a.unsure && status == "expired") {
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
	returned, unsure := 0, 0
	for _, a := range s.auth {
		if a.unsure {
			unsure++
		}
		did[a.did]++
		if r := s.rides[a.rideID]; r != nil {
			ended[r.status]++
		}
		if a.returned {
			returned++
		}
	}
	return fmt.Sprintf("authentication: %d rides waited for their rider (%d completed, %d failed, %d abandoned, %d answers to the bank's page lost; %d came back to the return page): %d charged, %d declined, %d expired",
		len(s.auth), did[chaosAuthCompleted], did[chaosAuthFailed], did[chaosAuthAbandoned], unsure, returned,
		ended["charged"], ended["declined"], ended["expired"])
}
