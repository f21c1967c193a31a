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

	"github.com/danielgtaylor/huma/v2"

	"github.com/atomicrides/atomicrides/internal/limits"
)

// Problem types of the requests refused before they reach the service.
const (
	// ProblemRateLimited: the rider's budget of writes or reads is spent
	// (429).
	ProblemRateLimited = "/problems/rate-limited"
	// ProblemAuthLimited: too many failed authentications from the client's
	// address (429).
	ProblemAuthLimited = "/problems/too-many-failed-authentications"
	// ProblemOverloaded: the service sheds load (503).
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
	// AuthFailures is each client address's budget of failed
	// authentications (API key, operator token, River UI password).
	AuthFailures limits.Policy
	// Shedder, when set, refuses requests at once (503) past its in-flight
	// threshold or database-wait budget.
	Shedder *limits.Shedder
	// Underway, when set, tells continuations of bookings under way from
	// new bookings; nil takes every booking for a new one.
	Underway *limits.Underway
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
// sets the RateLimit-Policy and RateLimit fields. When the budget is spent
// it answers 429 and reports true; the request has touched nothing.
func (h *handlers) riderLimited(ctx huma.Context, riderID int64) bool {
	lim := h.limits
	if lim.Limiter == nil {
		return false
	}
	p, reason := lim.Writes, limits.ReasonRiderWrites
	if m := ctx.Method(); m == http.MethodGet || m == http.MethodHead {
		p, reason = lim.Reads, limits.ReasonRiderReads
	}
	if p.Off() {
		return false
	}
	d := lim.Limiter.Allow(ctx.Context(), p, strconv.FormatInt(riderID, 10))
	ctx.SetHeader("RateLimit-Policy", p.Header())
	ctx.SetHeader("RateLimit", fmt.Sprintf("%q;r=%d;t=%d", p.Name, d.Remaining, limits.Seconds(d.Reset)))
	if d.Allowed {
		return false
	}
	lim.Metrics.Refused(reason)
	secs := limits.Seconds(d.RetryAfter)
	ctx.SetHeader("Retry-After", strconv.Itoa(secs))
	writeCtxProblem(ctx, problem(http.StatusTooManyRequests, ProblemRateLimited, fmt.Sprintf(
		"the rider's %s budget (%d per %s) is spent; retry after %d s (the same idempotency key is unused)",
		p.Name, p.Quota, p.Window, secs)))
	return true
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
	g.lim.Metrics.Refused(limits.ReasonAuthFailures)
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
		ctx.SetHeader("Retry-After", after)
		writeCtxProblem(ctx, m)
	}
	return blocked
}

// guardHTTP answers 429 on a plain handler when the address is blocked.
func (g authGuard) guardHTTP(w http.ResponseWriter, r *http.Request) bool {
	m, after, blocked := g.blocked(r.Context(), clientIP(r.Context()))
	if blocked {
		w.Header().Set("Retry-After", after)
		writeProblemModel(w, m)
	}
	return blocked
}

// criticalRoutes are never shed: probes, metrics, refunds (work past a
// recovery point), and operators' River UI.
var criticalRoutes = map[string]bool{
	"GET /healthz":            true,
	"GET /readyz":             true,
	"GET /metrics":            true,
	"POST /rides/{id}/refund": true,
	riverUIPrefix:             true,
}

// underwayKey names a booking for the Underway record: the credential and
// the idempotency key, hashed, since keys are scoped per rider and the
// record must not keep credentials.
func underwayKey(r *http.Request) string {
	sum := sha256.Sum256([]byte(r.Header.Get("Authorization") + "\x00" + strings.TrimSpace(r.Header.Get("Idempotency-Key"))))
	return hex.EncodeToString(sum[:16])
}

// storedStatus reports whether a booking's answer ends its key's work: a
// definitive answer (stored or refused before the key was used). 409, 500
// and 503 leave the booking to be continued by a retry.
func storedStatus(status int) bool {
	switch status {
	case http.StatusConflict, http.StatusInternalServerError, http.StatusServiceUnavailable:
		return false
	}
	return true
}

// shed admits each request through lim.Shedder by its class, answering 503
// with Retry-After at once to what it refuses, before anything reads the
// body or touches the database.
func shed(mux *http.ServeMux, lim Limits, next http.Handler) http.Handler {
	if lim.Shedder == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := mux.Handler(r)
		class := limits.Ordinary
		var key string
		switch {
		case criticalRoutes[pattern]:
			class = limits.Critical
		case pattern == routeRideCreate:
			class = limits.NewBooking
			key = underwayKey(r)
			if lim.Underway != nil && lim.Underway.Has(key) {
				class = limits.Continuation
			}
		}
		release, reason := lim.Shedder.Admit(class)
		if release == nil {
			lim.Metrics.Refused(reason)
			w.Header().Set("Retry-After", strconv.Itoa(limits.Seconds(limits.DefaultRetryAfter)))
			writeProblemModel(w, problem(http.StatusServiceUnavailable, ProblemOverloaded,
				"the service is overloaded; retry after 1 s with the same idempotency key (nothing was done)"))
			return
		}
		defer release()
		if key == "" || lim.Underway == nil {
			next.ServeHTTP(w, r)
			return
		}
		lim.Underway.Begin(key)
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		if storedStatus(sw.status) {
			lim.Underway.End(key)
		}
	})
}
