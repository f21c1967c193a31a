package telemetry

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// attemptsKey holds the attempt counter of one call in its context.
type attemptsKey struct{}

// WithAttempts gives one call to a remote API its attempt counter: every
// HTTP attempt that a client of TracedHTTPClient makes under the returned
// context (an SDK's own retries included) is numbered within that call.
func WithAttempts(ctx context.Context) context.Context {
	return context.WithValue(ctx, attemptsKey{}, new(atomic.Int64))
}

// TracedHTTPClient returns a copy of base (or, when base is nil, a client
// on a clone of net/http's default transport keeping up to maxIdle idle
// connections) bounded by timeout, whose every HTTP attempt is a child span
// "<name> attempt" of the call's span, which gets the attribute
// "<name>.attempts". Calls made with no recording span pass straight
// through, and nothing is added to the request: the remote API sees no trace
// headers.
func TracedHTTPClient(base *http.Client, name string, maxIdle int, timeout time.Duration) *http.Client {
	var hc http.Client
	if base != nil {
		hc = *base
	} else {
		// A clone of net/http's defaults (proxy, dialer, HTTP/2), unless
		// the process replaced http.DefaultTransport with another type.
		transport, ok := http.DefaultTransport.(*http.Transport)
		if ok {
			transport = transport.Clone()
		} else {
			transport = &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true}
		}
		transport.MaxIdleConns = maxIdle
		transport.MaxIdleConnsPerHost = maxIdle
		hc.Transport = transport
	}
	hc.Timeout = timeout
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	hc.Transport = tracedTransport{base: rt, name: name}
	return &hc
}

// tracedTransport traces each HTTP attempt of a call; see TracedHTTPClient.
type tracedTransport struct {
	base http.RoundTripper
	name string
}

// RoundTrip sends one attempt.
func (t tracedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	tracer, ok := ChildTracer(ctx)
	if !ok {
		return t.base.RoundTrip(req)
	}
	var attempt int64 = 1
	if n, ok := ctx.Value(attemptsKey{}).(*atomic.Int64); ok {
		attempt = n.Add(1)
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.Int64(t.name+".attempts", attempt))
	_, span := tracer.Start(ctx, t.name+" attempt", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.Int64(t.name+".attempt", attempt),
			attribute.String("http.request.method", req.Method),
			attribute.String("url.path", req.URL.Path),
			attribute.String("server.address", req.URL.Hostname()),
		))
	defer span.End()
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, resp.Status)
	}
	return resp, nil
}
