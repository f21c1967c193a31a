// Package httpctx holds what the HTTP server learns about a request before
// any handler runs: its request id and its client's address. The API's
// middleware (package openapi) stores them in the request's context; every
// HTTP adapter mounted behind it (the API, the booking pages) reads them
// from there, so that one request has one id in every log line.
package httpctx

import (
	"context"
	"net/http"
	"net/netip"
	"time"
)

type ctxKey int

const (
	ctxKeyRequestID ctxKey = iota
	ctxKeyClientIP
)

// With returns ctx carrying the request's id and, when known, its client's
// address.
func With(ctx context.Context, requestID string, clientIP *netip.Addr) context.Context {
	ctx = context.WithValue(ctx, ctxKeyRequestID, requestID)
	if clientIP != nil {
		ctx = context.WithValue(ctx, ctxKeyClientIP, clientIP)
	}
	return ctx
}

// RequestID returns the id of the request being served, "" outside one.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(ctxKeyRequestID).(string)
	return id
}

// ClientIP returns the address the request came from, nil when unknown.
func ClientIP(ctx context.Context) *netip.Addr {
	ip, _ := ctx.Value(ctxKeyClientIP).(*netip.Addr)
	return ip
}

// ExtendDeadlines lets the request behind w run for d from now, past the
// server's read and write timeouts: for a route that legitimately waits
// longer than they allow (a payment call, a wait for an earlier submission).
// Call it only once the request's body has been read, so that the server's
// read timeout still bounds a client that sends its body slowly. The read
// deadline is extended too because its expiry, while a handler runs, cancels
// the request's context. A writer that cannot set deadlines (a test
// recorder) is left as it is.
func ExtendDeadlines(w http.ResponseWriter, d time.Duration) {
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(d)
	_ = rc.SetReadDeadline(deadline)
	_ = rc.SetWriteDeadline(deadline)
}
