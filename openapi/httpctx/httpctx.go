// Package httpctx holds what the HTTP server learns about a request before
// any handler runs: its request id and its client's address. The API's
// middleware (package openapi) stores them in the request's context; every
// HTTP adapter mounted behind it (the API, the booking pages) reads them
// from there, so that one request has one id in every log line.
package httpctx

import (
	"context"
	"net/netip"
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
