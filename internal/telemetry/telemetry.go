// Package telemetry sets up OpenTelemetry tracing for the service and holds
// the instrumentation that is not specific to one layer: the slog handler
// that stamps log lines with the trace, the pgx tracer of database queries,
// and the River middleware that carries a trace from the transaction that
// inserts a job to the worker that runs it.
//
// Tracing is configured by the standard OTEL_* environment variables and is
// off unless they ask for it: with no exporter configured, Setup returns the
// no-op provider, and every span of the service costs a no-op call.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of the service's own spans.
const ScopeName = "github.com/atomicrides/atomicrides"

// DefaultServiceName is the service.name resource attribute unless
// OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) says otherwise.
const DefaultServiceName = "atomicrides"

// Propagator is the context propagation of every span the service
// continues or hands on: W3C Trace Context and Baggage. A client's
// traceparent header is honoured; a job carries its inserter's trace in its
// metadata in the same format.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(
	propagation.TraceContext{}, propagation.Baggage{},
)

// Tracing is the result of Setup: the provider to build the service's
// tracers from, and how to flush and stop it.
type Tracing struct {
	// Provider is an SDK provider exporting over OTLP when Enabled, the
	// no-op provider otherwise.
	Provider trace.TracerProvider
	// Enabled reports whether spans are exported.
	Enabled bool
	// Exporter describes where spans go ("otlp http/protobuf to …"), for a
	// log line at start; empty when disabled.
	Exporter string
	shutdown func(context.Context) error
}

// Shutdown flushes the spans not yet exported and stops the exporter. It is
// a no-op when tracing is disabled.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// Setup builds the tracer provider that the OTEL_* variables describe,
// read through getenv (os.Getenv in the binary):
//
//   - OTEL_TRACES_EXPORTER: "otlp" or "none". Unset, tracing is on exactly
//     when an OTLP endpoint is set.
//   - OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as is), or
//     OTEL_EXPORTER_OTLP_ENDPOINT (to which "/v1/traces" is appended over
//     HTTP): the collector. Default http://localhost:4318.
//   - OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL:
//     "http/protobuf" (default) or "grpc".
//
// The exporter and the SDK read the other standard variables themselves
// (OTEL_EXPORTER_OTLP_HEADERS, …_TIMEOUT, …_COMPRESSION, …_CERTIFICATE,
// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and
// …_ARG, OTEL_BSP_*). An unsupported value is an error naming its
// variable. Setup connects to nothing: spans are sent in batches, in the
// background, and a collector that is down loses spans, never requests.
func Setup(ctx context.Context, getenv func(string) string) (*Tracing, error) {
	exporterName := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	endpoint := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	signalEndpoint := endpoint != ""
	if endpoint == "" {
		endpoint = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	}
	switch exporterName {
	case "":
		if endpoint == "" {
			return &Tracing{Provider: noop.NewTracerProvider()}, nil
		}
	case "none":
		return &Tracing{Provider: noop.NewTracerProvider()}, nil
	case "otlp":
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: want otlp or none", exporterName)
	}
	protocol := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if protocol == "" {
		protocol = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	if protocol == "" {
		protocol = "http/protobuf"
	}

	var (
		client otlptrace.Client
		where  = endpoint
	)
	switch protocol {
	case "http/protobuf":
		var opts []otlptracehttp.Option
		if endpoint != "" {
			u := endpoint
			if !signalEndpoint {
				u = strings.TrimRight(endpoint, "/") + "/v1/traces"
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u))
			where = u
		}
		client = otlptracehttp.NewClient(opts...)
	case "grpc":
		var opts []otlptracegrpc.Option
		if endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
		}
		client = otlptracegrpc.NewClient(opts...)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: want http/protobuf or grpc", protocol)
	}
	if where == "" {
		where = "the default endpoint"
	}
	// New starts the client; neither protocol dials before the first export.
	exporter, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", DefaultServiceName)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: last, so they win
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exporter.Shutdown(ctx)
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	return &Tracing{
		Provider: tp,
		Enabled:  true,
		Exporter: "otlp " + protocol + " to " + where,
		shutdown: tp.Shutdown,
	}, nil
}

// Provider returns tp, or the global provider (no-op unless a program set
// one) when tp is nil: components take an optional provider and use this.
func Provider(tp trace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return otel.GetTracerProvider()
	}
	return tp
}

// Tracer is the service's tracer of tp (nil: the global provider).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	return Provider(tp).Tracer(ScopeName)
}

// ChildTracer returns the tracer of the span in ctx: spans started with it
// belong to the same provider as their parent, and are no-ops when there is
// no recording parent. Adapters without a provider of their own (the Stripe
// transport, the SMTP mailer, the database) use it, so that they trace what
// a traced caller does and add no root spans of their own.
func ChildTracer(ctx context.Context) (trace.Tracer, bool) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return nil, false
	}
	return parent.TracerProvider().Tracer(ScopeName), true
}
