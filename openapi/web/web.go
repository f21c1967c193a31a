// Package web is the riders' booking pages: server-rendered HTML over the
// service, an adapter of its own beside the API. Pages registers its routes
// on the API's mux (openapi.Config.Pages), behind the same request ids,
// access logs and metrics, and outside the spec.
//
//	GET  /book               the sign-in form, or a redirect to a new booking form
//	GET  /book/forms/{key}   the booking form whose idempotency key is key
//	POST /book/signin        sign in with an API key (sets the session cookie)
//	POST /book/signout       sign out
//	POST /book               book the form's ride: exactly once per form, however often it is submitted
//	GET  /book/rides/{id}    one of the rider's rides: its payment, or its trip's hold, fare and balance
//	POST /book/rides/{id}/cancel   cancel the ride's trip and release its hold
//	POST /book/rides/{id}/balance  pay the balance the rider owes for the ride
//
// Each booking form carries its own idempotency key in a hidden field,
// minted when GET /book sends the rider to a new form. Submitting the form
// twice (a double click, a resubmission after a slow answer, going back and
// submitting again) sends the same key, so the service books and charges one
// ride and answers every submission with it. A submission that finds an
// earlier one still running waits for it (bounded) and then shows the same
// ride. The key is in the form's URL too, so that going back to a submitted
// form shows that form, key included, whether the browser restores the page
// or fetches it again.
//
// The ride page's own forms (cancelling a trip, paying its balance) follow
// the same rule: each carries a key minted when the page is rendered, so
// every submission of one form is one request to the service. See trips.go.
package web

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/atomicrides/atomicrides/openapi/httpctx"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
)

// Config configures the booking pages.
type Config struct {
	// Service books the rides. Required.
	Service *service.Service
	// Accounts authenticates the riders and keeps their sessions.
	// Required.
	Accounts *accounts.Service
	// Secret keys the forms' CSRF tokens (serve passes the operator token):
	// every process given the same secret accepts the others' forms. Empty
	// means a random key, private to this Pages.
	Secret string
	// Logger receives internal errors and refused forms. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// PublicURL is the URL riders reach the service at (PUBLIC_URL), when
	// it differs from what the server sees. With an https URL the session
	// cookie is Secure even though the request reached Go over plain HTTP
	// (TLS terminated by a proxy). Empty: Secure only under Go's own TLS.
	PublicURL string
}

// maxBodyBytes caps the forms' bodies; they hold a few short fields.
const maxBodyBytes = 16 << 10

// Bounds of a submission's wait for an earlier submission of the same form.
const (
	bookingWait      = 15 * time.Second
	bookingPollFirst = 50 * time.Millisecond
	bookingPollMax   = 500 * time.Millisecond
)

// A form's fields before the rider changes them: San Francisco to Oakland.
var defaultForm = formData{OriginLat: "37.7749", OriginLon: "-122.4194", TargetLat: "37.8044", TargetLon: "-122.2712"}

// Pages serves the booking pages. It is safe for concurrent use.
type Pages struct {
	svc    *service.Service
	acc    *accounts.Service
	logger *slog.Logger
	secret []byte
	cop    *http.CrossOriginProtection
	// httpsOnly: the public URL is https, so cookies are always Secure.
	httpsOnly bool
}

// New returns the booking pages of cfg; Register mounts them.
func New(cfg Config) *Pages {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Pages{
		svc:    cfg.Service,
		acc:    cfg.Accounts,
		logger: cfg.Logger,
		secret: csrfSecret(cfg.Secret),
		cop:    http.NewCrossOriginProtection(),

		httpsOnly: strings.HasPrefix(strings.ToLower(cfg.PublicURL), "https://"),
	}
}

// Register adds the booking pages' routes (all under /book) to mux.
func (wb *Pages) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /book", wb.newForm)
	mux.HandleFunc("GET /book/forms/{key}", wb.bookForm)
	mux.HandleFunc("POST /book", wb.bookSubmit)
	mux.HandleFunc("POST /book/signin", wb.signIn)
	mux.HandleFunc("POST /book/signout", wb.signOut)
	mux.HandleFunc("GET /book/rides/{id}", wb.ridePage)
	mux.HandleFunc("POST /book/rides/{id}/cancel", wb.rideCancel)
	mux.HandleFunc("POST /book/rides/{id}/balance", wb.balancePay)
	mux.HandleFunc("GET "+service.ReturnPath, wb.actionReturn)
}

// newForm sends a signed-in rider to a booking form with a fresh
// idempotency key, and shows the sign-in form to anyone else.
func (wb *Pages) newForm(w http.ResponseWriter, r *http.Request) {
	if _, err := wb.session(w, r); err != nil {
		wb.signInPage(w, r, err, http.StatusOK, "")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, "/book/forms/"+rand.Text(), http.StatusSeeOther)
}

// bookForm shows the booking form of the key in its URL.
func (wb *Pages) bookForm(w http.ResponseWriter, r *http.Request) {
	s, err := wb.session(w, r)
	if err != nil {
		wb.signInPage(w, r, err, http.StatusOK, "")
		return
	}
	key, err := service.ParseIdempotencyKey(r.PathValue("key"))
	if err != nil {
		wb.message(w, r, s, http.StatusNotFound, "No such form", "Start from a fresh form.")
		return
	}
	f := defaultForm
	f.Key, f.Button = key, "Book and pay"
	wb.formPage(w, r, s, http.StatusOK, &f, "", "")
}

// recentRides is how many of the rider's latest rides the booking form
// lists.
const recentRides = 5

func (wb *Pages) formPage(w http.ResponseWriter, r *http.Request, s *session, status int, f *formData, notice, kind string) {
	wb.formPageWith(w, r, s, status, &pageData{Form: f, Notice: notice, NoticeKind: kind})
}

// formPageWith shows the booking form of d.Form, with d's notices.
func (wb *Pages) formPageWith(w http.ResponseWriter, r *http.Request, s *session, status int, d *pageData) {
	d.Title, d.Email, d.CSRF = "Book a ride", s.user.Email, s.csrf
	// The list is a convenience beside the form: when it cannot be read,
	// the page says so and the form still books.
	recent, err := wb.svc.RideList(r.Context(), s.user.ID, service.RideListParams{Limit: recentRides})
	if err != nil {
		wb.logger.ErrorContext(r.Context(), "booking page: recent rides", "err", err)
		d.RecentFailed = true
	} else {
		d.Recent = recent.Data
	}
	wb.render(w, r, status, "private, no-cache", "form", d)
}

// signInPage shows the sign-in form, or an error page when the session could
// not be judged.
func (wb *Pages) signInPage(w http.ResponseWriter, r *http.Request, sessionErr error, status int, notice string) {
	if sessionErr != nil && !errors.Is(sessionErr, errNoSession) {
		wb.internal(w, r, nil, "session", sessionErr)
		return
	}
	wb.render(w, r, status, "no-store", "signin", &pageData{Title: "Sign in", Notice: notice, NoticeKind: "error"})
}

func (wb *Pages) signIn(w http.ResponseWriter, r *http.Request) {
	if err := wb.sameOrigin(r); err != nil {
		wb.message(w, r, nil, http.StatusForbidden, "Sign-in refused", "The sign-in did not come from this site's own form.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	apiKey := strings.TrimSpace(r.PostFormValue("api_key"))
	sessionID, err := wb.acc.BookingSessionCreate(r.Context(), apiKey)
	if err != nil {
		if service.ErrorCode(err) != service.CodeUnauthenticated {
			wb.internal(w, r, nil, "sign in", err)
			return
		}
		wb.signInPage(w, r, nil, http.StatusUnauthorized, "That API key is not valid.")
		return
	}
	wb.setSessionCookie(w, r, sessionID)
	http.Redirect(w, r, "/book", http.StatusSeeOther)
}

func (wb *Pages) signOut(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	s, err := wb.session(w, r)
	if err == nil && wb.checkForm(r, s) != nil {
		wb.message(w, r, s, http.StatusForbidden, "Sign-out refused", "The request did not come from this site's own form.")
		return
	}
	if err == nil {
		if err := wb.acc.BookingSessionEnd(r.Context(), s.id); err != nil {
			wb.internal(w, r, s, "sign out", err)
			return
		}
	}
	wb.clearSessionCookie(w, r)
	http.Redirect(w, r, "/book", http.StatusSeeOther)
}

// bookSubmit books the form's ride under the form's idempotency key, and
// answers with a redirect to the ride (Post/Redirect/Get): every submission
// of one form ends on the same ride.
func (wb *Pages) bookSubmit(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	s, err := wb.session(w, r)
	if err != nil {
		wb.signInPage(w, r, err, http.StatusUnauthorized, "Sign in to book: your session has ended. Nothing was booked.")
		return
	}
	if err := r.ParseForm(); err != nil {
		wb.message(w, r, s, http.StatusBadRequest, "Unreadable form", "The form could not be read. Nothing was booked.")
		return
	}
	// The form is read: the submission may now wait for an earlier one and
	// then for the payment processor, longer than the server's timeouts.
	httpctx.ExtendDeadlines(w, bookingWait+wb.svc.Lease())
	if err := wb.checkForm(r, s); err != nil {
		wb.logger.InfoContext(r.Context(), "booking form refused", "request_id", httpctx.RequestID(r.Context()), "err", err)
		wb.message(w, r, s, http.StatusForbidden, "Form refused", "This form did not come from this site, or from an earlier sign-in. Nothing was booked.")
		return
	}
	f := &formData{
		Key:       r.PostFormValue("idempotency_key"),
		OriginLat: r.PostFormValue("origin_lat"), OriginLon: r.PostFormValue("origin_lon"),
		TargetLat: r.PostFormValue("target_lat"), TargetLon: r.PostFormValue("target_lon"),
		Button: "Book and pay",
	}
	key, err := service.ParseIdempotencyKey(f.Key)
	if err != nil {
		wb.message(w, r, s, http.StatusBadRequest, "Damaged form", "The form's booking key is missing or damaged. Nothing was booked.")
		return
	}
	params, field := parseRideForm(f)
	if field != "" {
		wb.formPage(w, r, s, http.StatusUnprocessableEntity, f, "Enter a number for "+field+". Nothing was booked.", "error")
		return
	}

	resp, err := wb.rideCreate(r.Context(), s.user.ID, key, params)
	if err != nil {
		wb.bookFailed(w, r, s, f, err)
		return
	}
	switch resp.Status {
	case http.StatusCreated:
		var ride service.Ride
		if err := json.Unmarshal(resp.Body, &ride); err != nil {
			wb.internal(w, r, s, "book: stored ride", err)
			return
		}
		to := "/book/rides/" + strconv.FormatInt(ride.ID, 10)
		if resp.Replayed {
			to += "?again=1"
		}
		http.Redirect(w, r, to, http.StatusSeeOther)
	case http.StatusAccepted:
		// The rider's bank asks for authentication: to the ride, whose
		// page sends the rider on to the bank (the form's redirect may
		// not leave this site), who sends them back to actionReturn, then
		// to the ride.
		var ride service.Ride
		if err := json.Unmarshal(resp.Body, &ride); err != nil {
			wb.internal(w, r, s, "book: stored ride", err)
			return
		}
		http.Redirect(w, r, "/book/rides/"+strconv.FormatInt(ride.ID, 10)+"?authenticate=1", http.StatusSeeOther)
	case http.StatusPaymentRequired:
		var p service.Problem
		_ = json.Unmarshal(resp.Body, &p)
		wb.message(w, r, s, http.StatusPaymentRequired, p.Title,
			"No ride was booked and nothing was charged ("+p.Detail+").")
	default:
		wb.internal(w, r, s, "book", errors.New("unexpected stored status "+strconv.Itoa(resp.Status)))
	}
}

// bookFailed answers a submission that got no stored answer. Where a retry
// can help, the page carries the same form, key included.
func (wb *Pages) bookFailed(w http.ResponseWriter, r *http.Request, s *session, f *formData, err error) {
	switch service.ErrorCode(err) {
	case service.CodeInvalid:
		var e *service.Error
		errors.As(err, &e)
		wb.formPage(w, r, s, http.StatusUnprocessableEntity, f, "Check the coordinates: "+fieldName(e.Field)+" "+e.Message+". Nothing was booked.", "error")
	case service.CodeKeyInUse:
		f.Button = "Check again"
		wb.formPage(w, r, s, http.StatusAccepted, f,
			"Your booking is still being processed. Check again in a moment: this form books one ride at most.", "info")
	case service.CodeKeyReused:
		wb.message(w, r, s, http.StatusUnprocessableEntity, "This form was already used",
			"This form already booked a different trip, so it cannot book this one. Start from a fresh form.")
	case service.CodeBalanceDue:
		// Nothing was booked and the form's key is free: the same form
		// books once the balance is paid.
		var e *service.Error
		errors.As(err, &e)
		wb.formPageWith(w, r, s, http.StatusPaymentRequired, &pageData{Form: f, Owed: wb.owedOf(r.Context(), s, e.RideID)})
	case service.CodeProcessorUnavailable:
		wb.logger.ErrorContext(r.Context(), "book", "request_id", httpctx.RequestID(r.Context()), "err", err)
		f.Button = "Try again"
		wb.formPage(w, r, s, http.StatusServiceUnavailable, f,
			"The payment processor did not answer. Try again: this form books one ride at most, and you will not be charged twice.", "error")
	default:
		wb.internal(w, r, s, "book", err)
	}
}

// rideCreate books under key, waiting (bounded) while an earlier submission
// of the same form holds the key: the second of two quick submissions then
// answers with the first one's ride. The service goes on with the work when
// the browser abandons a submission, so the wait ends.
func (wb *Pages) rideCreate(ctx context.Context, userID int64, key string, params service.RideCreateParams) (*service.Response, error) {
	return waitForKey(ctx, func() (*service.Response, error) {
		return wb.svc.RideCreate(ctx, userID, key, params, httpctx.ClientIP(ctx))
	})
}

// waitForKey makes call, and makes it again (bounded) while an earlier
// submission of the same form holds its key: the later submission then
// answers as the earlier one did.
func waitForKey(ctx context.Context, call func() (*service.Response, error)) (*service.Response, error) {
	deadline := time.Now().Add(bookingWait)
	poll := bookingPollFirst
	for {
		resp, err := call()
		if service.ErrorCode(err) != service.CodeKeyInUse || time.Now().Add(poll).After(deadline) {
			return resp, err
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return resp, err
		case <-t.C:
		}
		poll = min(2*poll, bookingPollMax)
	}
}

// fieldName names a ride field for riders.
func fieldName(field string) string {
	switch field {
	case "body.origin_lat":
		return "the origin's latitude"
	case "body.origin_lon":
		return "the origin's longitude"
	case "body.target_lat":
		return "the destination's latitude"
	case "body.target_lon":
		return "the destination's longitude"
	}
	return "a coordinate"
}

// parseRideForm reads the coordinates; field names the first that is not a
// number.
func parseRideForm(f *formData) (p service.RideCreateParams, field string) {
	for _, c := range []struct {
		field string
		v     string
		dst   *float64
	}{
		{"body.origin_lat", f.OriginLat, &p.OriginLat},
		{"body.origin_lon", f.OriginLon, &p.OriginLon},
		{"body.target_lat", f.TargetLat, &p.TargetLat},
		{"body.target_lon", f.TargetLon, &p.TargetLon},
	} {
		v, err := strconv.ParseFloat(strings.TrimSpace(c.v), 64)
		if err != nil {
			return p, fieldName(c.field)
		}
		*c.dst = v
	}
	return p, ""
}

// ridePage shows one of the signed-in rider's rides.
func (wb *Pages) ridePage(w http.ResponseWriter, r *http.Request) {
	s, err := wb.session(w, r)
	if err != nil {
		wb.signInPage(w, r, err, http.StatusUnauthorized, "Sign in to see your rides.")
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		wb.message(w, r, s, http.StatusNotFound, "No such ride", "")
		return
	}
	ride, ok := wb.rideOf(w, r, s, id, "ride page")
	if !ok {
		return
	}
	data := &pageData{}
	switch {
	case r.URL.Query().Get("again") != "" && ride.Capture == service.CaptureTrip:
		data.Notice, data.NoticeKind = "This form had already been submitted: it booked this one ride, and held its fare once.", "ok"
	case r.URL.Query().Get("again") != "":
		data.Notice, data.NoticeKind = "This form had already been submitted: it booked this one ride, and you were charged once.", "ok"
	case r.URL.Query().Get("paid") != "" && ride.ExtraStatus != nil && *ride.ExtraStatus == service.ExtraPaid:
		data.Notice, data.NoticeKind = "Balance paid: you can book again.", "ok"
	case ride.ChargeStatus == service.RideChargeCharged:
		data.Notice, data.NoticeKind = "Booked and paid.", "ok"
	case ride.NextAction != nil:
		data.Notice, data.NoticeKind = "Booked: your bank asks you to confirm the payment. Nothing is charged until you do.", "info"
		if r.URL.Query().Get("authenticate") != "" {
			data.Refresh = ride.NextAction.RedirectURL
		}
	default:
		data.Notice, data.NoticeKind = tripNotice(ride)
	}
	wb.showRide(w, r, s, http.StatusOK, ride, data, rideKeys{})
}

// internal logs err and shows a page that says nothing of it.
func (wb *Pages) internal(w http.ResponseWriter, r *http.Request, s *session, op string, err error) {
	wb.logger.ErrorContext(r.Context(), op, "request_id", httpctx.RequestID(r.Context()), "err", err)
	wb.message(w, r, s, http.StatusInternalServerError, "Something went wrong",
		"Please try again. A form you submitted books one ride at most.")
}

// actionReturn is where a rider's bank sends the rider back after they
// authenticated a ride's payment (or gave up). It needs no session: what it
// applies is the processor's answer about the payment named by the link
// (service.RideActionReturn), never what the link's parameters claim. Then
// it sends the rider to the ride, which shows the outcome.
func (wb *Pages) actionReturn(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for _, name := range []string{"key", "redirectResult"} {
		if len(q[name]) > 1 {
			wb.message(w, r, nil, http.StatusBadRequest, "Damaged link", "The link from your bank names "+name+" more than once. Nothing was changed.")
			return
		}
	}
	id, err := wb.svc.RideActionReturn(r.Context(), q.Get("key"), q.Get("redirectResult"))
	if err == nil {
		http.Redirect(w, r, "/book/rides/"+strconv.FormatInt(id, 10), http.StatusSeeOther)
		return
	}
	switch service.ErrorCode(err) {
	case service.CodeInvalid:
		var e *service.Error
		errors.As(err, &e)
		wb.message(w, r, nil, http.StatusBadRequest, "Damaged link", "The link from your bank could not be used ("+e.Field+" "+e.Message+"). Nothing was changed.")
	case service.CodeNotFound:
		wb.message(w, r, nil, http.StatusNotFound, "No such booking", "No booking waits for this link. Nothing was changed.")
	case service.CodeProcessorUnavailable:
		wb.message(w, r, nil, http.StatusServiceUnavailable, "Try again", "The payment processor did not answer. Reload this page in a moment: your payment is applied once.")
	default:
		wb.internal(w, r, nil, "action return", err)
	}
}
