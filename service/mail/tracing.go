package mail

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/atomicrides/atomicrides/internal/telemetry"
	"github.com/atomicrides/atomicrides/service"
)

// Send delivers msg over one SMTP connection. The whole exchange is bounded
// by the configured timeout and by ctx. Under a recording span (a receipt
// job's) the send is a child span "smtp send" naming the Message-ID and the
// server.
func (m *Mailer) Send(ctx context.Context, msg service.Message) error {
	tracer, ok := telemetry.ChildTracer(ctx)
	if !ok {
		return m.send(ctx, msg)
	}
	ctx, span := tracer.Start(ctx, "smtp send", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("server.address", m.addr),
			attribute.String("email.message.id", msg.MessageID),
		))
	defer span.End()
	err := m.send(ctx, msg)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}
