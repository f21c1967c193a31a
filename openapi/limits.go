package openapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/atomicrides/atomicrides/internal/limits"
	"github.com/atomicrides/atomicrides/service"
)

// Problem types of the requests refused before they reach the service.
const (
	// ProblemRateLimited: the rider's budget of writes or reads is spent
	// (429).
	ProblemRateLimited = "/problems/rate-limited"
	// ProblemAuthLimited: too many failed authentications from the client's
	// address (429).
	ProblemAuthLimited = "/problems/too-many-failed-authentications"
	// ProblemOverloaded: the service is at its capacity (503): the
	// admission control refused the request.
	ProblemOverloaded = "/problems/overloaded"
)

// Limits configures the admission control of the handler (package limits).
// The zero Limits limits nothing.
type Limits struct {
	// Limiter keeps the budgets; nil limits no rate.
	Limiter limits.Limiter
	// Writes and Reads are each rider's budgets of writes (POST) and reads
	// (GET).
	Writes, Reads limits.Policy
	// Operator and Dispatch are the budgets of the operator's and the
	// dispatch side's requests.
	Operator, Dispatch limits.Policy
	// AuthFailures is each client address's budget of failed
	// authentications (API key, operator token, River UI password).
	AuthFailures limits.Policy
	// Concurrency, when set, counts each credential's requests in flight
	// against RiderConcurrency, OperatorConcurrency and
	// DispatchConcurrency (zero: no limit), and answers 429 past it.
	Concurrency                                                *limits.Concurrency
	RiderConcurrency, OperatorConcurrency, DispatchConcurrency int
	// Admission, when set, admits requests by class within its limit and
	// refuses the rest at once (503 with Retry-After).
	Admission *limits.Admission
	// Started, when set, tells the retries of bookings this process
	// admitted from new bookings; nil takes every booking for a new one.
	Started *limits.Started
	// Metrics counts the refused requests; nil counts nothing.
	Metrics *limits.Metrics
}

// writeProblemModel writes m as problem+json with the headers already set.
func writeProblemModel(w http.ResponseWriter, m *huma.ErrorModel) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(m.Status)
	_ = json.NewEncoder(w).Encode(m)
}

func writeCtxProblem(ctx huma.Context, m *huma.ErrorModel) {
	ctx.SetHeader("Content-Type", "application/problem+json")
	ctx.SetStatus(m.Status)
	_ = json.NewEncoder(ctx.BodyWriter()).Encode(m)
}

// riderLimited charges the request to the rider's budget of its kind and
// counts it against the rider's requests in flight (released by the
// returned func); when either is spent it answers 429 and reports true;
// the request has touched nothing.
func (h *handlers) riderLimited(ctx huma.Context, riderID int64) (release func(), refused bool) {
	lim := h.limits
	p, reason := lim.Writes, limits.ReasonRiderWrites
	if m := ctx.Method(); m == http.MethodGet || m == http.MethodHead {
		p, reason = lim.Reads, limits.ReasonRiderReads
	}
	id := strconv.FormatInt(riderID, 10)
	return h.budgetLimited(ctx, "rider's", p, reason, "rider:"+id, id, lim.RiderConcurrency)
}

// budgetLimited charges the request to key's budget under p and sets the
// RateLimit-Policy and RateLimit fields, then counts it against
// concurrency requests in flight of ckey. When the budget is spent, or
// the requests in flight are at the limit, it answers 429 with
// Retry-After and reports true; the request has touched nothing, and
// takes no slot nor place in the admission control's queue. Otherwise the
// caller calls release when the request ends.
func (h *handlers) budgetLimited(ctx huma.Context, who string, p limits.Policy, reason, ckey, key string, concurrency int) (release func(), refused bool) {
	lim := h.limits
	class := requestClass(ctx.Context())
	if lim.Limiter != nil && !p.Off() {
		d := lim.Limiter.Allow(ctx.Context(), p, key)
		ctx.SetHeader("RateLimit-Policy", p.Header())
		ctx.SetHeader("RateLimit", fmt.Sprintf("%q;r=%d;t=%d", p.Name, d.Remaining, limits.Seconds(d.Reset)))
		if !d.Allowed {
			lim.Metrics.Refused(reason, class)
			secs := limits.Seconds(d.RetryAfter)
			ctx.SetHeader("Retry-After", strconv.Itoa(secs))
			writeCtxProblem(ctx, problem(http.StatusTooManyRequests, ProblemRateLimited, fmt.Sprintf(
				"the %s %s budget (%d per %s) is spent; retry after %d s (the same idempotency key is unused)",
				who, p.Name, p.Quota, p.Window, secs)))
			return nil, true
		}
	}
	if lim.Concurrency == nil || concurrency <= 0 {
		return func() {}, false
	}
	if !lim.Concurrency.Acquire(ckey, concurrency) {
		lim.Metrics.Refused(limits.ReasonRiderConcurrency, class)
		ctx.SetHeader("Retry-After", "1")
		writeCtxProblem(ctx, problem(http.StatusTooManyRequests, ProblemRateLimited, fmt.Sprintf(
			"the %s requests in flight are at their limit (%d at once); retry after 1 s, once one has been answered (the same idempotency key is unused)",
			who, concurrency)))
		return nil, true
	}
	return func() { lim.Concurrency.Release(ckey) }, false
}

// authGuard keeps each client address's budget of failed authentications.
// An address whose budget is spent is answered 429 whatever credential it
// presents, right or wrong, until the budget refills: the answer never says
// which part was wrong, nor whether a guess was right.
type authGuard struct {
	lim *Limits
}

// authLimitedDetail is the one message of every failed-authentication 429.
const authLimitedDetail = "too many failed authentications from this address; retry after %d s"

func addrKey(ip *netip.Addr) string {
	if ip == nil {
		return "unknown"
	}
	if ip.Is6() {
		// One client commonly holds a whole /64.
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// blocked reports whether the address's budget is spent; when it is, it
// counts the refusal and returns the model and Retry-After to answer.
func (g authGuard) blocked(ctx context.Context, ip *netip.Addr) (*huma.ErrorModel, string, bool) {
	if g.lim == nil || g.lim.Limiter == nil || g.lim.AuthFailures.Off() {
		return nil, "", false
	}
	spent, after := g.lim.Limiter.Spent(ctx, g.lim.AuthFailures, addrKey(ip))
	if !spent {
		return nil, "", false
	}
	g.lim.Metrics.Refused(limits.ReasonAuthFailures, requestClass(ctx))
	secs := limits.Seconds(after)
	return problem(http.StatusTooManyRequests, ProblemAuthLimited, fmt.Sprintf(authLimitedDetail, secs)), strconv.Itoa(secs), true
}

// failed charges a failed authentication to the address.
func (g authGuard) failed(ctx context.Context, ip *netip.Addr) {
	if g.lim == nil || g.lim.Limiter == nil || g.lim.AuthFailures.Off() {
		return
	}
	g.lim.Limiter.Allow(ctx, g.lim.AuthFailures, addrKey(ip))
}

// guardCtx answers 429 in a Huma operation when the address is blocked.
func (g authGuard) guardCtx(ctx huma.Context) bool {
	m, after, blocked := g.blocked(ctx.Context(), clientIP(ctx.Context()))
	if blocked {
		g.headers(ctx.SetHeader, after)
		writeCtxProblem(ctx, m)
	}
	return blocked
}

// guardHTTP answers 429 on a plain handler when the address is blocked.
func (g authGuard) guardHTTP(w http.ResponseWriter, r *http.Request) bool {
	m, after, blocked := g.blocked(r.Context(), clientIP(r.Context()))
	if blocked {
		g.headers(w.Header().Set, after)
		writeProblemModel(w, m)
	}
	return blocked
}

// headers sets the fields of a blocked address's 429: Retry-After, and
// the budget it spent as RateLimit-Policy and RateLimit, none of it left
// until Retry-After.
func (g authGuard) headers(set func(name, value string), after string) {
	p := g.lim.AuthFailures
	set("Retry-After", after)
	set("RateLimit-Policy", p.Header())
	set("RateLimit", fmt.Sprintf("%q;r=0;t=%s", p.Name, after))
}

// routeClasses sorts the routes into the admission control's classes;
// a route not named here is a Booking, and so is a new booking.
var routeClasses = map[string]limits.Class{
	"GET /healthz": limits.Exempt,
	"GET /readyz":  limits.Exempt,
	"GET /metrics": limits.Exempt,
	riverUIPrefix:  limits.Exempt,

	"POST /rides/{id}/refund":      limits.Priority,
	"POST /rides/{id}/complete":    limits.Priority,
	"POST /rides/{id}/cancel":      limits.Priority,
	"POST /webhooks/stripe":        limits.Priority,
	"POST /webhooks/adyen":         limits.Priority,
	"GET " + service.ReturnPath:    limits.Priority,
	"POST /book/rides/{id}/cancel": limits.Priority,

	"GET /rides":                  limits.List,
	"GET /users/{email}/api_keys": limits.List,
	"GET /docs":                   limits.List,
	"GET /docs/":                  limits.List,
	"GET /book":                   limits.List,
	"GET /book/forms/{key}":       limits.List,
	"GET /book/rides/{id}":        limits.List,
}

// routeClass is the class of a request the mux serves with pattern.
func routeClass(pattern string) limits.Class {
	if c, ok := routeClasses[pattern]; ok {
		return c
	}
	if strings.HasPrefix(pattern, "GET /openapi") {
		return limits.List
	}
	return limits.Booking
}

// startedKey names a booking for the Started record: the credential and
// the idempotency key, hashed, since keys are scoped per rider and the
// record must not keep credentials.
func startedKey(r *http.Request) string {
	sum := sha256.Sum256([]byte(r.Header.Get("Authorization") + "\x00" + strings.TrimSpace(r.Header.Get("Idempotency-Key"))))
	return hex.EncodeToString(sum[:16])
}

// admit passes each request through lim.Admission by its class, answering
// 503 with Retry-After to what it refuses before anything reads the body
// or touches the database, and tells the limit how each admitted request
// ended. A request of a route in authenticated is admitted only once its
// credential is authenticated and within its own budgets (admitted, called
// by requireRider, requireAdmin and requireDispatch): a request refused
// for its credential, or by its budgets, never takes a slot of the limit
// nor a place in its queue.
func admit(mux *http.ServeMux, lim Limits, authenticated map[string]bool, next http.Handler) http.Handler {
	if lim.Admission == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := mux.Handler(r)
		if d, ok := requestTimeout(r.Header.Get("Request-Timeout")); ok {
			r = r.WithContext(limits.WithWaitDeadline(r.Context(), time.Now().Add(d)))
		}
		g := &gate{lim: &lim, class: routeClass(pattern)}
		if pattern == routeRideCreate && lim.Started != nil {
			g.key = startedKey(r)
			switch started, finished := lim.Started.Seen(g.key); {
			case finished:
				// A replay answered from memory costs a lookup.
				g.class = limits.Exempt
			case started:
				g.class = limits.Priority
			}
		}
		if authenticated[pattern] {
			r = r.WithContext(context.WithValue(r.Context(), ctxKeyGate, g))
		} else if refusal := g.admit(r.Context()); refusal != nil {
			w.Header().Set("Retry-After", strconv.Itoa(refusal.RetryAfter))
			writeProblemModel(w, overloaded(refusal))
			return
		}
		// requestContext's writer, which records the status, when it is
		// the one served.
		sw, ok := w.(*statusWriter)
		if !ok {
			sw = &statusWriter{ResponseWriter: w, status: http.StatusOK}
		}
		next.ServeHTTP(sw, r)
		if g.ticket == nil {
			return // refused before the limit
		}
		op := pattern
		if sw.Header().Get("Idempotent-Replayed") == "true" {
			op += " replayed"
		}
		if g.key != "" {
			switch {
			case definitive(sw.status):
				lim.Started.Finish(g.key)
			case sw.status < http.StatusInternalServerError && sw.status != http.StatusConflict:
				// Refused before its key was used (a 4xx of the request
				// itself): nothing is under way to continue.
				lim.Started.Forget(g.key)
			}
		}
		g.ticket.Done(op, outcome(r, sw.status))
	})
}

// maxRequestTimeout bounds a Request-Timeout: the server's own write
// timeout ends a request sooner anyway.
const maxRequestTimeout = 5 * time.Minute

// requestTimeout reads a Request-Timeout field: how long the client waits
// for the answer, in seconds (a decimal number above 0, at most
// maxRequestTimeout). A request that gives one waits in the admission
// queue while the service could still answer it in time; one that gives
// none waits half a second at most.
func requestTimeout(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	secs, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || !(secs > 0) || secs > maxRequestTimeout.Seconds() {
		return 0, false
	}
	return time.Duration(secs * float64(time.Second)), true
}

// gate is a request's way through the admission control: its class, its
// key in the Started record, and its ticket once admitted.
type gate struct {
	lim    *Limits
	class  limits.Class
	key    string
	ticket *limits.Ticket
}

// admit admits the request, or returns the refusal to answer.
func (g *gate) admit(ctx context.Context) *limits.Refusal {
	ticket, refused := g.lim.Admission.Admit(ctx, g.class)
	if refused != nil {
		return refused
	}
	g.ticket = ticket
	if g.key != "" && g.class != limits.Exempt {
		g.lim.Started.Add(g.key)
	}
	return nil
}

// overloaded is the problem of a request the admission control refused.
func overloaded(r *limits.Refusal) *huma.ErrorModel {
	return problem(http.StatusServiceUnavailable, ProblemOverloaded, fmt.Sprintf(
		"the service is at its capacity; retry after %d s with the same idempotency key (nothing was done)", r.RetryAfter))
}

// requestClass is the admission class of the request of ctx (Booking when
// admit did not sort it).
func requestClass(ctx context.Context) limits.Class {
	if g, ok := ctx.Value(ctxKeyGate).(*gate); ok {
		return g.class
	}
	return limits.Booking
}

// admitted admits an authenticated request within its budgets through
// the admission control, when admit left it to be admitted here; when
// the control refuses it, it answers 503 with Retry-After and reports
// false.
func admitted(ctx huma.Context) bool {
	g, ok := ctx.Context().Value(ctxKeyGate).(*gate)
	if !ok || g.ticket != nil {
		return true
	}
	refusal := g.admit(ctx.Context())
	if refusal == nil {
		return true
	}
	ctx.SetHeader("Retry-After", strconv.Itoa(refusal.RetryAfter))
	writeCtxProblem(ctx, overloaded(refusal))
	return false
}

// authenticatedRoutes are the mux patterns of api's operations that take a
// credential.
func authenticatedRoutes(api huma.API) map[string]bool {
	routes := map[string]bool{}
	for path, item := range api.OpenAPI().Paths {
		for method, op := range map[string]*huma.Operation{http.MethodGet: item.Get, http.MethodPut: item.Put,
			http.MethodPost: item.Post, http.MethodDelete: item.Delete, http.MethodPatch: item.Patch} {
			if op != nil && len(op.Security) > 0 {
				routes[method+" "+path] = true
			}
		}
	}
	return routes
}

// definitive reports whether a booking's answer is one stored on its key,
// which its retries get again: a 2xx, or a 402 (the payment declined). Not
// a refusal before the key was used (a 4xx of the request itself, a 429),
// after which the same key may still book anew, nor an answer that leaves
// the booking to be continued (409, 5xx).
func definitive(status int) bool {
	return status < http.StatusMultipleChoices || status == http.StatusPaymentRequired
}

// outcome is how a request ended, to the admission limit: an answer that
// did the operation's work is a sample of its latency (a 2xx, or a 402: a
// payment declined); a client gone before its answer backs the limit off.
func outcome(r *http.Request, status int) limits.Outcome {
	switch {
	case r.Context().Err() != nil:
		return limits.ClientGone
	case status < 300 || status == http.StatusPaymentRequired:
		return limits.Served
	}
	return limits.Answered
}
