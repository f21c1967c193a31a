package adyen

import (
	"context"
	"net/http"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/atomicrides/atomicrides/internal/telemetry"
)

// attemptsKey holds the attempt counter of one call in its context.
type attemptsKey struct{}

func withAttempts(ctx context.Context) context.Context {
	return context.WithValue(ctx, attemptsKey{}, new(atomic.Int64))
}

// tracedTransport traces each HTTP attempt of a call as a child of the
// call's span, and sets the call's span attribute adyen.attempts. Nothing
// is added to the request.
type tracedTransport struct{ base http.RoundTripper }

// RoundTrip sends one attempt.
func (t tracedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	tracer, ok := telemetry.ChildTracer(ctx)
	if !ok {
		return t.base.RoundTrip(req)
	}
	var attempt int64 = 1
	if n, ok := ctx.Value(attemptsKey{}).(*atomic.Int64); ok {
		attempt = n.Add(1)
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.Int64("adyen.attempts", attempt))
	_, span := tracer.Start(ctx, "adyen attempt", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.Int64("adyen.attempt", attempt),
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
