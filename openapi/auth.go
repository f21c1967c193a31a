package openapi

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/atomicrides/atomicrides/internal/limits"
	"github.com/atomicrides/atomicrides/service"
)

func bearer(header string) string {
	const prefix = "bearer "
	if len(header) > len(prefix) && strings.EqualFold(header[:len(prefix)], prefix) {
		return strings.TrimSpace(header[len(prefix):])
	}
	return ""
}

func tokenEqual(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// requireRider authenticates a rider's API key before anything else about
// the request (its body included) is looked at, then passes it through
// the chain of limits, each refusing at once what it refuses: an address
// that failed to authenticate too often is answered 429 before its
// credential is looked at; a wrong credential 401; a rider over its
// budget of writes or reads, or at its limit of requests in flight, 429;
// and only then does the request ask the admission control for a slot
// (503 when the service is at its capacity). A key the process
// authenticated lately is answered from memory, with no database work.
func (h *handlers) requireRider(ctx huma.Context, next func(huma.Context)) {
	token := bearer(ctx.Header("Authorization"))
	if token != "" && h.guard.guardCtx(ctx) {
		return
	}
	user, err := h.acc.Authenticate(ctx.Context(), token)
	if err != nil {
		if token != "" && service.ErrorCode(err) == service.CodeUnauthenticated {
			h.guard.failed(ctx.Context(), clientIP(ctx.Context()))
		}
		h.unauthorized(ctx, err)
		return
	}
	release, refused := h.riderLimited(ctx, user.ID)
	if refused {
		return
	}
	defer release()
	if !admitted(ctx) {
		return
	}
	next(huma.WithValue(ctx, ctxKeyUser, user))
}

// requireAdmin authenticates the operator credential, then passes the
// request through the operator's budget and limit of requests in flight
// and the admission control, as requireRider does a rider's.
func (h *handlers) requireAdmin(ctx huma.Context, next func(huma.Context)) {
	token := bearer(ctx.Header("Authorization"))
	if token != "" && h.guard.guardCtx(ctx) {
		return
	}
	if !tokenEqual(token, h.adminToken) {
		if token != "" {
			h.guard.failed(ctx.Context(), clientIP(ctx.Context()))
		}
		h.unauthorized(ctx, &service.Error{Code: service.CodeUnauthenticated, Message: "the operator token is required"})
		return
	}
	h.withinBudgets(ctx, "operator's", h.limits.Operator, h.limits.OperatorConcurrency, next)
}

// withinBudgets passes an authenticated operator's or dispatch request
// through its credential's budget under p and its limit of requests in
// flight, then the admission control, and runs next when all let it
// through.
func (h *handlers) withinBudgets(ctx huma.Context, who string, p limits.Policy, concurrency int, next func(huma.Context)) {
	release, refused := h.budgetLimited(ctx, who, p, limits.ReasonRiderWrites, p.Name, p.Name, concurrency)
	if refused {
		return
	}
	defer release()
	if !admitted(ctx) {
		return
	}
	next(ctx)
}

// unauthorized answers a failed authentication: 401 with the domain's
// message for missing or unknown credentials (err wrapped or not), 500 for
// anything else, which is logged.
func (h *handlers) unauthorized(ctx huma.Context, err error) {
	var e *service.Error
	if !errors.As(err, &e) || e.Code != service.CodeUnauthenticated {
		h.logger.ErrorContext(ctx.Context(), "authenticate", "request_id", RequestID(ctx.Context()), "err", err)
		// The keys could not be read (the database unreachable, or no
		// primary during a failover): as every 500, retryable.
		retry := time.Second
		if e != nil && e.RetryAfter > 0 {
			retry = e.RetryAfter
		}
		ctx.SetHeader("Retry-After", strconv.Itoa(int((retry+time.Second-1)/time.Second)))
		_ = huma.WriteErr(h.api, ctx, http.StatusInternalServerError, "internal error")
		return
	}
	ctx.SetHeader("WWW-Authenticate", `Bearer realm="atomic-rides"`)
	_ = huma.WriteErr(h.api, ctx, http.StatusUnauthorized, e.Message)
}

func riderFrom(ctx interface{ Value(any) any }) *service.User {
	u, _ := ctx.Value(ctxKeyUser).(*service.User)
	return u
}

// requireAdminBasic guards browser-facing operator pages (River UI) with HTTP
// Basic: any user name, the operator token as password. A wrong password
// counts against the address's failed authentications (guard).
func requireAdminBasic(token string, guard authGuard, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pass, ok := r.BasicAuth()
		if ok && guard.guardHTTP(w, r) {
			return
		}
		if !ok || !tokenEqual(pass, token) {
			if ok {
				guard.failed(r.Context(), clientIP(r.Context()))
			}
			w.Header().Set("WWW-Authenticate", `Basic realm="atomic-rides operators", charset="UTF-8"`)
			writeProblem(w, http.StatusUnauthorized, "operator credentials required: any user name, ADMIN_TOKEN as password")
			return
		}
		next.ServeHTTP(w, r)
	})
}
