package web

import (
	"bytes"
	"crypto/rand"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"strings"

	"github.com/atomicrides/atomicrides/openapi/httpctx"
	"github.com/atomicrides/atomicrides/service"
)

//go:embed templates/*.html
var webFiles embed.FS

// webPages are the booking pages, each a clone of the layout with its own
// "content".
var webPages = func() map[string]*template.Template {
	funcs := template.FuncMap{"amount": amount}
	layout := template.Must(template.New("layout").Funcs(funcs).ParseFS(webFiles, "templates/layout.html"))
	pages := map[string]*template.Template{}
	for _, name := range []string{"signin", "form", "ride", "message"} {
		pages[name] = template.Must(template.Must(layout.Clone()).ParseFS(webFiles, "templates/"+name+".html"))
	}
	return pages
}()

// amount formats cents of currency for riders: 20.00 USD.
func amount(cents int64, currency string) string {
	return fmt.Sprintf("%d.%02d %s", cents/100, cents%100, strings.ToUpper(currency))
}

// pageData is what a booking page shows.
type pageData struct {
	Title string
	// Nonce admits the page's own <style> and <script> under its CSP.
	Nonce string
	// Email and CSRF are set when a rider is signed in.
	Email string
	CSRF  string

	Notice     string
	NoticeKind string // info, ok or error

	Form *formData
	// Owed is the balance that refused the form's booking.
	Owed *owedView
	Ride *service.Ride
	// Trip is the ride's money when it follows its trip (capture trip),
	// with the ride page's forms.
	Trip *tripView
	// Recent are the rider's latest rides, shown under the booking form;
	// RecentFailed says they could not be read.
	Recent       []*service.Ride
	RecentFailed bool

	// Heading, Detail and Link make up a message page.
	Heading, Detail, Link string
	// Refresh, when set, sends the browser on to that URL as soon as the
	// page loads (the bank's page, for a ride just booked that waits for
	// its rider): a navigation of the page's own, which form-action 'self'
	// does not govern, unlike a redirect answering the form.
	Refresh string
}

// formData is the booking form: its one idempotency key and its fields as
// the rider entered them.
type formData struct {
	Key                                        string
	OriginLat, OriginLon, TargetLat, TargetLon string
	Button                                     string
}

// contentSecurityPolicy admits nothing but the page itself, its forms and
// its nonced inline style and script.
func contentSecurityPolicy(nonce string) string {
	return "default-src 'none'; style-src 'nonce-" + nonce + "'; script-src 'nonce-" + nonce + "'; " +
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
}

// render writes page name with status and Cache-Control cache.
func (wb *Pages) render(w http.ResponseWriter, r *http.Request, status int, cache, name string, data *pageData) {
	data.Nonce = rand.Text()
	var buf bytes.Buffer
	if err := webPages[name].ExecuteTemplate(&buf, "layout", data); err != nil {
		wb.logger.ErrorContext(r.Context(), "render page", "page", name, "request_id", httpctx.RequestID(r.Context()), "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", contentSecurityPolicy(data.Nonce))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", cache)
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// message renders a message page with a link back to a fresh form.
func (wb *Pages) message(w http.ResponseWriter, r *http.Request, s *session, status int, heading, detail string) {
	data := &pageData{Title: heading, Heading: heading, Detail: detail}
	if s != nil {
		data.Email, data.CSRF = s.user.Email, s.csrf
	}
	wb.render(w, r, status, "no-store", "message", data)
}
