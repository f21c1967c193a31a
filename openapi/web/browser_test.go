package web_test

import (
	"context"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
)

// newBrowser starts a headless Chromium for this test only; extra options
// come last.
func newBrowser(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	return testkit.Browser(t, append([]chromedp.ExecAllocatorOption{chromedp.WindowSize(900, 760)}, extra...)...)
}

// center returns the middle of an element in the viewport.
func center(ctx context.Context, t *testing.T, sel chromedp.ID) (x, y float64) {
	t.Helper()
	box, err := chromedp.Run(ctx, chromedp.Dimensions(sel))
	require.NoError(t, err)
	q := box.Content
	return (q[0] + q[2] + q[4] + q[6]) / 4, (q[1] + q[3] + q[5] + q[7]) / 4
}

// clickAt presses and releases the mouse at x, y: a click that lands on
// whatever document shows there, even while a navigation is pending (a
// query action would wait for the navigation to finish first).
func clickAt(ctx context.Context, t *testing.T, x, y float64, count int) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, chromedp.MouseClickXY(x, y, chromedp.ClickCount(count))))
}

func scripts(ctx context.Context, t *testing.T, enabled bool) {
	t.Helper()
	_, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: !enabled})
	require.NoError(t, err)
}

func text(ctx context.Context, t *testing.T, sel chromedp.ID) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(sel))
	require.NoError(t, err)
	return strings.TrimSpace(s)
}

func value(ctx context.Context, t *testing.T, sel chromedp.ID) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Value(sel))
	require.NoError(t, err)
	return s
}

// nextLoad subscribes to the page's next load event; the returned func
// waits for it. It tells a new page apart from the one being left, which
// the DOM queries cannot do for a page restored from the back/forward cache.
func nextLoad(ctx context.Context, t *testing.T) (wait func()) {
	t.Helper()
	next, stop := iter.Pull2(chromedp.Events(ctx, page.LoadEventFired))
	return func() {
		t.Helper()
		defer stop()
		_, err, ok := next()
		require.True(t, ok, "no load event")
		require.NoError(t, err)
	}
}

// shownRide reads the ride page the browser shows: the ride's id and
// charge. again says whether the page must say that the form had already
// been submitted.
func shownRide(ctx context.Context, t *testing.T, base string, again bool) (id int64, charge string) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("ride"))))
	attr, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.ID("ride"), "data-ride-id"))
	require.NoError(t, err)
	id, err = strconv.ParseInt(attr.Value, 10, 64)
	require.NoError(t, err)
	want := base + "/book/rides/" + attr.Value
	notice := "Booked and paid."
	if again {
		want += "?again=1"
		notice = "This form had already been submitted: it booked this one ride, and you were charged once."
	}
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, want, loc)
	require.Equal(t, notice, text(ctx, t, "notice"))
	require.Equal(t, "charged", text(ctx, t, "ride-status"))
	return id, text(ctx, t, "ride-charge")
}

// freshForm opens the booking form and returns its idempotency key.
func freshForm(ctx context.Context, t *testing.T, base string) string {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/book"), chromedp.WaitVisible(chromedp.ID("book"))))
	key := value(ctx, t, "idempotency_key")
	require.GreaterOrEqual(t, len(key), 20)
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, base+"/book/forms/"+key, loc)
	return key
}

// TestBookingPageInChromium drives the booking page in a real headless
// Chromium: a rapid double click, a resubmission while the first
// submission waits at Stripe, and going back to a submitted form and
// submitting it again each book and charge one ride, and the page shows it.
// The double submissions run with scripts off, so that the page's
// button-disabling script cannot hide them: both POSTs reach the server.
func TestBookingPageInChromium(t *testing.T) {
	t.Parallel()
	b := setup(t)
	apiKey := b.rider(t, "browser@example.com", "")
	ctx := newBrowser(t)

	chargesOf := func(id int64) []fakestripe.Charge { return b.ChargesOfRide(t, id) }
	keyRows := func(key string) int {
		return b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1`, key)
	}

	signIn(ctx, t, b, apiKey)

	// A person's double click: the second click comes while the first
	// submission is on its way. (The protocol can click faster than a person;
	// the browser then drops the first submission unsent.) The first charge
	// is held at Stripe until both submissions have reached the server.
	t.Run("rapid double click", func(t *testing.T) {
		scripts(ctx, t, false)
		_, release := holdNextCharge(t, b)
		key := freshForm(ctx, t, b.url)
		x, y := center(ctx, t, "book")
		drain(b.arrived)
		before := b.posts.Load()
		loaded := nextLoad(ctx, t)
		clickAt(ctx, t, x, y, 1)
		<-b.arrived
		clickAt(ctx, t, x, y, 2)
		<-b.arrived
		release()
		loaded()
		id, charge := shownRide(ctx, t, b.url, true)
		require.EqualValues(t, 2, b.posts.Load()-before, "both clicks submitted the form")
		charges := chargesOf(id)
		require.Len(t, charges, 1, "one charge for the form")
		require.Equal(t, charges[0].ID, charge, "the page shows the ride that was charged")
		require.Equal(t, 1, keyRows(key))
	})

	// The first submission waits at Stripe; the rider submits again.
	t.Run("resubmit after a slow response", func(t *testing.T) {
		scripts(ctx, t, false)
		fired, release := holdNextCharge(t, b)
		key := freshForm(ctx, t, b.url)
		x, y := center(ctx, t, "book")
		before, conflicts := b.posts.Load(), b.Service.Stats().Conflicts
		loaded := nextLoad(ctx, t)
		clickAt(ctx, t, x, y, 1)
		<-fired // the first submission is at Stripe, with no answer yet
		clickAt(ctx, t, x, y, 1)
		// The second submission finds the form's key in use and waits for
		// the first.
		require.Eventually(t, func() bool { return b.Service.Stats().Conflicts > conflicts }, 30*time.Second, 10*time.Millisecond)
		release()
		loaded()

		id, charge := shownRide(ctx, t, b.url, true)
		require.EqualValues(t, 2, b.posts.Load()-before)
		charges := chargesOf(id)
		require.Len(t, charges, 1)
		require.Equal(t, charges[0].ID, charge)
		require.Equal(t, 1, keyRows(key))
	})

	t.Run("back and submit again", func(t *testing.T) {
		backAndSubmitAgain(ctx, t, b, page.NavigationTypeBackForwardCacheRestore)
	})

	// Without the back/forward cache the browser shows the form from its
	// HTTP cache: the form's Cache-Control must let it, and not fetch a form
	// with a new key.
	t.Run("back and submit again, from the HTTP cache", func(t *testing.T) {
		ctx := newBrowser(t, chromedp.Flag("disable-features", "Translate,BlinkGenPropertyTrees,BackForwardCache"))
		signIn(ctx, t, b, apiKey)
		backAndSubmitAgain(ctx, t, b, page.NavigationTypeNavigation)
	})

	require.Len(t, b.Stripe.SucceededCharges(), 4, "four forms, four charges")
	require.Equal(t, 4, b.Count(t, `SELECT count(*) FROM rides`))

	// The form lists the rider's recent rides, newest first, with their
	// status (a declined one with what the rider was told), each linking to
	// its page.
	t.Run("recent rides", func(t *testing.T) {
		b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultStatus, Status: http.StatusPaymentRequired, Times: 1})
		resp, err := b.Service.RideCreate(b.Ctx, riderID(t, b, apiKey), testkit.NewKey(), testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusPaymentRequired, resp.Status)
		scripts(ctx, t, true)
		freshForm(ctx, t, b.url)
		shown := evaluate[[][]string](ctx, t, `[...document.querySelectorAll("#recent-rides tbody tr")].map(tr =>
			[tr.dataset.rideId, tr.querySelector(".ride-status").textContent.trim(), tr.querySelector(".ride-refund").textContent.trim(), tr.querySelector("a").getAttribute("href")])`)
		rows, err := b.Pool.Query(b.Ctx, `SELECT id, charge_status || coalesce(': ' || decline_message, '') FROM rides ORDER BY created_at DESC, id DESC`)
		require.NoError(t, err)
		var want [][]string
		for rows.Next() {
			var id int64
			var status string
			require.NoError(t, rows.Scan(&id, &status))
			s := strconv.FormatInt(id, 10)
			want = append(want, []string{s, status, "none", "/book/rides/" + s})
		}
		require.NoError(t, rows.Err())
		require.Len(t, want, 5)
		require.Equal(t, "declined: Your card was declined.", want[0][1])
		require.Equal(t, want, shown, "the five rides, newest first: the declined one, then four charged")
	})
}

// signIn signs in through the sign-in form and checks the session cookie.
func signIn(ctx context.Context, t *testing.T, b *testBundle, apiKey string) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(b.url+"/book"),
		chromedp.WaitVisible(chromedp.ID("api_key")),
		chromedp.SendKeys(chromedp.ID("api_key"), apiKey),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("book")),
	))
	cookies, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{b.url + "/book"}})
	require.NoError(t, err)
	require.Len(t, cookies.Cookies, 1)
	c := cookies.Cookies[0]
	require.True(t, c.HTTPOnly)
	require.Equal(t, network.CookieSameSiteStrict, c.SameSite)
	require.Equal(t, "/book", c.Path)
}

// backAndSubmitAgain books, goes back to the form, submits it again, and
// expects the same ride, charged once. Scripts are on: the page's script
// must enable the button again on the way back.
func backAndSubmitAgain(ctx context.Context, t *testing.T, b *testBundle, wantBack page.NavigationType) {
	t.Helper()
	scripts(ctx, t, true)
	key := freshForm(ctx, t, b.url)
	// The rider's own destination: going back must show it again too, or
	// the resubmission would be another trip under the same key.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Clear(chromedp.ID("target_lat")), chromedp.SendKeys(chromedp.ID("target_lat"), "38.5")))
	before := b.posts.Load()
	loaded := nextLoad(ctx, t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("book"))))
	loaded()
	id, charge := shownRide(ctx, t, b.url, false)
	require.Equal(t, "38.5, -122.2712", text(ctx, t, "ride-to"))

	require.Equal(t, wantBack, goBack(ctx, t))
	evaluate[bool](ctx, t, `new Promise(ok => document.readyState === "complete" ? ok(true) : addEventListener("load", () => ok(true)))`)
	require.Equal(t, key, evaluate[string](ctx, t, `document.getElementById("idempotency_key").value`), "going back shows the submitted form, key and all")
	require.Equal(t, "38.5", evaluate[string](ctx, t, `document.getElementById("target_lat").value`))
	require.False(t, evaluate[bool](ctx, t, `document.getElementById("book").disabled`), "the button is enabled")
	x, y := evaluateCenter(ctx, t, "book")
	loaded = nextLoad(ctx, t)
	clickAt(ctx, t, x, y, 1)
	loaded()
	againID, againCharge := shownRide(ctx, t, b.url, true)
	require.Equal(t, id, againID, "the same ride")
	require.Equal(t, charge, againCharge)
	require.EqualValues(t, 2, b.posts.Load()-before)
	require.Len(t, b.ChargesOfRide(t, id), 1)
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1`, key))

	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	path := testkit.SaveScreenshot(t, "booking-page-"+string(wantBack)+".png", png)
	t.Logf("screenshot of the page after the resubmission: %s", path)
}

// goBack is the browser's Back button; it returns how the page came back
// (from the back/forward cache, or loaded again). Query actions are not used
// on the page it shows: chromedp does not track a document restored from the
// back/forward cache, so they would wait for ever.
func goBack(ctx context.Context, t *testing.T) page.NavigationType {
	t.Helper()
	hist, err := chromedp.Call(ctx, page.GetNavigationHistory, cdp.Empty{})
	require.NoError(t, err)
	require.Positive(t, hist.CurrentIndex)
	back := chromedp.Func(func(ctx context.Context, tgt *chromedp.Target) error {
		_, err := cdp.Call(ctx, tgt, page.NavigateToHistoryEntry, page.NavigateToHistoryEntryParams{EntryID: hist.Entries[hist.CurrentIndex-1].ID})
		return err
	})
	ev, err := chromedp.Run(ctx, chromedp.WaitEvent(page.FrameNavigated,
		func(ev page.EventFrameNavigated) bool { return ev.Frame.ParentID == "" }, back))
	require.NoError(t, err)
	return ev.Type
}

// evaluate runs a JavaScript expression in the page, awaiting a promise.
func evaluate[T any](ctx context.Context, t *testing.T, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	require.NoError(t, err, expr)
	return v
}

// evaluateCenter is center without a query action.
func evaluateCenter(ctx context.Context, t *testing.T, id string) (x, y float64) {
	t.Helper()
	r := evaluate[[]float64](ctx, t, `(r => [r.left + r.width/2, r.top + r.height/2])(document.getElementById("`+id+`").getBoundingClientRect())`)
	require.Len(t, r, 2)
	return r[0], r[1]
}

// holdNextCharge holds the next charge at the fake Stripe until release is
// called (or the test ends); fired tells when the charge is being held.
func holdNextCharge(t *testing.T, b *testBundle) (fired <-chan struct{}, release func()) {
	return holdNext(t, b, fakestripe.OpPaymentIntentCreate)
}

// holdNext holds the next request of op at the fake Stripe until release is
// called (or the test ends); fired tells when the request is being held.
func holdNext(t *testing.T, b *testBundle, op string) (fired <-chan struct{}, release func()) {
	gate, held := make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	b.Stripe.Inject(fakestripe.Fault{Op: op, Kind: fakestripe.FaultLatency, Gate: gate, Fired: held, Times: 1})
	return held, release
}

// drain empties ch.
func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// riderID is the id of the rider holding apiKey.
func riderID(t *testing.T, b *testBundle, apiKey string) int64 {
	t.Helper()
	u, err := b.Accounts.Authenticate(b.Ctx, apiKey)
	require.NoError(t, err)
	return u.ID
}

// TestBookingPageAuthenticationInChromium books, in a real headless
// Chromium, with a card whose bank asks for authentication: the page sends
// the rider to the bank's challenge (the fake Stripe's), the rider
// completes it (or fails it), and the bank sends them back to the service,
// which shows the ride charged once (or declined).
func TestBookingPageAuthenticationInChromium(t *testing.T) {
	t.Parallel()
	b := setup(t)
	apiKey := b.rider(t, "sca-browser@example.com", fakestripe.TokenAuthenticationRequired)
	ctx := newBrowser(t)
	signIn(ctx, t, b, apiKey)
	scripts(ctx, t, true)

	// book submits a fresh form and answers the bank's page with the
	// button button, and returns the ride the browser is sent back to.
	book := func(t *testing.T, button string) int64 {
		freshForm(ctx, t, b.url)
		// Booked, the ride's page sends the browser on to the bank's.
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("book"))))
		waitLocation(ctx, t, b.Stripe.URL+"/_fake/challenge/pi_")
		require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID(button)), chromedp.Click(chromedp.ID(button))))
		// The bank sends the rider back to the service, which shows the ride.
		loc := waitLocation(ctx, t, b.url+"/book/rides/")
		require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("ride"))))
		attr, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.ID("ride"), "data-ride-id"))
		require.NoError(t, err)
		id, err := strconv.ParseInt(attr.Value, 10, 64)
		require.NoError(t, err)
		require.Equal(t, b.url+"/book/rides/"+attr.Value, loc, "back at the service, on the ride")
		return id
	}

	t.Run("completed", func(t *testing.T) {
		id := book(t, "complete")
		require.Equal(t, "charged", text(ctx, t, "ride-status"))
		charges := b.ChargesOfRide(t, id)
		require.Len(t, charges, 1, "charged once")
		require.Equal(t, charges[0].ID, text(ctx, t, "ride-charge"))
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'ride_receipt' AND (args->>'ride_id')::bigint = $1`, id))
	})

	t.Run("failed", func(t *testing.T) {
		id := book(t, "fail")
		require.Equal(t, "declined", text(ctx, t, "ride-status"))
		for _, c := range b.ChargesOfRide(t, id) {
			require.NotEqual(t, fakestripe.ChargeSucceeded, c.Status, "nothing charged")
		}
		require.Zero(t, b.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'ride_receipt' AND (args->>'ride_id')::bigint = $1`, id))
	})

	require.Len(t, b.Stripe.SucceededCharges(), 1)
}

// waitLocation waits until the browser shows a page whose URL starts with
// prefix, and returns the URL: across navigations of the page's own (a
// refresh, a redirect), which an element query bound to the page being
// left would not see.
func waitLocation(ctx context.Context, t *testing.T, prefix string) string {
	t.Helper()
	var loc string
	require.Eventually(t, func() bool {
		c, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		l, err := chromedp.Run(c, chromedp.Location())
		loc = l
		return err == nil && strings.HasPrefix(l, prefix)
	}, 30*time.Second, 20*time.Millisecond, "never at %s (at %s)", prefix, loc)
	return loc
}

// shownRideID reads the id of the ride page the browser shows, which must
// be at base's /book/rides/{id}, followed by query when not empty.
func shownRideID(ctx context.Context, t *testing.T, base, query string) int64 {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("ride"))))
	attr, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.ID("ride"), "data-ride-id"))
	require.NoError(t, err)
	id, err := strconv.ParseInt(attr.Value, 10, 64)
	require.NoError(t, err)
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, base+"/book/rides/"+attr.Value+query, loc)
	return id
}

// clickAndLoad clicks the element id and waits for the page it leads to.
func clickAndLoad(ctx context.Context, t *testing.T, id chromedp.ID) {
	t.Helper()
	loaded := nextLoad(ctx, t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(id)))
	loaded()
}

// absent says that the page shows no element id.
func absent(ctx context.Context, t *testing.T, id string) bool {
	t.Helper()
	return evaluate[bool](ctx, t, `document.getElementById("`+id+`") === null`)
}

// TestTripPagesInChromium drives a trip's pages in a real headless
// Chromium (capture trip): a booking shows its fare held; pressing Cancel
// ride releases the hold, once however often it is pressed; a completed
// trip shows its fare; a rider owing a balance is refused a booking by a
// page that links to the ride, whose Pay the balance button pays it once
// the card is replaced, and the rider books again.
func TestTripPagesInChromium(t *testing.T) {
	t.Parallel()
	b := setupTrips(t)
	rider := b.Rider(t, "trip-browser@example.com", "tok_visa")
	ctx := newBrowser(t)
	signIn(ctx, t, b, rider.APIKey)

	bookTrip := func(t *testing.T) int64 {
		t.Helper()
		scripts(ctx, t, true)
		freshForm(ctx, t, b.url)
		clickAndLoad(ctx, t, "book")
		id := shownRideID(ctx, t, b.url, "")
		require.Equal(t, "authorized", text(ctx, t, "ride-status"))
		return id
	}

	t.Run("booked, its fare held", func(t *testing.T) {
		id := bookTrip(t)
		require.Contains(t, text(ctx, t, "notice"), "the fare is held on your card, not charged")
		require.Regexp(t, `^20\.00 USD is held on your card until \d{4}-\d\d-\d\d \d\d:\d\d UTC`, text(ctx, t, "trip-held"))
		require.Equal(t, fakestripe.PaymentIntentRequiresCapture, intentOfRide(t, b, rider.ID, id).Status)

		// Cancel ride releases the hold.
		clickAndLoad(ctx, t, "cancel")
		require.Equal(t, id, shownRideID(ctx, t, b.url, ""))
		require.Equal(t, "cancelled", text(ctx, t, "ride-status"))
		require.Contains(t, text(ctx, t, "trip-released"), "nothing was charged")
		require.Contains(t, text(ctx, t, "notice"), "Nothing was charged.")
		require.True(t, absent(ctx, t, "cancel"), "nothing left to cancel")
		require.Equal(t, fakestripe.PaymentIntentCanceled, intentOfRide(t, b, rider.ID, id).Status)
	})

	// The rider presses Cancel ride again while the first press waits at
	// Stripe (scripts off, so that the button stays enabled): both posts
	// reach the server with the form's one key, and the hold is released
	// once.
	t.Run("cancel pressed twice", func(t *testing.T) {
		id := bookTrip(t)
		scripts(ctx, t, false)
		key := value(ctx, t, "cancel_key")
		fired, release := holdNext(t, b, fakestripe.OpPaymentIntentCancel)
		x, y := center(ctx, t, "cancel")
		before, conflicts, cancels := b.ridePosts.Load(), b.Service.Stats().Conflicts, stripeOps(b, fakestripe.OpPaymentIntentCancel)
		loaded := nextLoad(ctx, t)
		clickAt(ctx, t, x, y, 1)
		<-fired
		clickAt(ctx, t, x, y, 1)
		require.Eventually(t, func() bool { return b.Service.Stats().Conflicts > conflicts }, 30*time.Second, 10*time.Millisecond)
		release()
		loaded()
		require.Equal(t, id, shownRideID(ctx, t, b.url, ""))
		require.Equal(t, "cancelled", text(ctx, t, "ride-status"))
		require.EqualValues(t, 2, b.ridePosts.Load()-before, "both presses submitted the form")
		require.Equal(t, cancels+1, stripeOps(b, fakestripe.OpPaymentIntentCancel), "one release")
		require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1`, key))
		require.Equal(t, fakestripe.PaymentIntentCanceled, intentOfRide(t, b, rider.ID, id).Status)
	})

	t.Run("a completed trip shows its fare", func(t *testing.T) {
		id := bookTrip(t)
		completeTrip(t, b, id, 2730)
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.url+"/book/rides/"+strconv.FormatInt(id, 10))))
		require.Equal(t, id, shownRideID(ctx, t, b.url, ""))
		require.Equal(t, "completed", text(ctx, t, "ride-status"))
		require.Equal(t, "27.30 USD", text(ctx, t, "trip-fare"))
		require.Equal(t, "20.00 USD of the 20.00 USD held", text(ctx, t, "trip-captured"))
		require.Equal(t, "7.30 USD, charged to your card after the trip", text(ctx, t, "trip-extra"))
		require.True(t, absent(ctx, t, "cancel"))
		require.True(t, absent(ctx, t, "pay-balance"))
	})

	// A card whose bank asks for authentication: the hold is authenticated
	// with the rider present, the fare above it (charged without the rider)
	// is declined, and the rider owes it.
	t.Run("a balance due, paid", func(t *testing.T) {
		const email = "trip-owes@example.com"
		owes := b.Rider(t, email, fakestripe.TokenAuthenticationRequired)
		ctx := newBrowser(t)
		signIn(ctx, t, b, owes.APIKey)
		scripts(ctx, t, true)
		freshForm(ctx, t, b.url)
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("book"))))
		waitLocation(ctx, t, b.Stripe.URL+"/_fake/challenge/pi_")
		require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("complete")), chromedp.Click(chromedp.ID("complete"))))
		waitLocation(ctx, t, b.url+"/book/rides/")
		id := shownRideID(ctx, t, b.url, "")
		sid := strconv.FormatInt(id, 10)
		require.Equal(t, "authorized", text(ctx, t, "ride-status"))
		require.Equal(t, int64(500), completeTrip(t, b, id, service.RideAmountCents+500).BalanceDueCents)

		// The next booking is refused: the page names the ride and links
		// to it.
		freshForm(ctx, t, b.url)
		clickAndLoad(ctx, t, "book")
		require.Contains(t, text(ctx, t, "balance-due"), "Nothing was booked: you owe 5.00 USD for ride #"+sid)
		clickAndLoad(ctx, t, "balance-due-ride")
		require.Equal(t, id, shownRideID(ctx, t, b.url, ""))
		require.Equal(t, "5.00 USD", text(ctx, t, "balance-amount"))
		require.Equal(t, "5.00 USD, due: it could not be charged to your card", text(ctx, t, "trip-extra"))
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		require.NoError(t, err)
		t.Logf("screenshot of a ride whose balance is due: %s", testkit.SaveScreenshot(t, "trip-balance-due.png", png))

		// The same card: declined, the balance still due.
		clickAndLoad(ctx, t, "pay-balance")
		require.Contains(t, text(ctx, t, "notice"), "Not paid: your card was declined")
		require.Equal(t, "5.00 USD", text(ctx, t, "balance-amount"))

		// Another card: the button pays it.
		_, err = b.Accounts.UserUpsert(b.Ctx, accounts.UserUpsertParams{Email: email, PaymentSource: "tok_visa"})
		require.NoError(t, err)
		clickAndLoad(ctx, t, "pay-balance")
		require.Equal(t, id, shownRideID(ctx, t, b.url, "?paid=1"))
		require.Equal(t, "Balance paid: you can book again.", text(ctx, t, "notice"))
		require.Equal(t, "5.00 USD, paid by you after the trip", text(ctx, t, "trip-extra"))
		require.True(t, absent(ctx, t, "pay-balance"))
		paid, err := b.Service.RideGet(b.Ctx, owes.ID, id)
		require.NoError(t, err)
		require.Equal(t, service.ExtraPaid, *paid.ExtraStatus)
		require.Zero(t, paid.BalanceDueCents)

		// And the rider books again.
		freshForm(ctx, t, b.url)
		clickAndLoad(ctx, t, "book")
		require.NotEqual(t, id, shownRideID(ctx, t, b.url, ""))
		require.Equal(t, "authorized", text(ctx, t, "ride-status"))
	})
}
