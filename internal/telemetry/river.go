package telemetry

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// RiverMiddleware carries traces through River: a job inserted under a span
// (an atomic phase that stages a receipt job, say) keeps that span's
// context in its metadata, in W3C Trace Context form under "traceparent";
// the job's run is a span that continues it, so a booking's receipt job and
// its SMTP send appear in the booking's trace. A job inserted with no span
// (the periodic completer and reaper) runs as the root of a trace of its
// own.
//
// It must be installed on every River client that inserts jobs (the
// service's insert-only client) and on the client that works them.
type RiverMiddleware struct {
	river.MiddlewareDefaults
	tracer trace.Tracer
}

var (
	_ rivertype.JobInsertMiddleware = (*RiverMiddleware)(nil)
	_ rivertype.WorkerMiddleware    = (*RiverMiddleware)(nil)
)

// NewRiverMiddleware returns the middleware, starting job spans on tp (nil:
// the global provider).
func NewRiverMiddleware(tp trace.TracerProvider) *RiverMiddleware {
	return &RiverMiddleware{tracer: Tracer(tp)}
}

// InsertMany writes the trace context of ctx into each job's metadata.
func (m *RiverMiddleware) InsertMany(ctx context.Context, manyParams []*rivertype.JobInsertParams, doInner func(ctx context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		carrier := propagation.MapCarrier{}
		Propagator.Inject(ctx, carrier)
		for _, p := range manyParams {
			md, err := withCarrier(p.Metadata, carrier)
			if err != nil {
				return nil, err
			}
			p.Metadata = md
		}
	}
	return doInner(ctx)
}

// Work runs the job inside a span continuing the trace of its inserter.
func (m *RiverMiddleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(ctx context.Context) error) error {
	ctx = Propagator.Extract(ctx, carrierOf(job.Metadata))
	ctx, span := m.tracer.Start(ctx, "job "+job.Kind,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "river"),
			attribute.String("river.job.kind", job.Kind),
			attribute.Int64("river.job.id", job.ID),
			attribute.Int("river.job.attempt", job.Attempt),
			attribute.String("river.queue", job.Queue),
		))
	defer span.End()
	err := doInner(ctx)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// withCarrier returns the JSON object md with the carrier's keys set.
func withCarrier(md []byte, carrier propagation.MapCarrier) ([]byte, error) {
	obj := map[string]json.RawMessage{}
	if len(md) > 0 {
		if err := json.Unmarshal(md, &obj); err != nil {
			return nil, fmt.Errorf("telemetry: job metadata: %w", err)
		}
	}
	for k, v := range carrier {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		obj[k] = b
	}
	return json.Marshal(obj)
}

// carrierOf reads the string values of a job's metadata; whatever is not a
// JSON object of strings is ignored.
func carrierOf(md []byte) propagation.MapCarrier {
	carrier := propagation.MapCarrier{}
	var obj map[string]json.RawMessage
	if json.Unmarshal(md, &obj) != nil {
		return carrier
	}
	for k, raw := range obj {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			carrier[k] = s
		}
	}
	return carrier
}
