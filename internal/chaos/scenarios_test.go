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
)

// chaosRecord is what the clients learned about one idempotency key.
type chaosRecord struct {
	user *chaosUser
	key  string
	flow string // "ride.create" or "ride.refund"
	// req is the request every client of the key sent.
	req    chaosRequest
	rideID int64 // the ride refunded, for ride.refund
	// answers holds the last answer of every client that used the key
	// (several in a burst).
	answers []chaosAnswer
	// quit: a client gave up on purpose before a definitive answer, leaving
	// the key to the completer.
	quit bool
}

// chaosMalformed is a request that is wrong by construction and the 4xx it
// must get, whatever else fails meanwhile.
type chaosMalformed struct {
	name string
	req  chaosRequest
	want int
}

// chaosMalformedResult is the last answer to one malformed request.
type chaosMalformedResult struct {
	name   string
	want   int
	answer chaosAnswer
}

// chaosBook collects the records of every scenario; safe for concurrent
// use.
type chaosBook struct {
	mu        sync.Mutex
	records   []*chaosRecord
	malformed []chaosMalformedResult
	scenarios map[string]int
	started   atomic.Int64
	// riders created during the chaos, and the creations that failed.
	riders        int
	riderFailures []string
}

func (b *chaosBook) add(r *chaosRecord) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.records = append(b.records, r)
}

func (b *chaosBook) ran(scenario string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.scenarios == nil {
		b.scenarios = map[string]int{}
	}
	b.scenarios[scenario]++
}

func (b *chaosBook) malformedResult(r chaosMalformedResult) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.malformed = append(b.malformed, r)
}

// chaosLoad is the clients: workers that run scenarios until told to stop
// or until the plan's number of scenarios has started.
type chaosLoad struct {
	rider *chaosRider
	users []*chaosUser
	book  *chaosBook
	run   string // distinguishes this run's keys
	max   int64
	seq   atomic.Int64
	// scenarios is the mix the clients draw from; nil means
	// chaosScenarios.
	scenarios []chaosScenario
	// auth records the rides that waited for their rider
	// (authentication_test.go).
	auth chaosAuthBook
	// trips records the trips and how their clients ended them
	// (trips_test.go).
	trips chaosTripBook
	// dispatchUser owns the dispatch side's keys (trips_test.go).
	dispatchOnce sync.Once
	dispatchUser *chaosUser
	// tripRiders, when not nil, are the riders trip clients take, one
	// each, instead of creating their own (trips_test.go): the restore
	// run creates them before the backup.
	tripRiders chan *chaosUser
}

// chaosScenario is one kind of client behaviour and its weight in the mix.
type chaosScenario struct {
	name   string
	weight int
	run    func(l *chaosLoad, ctx context.Context, u *chaosUser)
}

var chaosScenarios = []chaosScenario{
	{"booking", 34, (*chaosLoad).booking},
	{"booking + refund", 14, (*chaosLoad).bookingRefund},
	{"same-key burst", 10, (*chaosLoad).sameKeyBurst},
	{"same-body burst, different keys", 8, (*chaosLoad).sameBodyBurst},
	{"refund burst, different keys", 8, (*chaosLoad).refundBurst},
	{"client cut off mid-request, gone", 8, (*chaosLoad).quitMidRequest},
	{"client gone after one failure", 10, (*chaosLoad).quitAfterFailure},
	{"malformed request", 8, (*chaosLoad).malformed},
	{"new rider, booking at once", 4, (*chaosLoad).newRider},
	{"new rider whose bank asks for authentication (3-D Secure)", 6, (*chaosLoad).authenticatedBooking},
	{chaosTripScenario, 16, (*chaosLoad).trip},
}

// work runs scenarios until stop is closed or the plan's number of
// scenarios has started; each scenario runs to its end (bounded by the
// clients' own limits).
func (l *chaosLoad) work(ctx context.Context, stop <-chan struct{}) {
	mix := l.scenarios
	if mix == nil {
		mix = chaosScenarios
	}
	total := 0
	for _, s := range mix {
		total += s.weight
	}
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		if l.book.started.Add(1) > l.max {
			return
		}
		n := rand.IntN(total)
		for _, s := range mix {
			if n -= s.weight; n < 0 {
				l.book.ran(s.name)
				s.run(l, ctx, l.users[rand.IntN(len(l.users))])
				break
			}
		}
		// Think time between bookings, so that a small number of them
		// spans the fault schedule.
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(100+rand.IntN(300)) * time.Millisecond):
		}
	}
}

// newKey returns a fresh idempotency key.
func (l *chaosLoad) newKey() string {
	return fmt.Sprintf("chaos-%s-%06d-%08x", l.run, l.seq.Add(1), rand.Uint32())
}

// chaosRideBody is a booking with random coordinates.
func chaosRideBody() []byte {
	b, _ := json.Marshal(map[string]float64{
		"origin_lat": -89 + 178*rand.Float64(), "origin_lon": -179 + 358*rand.Float64(),
		"target_lat": -89 + 178*rand.Float64(), "target_lon": -179 + 358*rand.Float64(),
	})
	return b
}

func (l *chaosLoad) rideRequest(u *chaosUser, key string, body []byte) chaosRequest {
	return chaosRequest{method: http.MethodPost, path: "/rides", token: u.token, key: key, body: body}
}

func (l *chaosLoad) refundRequest(u *chaosUser, key string, rideID int64) chaosRequest {
	return chaosRequest{method: http.MethodPost, path: fmt.Sprintf("/rides/%d/refund", rideID), token: u.token, key: key}
}

// bookOnce books one ride, retrying until a definitive answer, and returns
// the ride's id when it was charged.
func (l *chaosLoad) bookOnce(ctx context.Context, u *chaosUser) int64 {
	rec := &chaosRecord{user: u, key: l.newKey(), flow: "ride.create"}
	rec.req = l.rideRequest(u, rec.key, chaosRideBody())
	ans := l.rider.retry(ctx, rec.req)
	rec.answers = append(rec.answers, ans)
	l.book.add(rec)
	return chargedRide(ans)
}

// chargedRide returns the id of the ride in a 201 answer, else 0.
func chargedRide(ans chaosAnswer) int64 {
	if !ans.Definitive || ans.Status != http.StatusCreated {
		return 0
	}
	var ride struct {
		ID int64 `json:"id"`
	}
	_ = json.Unmarshal(ans.Body, &ride)
	return ride.ID
}

func (l *chaosLoad) booking(ctx context.Context, u *chaosUser) { l.bookOnce(ctx, u) }

func (l *chaosLoad) bookingRefund(ctx context.Context, u *chaosUser) {
	rideID := l.bookOnce(ctx, u)
	if rideID == 0 {
		return
	}
	rec := &chaosRecord{user: u, key: l.newKey(), flow: "ride.refund", rideID: rideID}
	rec.req = l.refundRequest(u, rec.key, rideID)
	attempts := chaosMaxAttempts
	if rand.IntN(3) == 0 {
		attempts = 1 // this client gives up after one failure
	}
	ans := l.rider.retryUpTo(ctx, rec.req, attempts)
	rec.answers = append(rec.answers, ans)
	l.settle(rec, ans, attempts)
}

// settle records the answer of a client that made at most attempts
// attempts: one that stopped short of a definitive answer before its
// limits quit on purpose.
func (l *chaosLoad) settle(rec *chaosRecord, ans chaosAnswer, attempts int) {
	if !ans.Definitive && attempts < chaosMaxAttempts {
		rec.quit = true
		l.rider.stats.quitters.Add(1)
	} else if !ans.Definitive {
		l.rider.stats.gaveUpExhausted.Add(1)
	}
	l.book.add(rec)
}

// sameKeyBurst: several clients send the identical request (same key, same
// body) at once, each retrying until a definitive answer.
func (l *chaosLoad) sameKeyBurst(ctx context.Context, u *chaosUser) {
	rec := &chaosRecord{user: u, key: l.newKey(), flow: "ride.create"}
	req := l.rideRequest(u, rec.key, chaosRideBody())
	rec.req = req
	answers := make([]chaosAnswer, 3+rand.IntN(3))
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() { answers[i] = l.rider.retry(ctx, req) })
	}
	wg.Wait()
	rec.answers = answers
	l.book.add(rec)
}

// sameBodyBurst: the same booking sent at once under different keys, as a
// double form submission without a key in the form would: each key is its
// own booking.
func (l *chaosLoad) sameBodyBurst(ctx context.Context, u *chaosUser) {
	body := chaosRideBody()
	var wg sync.WaitGroup
	for range 2 + rand.IntN(2) {
		rec := &chaosRecord{user: u, key: l.newKey(), flow: "ride.create"}
		rec.req = l.rideRequest(u, rec.key, body)
		wg.Go(func() {
			rec.answers = append(rec.answers, l.rider.retry(ctx, rec.req))
			l.book.add(rec)
		})
	}
	wg.Wait()
}

// refundBurst: a charged ride refunded at once under different keys; the
// ride is refunded once.
func (l *chaosLoad) refundBurst(ctx context.Context, u *chaosUser) {
	rideID := l.bookOnce(ctx, u)
	if rideID == 0 {
		return
	}
	var wg sync.WaitGroup
	for range 2 + rand.IntN(2) {
		rec := &chaosRecord{user: u, key: l.newKey(), flow: "ride.refund", rideID: rideID}
		rec.req = l.refundRequest(u, rec.key, rideID)
		wg.Go(func() {
			rec.answers = append(rec.answers, l.rider.retry(ctx, rec.req))
			l.book.add(rec)
		})
	}
	wg.Wait()
}

// quitMidRequest: the client hangs up after a few milliseconds and never
// comes back; whatever the server started, the completer finishes.
func (l *chaosLoad) quitMidRequest(ctx context.Context, u *chaosUser) {
	rec := &chaosRecord{user: u, key: l.newKey(), flow: "ride.create"}
	rec.req = l.rideRequest(u, rec.key, chaosRideBody())
	status, body, hdr := l.rider.do(ctx, rec.req, time.Duration(2+rand.IntN(40))*time.Millisecond)
	ans := chaosAnswer{Status: status, Body: body, Attempts: 1, Definitive: !chaosTransient(status, body),
		Replayed: hdr.Get("Idempotent-Replayed") == "true", At: time.Now()}
	rec.answers = append(rec.answers, ans)
	rec.quit = !ans.Definitive
	if rec.quit {
		l.rider.stats.quitters.Add(1)
	}
	l.book.add(rec)
}

// quitAfterFailure: the client tries once and gives up on anything but a
// definitive answer.
func (l *chaosLoad) quitAfterFailure(ctx context.Context, u *chaosUser) {
	rec := &chaosRecord{user: u, key: l.newKey(), flow: "ride.create"}
	rec.req = l.rideRequest(u, rec.key, chaosRideBody())
	ans := l.rider.retryUpTo(ctx, rec.req, 1)
	rec.answers = append(rec.answers, ans)
	l.settle(rec, ans, 1)
}

// quitUnder is a client that tries once, just after the Stripe fault f was
// injected, and gives up on anything but a definitive answer: the request
// the fault fails is left to the completer.
func (l *chaosLoad) quitUnder(ctx context.Context, f chaosStripeFault) {
	l.book.ran("client gone after one failure, under a Stripe fault")
	charged := l.users[1+rand.IntN(len(l.users)-1)] // the first rider's card is declined
	switch f.fault["op"] {
	case "refund.create":
		rideID := l.bookOnce(ctx, charged)
		if rideID == 0 {
			return
		}
		rec := &chaosRecord{user: charged, key: l.newKey(), flow: "ride.refund", rideID: rideID}
		rec.req = l.refundRequest(charged, rec.key, rideID)
		ans := l.rider.retryUpTo(ctx, rec.req, 1)
		rec.answers = append(rec.answers, ans)
		l.settle(rec, ans, 1)
	case "customer.create":
		if u := l.createRider(ctx); u != nil {
			l.quitAfterFailure(ctx, u)
		}
	default:
		l.quitAfterFailure(ctx, charged)
	}
}

// newRider: a rider is created and books at once, racing the background
// job that creates its Stripe customer.
func (l *chaosLoad) newRider(ctx context.Context, _ *chaosUser) {
	if u := l.createRider(ctx); u != nil {
		l.bookOnce(ctx, u)
	}
}

// createRider creates a rider through the admin API, retrying like any
// client; when the answer with the API key was lost, it asks for another
// key. It returns nil (and counts a failure) when it got no rider.
func (l *chaosLoad) createRider(ctx context.Context) *chaosUser {
	return l.createRiderWith(ctx, "tok_visa")
}

// createRiderWith is createRider with the rider paying by source.
func (l *chaosLoad) createRiderWith(ctx context.Context, source string) *chaosUser {
	u := &chaosUser{email: fmt.Sprintf("rider-%s-%06d@chaos.example", l.run, l.seq.Add(1)), source: source}
	body, _ := json.Marshal(map[string]string{"payment_source": source})
	ans := l.rider.retry(ctx, chaosRequest{method: http.MethodPut, path: "/users/" + u.email, token: chaosAdminToken,
		body: body})
	var created struct {
		User struct {
			ID int64 `json:"id"`
		} `json:"user"`
		APIKey string `json:"api_key"`
	}
	if ans.Definitive && (ans.Status == http.StatusCreated || ans.Status == http.StatusOK) {
		_ = json.Unmarshal(ans.Body, &created)
	}
	if created.User.ID != 0 && created.APIKey == "" {
		minted := l.rider.retry(ctx, chaosRequest{method: http.MethodPost, path: "/users/" + u.email + "/api_keys", token: chaosAdminToken})
		if minted.Definitive && minted.Status == http.StatusCreated {
			_ = json.Unmarshal(minted.Body, &created)
		}
	}
	l.book.mu.Lock()
	defer l.book.mu.Unlock()
	if created.User.ID == 0 || created.APIKey == "" {
		l.book.riderFailures = append(l.book.riderFailures, fmt.Sprintf("%s: %d %s", u.email, ans.Status, ans.Body))
		return nil
	}
	u.id, u.token = created.User.ID, created.APIKey
	l.book.riders++
	return u
}

// malformed sends one request that is wrong by construction, retrying
// transient failures like any client; its answer must be its 4xx.
func (l *chaosLoad) malformed(ctx context.Context, u *chaosUser) {
	cases := l.malformedCases(u)
	c := cases[rand.IntN(len(cases))]
	if c.name == "same key, another body" {
		// The key's first request books a ride; the second reuses the key.
		rec := &chaosRecord{user: u, key: c.req.key, flow: "ride.create"}
		rec.req = l.rideRequest(u, c.req.key, chaosRideBody())
		rec.answers = append(rec.answers, l.rider.retry(ctx, rec.req))
		l.book.add(rec)
		if !rec.answers[0].Definitive {
			return
		}
	}
	l.book.malformedResult(chaosMalformedResult{name: c.name, want: c.want, answer: l.rider.retry(ctx, c.req)})
}

// malformedCases are the malformed requests of rider u; each names its
// cause.
func (l *chaosLoad) malformedCases(u *chaosUser) []chaosMalformed {
	ride := func(key string, body string) chaosRequest {
		return chaosRequest{method: http.MethodPost, path: "/rides", token: u.token, key: key, body: []byte(body)}
	}
	good := `{"origin_lat":1,"origin_lon":2,"target_lat":3,"target_lon":4}`
	textPlain := ride(l.newKey(), good)
	textPlain.ctype = "text/plain"
	noAuth := ride(l.newKey(), good)
	noAuth.token = ""
	badAuth := ride(l.newKey(), good)
	badAuth.token = "ark_not-a-key"
	return []chaosMalformed{
		{"malformed JSON", ride(l.newKey(), `{"origin_lat":1,`), http.StatusBadRequest},
		{"latitude out of range", ride(l.newKey(), `{"origin_lat":91,"origin_lon":2,"target_lat":3,"target_lon":4}`), http.StatusUnprocessableEntity},
		{"coordinate as a string", ride(l.newKey(), `{"origin_lat":"north","origin_lon":2,"target_lat":3,"target_lon":4}`), http.StatusUnprocessableEntity},
		{"unknown field", ride(l.newKey(), `{"origin_lat":1,"origin_lon":2,"target_lat":3,"target_lon":4,"tip":5}`), http.StatusUnprocessableEntity},
		{"missing field", ride(l.newKey(), `{"origin_lat":1,"origin_lon":2,"target_lat":3}`), http.StatusUnprocessableEntity},
		{"no Idempotency-Key", ride("", good), http.StatusBadRequest},
		{"Idempotency-Key too short", ride("short-key", good), http.StatusBadRequest},
		{"Idempotency-Key not printable", ride("chaos key with spaces 0123456789", good), http.StatusBadRequest},
		{"body over 16 KiB", ride(l.newKey(), `{"origin_lat":1,"origin_lon":2,"target_lat":3,"target_lon":4,"pad":"`+strings.Repeat("x", 17<<10)+`"}`), http.StatusRequestEntityTooLarge},
		{"text/plain body", textPlain, http.StatusUnsupportedMediaType},
		{"no credentials", noAuth, http.StatusUnauthorized},
		{"unknown API key", badAuth, http.StatusUnauthorized},
		{"refund of ride 0", chaosRequest{method: http.MethodPost, path: "/rides/0/refund", token: u.token, key: l.newKey()}, http.StatusUnprocessableEntity},
		// 2^53: above every ride id the database draws.
		{"refund of a ride that does not exist", chaosRequest{method: http.MethodPost, path: "/rides/9007199254740992/refund", token: u.token, key: l.newKey()}, http.StatusNotFound},
		{"same key, another body", ride(l.newKey(), good), http.StatusUnprocessableEntity},
	}
}
