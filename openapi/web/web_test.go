package web_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/openapi"
	"github.com/atomicrides/atomicrides/openapi/web"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
)

// testBundle is the service's real handler with the booking pages mounted,
// over one isolated world (its own database, fake Stripe and service),
// counting the booking form's submissions as they reach the server.
type testBundle struct {
	*testkit.Env
	url   string
	posts atomic.Int64
	// ridePosts counts the posts of the ride page's forms (cancel, pay
	// the balance) as they reach the server.
	ridePosts atomic.Int64
	// arrived receives one value per POST /book as it reaches the server
	// (dropped when nobody reads them).
	arrived chan struct{}
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return setupWith(t, "")
}

// setupTrips is setup in a world whose bookings hold their fare until the
// trip ends (service.CaptureTrip).
func setupTrips(t *testing.T) *testBundle {
	t.Helper()
	return setupWith(t, service.CaptureTrip)
}

func setupWith(t *testing.T, capture service.Capture) *testBundle {
	t.Helper()
	base, serve := testkit.Listen(t)
	b := &testBundle{Env: testkit.NewWith(t, testkit.Options{PublicURL: base, Capture: capture}), url: base, arrived: make(chan struct{}, 16)}
	logger := slog.New(slog.DiscardHandler)
	pages := web.New(web.Config{Service: b.Service, Accounts: b.Accounts, Secret: "test-secret", Logger: logger})
	h := testkit.Conform(t, openapi.NewHandler(openapi.Config{Service: b.Service, Accounts: b.Accounts, Logger: logger, Pages: pages}))
	serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/book" {
			b.posts.Add(1)
			select {
			case b.arrived <- struct{}{}:
			default:
			}
		}
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/book/rides/") {
			b.ridePosts.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	return b
}

// rider creates a rider paying with source and returns its API key.
func (b *testBundle) rider(t *testing.T, email, source string) string {
	t.Helper()
	return b.Rider(t, email, source).APIKey
}

// browserless is a plain HTTP client with a cookie jar that does not follow
// redirects, for checking what the pages answer.
type browserless struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newBrowserless(t *testing.T, base string) *browserless {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &browserless{t: t, base: base, c: &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

type htmlPage struct {
	status int
	header http.Header
	body   string
}

func (p htmlPage) hidden(t *testing.T, name string) string {
	t.Helper()
	m := regexp.MustCompile(`name="` + name + `"[^>]*value="([^"]*)"`).FindStringSubmatch(p.body)
	require.NotNil(t, m, "hidden field %s in:\n%s", name, p.body)
	return m[1]
}

func (bl *browserless) do(method, path string, form url.Values, headers map[string]string) htmlPage {
	bl.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, bl.base+path, body)
	require.NoError(bl.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := bl.c.Do(req)
	require.NoError(bl.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(bl.t, err)
	return htmlPage{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// form follows GET /book to a new booking form.
func (bl *browserless) form() htmlPage {
	bl.t.Helper()
	redirect := bl.do(http.MethodGet, "/book", nil, nil)
	require.Equal(bl.t, http.StatusSeeOther, redirect.status, redirect.body)
	require.Equal(bl.t, "no-store", redirect.header.Get("Cache-Control"))
	loc := redirect.header.Get("Location")
	require.Regexp(bl.t, `^/book/forms/[A-Z2-7]{26}$`, loc)
	p := bl.do(http.MethodGet, loc, nil, nil)
	require.Equal(bl.t, http.StatusOK, p.status, p.body)
	require.Equal(bl.t, strings.TrimPrefix(loc, "/book/forms/"), p.hidden(bl.t, "idempotency_key"), "the form's key is its URL's")
	return p
}

func (bl *browserless) signIn(apiKey string) {
	bl.t.Helper()
	p := bl.do(http.MethodPost, "/book/signin", url.Values{"api_key": {apiKey}}, map[string]string{"Sec-Fetch-Site": "same-origin"})
	require.Equal(bl.t, http.StatusSeeOther, p.status, p.body)
}

func rideForm(csrf, key string) url.Values {
	return url.Values{
		"csrf_token": {csrf}, "idempotency_key": {key},
		"origin_lat": {"37.7749"}, "origin_lon": {"-122.4194"}, "target_lat": {"37.8044"}, "target_lon": {"-122.2712"},
	}
}

var sameSite = map[string]string{"Sec-Fetch-Site": "same-origin"}

// The pages' security: the session cookie's attributes, self-contained
// pages under a strict CSP, and every state-changing form refused from
// another origin or without the session's token.
func TestBookingPagesSecurity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	apiKey := b.rider(t, "secure@example.com", "")
	bl := newBrowserless(t, b.url)

	signin := bl.do(http.MethodGet, "/book", nil, nil)
	require.Equal(t, http.StatusOK, signin.status)
	require.Contains(t, signin.body, `action="/book/signin"`)
	require.Equal(t, "no-store", signin.header.Get("Cache-Control"))

	bad := bl.do(http.MethodPost, "/book/signin", url.Values{"api_key": {"ark_wrong"}}, sameSite)
	require.Equal(t, http.StatusUnauthorized, bad.status)
	require.Contains(t, bad.body, "not valid")
	require.Empty(t, bad.header.Values("Set-Cookie"))

	cross := bl.do(http.MethodPost, "/book/signin", url.Values{"api_key": {apiKey}}, map[string]string{"Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, cross.status, "login CSRF")
	require.Empty(t, cross.header.Values("Set-Cookie"))
	foreignReferer := bl.do(http.MethodPost, "/book/signin", url.Values{"api_key": {apiKey}}, map[string]string{"Referer": "https://evil.example/x"})
	require.Equal(t, http.StatusForbidden, foreignReferer.status)

	ok := bl.do(http.MethodPost, "/book/signin", url.Values{"api_key": {apiKey}}, sameSite)
	require.Equal(t, http.StatusSeeOther, ok.status)
	require.Equal(t, "/book", ok.header.Get("Location"))
	cookie := ok.header.Get("Set-Cookie")
	for _, attr := range []string{"atomicrides_book=", "Path=/book", "HttpOnly", "SameSite=Strict", "Max-Age="} {
		require.Contains(t, cookie, attr)
	}
	require.NotContains(t, cookie, "Secure", "plain HTTP here; Secure is set under TLS")

	form := bl.form()
	require.Contains(t, form.body, "secure@example.com")
	require.Equal(t, "private, no-cache", form.header.Get("Cache-Control"))
	csp := form.header.Get("Content-Security-Policy")
	require.Contains(t, csp, "default-src 'none'")
	require.Contains(t, csp, "frame-ancestors 'none'")
	require.NotRegexp(t, `(src|href)="(https?:)?//`, form.body, "no external assets")
	csrf, key := form.hidden(t, "csrf_token"), form.hidden(t, "idempotency_key")
	require.GreaterOrEqual(t, len(key), 20)
	require.NotEqual(t, key, bl.form().hidden(t, "idempotency_key"), "a fresh key per new form")
	require.Equal(t, key, bl.do(http.MethodGet, "/book/forms/"+key, nil, nil).hidden(t, "idempotency_key"), "a form shown again keeps its key")
	require.Equal(t, http.StatusNotFound, bl.do(http.MethodGet, "/book/forms/short", nil, nil).status)

	for name, attempt := range map[string]struct {
		form    url.Values
		headers map[string]string
	}{
		"no token":        {rideForm("", key), sameSite},
		"wrong token":     {rideForm(strings.Repeat("x", len(csrf)), key), sameSite},
		"another origin":  {rideForm(csrf, key), map[string]string{"Sec-Fetch-Site": "cross-site"}},
		"foreign Origin":  {rideForm(csrf, key), map[string]string{"Origin": "https://evil.example"}},
		"foreign Referer": {rideForm(csrf, key), map[string]string{"Referer": "https://evil.example/book"}},
	} {
		p := bl.do(http.MethodPost, "/book", attempt.form, attempt.headers)
		require.Equal(t, http.StatusForbidden, p.status, name)
	}
	require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys`), "a refused form writes nothing")

	// Without the cookie, the same token is worthless.
	anon := newBrowserless(t, b.url)
	p := anon.do(http.MethodPost, "/book", rideForm(csrf, key), sameSite)
	require.Equal(t, http.StatusUnauthorized, p.status)
	require.Contains(t, p.body, `action="/book/signin"`)
	require.Empty(t, b.Stripe.Charges())

	// Signing out needs the token too, then ends the session.
	require.Equal(t, http.StatusForbidden, bl.do(http.MethodPost, "/book/signout", url.Values{"csrf_token": {"nope"}}, sameSite).status)
	out := bl.do(http.MethodPost, "/book/signout", url.Values{"csrf_token": {csrf}}, sameSite)
	require.Equal(t, http.StatusSeeOther, out.status)
	require.Contains(t, out.header.Get("Set-Cookie"), "Max-Age=0")
	require.Contains(t, bl.do(http.MethodGet, "/book", nil, nil).body, `action="/book/signin"`)
}

// What a submission answers, without a browser: the redirect to the ride,
// the same ride for the same form, and clear pages for what went wrong.
func TestBookingPagesAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bl := newBrowserless(t, b.url)
	bl.signIn(b.rider(t, "answers@example.com", ""))
	form := bl.form()
	csrf, key := form.hidden(t, "csrf_token"), form.hidden(t, "idempotency_key")

	first := bl.do(http.MethodPost, "/book", rideForm(csrf, key), sameSite)
	require.Equal(t, http.StatusSeeOther, first.status, first.body)
	loc := first.header.Get("Location")
	require.Regexp(t, `^/book/rides/\d+$`, loc)
	again := bl.do(http.MethodPost, "/book", rideForm(csrf, key), sameSite)
	require.Equal(t, http.StatusSeeOther, again.status)
	require.Equal(t, loc+"?again=1", again.header.Get("Location"), "the same form, the same ride")
	require.Len(t, b.Stripe.SucceededCharges(), 1)

	ride := bl.do(http.MethodGet, loc, nil, nil)
	require.Equal(t, http.StatusOK, ride.status)
	require.Contains(t, ride.body, b.Stripe.SucceededCharges()[0].ID)
	require.Contains(t, ride.body, "20.00 USD")

	// The same form edited to another trip: refused, not booked.
	edited := rideForm(csrf, key)
	edited.Set("target_lat", "38")
	reused := bl.do(http.MethodPost, "/book", edited, sameSite)
	require.Equal(t, http.StatusUnprocessableEntity, reused.status)
	require.Contains(t, reused.body, "already booked a different trip")

	// Bad input: the form again, with the same key, naming the field.
	fresh := bl.form().hidden(t, "idempotency_key")
	bad := rideForm(csrf, fresh)
	bad.Set("origin_lon", "east")
	p := bl.do(http.MethodPost, "/book", bad, sameSite)
	require.Equal(t, http.StatusUnprocessableEntity, p.status)
	require.Contains(t, p.body, "the origin&#39;s longitude")
	require.Equal(t, fresh, p.hidden(t, "idempotency_key"))
	bad.Set("origin_lon", "200")
	p = bl.do(http.MethodPost, "/book", bad, sameSite)
	require.Equal(t, http.StatusUnprocessableEntity, p.status)
	require.Contains(t, p.body, "must be a number between -180 and 180")
	damaged := rideForm(csrf, "short")
	require.Equal(t, http.StatusBadRequest, bl.do(http.MethodPost, "/book", damaged, sameSite).status)

	// Stripe gives no answer: the same form comes back to try again, and
	// trying again books it once.
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultStatus, Status: http.StatusServiceUnavailable, Times: 1})
	down := bl.do(http.MethodPost, "/book", rideForm(csrf, fresh), sameSite)
	require.Equal(t, http.StatusServiceUnavailable, down.status)
	require.Contains(t, down.body, "did not answer")
	require.Equal(t, fresh, down.hidden(t, "idempotency_key"))
	require.Equal(t, http.StatusSeeOther, bl.do(http.MethodPost, "/book", rideForm(csrf, fresh), sameSite).status)
	require.Len(t, b.Stripe.SucceededCharges(), 2)

	// Someone else's ride is not found.
	other := newBrowserless(t, b.url)
	other.signIn(b.rider(t, "other@example.com", ""))
	require.Equal(t, http.StatusNotFound, other.do(http.MethodGet, loc, nil, nil).status)

	// A declined card: a clear page, and the same page for the same form.
	declined := newBrowserless(t, b.url)
	declined.signIn(b.rider(t, "declined@example.com", fakestripe.TokenChargeDeclined))
	dform := declined.form()
	dcsrf, dkey := dform.hidden(t, "csrf_token"), dform.hidden(t, "idempotency_key")
	for range 2 {
		d := declined.do(http.MethodPost, "/book", rideForm(dcsrf, dkey), sameSite)
		require.Equal(t, http.StatusPaymentRequired, d.status)
		require.Contains(t, d.body, "Card declined")
		require.Contains(t, d.body, "nothing was charged")
	}
	require.Len(t, b.Stripe.SucceededCharges(), 2)
}

// TestActionReturnPage: the page a rider's bank sends the rider back to
// applies the processor's answer about the payment its link names, and
// nothing else: a link that names no booking, or names a parameter twice,
// changes nothing and says so; one hit twice shows the ride.
func TestActionReturnPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bl := newBrowserless(t, b.url)
	uid := b.Rider(t, "return-page@example.com", fakestripe.TokenAuthenticationRequired).ID
	resp, err := b.Service.RideCreate(b.Ctx, uid, testkit.NewKey(), testkit.SomeRide, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, resp.Status)
	ride := testkit.DecodeRide(t, resp.Body)
	var pkey string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT charge_key FROM rides WHERE id = $1`, ride.ID).Scan(&pkey))

	p := bl.do(http.MethodGet, "/book/return?key=ar-ch-nobody", nil, nil)
	require.Equal(t, http.StatusNotFound, p.status)
	require.Contains(t, p.body, "No booking waits for this link")
	p = bl.do(http.MethodGet, "/book/return?key="+url.QueryEscape(pkey)+"&key=ar-ch-other", nil, nil)
	require.Equal(t, http.StatusBadRequest, p.status)
	require.Contains(t, p.body, "names key more than once")

	require.NoError(t, b.Stripe.Authenticate(*ride.PaymentID, true))
	for range 2 {
		p = bl.do(http.MethodGet, "/book/return?key="+url.QueryEscape(pkey)+"&redirect_status=failed", nil, nil)
		require.Equal(t, http.StatusSeeOther, p.status)
		require.Equal(t, "/book/rides/"+strconv.FormatInt(ride.ID, 10), p.header.Get("Location"))
	}
	got, err := b.Service.RideGet(b.Ctx, uid, ride.ID)
	require.NoError(t, err)
	require.Equal(t, service.RideChargeCharged, got.ChargeStatus, "Stripe's answer, not the link's redirect_status")
	require.Len(t, b.Stripe.SucceededCharges(), 1)
}

// byID is the value of the element whose id is id: one of several forms'
// hidden fields of the same name.
func (p htmlPage) byID(t *testing.T, id string) string {
	t.Helper()
	m := regexp.MustCompile(`id="` + id + `"[^>]*value="([^"]*)"`).FindStringSubmatch(p.body)
	require.NotNil(t, m, "field #%s in:\n%s", id, p.body)
	return m[1]
}

// rideOfLocation is the ride a redirect to its page names.
func rideOfLocation(t *testing.T, loc string) int64 {
	t.Helper()
	m := regexp.MustCompile(`^/book/rides/(\d+)(\?.*)?$`).FindStringSubmatch(loc)
	require.NotNil(t, m, "not a ride page: %q", loc)
	id, err := strconv.ParseInt(m[1], 10, 64)
	require.NoError(t, err)
	return id
}

// bookThroughForm submits a fresh booking form and returns the ride it
// redirected to.
func (bl *browserless) bookThroughForm() (id int64, loc string) {
	bl.t.Helper()
	form := bl.form()
	p := bl.do(http.MethodPost, "/book", rideForm(form.hidden(bl.t, "csrf_token"), form.hidden(bl.t, "idempotency_key")), sameSite)
	require.Equal(bl.t, http.StatusSeeOther, p.status, p.body)
	loc = p.header.Get("Location")
	return rideOfLocation(bl.t, loc), loc
}

// completeTrip completes a trip as the dispatch side does, with fare.
func completeTrip(t *testing.T, b *testBundle, rideID, fare int64) service.Ride {
	t.Helper()
	resp, err := b.Service.RideComplete(b.Ctx, testkit.NewKey(), service.RideCompleteParams{RideID: rideID, FareCents: fare, Currency: "usd"}, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
	return testkit.DecodeRide(t, resp.Body)
}

// intentOfRide is the fake Stripe's PaymentIntent of one of uid's rides.
func intentOfRide(t *testing.T, b *testBundle, uid, rideID int64) fakestripe.PaymentIntent {
	t.Helper()
	ride, err := b.Service.RideGet(b.Ctx, uid, rideID)
	require.NoError(t, err)
	require.NotNil(t, ride.PaymentID)
	pi, ok := b.Stripe.PaymentIntent(*ride.PaymentID)
	require.True(t, ok, "no payment intent %s", *ride.PaymentID)
	return pi
}

// stripeOps counts the requests of op the fake Stripe executed (not
// replays).
func stripeOps(b *testBundle, op string) int {
	n := 0
	for _, r := range b.Stripe.Requests() {
		if r.Op == op && !r.Replayed && r.Status == http.StatusOK {
			n++
		}
	}
	return n
}

func actionForm(csrf, key string) url.Values {
	return url.Values{"csrf_token": {csrf}, "idempotency_key": {key}}
}

// A trip's pages, without a browser: the hold shown while the trip runs,
// its cancellation (once per form, refused forms changing nothing), a
// cancellation that comes after the completion, and the fare of a completed
// trip, within the hold and above it.
func TestTripPages(t *testing.T) {
	t.Parallel()
	b := setupTrips(t)
	rider := b.Rider(t, "trip-pages@example.com", "tok_visa")
	bl := newBrowserless(t, b.url)
	bl.signIn(rider.APIKey)

	form := bl.form()
	csrf, key := form.hidden(t, "csrf_token"), form.hidden(t, "idempotency_key")
	first := bl.do(http.MethodPost, "/book", rideForm(csrf, key), sameSite)
	require.Equal(t, http.StatusSeeOther, first.status, first.body)
	loc := first.header.Get("Location")
	id := rideOfLocation(t, loc)
	sid := strconv.FormatInt(id, 10)

	page := bl.do(http.MethodGet, loc, nil, nil)
	require.Equal(t, http.StatusOK, page.status)
	require.Contains(t, page.body, `id="ride-status">authorized<`)
	require.Regexp(t, `id="trip-held">20\.00 USD is held on your card until \d{4}-\d\d-\d\d \d\d:\d\d UTC`, page.body)
	require.Contains(t, page.body, "the fare is held on your card, not charged")
	require.Contains(t, page.body, `action="/book/rides/`+sid+`/cancel"`)
	require.Contains(t, page.body, ">Cancel ride<")
	require.NotContains(t, page.body, "Pay the balance")
	require.Equal(t, fakestripe.PaymentIntentRequiresCapture, intentOfRide(t, b, rider.ID, id).Status)

	again := bl.do(http.MethodPost, "/book", rideForm(csrf, key), sameSite)
	require.Equal(t, loc+"?again=1", again.header.Get("Location"))
	require.Contains(t, bl.do(http.MethodGet, loc+"?again=1", nil, nil).body, "it booked this one ride, and held its fare once")

	// The cancel form is protected like the booking form: a refused one
	// cancels nothing and writes nothing.
	cancelKey := page.byID(t, "cancel_key")
	require.GreaterOrEqual(t, len(cancelKey), 20)
	require.NotEqual(t, key, cancelKey)
	keysBefore := b.Count(t, `SELECT count(*) FROM idempotency_keys`)
	for name, attempt := range map[string]struct {
		form    url.Values
		headers map[string]string
		status  int
	}{
		"no token":       {actionForm("", cancelKey), sameSite, http.StatusForbidden},
		"wrong token":    {actionForm(strings.Repeat("x", len(csrf)), cancelKey), sameSite, http.StatusForbidden},
		"another origin": {actionForm(csrf, cancelKey), map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		"foreign Origin": {actionForm(csrf, cancelKey), map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		"no key":         {actionForm(csrf, ""), sameSite, http.StatusBadRequest},
	} {
		p := bl.do(http.MethodPost, "/book/rides/"+sid+"/cancel", attempt.form, attempt.headers)
		require.Equal(t, attempt.status, p.status, name)
		require.Contains(t, p.body, "Nothing was cancelled", name)
	}
	anon := newBrowserless(t, b.url).do(http.MethodPost, "/book/rides/"+sid+"/cancel", actionForm(csrf, cancelKey), sameSite)
	require.Equal(t, http.StatusUnauthorized, anon.status)
	require.Equal(t, keysBefore, b.Count(t, `SELECT count(*) FROM idempotency_keys`))
	require.Equal(t, fakestripe.PaymentIntentRequiresCapture, intentOfRide(t, b, rider.ID, id).Status)

	// Cancelled: every submission of the form ends on the ride, the hold
	// released once.
	for range 2 {
		p := bl.do(http.MethodPost, "/book/rides/"+sid+"/cancel", actionForm(csrf, cancelKey), sameSite)
		require.Equal(t, http.StatusSeeOther, p.status, p.body)
		require.Equal(t, loc, p.header.Get("Location"))
	}
	cancelled := bl.do(http.MethodGet, loc, nil, nil)
	require.Contains(t, cancelled.body, `id="ride-status">cancelled<`)
	require.Contains(t, cancelled.body, "nothing was charged")
	require.NotContains(t, cancelled.body, `id="cancel"`)
	require.Equal(t, fakestripe.PaymentIntentCanceled, intentOfRide(t, b, rider.ID, id).Status)
	require.Equal(t, 1, stripeOps(b, fakestripe.OpPaymentIntentCancel))
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1`, cancelKey))
	require.NotEmpty(t, cancelled.header.Get("Content-Security-Policy"))

	// Another rider cannot cancel it, nor see it.
	other := newBrowserless(t, b.url)
	other.signIn(b.rider(t, "trip-other@example.com", "tok_visa"))
	otherForm := other.form()
	p := other.do(http.MethodPost, "/book/rides/"+sid+"/cancel", actionForm(otherForm.hidden(t, "csrf_token"), testkit.NewKey()), sameSite)
	require.Equal(t, http.StatusNotFound, p.status)

	// Completed while the page was open: the cancellation is refused, and
	// the page says why and shows the fare.
	id2, loc2 := bl.bookThroughForm()
	page2 := bl.do(http.MethodGet, loc2, nil, nil)
	completeTrip(t, b, id2, 1350)
	refused := bl.do(http.MethodPost, "/book/rides/"+strconv.FormatInt(id2, 10)+"/cancel", actionForm(csrf, page2.byID(t, "cancel_key")), sameSite)
	require.Equal(t, http.StatusConflict, refused.status, refused.body)
	require.Contains(t, refused.body, "Not cancelled: the trip was completed before your cancellation arrived")
	require.Contains(t, refused.body, `id="trip-fare">13.50 USD<`)
	require.Contains(t, refused.body, "13.50 USD of the 20.00 USD held, the rest of the hold released")
	require.NotContains(t, refused.body, `id="cancel"`)
	pi2 := intentOfRide(t, b, rider.ID, id2)
	require.Equal(t, fakestripe.PaymentIntentSucceeded, pi2.Status)
	require.Equal(t, int64(1350), pi2.AmountReceived)

	// A fare above the hold: the hold captured, the rest charged.
	id3, loc3 := bl.bookThroughForm()
	completeTrip(t, b, id3, 2730)
	done := bl.do(http.MethodGet, loc3, nil, nil)
	require.Contains(t, done.body, `id="ride-status">completed<`)
	require.Contains(t, done.body, "Trip completed and paid.")
	require.Contains(t, done.body, `id="trip-fare">27.30 USD<`)
	require.Contains(t, done.body, "20.00 USD of the 20.00 USD held")
	require.Contains(t, done.body, "7.30 USD, charged to your card after the trip")
	require.NotContains(t, done.body, "Pay the balance")
	require.NotContains(t, done.body, `id="cancel"`)

	// A hold nobody ended expires: released, nothing charged.
	id4, loc4 := bl.bookThroughForm()
	b.Exec(t, `UPDATE rides SET hold_expires_at = now() - interval '1 minute' WHERE id = $1`, id4)
	n, err := b.Service.HoldsRelease(b.Ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	expired := bl.do(http.MethodGet, loc4, nil, nil)
	require.Contains(t, expired.body, `id="ride-status">expired<`)
	require.Contains(t, expired.body, "the hold of 20.00 USD was released, and nothing was charged")
	require.NotContains(t, expired.body, `id="ride-expired"`, "not the expiry of an unconfirmed payment")
	require.NotContains(t, expired.body, `id="cancel"`)
}

// TestTripBalancePages: a rider owing the part of a fare above its hold is
// refused a booking by a page naming the ride, whose page pays the
// balance: a declined payment says so and leaves the balance due; paid,
// the refused form books.
func TestTripBalancePages(t *testing.T) {
	t.Parallel()
	b := setupTrips(t)
	const email = "owes@example.com"
	rider := b.Rider(t, email, fakestripe.TokenAuthenticationRequired)
	bl := newBrowserless(t, b.url)
	bl.signIn(rider.APIKey)

	// The bank asks to authenticate the hold; the rider does, and comes
	// back: the fare is held. The fare above it, charged without the
	// rider, is declined for want of authentication: a balance due.
	form := bl.form()
	csrf := form.hidden(t, "csrf_token")
	booked := bl.do(http.MethodPost, "/book", rideForm(csrf, form.hidden(t, "idempotency_key")), sameSite)
	require.Equal(t, http.StatusSeeOther, booked.status, booked.body)
	require.Regexp(t, `\?authenticate=1$`, booked.header.Get("Location"))
	id := rideOfLocation(t, booked.header.Get("Location"))
	sid, loc := strconv.FormatInt(id, 10), "/book/rides/"+strconv.FormatInt(id, 10)
	pi := intentOfRide(t, b, rider.ID, id)
	require.NoError(t, b.Stripe.Authenticate(pi.ID, true))
	var pkey string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT charge_key FROM rides WHERE id = $1`, id).Scan(&pkey))
	back := bl.do(http.MethodGet, "/book/return?key="+url.QueryEscape(pkey), nil, nil)
	require.Equal(t, http.StatusSeeOther, back.status, back.body)
	require.Equal(t, loc, back.header.Get("Location"))
	require.Contains(t, bl.do(http.MethodGet, loc, nil, nil).body, `id="ride-status">authorized<`)
	done := completeTrip(t, b, id, service.RideAmountCents+500)
	require.Equal(t, int64(500), done.BalanceDueCents)

	page := bl.do(http.MethodGet, loc, nil, nil)
	require.Contains(t, page.body, `id="ride-status">completed<`)
	require.Contains(t, page.body, `id="balance-amount">5.00 USD<`)
	require.Contains(t, page.body, "5.00 USD, due: it could not be charged to your card")
	require.Contains(t, page.body, ">Pay the balance<")
	require.Contains(t, page.body, `action="/book/rides/`+sid+`/balance"`)
	require.NotContains(t, page.body, `id="cancel"`)
	payKey := page.byID(t, "balance_key")

	// The next booking is refused, naming the ride, with nothing booked
	// and the form's key left free.
	next := bl.form()
	nextKey := next.hidden(t, "idempotency_key")
	refused := bl.do(http.MethodPost, "/book", rideForm(csrf, nextKey), sameSite)
	require.Equal(t, http.StatusPaymentRequired, refused.status, refused.body)
	require.Contains(t, refused.body, "Nothing was booked: you owe")
	require.Contains(t, refused.body, `id="balance-due-amount">5.00 USD<`)
	require.Contains(t, refused.body, `href="`+loc+`" id="balance-due-ride">ride #`+sid+`<`)
	require.Equal(t, nextKey, refused.hidden(t, "idempotency_key"), "the same form books once the balance is paid")
	require.Zero(t, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1`, nextKey))
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM rides WHERE user_id = $1`, rider.ID))

	// The same card is declined again: the page says so, the balance
	// stays due, and the answer carries a new form to pay again; the
	// declined form replays its decline.
	declined := bl.do(http.MethodPost, loc+"/balance", actionForm(csrf, payKey), sameSite)
	require.Equal(t, http.StatusPaymentRequired, declined.status, declined.body)
	require.Contains(t, declined.body, "Not paid: your card was declined")
	require.Contains(t, declined.body, "the balance is still due")
	require.Contains(t, declined.body, `id="balance-amount">5.00 USD<`)
	newPayKey := declined.byID(t, "balance_key")
	require.NotEqual(t, payKey, newPayKey)
	replayed := bl.do(http.MethodPost, loc+"/balance", actionForm(csrf, payKey), sameSite)
	require.Equal(t, http.StatusPaymentRequired, replayed.status)
	require.Contains(t, replayed.body, "Not paid: your card was declined")
	require.Equal(t, http.StatusForbidden, bl.do(http.MethodPost, loc+"/balance", actionForm("nope", newPayKey), sameSite).status)

	// With another card, the new form pays it, once however often it is
	// submitted.
	_, err := b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: email, PaymentSource: "tok_visa"})
	require.NoError(t, err)
	for range 2 {
		paid := bl.do(http.MethodPost, loc+"/balance", actionForm(csrf, newPayKey), sameSite)
		require.Equal(t, http.StatusSeeOther, paid.status, paid.body)
		require.Equal(t, loc+"?paid=1", paid.header.Get("Location"))
	}
	shown := bl.do(http.MethodGet, loc+"?paid=1", nil, nil)
	require.Contains(t, shown.body, "Balance paid: you can book again.")
	require.Contains(t, shown.body, "5.00 USD, paid by you after the trip")
	require.NotContains(t, shown.body, "Pay the balance")
	var balances int
	for _, p := range b.Stripe.PaymentIntents() {
		if p.Status == fakestripe.PaymentIntentSucceeded && p.AmountReceived == 500 {
			balances++
		}
	}
	require.Equal(t, 1, balances, "the balance is paid once")

	// Paid: the refused form books now. Its ride owes nothing.
	again := bl.do(http.MethodPost, "/book", rideForm(csrf, nextKey), sameSite)
	require.Equal(t, http.StatusSeeOther, again.status, again.body)
	newID := rideOfLocation(t, again.header.Get("Location"))
	require.NotEqual(t, id, newID)
	nothing := bl.do(http.MethodPost, "/book/rides/"+strconv.FormatInt(newID, 10)+"/balance", actionForm(csrf, testkit.NewKey()), sameSite)
	require.Equal(t, http.StatusConflict, nothing.status, nothing.body)
	require.Contains(t, nothing.body, "There is no balance to pay for this ride.")
}
