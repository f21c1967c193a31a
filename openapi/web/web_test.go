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
)

// testBundle is the service's real handler with the booking pages mounted,
// over one isolated world (its own database, fake Stripe and service),
// counting the booking form's submissions as they reach the server.
type testBundle struct {
	*testkit.Env
	url   string
	posts atomic.Int64
	// arrived receives one value per POST /book as it reaches the server
	// (dropped when nobody reads them).
	arrived chan struct{}
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	base, serve := testkit.Listen(t)
	b := &testBundle{Env: testkit.NewWith(t, testkit.Options{PublicURL: base}), url: base, arrived: make(chan struct{}, 16)}
	logger := slog.New(slog.DiscardHandler)
	pages := web.New(web.Config{Service: b.Service, Secret: "test-secret", Logger: logger})
	h := openapi.NewHandler(openapi.Config{Service: b.Service, Logger: logger, Pages: pages})
	serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/book" {
			b.posts.Add(1)
			select {
			case b.arrived <- struct{}{}:
			default:
			}
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
